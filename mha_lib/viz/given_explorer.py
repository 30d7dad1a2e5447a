"""Explorers of GIVEN attention weights: a model's layers, one sequence, any (e.g. causal) mask.

The explorers of :mod:`mha_lib.viz.explorer` and :mod:`mha_lib.viz.static_explorer` run one
:class:`mha_lib.MultiHeadAttention` themselves, with one valid length per example. A deeper
model (say the two-layer model of :mod:`mha_lib.induction`) computes its weights itself, layer
by layer, with a causal mask: query ``i`` sees keys ``0 .. i`` (per-query valid lengths). The
explorers here take those weights as they are, one sequence, and a control picks the layer:

* :func:`given_explorer` / :func:`given_explorer_html`: kernel-free, for the website (every
  layer's weights are stored in the page; a native range input and a short script switch);
* :func:`explore_given`: live in Jupyter (an ipywidgets slider and a plotly ``FigureWidget``
  updated in place).

Cells the mask hides are grey ("masked"), whatever the weights hold there; the weights there
must be 0 (else the mask given is not the model's and the picture would lie: ValueError).

Shape legend
    N   number of layers (the control's positions)
    H   heads per layer
    Lq  number of queries, Lk number of key-value pairs
"""

from __future__ import annotations

import html
import json
import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_lib._checks import check_positive_int
from mha_lib.viz.heatmaps import (
    DEFAULT_MAX_COLS,
    WEIGHT_TOLERANCE,
    as_array,
    as_list,
    as_weights,
    heatmap_parts,
    masked_keys,
)

__all__ = ["explore_given", "given_explorer", "given_explorer_html"]

_DIV_ID = "mha-given-explorer"


@dataclass(frozen=True)
class _GivenWeights:
    """Checked inputs of the given-weights explorers.

    Shapes:
        weights: (N, H, Lq, Lk) float64 in [0, 1]; masked: (Lq, Lk) bool, True = hidden.
    """

    weights: np.ndarray
    masked: np.ndarray
    query_tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    layer_names: tuple[str, ...]

    @property
    def num_layers(self) -> int:
        return self.weights.shape[0]

    def parts(self, n: int, max_cols: int, narrow: bool = False,
              title: str | None = None) -> tuple[list[dict], dict]:
        """Traces and layout of layer ``n`` (masked cells NaN in z), as in ``attention_heatmaps``."""
        return heatmap_parts(
            self.weights[n][None], self.masked[None], query_labels=list(self.query_tokens),
            key_labels=list(self.key_tokens), max_cols=max_cols,
            example_titles=[self.layer_names[n]], masked_note=bool(self.masked.any()),
            narrow=narrow, title=title,
        )

    def shown(self, n: int) -> np.ndarray:
        """(H, Lq, Lk) weights of layer ``n`` as drawn: masked cells NaN."""
        z = self.weights[n].copy()
        z[:, self.masked] = np.nan
        return z


def _labels(labels: object, length: int, name: str) -> tuple[str, ...]:
    labels = as_list(labels, name)
    if isinstance(labels, str) or not isinstance(labels, Sequence) or len(labels) != length:
        raise ValueError(f"{name} must be {length} labels (one per position), got {labels!r}")
    return tuple(str(t) for t in labels)


def _given_weights(
    weights: object,
    *,
    tokens: object,
    key_tokens: object = None,
    valid_lens: object = None,
    layer_names: Sequence[str] | None = None,
) -> _GivenWeights:
    """Check the explorers' inputs and bundle them.

    Shapes:
        weights: (N, H, Lq, Lk), e.g. ``model(tokens, need_weights=True)[1][0]`` for one
            sequence of :class:`mha_lib.induction.AttentionOnlyTransformer`.
        tokens: Lq labels (the queries', and the keys' unless ``key_tokens`` is given).
        valid_lens: None (nothing masked), an int in [0, Lk], or Lq per-query valid lengths,
            e.g. ``mha_lib.masking.causal_valid_lens(1, L)[0]`` (query i sees keys 0..i).

    Raises:
        ValueError: weights not 4-D, not finite or outside [0, 1], or not 0 on a masked cell;
            labels of the wrong length; bad valid lengths; layer names not N strings.
    """
    weights = as_array(weights, "weights")
    if weights.ndim != 4:
        raise ValueError(f"weights must have shape (N, H, Lq, Lk) (layers, heads, queries, keys), "
                         f"got {weights.ndim} dimensions")
    array = as_weights(weights)  # checked; a 4-D input keeps its shape: (N, H, Lq, Lk)
    N, H, Lq, Lk = array.shape
    query_tokens = _labels(tokens, Lq, "tokens")
    key_tokens = (query_tokens if key_tokens is None and Lq == Lk
                  else _labels(key_tokens, Lk, "key_tokens"))
    valid_lens = as_list(valid_lens, "valid_lens")
    if valid_lens is None:
        masked = np.zeros((Lq, Lk), dtype=bool)
    elif isinstance(valid_lens, numbers.Integral) and not isinstance(valid_lens, bool):
        masked = masked_keys([valid_lens], 1, Lq, Lk)[0]  # (1,) -> (1, Lq, Lk) -> (Lq, Lk)
    else:
        if isinstance(valid_lens, str) or not isinstance(valid_lens, Sequence) \
                or len(valid_lens) != Lq:
            raise ValueError(f"valid_lens must be None, an int or {Lq} per-query valid lengths, "
                             f"got {valid_lens!r}")
        masked = masked_keys([list(valid_lens)], 1, Lq, Lk)[0]  # (1, Lq) -> (1, Lq, Lk) -> (Lq, Lk)
    if (array[:, :, masked] > WEIGHT_TOLERANCE).any():
        raise ValueError("weights must be 0 on the cells valid_lens masks: is valid_lens the mask "
                         "the model used (e.g. causal_valid_lens for a causal model)?")
    names = tuple(f"layer {n}" for n in range(N)) if layer_names is None else layer_names
    if isinstance(names, str) or not isinstance(names, Sequence) or len(names) != N \
            or not all(isinstance(s, str) for s in names):
        raise ValueError(f"layer_names must be {N} strings, got {layer_names!r}")
    return _GivenWeights(array, masked, query_tokens, key_tokens, tuple(names))


# The page's script, after plotly.js: the range input picks a layer, Plotly.react draws its
# stored traces and layout (the phone layout when the figure's box is narrow).
_REDRAW_JS = """
(function () {
  var gd = document.getElementById("__DIV__");
  var ex = __STATES__;
  var config = {responsive: true, displaylogo: false, displayModeBar: false};
  var input = document.getElementById("__DIV__-layer");
  function narrow() {
    return window.mhaIsNarrow ? window.mhaIsNarrow(gd) : (gd.parentElement || gd).clientWidth < 560;
  }
  var shownNarrow = null;
  function redraw() {
    var n = Number(input.value);
    shownNarrow = narrow();
    var data = ex.traces[n].map(function (trace, h) {
      var z = ex.weights[n][h];
      var text = z.map(function (row) {
        return row.map(function (w) { return w === null ? "masked" : "weight " + w.toFixed(3); });
      });
      return Object.assign({}, trace, {z: z, text: text});
    });
    var layout = (shownNarrow ? ex.narrow_layouts : ex.layouts)[n];
    gd.style.height = layout.height + "px";
    input.setAttribute("aria-valuetext", ex.names[n]);
    document.getElementById(input.id + "-value").textContent = ex.names[n];
    gd.setAttribute("aria-label", ex.description + " Now: " + ex.names[n] + ".");
    gd.dataset.state = String(n);
    return Plotly.react(gd, data, layout, config);
  }
  input.addEventListener("input", redraw);
  window.addEventListener("resize", function () { if (narrow() !== shownNarrow) redraw(); });
  gd.mhaExplorer = {states: ex, redraw: redraw};
  redraw();
})();
"""


def _stored(z: np.ndarray, decimals: int) -> list:
    """(H, Lq, Lk) weights with NaN = masked as nested lists, rounded, masked cells None."""
    rounded = np.round(z, decimals).astype(object)
    rounded[np.isnan(z)] = None
    return rounded.tolist()


def given_explorer(
    weights: object,
    *,
    tokens: object,
    key_tokens: object = None,
    valid_lens: object = None,
    layer_names: Sequence[str] | None = None,
    layer: int = 0,
    max_cols: int = DEFAULT_MAX_COLS,
    decimals: int = 4,
    title: str | None = None,
) -> go.Figure:
    """A self-contained plotly figure of given weights, one layer at a time, without a kernel.

    The arguments up to ``layer_names`` are those of :func:`_given_weights`. The figure shows
    layer ``layer``; :func:`given_explorer_html` adds the "Layer" range input that switches.
    Everything lives in ``fig.layout.meta["explorer"]``: ``names`` (the layers'), ``weights``
    (``[n][h]`` an (Lq, Lk) nested list, masked cells None, rounded to ``decimals``), per layer
    the ``traces`` (without weights), ``layouts`` and phone ``narrow_layouts``, the initial
    ``layer`` and a ``description`` (the text alternative, also ``meta["description"]``).

    Raises:
        ValueError: as :func:`_given_weights`, a ``layer`` not in [0, N), ``decimals`` not in 1..8.
    """
    given, layer, max_cols = _checked(weights, tokens, key_tokens, valid_lens, layer_names,
                                      layer, max_cols)
    if (isinstance(decimals, bool) or not isinstance(decimals, numbers.Integral)
            or not 1 <= decimals <= 8):
        raise ValueError(f"decimals must be an integer in 1..8, got {decimals!r}")
    states, skeletons, layouts, narrow_layouts = [], [], [], []
    for n in range(given.num_layers):
        traces, layout = given.parts(n, max_cols, title=title)
        _, narrow = given.parts(n, max_cols, narrow=True, title=title)
        states.append(_stored(given.shown(n), int(decimals)))
        for trace in traces:  # the stored state, so the page shows exactly what the control does
            trace["z"] = states[n][trace["meta"]["head"]]
        skeletons.append([{k: v for k, v in t.items() if k not in ("z", "text")} for t in traces])
        layouts.append(layout)
        narrow_layouts.append(narrow)
        if n == layer:
            initial_traces, initial_layout = traces, dict(layout)
    N, H, Lq, Lk = given.weights.shape
    description = (
        f"Attention weights of the {H} heads of one layer on one sequence of {Lq} tokens: keys "
        "left to right, queries top to bottom, colour from 0 (dark purple) to 1 (yellow), "
        "masked keys grey. The control above chooses the layer."
    )
    initial_layout.update(meta={
        "description": description,
        "explorer": {"names": list(given.layer_names), "weights": states, "traces": skeletons,
                     "layouts": layouts, "narrow_layouts": narrow_layouts, "layer": layer,
                     "description": description},
    })
    return go.Figure(data=initial_traces, layout=initial_layout)


def _checked(weights, tokens, key_tokens, valid_lens, layer_names, layer, max_cols):
    """The arguments both explorers share, checked: (_GivenWeights, layer, max_cols)."""
    given = _given_weights(weights, tokens=tokens, key_tokens=key_tokens, valid_lens=valid_lens,
                          layer_names=layer_names)
    if isinstance(layer, bool) or not isinstance(layer, numbers.Integral) \
            or not 0 <= layer < given.num_layers:
        raise ValueError(f"layer must be an integer in [0, {given.num_layers}), got {layer!r}")
    return given, int(layer), check_positive_int(max_cols, "max_cols")


def given_explorer_html(fig: go.Figure, *, div_id: str = _DIV_ID) -> str:
    """HTML for the website: a labelled "Layer" range input, the figure's div and its script.

    plotly.js comes from the book's own ``_static`` (no CDN). Show it with
    ``IPython.display.HTML(...)``. ``div_id`` must be unique on the page.

    Args:
        fig: a figure from :func:`given_explorer`.
    """
    if not isinstance(fig, go.Figure) or not isinstance(fig.layout.meta, dict) \
            or "names" not in fig.layout.meta.get("explorer", {}):
        raise ValueError("fig must be a figure from given_explorer")
    if not isinstance(div_id, str) or not div_id.replace("-", "").isalnum():
        raise ValueError(f"div_id must be letters, digits and dashes, got {div_id!r}")
    import plotly.io as pio

    explorer = json.loads(pio.to_json(fig.layout.meta["explorer"], validate=False))
    script = (_REDRAW_JS.replace("__DIV__", div_id)
              .replace("__STATES__", json.dumps(explorer, separators=(",", ":"))))
    script = script.replace("</", "<\\/")  # the JSON cannot close the script early
    n, names = explorer["layer"], explorer["names"]
    label = html.escape(explorer["description"], quote=True)
    control = (
        f'<div class="mha-control"><label for="{div_id}-layer">Layer: '
        f'<output id="{div_id}-layer-value" for="{div_id}-layer">{html.escape(names[n])}</output>'
        f'</label><input type="range" id="{div_id}-layer" min="0" max="{len(names) - 1}" '
        f'step="1" value="{n}"></div>'
    )
    return (
        f'<div class="mha-explorer"><div class="mha-explorer-controls" id="{div_id}-controls" '
        f'role="group" aria-label="Explorer controls">{control}</div>'
        f'<div id="{div_id}" class="plotly-graph-div mha-figure" role="img" aria-label="{label}" '
        f'style="height:{int(fig.layout.height)}px"></div></div>\n'
        f'<script type="text/javascript">{script}</script>'
    )


def explore_given(
    weights: object,
    *,
    tokens: object,
    key_tokens: object = None,
    valid_lens: object = None,
    layer_names: Sequence[str] | None = None,
    layer: int = 0,
    max_cols: int = DEFAULT_MAX_COLS,
):
    """The live explorer of given weights in Jupyter: a "layer" slider and the layer's heatmaps.

    The arguments are those of :func:`given_explorer`. Returns an ipywidgets ``VBox`` with
    attributes ``layer`` (a ``SelectionSlider`` over the layer names), ``figure`` (the plotly
    ``FigureWidget``, updated in place) and ``shown()`` (``{head: (Lq, Lk)}`` weights read back
    from the figure, NaN = masked).

    Raises:
        ValueError: as :func:`given_explorer`.
    """
    import ipywidgets as widgets

    given, layer, max_cols = _checked(weights, tokens, key_tokens, valid_lens, layer_names,
                                      layer, max_cols)
    traces, layout = given.parts(layer, max_cols)
    slider = widgets.SelectionSlider(
        options=[(name, n) for n, name in enumerate(given.layer_names)], value=layer,
        description="layer", continuous_update=True,
    )
    figure = go.FigureWidget(data=traces, layout=layout)

    def on_change(change=None) -> None:
        new, new_layout = given.parts(slider.value, max_cols)
        with figure.batch_update():
            for trace, fresh in zip(figure.data, new):
                trace.z, trace.text, trace.hovertemplate = (fresh["z"], fresh["text"],
                                                            fresh["hovertemplate"])
            figure.layout.annotations = new_layout["annotations"]

    def shown() -> dict[int, np.ndarray]:
        return {t.meta["head"]: np.array(t.z, dtype=float) for t in figure.data}

    slider.observe(on_change, names="value")
    box = widgets.VBox([slider, figure])
    box.layer, box.figure, box.shown, box.given = slider, figure, shown, given
    return box
