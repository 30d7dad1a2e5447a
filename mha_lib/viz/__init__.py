"""Pictures of attention (an upper layer: builds on :class:`mha_lib.MultiHeadAttention`).

* :func:`attention_heatmaps`    one plotly heatmap per (example, head) of attention weights
* :func:`transposition_figure`  where ``transpose_qkv`` sends each feature, from the real function
* :func:`explore`               live explorer (ipywidgets + FigureWidget; needs a kernel)
* :func:`static_explorer`       kernel-free explorer for the website (precomputed states), and
  :func:`static_explorer_html`  its HTML for ``IPython.display.HTML``
* :mod:`mha_lib.viz.scene`      the inputs and the one function computing the explorers' weights
* :mod:`mha_lib.viz.given_explorer`, :mod:`mha_lib.viz.diagram`, :mod:`mha_lib.viz.positions`,
  :mod:`mha_lib.viz.modern`: the explorers of given weights and the figures of single chapters.

Only the live explorers need ipywidgets: :mod:`mha_lib.viz.explorer` is imported on first use of
``explore``, so everything else works without it. The tools that drive these pictures in a
browser or in JupyterLab live in :mod:`mha_lib.book` (build tooling), not here.
"""

from mha_lib.viz.heatmaps import attention_heatmaps
from mha_lib.viz.static_explorer import static_explorer, static_explorer_html
from mha_lib.viz.transposition import transposition_figure

__all__ = [
    "attention_heatmaps",
    "explore",
    "static_explorer",
    "static_explorer_html",
    "transposition_figure",
]


def __getattr__(name: str):
    """Import the live explorer (and so ipywidgets) only when it is asked for."""
    if name == "explore":
        from mha_lib.viz.explorer import explore

        return explore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
