"""The live explorer: sliders that recompute multi-head attention and redraw its heatmaps.

Needs a running Jupyter kernel (the website shows :mod:`mha_lib.viz.static_explorer` instead).
Every change of a control runs :class:`mha_lib.MultiHeadAttention` again (through
:meth:`mha_lib.viz.scene.Source.weights`) and updates the SAME plotly ``FigureWidget`` in place.

Shape legend
    B   number of examples (one valid-length slider each)
    H   number of heads; D = num_hiddens = H*d
    Lq  number of queries, Lk number of key-value pairs
"""

from __future__ import annotations

import ipywidgets as widgets
import plotly.graph_objects as go
from torch import Tensor

from mha_lib._checks import check_positive_int
from mha_lib.viz.heatmaps import DEFAULT_MAX_COLS
from mha_lib.viz.layout import axis_names
from mha_lib.viz.scene import Source, make_source

SEED_SLIDER_MAX = 20  # the seed slider reaches at least this far (further for a larger seed)


def layout_changes(layout: dict, num_axes: int) -> dict:
    """The layout entries that depend on the head count, as flat ``"xaxis2.domain"`` keys.

    Args:
        layout: a layout from :meth:`mha_lib.viz.scene.Source.parts`.
        num_axes: number of x (and y) axes in the figure, B * (largest head count).
    """
    changes = {key: layout[key] for key in ("annotations", "shapes", "height")}
    for slot in range(num_axes):
        for axis in axis_names(slot):
            name = axis[0] + "axis" + axis[1:]
            changes[name + ".domain"] = layout[name]["domain"]
            changes[name + ".visible"] = layout[name]["visible"]
    return changes


class AttentionExplorer(widgets.VBox):
    """Live explorer of multi-head attention weights (an ipywidgets ``VBox``); see :func:`explore`.

    Attributes:
        heads: ``SelectionSlider`` offering only head counts that divide num_hiddens (a single,
            disabled option for a given ``mha``).
        valid_lens: tuple of B ``IntSlider`` (0..Lk), the valid length of each example.
        seed: ``IntSlider`` (0 .. max(20, initial seed)) for the random initialisation of the
            projections, or None for a given ``mha``.
        figure: the plotly ``FigureWidget``, created once and updated in place.
        source: the :class:`~mha_lib.viz.scene.Source` computing the weights.
    """

    def __init__(self, source: Source, *, num_heads: int | None = None,
                 max_cols: int = DEFAULT_MAX_COLS) -> None:
        self.source = source
        self.max_cols = check_positive_int(max_cols, "max_cols")
        scene = source.scene
        choices = source.head_choices
        num_heads = source.initial_heads(num_heads)
        style = {"description_width": "initial"}
        self.heads = widgets.SelectionSlider(
            options=list(choices), value=num_heads, description="heads H",
            disabled=len(choices) == 1, continuous_update=True, style=style,
        )
        self.valid_lens = tuple(
            widgets.IntSlider(value=v, min=0, max=scene.num_keys,
                              description=f"valid length (example {b})", style=style)
            for b, v in enumerate(scene.valid_lens)
        )
        self.seed = None if source.fixed is not None else widgets.IntSlider(
            value=source.seed, min=0, max=max(SEED_SLIDER_MAX, source.seed), description="seed",
            style=style)
        self.info = widgets.HTML()
        traces, layout = source.parts(self.weights(), self.current_valid_lens(), self.max_cols)
        self.figure = go.FigureWidget(data=traces, layout=layout)
        self._layout = layout_changes(layout, len(traces))  # what the figure shows now
        self._describe()
        controls = [self.heads, *self.valid_lens] + ([self.seed] if self.seed else [])
        for control in controls:
            control.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([widgets.VBox(controls), self.info]), self.figure])

    def current_valid_lens(self) -> list[int]:
        return [slider.value for slider in self.valid_lens]

    def weights(self) -> Tensor:
        """(B, H, Lq, Lk) weights for the controls' current values, from MultiHeadAttention."""
        seed = self.source.seed if self.seed is None else self.seed.value
        return self.source.weights(self.heads.value, self.current_valid_lens(), seed)

    def _describe(self) -> None:
        H, D = self.heads.value, self.source.num_hiddens
        self.info.value = (
            f"<div style='padding-left:2em'>H = {H} head{'s' if H > 1 else ''} of size "
            f"d = D/H = {D}/{H} = {D // H}<br>grey cells: masked keys</div>"
        )

    def _on_change(self, change=None) -> None:
        self.update()

    def update(self) -> None:
        """Recompute the weights and redraw the same FigureWidget in place.

        One batch carries the new weights of every panel and, when the head count changed, the
        layout entries that differ (panels shown, hidden and moved, their titles).
        """
        traces, layout = self.source.parts(self.weights(), self.current_valid_lens(),
                                           self.max_cols)
        restyle = {key: [trace[key] for trace in traces] for key in ("z", "text", "visible")}
        changes = layout_changes(layout, len(traces))
        relayout = {k: v for k, v in changes.items() if self._layout.get(k) != v}
        self._layout.update(relayout)
        with self.figure.batch_update():
            # A relayout of a list only updates the items already there: assign whole lists
            # (the number of panel titles and backgrounds follows the head count).
            for key in ("annotations", "shapes"):
                if key in relayout:
                    self.figure.layout[key] = relayout.pop(key)
            self.figure.plotly_update(restyle_data=restyle, relayout_data=relayout)
        self._describe()


def explore(
    *, num_heads: int | None = None, max_cols: int = DEFAULT_MAX_COLS, **inputs
) -> AttentionExplorer:
    """Explore multi-head attention weights live in Jupyter: sliders, heatmaps, real weights.

    With no arguments: self-attention over two short sentences with seeded random word
    vectors and a fresh (untrained) MultiHeadAttention with ``num_hiddens`` = 8; sliders for
    the number of heads (only divisors of num_hiddens), one valid length per example and the
    seed of the projections.

    With your own model (its head count is then fixed)::

        explorer = explore(mha=trained_mha, queries=x, tokens=words)            # self-attention
        explorer = explore(mha=trained_mha, queries=q, keys=k, values=v,
                           query_tokens=q_words, key_tokens=k_words, valid_lens=[5, 3])

    The module is run as ``mha(queries, keys, values, valid_lens, need_weights=True)`` in eval
    mode without gradients (its training mode is restored afterwards). With ``queries`` but no
    ``mha``, fresh seeded models of every allowed head count are built for those inputs.

    Shapes:
        queries: (B, Lq, query_size); keys: (B, Lk, key_size), default queries;
        values: (B, Lk, value_size), default keys.
        tokens / query_tokens / key_tokens: Lq (Lk) labels, or B lists of them.
        valid_lens: B initial valid lengths in [0, Lk], default Lk (nothing masked).

    Args:
        num_heads: initial head count (default 2 when allowed).
        max_cols: heads side by side before wrapping.
        **inputs: what to attend over, passed to :func:`mha_lib.viz.scene.make_source`:

            * ``mha``: a trained (or any) ``mha_lib.MultiHeadAttention``;
            * ``queries``, ``keys``, ``values``: its inputs (see Shapes), all of one dtype and
              device (the module's, with ``mha``);
            * ``tokens``, ``query_tokens``, ``key_tokens``, ``valid_lens``: see Shapes;
            * ``num_hiddens``: D for the fresh models (default 8; ignored with ``mha``);
            * ``sentences``: the default scene's sentences (one example each), when no
              queries are given;
            * ``seed``: integer >= 0, initial seed of the fresh models' parameters and of the
              default word vectors (default 0).

    Returns:
        An :class:`AttentionExplorer` (display it as the last expression of a cell). Its
        ``heads``, ``valid_lens`` and ``figure`` attributes can be driven from code.

    Raises:
        ValueError: an ``mha`` that is not a MultiHeadAttention or comes without queries,
            inputs of the wrong shape, dtype or device, or not finite, labels of the wrong
            length, valid lengths outside [0, Lk], a ``num_heads`` that does not divide
            ``num_hiddens`` (or is not an integer), or a seed that is not an integer >= 0.
        TypeError: an argument that neither ``explore`` nor ``make_source`` takes.
    """
    return AttentionExplorer(make_source(**inputs), num_heads=num_heads, max_cols=max_cols)
