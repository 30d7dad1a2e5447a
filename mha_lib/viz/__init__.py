"""Pictures of attention (an upper layer: builds on :class:`mha_lib.MultiHeadAttention`).

* :func:`attention_heatmaps`    one plotly heatmap per (example, head) of attention weights
* :func:`transposition_figure`  where ``transpose_qkv`` sends each feature, from the real function
"""

from mha_lib.viz.heatmaps import attention_heatmaps
from mha_lib.viz.transposition import transposition_figure

__all__ = ["attention_heatmaps", "transposition_figure"]
