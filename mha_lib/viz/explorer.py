"""The live explorer: sliders that recompute multi-head attention and redraw its heatmaps.

Needs a running Jupyter kernel (the website shows :mod:`mha_lib.viz.static_explorer` instead).
Every change of a control runs :class:`mha_lib.MultiHeadAttention` again (through
:meth:`mha_lib.viz.scene.Source.weights`) and updates the SAME plotly ``FigureWidget`` in place.

The figure is built so that the browser redraws little: ONE heatmap trace per example,
whatever the head count, its H heads side by side on one canvas, separated by empty
(``None``) columns; a second x axis on top names the heads. The figure's size never changes.
A valid-length or seed change restyles the B traces' ``z`` and hover text; a head-count change
also moves a few axis ticks. Masked keys get the value :data:`_MASKED_Z`, drawn grey by the
colour scale (its colour bar says "masked"), so the data holds neither NaN (not valid JSON:
the widget's messages would fail to serialise) nor anything that could pass for a weight.

Shape legend
    B   number of examples (one valid-length slider each)
    H   number of heads; D = d_model = H*d
    Lq  number of queries, Lk number of key-value pairs
"""

from __future__ import annotations

from dataclasses import dataclass

import ipywidgets as widgets
import numpy as np
import plotly.colors
import plotly.graph_objects as go
from torch import Tensor

from mha_lib.viz.heatmaps import MASKED_COLOR, as_weights
from mha_lib.viz.scene import Source, make_source

__all__ = ["explore"]

_SEED_SLIDER_MAX = 20  # the seed slider reaches at least this far (further for a larger seed)
_MASKED_Z = -0.1  # a masked key's value in z: below every weight, grey on the colour scale
_PANEL_PX = 200  # height of one example's heatmaps, in pixels
_TITLE_PX = 34  # room above an example for the head names
_AXIS_PX = 70  # room below an example for its key labels and the "key" axis title
_MARGIN_PX = 10
_SLIDER_STYLE = {"description_width": "13.5em"}  # one width: the tracks line up
_SLIDER_WIDTH = "540px"  # a 0..12 valid length gets about 25 px per step


def _colorscale() -> list:
    """Viridis on [0, 1], and grey for _MASKED_Z (the colour axis runs from _MASKED_Z to 1)."""
    viridis = plotly.colors.sequential.Viridis
    start = -_MASKED_Z / (1 - _MASKED_Z)  # where weight 0 sits on the colour axis
    return [[0.0, MASKED_COLOR], [start, MASKED_COLOR]] + [
        [start + (1 - start) * i / (len(viridis) - 1), colour] for i, colour in enumerate(viridis)
    ]


@dataclass(frozen=True)
class _Canvas:
    """Where head ``h`` of an example sits on the example's one heatmap: columns
    ``h*(Lk+1) .. h*(Lk+1)+Lk-1``, with one empty column between neighbouring heads."""

    num_heads: int
    num_queries: int
    num_keys: int

    @property
    def shape(self) -> tuple[int, int]:
        """(canvas rows, canvas columns) = (Lq, H*(Lk+1) - 1)."""
        return self.num_queries, self.num_heads * (self.num_keys + 1) - 1

    def column(self, head: int) -> int:
        """Canvas column of key 0 of ``head``."""
        return head * (self.num_keys + 1)


def _canvas_z(weights: np.ndarray, valid_len: int, canvas: _Canvas) -> list:
    """One example's heads as one JSON-ready z: weights, _MASKED_Z, None in the gaps.

    Shapes:
        weights: (H, Lq, Lk) of one example. Returns Lq rows of H*(Lk+1) - 1 values.
    """
    z = np.full(canvas.shape, np.nan)
    for h in range(canvas.num_heads):
        c = canvas.column(h)
        z[:, c:c + valid_len] = weights[h, :, :valid_len]
        z[:, c + valid_len:c + canvas.num_keys] = _MASKED_Z
    return np.where(np.isnan(z), None, z).tolist()  # None, not NaN: valid JSON


def _canvas_text(z: list, canvas: _Canvas, name: str, query_tokens, key_tokens) -> list:
    """Hover texts of a canvas: head, query, key and weight (or "masked"); empty in the gaps."""
    text = [[""] * canvas.shape[1] for _ in range(canvas.shape[0])]
    for h in range(canvas.num_heads):
        c = canvas.column(h)
        for i, query in enumerate(query_tokens):
            for j, key in enumerate(key_tokens):
                w = z[i][c + j]
                text[i][c + j] = (f"{name}head {h}<br>query {i}: {query}<br>key {j}: {key}<br>"
                                  + ("masked" if w == _MASKED_Z else f"weight {w:.3f}"))
    return text


def _axis_names(b: int, batch_size: int) -> tuple[str, str, str]:
    """Trace-side ids of example b's key axis, query axis and head-name axis (on top)."""
    suffix = "" if b == 0 else str(b + 1)
    return "x" + suffix, "y" + suffix, f"x{batch_size + b + 1}"


def _head_ticks(canvas: _Canvas, key_tokens) -> dict:
    """The entries of example b's axes that follow the head count (flat keys, b = 0 axes)."""
    H, Lk = canvas.num_heads, canvas.num_keys
    return {
        "range": [-0.5, canvas.shape[1] - 0.5],
        "tickvals": [canvas.column(h) + j for h in range(H) for j in range(Lk)],
        "ticktext": [t for _ in range(H) for t in key_tokens],
        "head_tickvals": [canvas.column(h) + (Lk - 1) / 2 for h in range(H)],
        "head_ticktext": [f"head {h}" for h in range(H)],
    }


def _figure_parts(source: Source, weights: np.ndarray, valid_lens) -> tuple[list, dict, _Canvas]:
    """Traces (B heatmaps), layout and canvas of the explorer's figure.

    Shapes:
        weights: (B, H, Lq, Lk), checked by :func:`mha_lib.viz.heatmaps.as_weights`.
    """
    scene = source.scene
    B, H, Lq, Lk = weights.shape
    canvas = _Canvas(H, Lq, Lk)
    block_px = _TITLE_PX + _PANEL_PX + _AXIS_PX
    traces, layout = [], {}
    for b in range(B):
        x, y, top = _axis_names(b, B)
        name = f"example {b}, " if B > 1 else ""
        z = _canvas_z(weights[b], valid_lens[b], canvas)
        traces.append({
            "type": "heatmap", "xaxis": x, "yaxis": y, "coloraxis": "coloraxis",
            "meta": {"example": b}, "name": f"example {b}", "z": z,
            "text": _canvas_text(z, canvas, name, scene.query_tokens[b], scene.key_tokens[b]),
            "hovertemplate": "%{text}<extra></extra>", "hoverongaps": False,
        })
        ticks = _head_ticks(canvas, scene.key_tokens[b])
        # "allow": plotly otherwise measures every tick label on every redraw to hide those
        # past the figure's edge (about a third of a redraw's time); ours all fit.
        common = {"showgrid": False, "zeroline": False, "fixedrange": True,
                  "ticklabeloverflow": "allow"}
        layout["xaxis" + x[1:]] = {
            "anchor": y, "domain": [0.0, 1.0], "range": ticks["range"], "tickmode": "array",
            "tickvals": ticks["tickvals"], "ticktext": ticks["ticktext"], "tickangle": -60,
            "title": {"text": "key", "standoff": 4}, **common,
        }
        layout["xaxis" + top[1:]] = {
            "overlaying": x, "matches": x, "side": "top", "anchor": y, "tickmode": "array",
            "tickvals": ticks["head_tickvals"], "ticktext": ticks["head_ticktext"],
            "ticks": "", "tickfont": {"size": 13}, **common,
        }
        top_edge = 1 - (b * block_px + _TITLE_PX) / (B * block_px)
        layout["yaxis" + y[1:]] = {
            "anchor": x, "domain": [round(top_edge - _PANEL_PX / (B * block_px), 6),
                                    round(top_edge, 6)],
            "range": [Lq - 0.5, -0.5],  # first query at the top
            "tickmode": "array", "tickvals": list(range(Lq)),
            "ticktext": list(scene.query_tokens[b]),
            "title": {"text": f"example {b}: query" if B > 1 else "query", "standoff": 4},
            **common,
        }
    for b in range(B):  # plotly draws an axis only with a trace on it: an invisible point
        x, y, top = _axis_names(b, B)
        traces.append({"type": "scatter", "xaxis": top, "yaxis": y, "x": [0], "y": [0],
                       "mode": "markers", "marker": {"opacity": 0}, "hoverinfo": "skip",
                       "meta": {"example": b, "role": "head names"}})
    layout.update(
        coloraxis={"colorscale": _colorscale(), "cmin": _MASKED_Z, "cmax": 1.0,
                   "colorbar": {"title": {"text": "weight"}, "len": min(1.0, 300 / (B * block_px)),
                                "thickness": 14, "tickvals": [_MASKED_Z / 2, 0, 0.2, 0.4, 0.6,
                                                              0.8, 1.0],
                                "ticktext": ["masked", "0", "0.2", "0.4", "0.6", "0.8", "1"]}},
        plot_bgcolor="rgba(0,0,0,0)", showlegend=False, height=B * block_px + 2 * _MARGIN_PX,
        margin={"t": _MARGIN_PX, "b": _MARGIN_PX, "l": 70, "r": 20},
    )
    return traces, layout, canvas


class _AttentionExplorer(widgets.VBox):
    """Live explorer of multi-head attention weights (an ipywidgets ``VBox``); see :func:`explore`.

    Attributes:
        heads: ``SelectionSlider`` offering only head counts that divide d_model (a single,
            disabled option for a given ``mha``).
        valid_lens: tuple of B ``IntSlider`` (0..Lk), the valid length of each example.
        seed: ``IntSlider`` (0 .. max(20, initial seed)) for the random initialisation of the
            projections, or None for a given ``mha``.
        figure: the plotly ``FigureWidget``, created once and updated in place: one heatmap
            trace per example (``figure.data[b]``, b < B), its heads side by side, then B
            invisible traces that carry the head names' axes; see :meth:`shown`.
        source: the :class:`~mha_lib.viz.scene.Source` computing the weights.
    """

    def __init__(self, source: Source, *, num_heads: int | None = None) -> None:
        self.source = source
        scene = source.scene
        choices = source.head_choices
        num_heads = source.initial_heads(num_heads)
        wide = widgets.Layout(width=_SLIDER_WIDTH)
        self.heads = widgets.SelectionSlider(
            options=list(choices), value=num_heads, description="heads H",
            disabled=len(choices) == 1, continuous_update=True, style=_SLIDER_STYLE, layout=wide,
        )
        self.valid_lens = tuple(
            widgets.IntSlider(value=v, min=0, max=scene.num_keys, style=_SLIDER_STYLE,
                              layout=wide, description=f"valid length (example {b})")
            for b, v in enumerate(scene.valid_lens)
        )
        self.seed = None if source.fixed is not None else widgets.IntSlider(
            value=source.seed, min=0, max=max(_SEED_SLIDER_MAX, source.seed), description="seed",
            style=_SLIDER_STYLE, layout=wide)
        self.info = widgets.HTML()
        traces, layout, self._canvas = _figure_parts(source, self._weights_array(),
                                                    self.current_valid_lens())
        self.figure = go.FigureWidget(data=traces, layout=layout)
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

    def _weights_array(self) -> np.ndarray:
        return as_weights(self.weights())  # checked: finite, in [0, 1]; (B, H, Lq, Lk)

    def shown(self) -> dict[tuple[int, int], np.ndarray]:
        """What the figure shows now: ``{(example, head): (Lq, Lk) weights}``, NaN = masked.

        Read back from the figure's data, so a test of it tests what the reader sees.
        """
        canvas = self._canvas
        out = {}
        for b, trace in enumerate(self.figure.data[:self.source.scene.batch_size]):
            z = np.array(trace.z, dtype=float)  # (Lq, H*(Lk+1) - 1); gaps None -> NaN
            z[z == _MASKED_Z] = np.nan
            for h in range(canvas.num_heads):
                c = canvas.column(h)
                out[b, h] = z[:, c:c + canvas.num_keys]
        return out

    def _describe(self) -> None:
        H, D = self.heads.value, self.source.d_model
        self.info.value = (
            f"<div style='padding-left:2em'>H = {H} head{'s' if H > 1 else ''} of size "
            f"d = D/H = {D}/{H} = {D // H}<br>grey cells: masked keys</div>"
        )

    def _on_change(self, change=None) -> None:
        self.update()

    def update(self) -> None:
        """Recompute the weights and redraw the same FigureWidget in place, in one message.

        Every change replaces the B traces' ``z`` and hover ``text``; a head-count change also
        replaces the ticks of the key axes and of the head names (flat keys: a relayout of
        whole axis objects costs plotly's Python side about five times as much).
        """
        traces, _, canvas = _figure_parts(self.source, self._weights_array(),
                                         self.current_valid_lens())
        B = self.source.scene.batch_size
        restyle = {"z": [t["z"] for t in traces[:B]], "text": [t["text"] for t in traces[:B]]}
        relayout = {}
        if canvas != self._canvas:
            for b in range(B):
                x, _, top = _axis_names(b, B)
                ticks = _head_ticks(canvas, self.source.scene.key_tokens[b])
                for axis, prefix in ((x, ""), (top, "head_")):
                    name = "xaxis" + axis[1:]
                    relayout[f"{name}.tickvals"] = ticks[prefix + "tickvals"]
                    relayout[f"{name}.ticktext"] = ticks[prefix + "ticktext"]
                relayout[f"xaxis{x[1:]}.range"] = ticks["range"]
        self._canvas = canvas
        self.figure.plotly_update(restyle_data=restyle, relayout_data=relayout,
                                  trace_indexes=list(range(B)))
        self._describe()


def explore(*, num_heads: int | None = None, **inputs) -> _AttentionExplorer:
    """Explore multi-head attention weights live in Jupyter: sliders, heatmaps, real weights.

    With no arguments: self-attention over two short sentences with seeded random word
    vectors and a fresh (untrained) MultiHeadAttention with ``d_model`` = 8; sliders for
    the number of heads (only divisors of d_model), one valid length per example and the
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
        **inputs: what to attend over, passed to :func:`mha_lib.viz.scene.make_source`:

            * ``mha``: a trained (or any) ``mha_lib.MultiHeadAttention``;
            * ``queries``, ``keys``, ``values``: its inputs (see Shapes), all of one dtype and
              device (the module's, with ``mha``);
            * ``tokens``, ``query_tokens``, ``key_tokens``, ``valid_lens``: see Shapes;
            * ``d_model``: D for the fresh models (default 8; ignored with ``mha``);
            * ``sentences``: the default scene's sentences (one example each), when no
              queries are given;
            * ``seed``: integer >= 0, initial seed of the fresh models' parameters and of the
              default word vectors (default 0).

    Returns:
        An :class:`_AttentionExplorer` (display it as the last expression of a cell). Its
        ``heads``, ``valid_lens`` and ``figure`` attributes can be driven from code, and
        :meth:`_AttentionExplorer.shown` returns the weights the figure shows.

    Raises:
        ValueError: an ``mha`` that is not a MultiHeadAttention or comes without queries,
            inputs of the wrong shape, dtype or device, or not finite, labels of the wrong
            length, valid lengths outside [0, Lk], a ``num_heads`` that does not divide
            ``d_model`` (or is not an integer), a seed that is not an integer >= 0, or an
            argument of another name.
    """
    return _AttentionExplorer(make_source(**inputs), num_heads=num_heads)
