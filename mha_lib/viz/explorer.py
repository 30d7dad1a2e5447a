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

from typing import Sequence

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
from torch import Tensor

from mha_lib.multihead import MultiHeadAttention
from mha_lib.viz.heatmaps import DEFAULT_MAX_COLS, _check_max_cols, heatmap_parts
from mha_lib.viz.layout import axis_names
from mha_lib.viz.scene import DEFAULT_NUM_HIDDENS, DEFAULT_SENTENCES, Source, make_source


def source_parts(source: Source, weights: Tensor, valid_lens: Sequence[int], max_cols: int,
                 num_slots: int | None = None):
    """Traces and layout for the weights of ``source``, masked keys from ``valid_lens``.

    Args:
        num_slots: heads the figure has room for; default the largest head count of
            ``source``, so that hidden slots stand ready for any other head count.
    """
    scene = source.scene
    B, Lq, Lk = scene.batch_size, scene.queries.shape[1], scene.num_keys
    keep = np.arange(Lk)[None, :] < np.asarray(valid_lens)[:, None]  # (B, Lk)
    masked = np.broadcast_to(~keep[:, None, :], (B, Lq, Lk))  # (B, Lk) -> (B, Lq, Lk)
    return heatmap_parts(
        weights.double().numpy(), masked, query_labels=scene.query_tokens,
        key_labels=scene.key_tokens, max_cols=max_cols,
        num_slots=max(source.head_choices) if num_slots is None else num_slots, masked_note=True,
    )


def layout_changes(layout: dict, num_axes: int) -> dict:
    """The layout entries that depend on the head count, as flat ``"xaxis2.domain"`` keys.

    Args:
        layout: a layout from :func:`source_parts`.
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
        seed: ``IntSlider`` for the random initialisation of the projections, or None for a
            given ``mha``.
        figure: the plotly ``FigureWidget``, created once and updated in place.
        source: the :class:`~mha_lib.viz.scene.Source` computing the weights.
    """

    def __init__(self, source: Source, *, num_heads: int | None = None, seed: int = 0,
                 max_cols: int = DEFAULT_MAX_COLS) -> None:
        self.source = source
        self.max_cols = _check_max_cols(max_cols)
        scene = source.scene
        choices = source.head_choices
        if num_heads is None:
            num_heads = 2 if 2 in choices else choices[0]
        if num_heads not in choices:
            raise ValueError(f"num_heads must be one of {list(choices)}, got {num_heads!r}")
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
            value=seed, min=0, max=20, description="seed", style=style)
        self.info = widgets.HTML()
        traces, layout = source_parts(source, self.weights(), self.current_valid_lens(), self.max_cols)
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
        seed = 0 if self.seed is None else self.seed.value
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
        traces, layout = source_parts(self.source, self.weights(), self.current_valid_lens(),
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
    *,
    mha: MultiHeadAttention | None = None,
    queries: Tensor | None = None,
    keys: Tensor | None = None,
    values: Tensor | None = None,
    tokens: object = None,
    query_tokens: object = None,
    key_tokens: object = None,
    valid_lens: Sequence[int] | Tensor | None = None,
    num_heads: int | None = None,
    num_hiddens: int = DEFAULT_NUM_HIDDENS,
    sentences: Sequence[str] = DEFAULT_SENTENCES,
    seed: int = 0,
    max_cols: int = DEFAULT_MAX_COLS,
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
        mha: a trained (or any) ``mha_lib.MultiHeadAttention``.
        num_heads: initial head count (default 2 when allowed).
        num_hiddens: D for the fresh models (ignored with ``mha``).
        sentences: the default scene's sentences (one example each), when no queries are given.
        seed: initial seed of the fresh models' parameters and of the default word vectors.
        max_cols: heads side by side before wrapping.

    Returns:
        An :class:`AttentionExplorer` (display it as the last expression of a cell). Its
        ``heads``, ``valid_lens`` and ``figure`` attributes can be driven from code.

    Raises:
        ValueError: an ``mha`` that is not a MultiHeadAttention or comes without queries,
            inputs of the wrong shape, labels of the wrong length, valid lengths outside
            [0, Lk], or a ``num_heads`` that does not divide ``num_hiddens``.
    """
    source = make_source(mha=mha, queries=queries, keys=keys, values=values, tokens=tokens,
                         query_tokens=query_tokens, key_tokens=key_tokens, valid_lens=valid_lens,
                         sentences=sentences, num_hiddens=num_hiddens, seed=seed)
    return AttentionExplorer(source, num_heads=num_heads, seed=seed, max_cols=max_cols)
