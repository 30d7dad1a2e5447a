"""Pictures of attention (an upper layer: builds on :class:`mha_lib.MultiHeadAttention`).

* :func:`attention_heatmaps`    one plotly heatmap per (example, head) of attention weights
* :func:`transposition_figure`  where ``transpose_qkv`` sends each feature, from the real function
* :func:`explore`               live explorer (ipywidgets + FigureWidget; needs a kernel)
* :func:`static_explorer`       kernel-free explorer for the website (precomputed states), and
  :func:`static_explorer_html`  its HTML for ``IPython.display.HTML``
* :func:`explore_text`          type into the story language model and see its heads (live), and
  :func:`text_explorer_html`    the same for the website: the model runs in the page
* :mod:`mha_lib.viz.scene`      the inputs and the one function computing the explorers' weights
* :mod:`mha_lib.viz.given_explorer`, :mod:`mha_lib.viz.diagram`, :mod:`mha_lib.viz.positions`,
  :mod:`mha_lib.viz.modern`: the explorers of given weights and the figures of single chapters.

Only the live explorers need ipywidgets: :mod:`mha_lib.viz.explorer` and
:mod:`mha_lib.viz.text_explorer` are imported on first use of their names, so everything else
works without it. The tools that drive these pictures in a
browser or in JupyterLab live in :mod:`mha_lib.book` (build tooling), not here.
"""

from mha_lib.viz.heatmaps import attention_heatmaps
from mha_lib.viz.static_explorer import static_explorer, static_explorer_html
from mha_lib.viz.transposition import transposition_figure

__all__ = [
    "attention_heatmaps",
    "explore",
    "explore_text",
    "static_explorer",
    "static_explorer_html",
    "text_explorer_html",
    "transposition_figure",
]


def __getattr__(name: str):
    """Import the live explorers (and so ipywidgets) only when they are asked for."""
    if name == "explore":
        from mha_lib.viz.explorer import explore

        return explore
    if name in ("explore_text", "text_explorer_html"):
        from mha_lib.viz import text_explorer

        return getattr(text_explorer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
