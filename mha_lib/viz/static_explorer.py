"""The kernel-free explorer for the website: precomputed weights, plotly sliders, a little JavaScript.

Without a kernel nothing can be recomputed, so every state the sliders can reach is computed
in advance by :meth:`mha_lib.viz.scene.Source.weights` (the real MultiHeadAttention) and
stored in the figure (``layout.meta["explorer"]``). The examples of a batch do not influence
each other, so the weights of example ``b`` depend only on (H, its own valid length): the
figure stores one state per (H, example, valid length), and a short script combines the
sliders' positions into one ``Plotly.update`` call. That keeps the page small: the default
explorer holds 4 head counts x 2 examples x 7 valid lengths states, not 4 x 7 x 7.

Shape legend
    B   number of examples (one valid-length slider each)
    H   number of heads
    Lq  number of queries, Lk number of key-value pairs
"""

from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from mha_lib._checks import check_positive_int
from mha_lib.viz.heatmaps import DEFAULT_MAX_COLS
from mha_lib.viz.scene import Source, make_source

DIV_ID = "mha-static-explorer"
SLIDER_ROW_PX = 85  # height of one row of sliders above the panels
SLIDERS_PER_ROW = 3

# Runs once after Plotly.newPlot; "{plot_id}" is replaced by plotly's to_html. On a slider
# change it shows the stored state of each example for the sliders' positions: a restyle of the
# changed example's panels for a valid length; for a head count, ``Plotly.react`` on the same
# div with that head count's traces and layout. (Unlike the live FigureWidget, the figure keeps
# no hidden panels for other head counts: in plotly.js they cost about 60 ms per redraw.)
REDRAW_JS = """
(function () {
  var gd = document.getElementById("{plot_id}");
  var ex = gd.layout.meta.explorer;
  var shown = gd.layout.sliders.map(function (s) { return s.active; });  // what is drawn
  function hoverText(z) {
    return z.map(function (row) {
      return row.map(function (w) { return w === null ? "masked" : "weight " + w.toFixed(3); });
    });
  }
  function redraw() {
    var active = gd.layout.sliders.map(function (s) { return s.active; });
    var hi = active[0], headsChanged = hi !== shown[0];
    var data = [], traces = [];
    ex.traces[hi].forEach(function (trace, k) {
      var b = trace.meta.example, h = trace.meta.head;
      if (!headsChanged && active[1 + b] === shown[1 + b]) return;  // example unchanged
      var z = ex.weights[hi][b][active[1 + b]][h];
      data.push(Object.assign({}, trace, {z: z, text: hoverText(z)}));
      traces.push(k);
    });
    shown = active;
    if (headsChanged) {  // other panels: this head count's traces and layout, same sliders
      var layout = Object.assign({}, ex.layouts[hi], {sliders: gd.layout.sliders,
                                                      meta: gd.layout.meta});
      return Plotly.react(gd, data, layout);
    }
    if (!traces.length) return null;
    return Plotly.restyle(gd, {
      z: data.map(function (t) { return t.z; }),
      text: data.map(function (t) { return t.text; }),
    }, traces);
  }
  gd.on("plotly_sliderchange", redraw);
})();
"""


def _state(weights: np.ndarray, valid_len: int, decimals: int) -> list:
    """(H, Lq, Lk) weights of one example as nested lists, rounded, masked keys as None."""
    rounded = np.round(weights, decimals).astype(object)
    rounded[..., valid_len:] = None
    return rounded.tolist()


def explorer_states(source: Source, *, seed: int | None = None, decimals: int = 4) -> list:
    """Every state of the static explorer: ``states[i][b][v]`` = head count ``i``, example ``b``,
    valid length ``v``, a (H, Lq, Lk) nested list (masked keys None), rounded to ``decimals``.

    Computed with the valid lengths ``[v] * B``: example ``b``'s weights depend only on
    ``valid_lens[b]``, so any combination of slider positions is a combination of states.
    ``seed`` draws the projections (default: the source's seed).
    """
    B, Lk = source.scene.batch_size, source.scene.num_keys
    states = []
    for H in source.head_choices:
        per_example = [[None] * (Lk + 1) for _ in range(B)]
        for v in range(Lk + 1):
            weights = source.weights(H, [v] * B, seed).double().numpy()  # (B, H, Lq, Lk)
            for b in range(B):
                per_example[b][v] = _state(weights[b], v, decimals)
        states.append(per_example)
    return states


def _sliders(source: Source, heads_index: int, valid_lens: Sequence[int]) -> list[dict]:
    """Plotly sliders: head count first, then one valid length per example, in rows of three."""
    B, Lk = source.scene.batch_size, source.scene.num_keys
    specs = [("heads: ", [str(H) for H in source.head_choices], heads_index)]
    for b in range(B):
        prefix = "valid length: " if B == 1 else f"valid length (example {b}): "
        specs.append((prefix, [str(v) for v in range(Lk + 1)], valid_lens[b]))
    rows = -(-len(specs) // SLIDERS_PER_ROW)
    sliders = []
    for i, (prefix, labels, active) in enumerate(specs):
        row, col = divmod(i, SLIDERS_PER_ROW)
        sliders.append({
            "active": active,
            "currentvalue": {"prefix": prefix, "font": {"size": 14}},
            "steps": [{"label": label, "method": "skip", "args": [None]} for label in labels],
            "x": col / SLIDERS_PER_ROW, "len": 1 / SLIDERS_PER_ROW - 0.04,
            "y": 1, "xanchor": "left", "yanchor": "bottom",
            "pad": {"t": 0, "b": 30 + SLIDER_ROW_PX * (rows - 1 - row)},
            "transition": {"duration": 0},
        })
    return sliders


def static_explorer(
    *,
    num_heads: int | None = None,
    max_cols: int = DEFAULT_MAX_COLS,
    decimals: int = 4,
    **inputs,
) -> go.Figure:
    """A self-contained plotly figure exploring head count and valid lengths without a kernel.

    The arguments mean what they mean for :func:`mha_lib.viz.explore` (same defaults, same
    weights; ``inputs`` go to :func:`mha_lib.viz.scene.make_source`); ``seed`` is fixed here.
    Sliders: "heads: " (head counts dividing num_hiddens) and
    one "valid length (example b): " per example ("valid length: " for one example). The
    states live in ``fig.layout.meta["explorer"]``: ``heads``, ``weights`` (see
    :func:`explorer_states`), per head count the ``traces`` (without weights) and the
    ``layouts``, and ``batch_size``. Moving a slider needs :data:`REDRAW_JS`, which
    :func:`static_explorer_html` attaches.

    Args:
        decimals: weights are rounded to this many decimals to keep the page small.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        ValueError: as :func:`mha_lib.viz.explore`, or ``decimals`` not in 1..8.
    """
    if (isinstance(decimals, bool) or not isinstance(decimals, numbers.Integral)
            or not 1 <= decimals <= 8):
        raise ValueError(f"decimals must be an integer in 1..8, got {decimals!r}")
    decimals = int(decimals)
    max_cols = check_positive_int(max_cols, "max_cols")
    source = make_source(**inputs)
    heads = list(source.head_choices)
    num_heads = source.initial_heads(num_heads)
    lens = list(source.scene.valid_lens)
    states = explorer_states(source, decimals=decimals)
    sliders = _sliders(source, heads.index(num_heads), lens)
    extra_px = SLIDER_ROW_PX * -(-len(sliders) // SLIDERS_PER_ROW)
    skeletons, layouts = [], []
    for i, H in enumerate(heads):
        traces, layout = source.parts(source.weights(H, lens), lens, max_cols, num_slots=H)
        for trace in traces:  # the stored state, so the page shows exactly what sliders do
            b, h = trace["meta"]["example"], trace["meta"]["head"]
            trace["z"] = states[i][b][lens[b]][h]
        layout.update(height=layout["height"] + extra_px,
                      margin={**layout["margin"], "t": layout["margin"]["t"] + extra_px})
        skeletons.append([{k: v for k, v in t.items() if k not in ("z", "text")} for t in traces])
        layouts.append(layout)
        if H == num_heads:
            initial_traces, initial_layout = traces, dict(layout)
    initial_layout.update(
        sliders=sliders,
        meta={"explorer": {"heads": heads, "weights": states, "traces": skeletons,
                           "layouts": layouts, "batch_size": source.scene.batch_size}},
    )
    return go.Figure(data=initial_traces, layout=initial_layout)


def static_explorer_html(fig: go.Figure | None = None, **kwargs) -> str:
    """HTML for the website: the static explorer's div (fixed id) and scripts, no plotly.js.

    plotly.js is served by the book's own ``_static`` (see ``mha_lib.book.sphinx_ext``): the
    HTML has no CDN link and no MathJax. Show it with ``IPython.display.HTML(...)``.

    Args:
        fig: a figure from :func:`static_explorer`; built from ``kwargs`` when None.
    """
    fig = static_explorer(**kwargs) if fig is None else fig
    return fig.to_html(
        include_plotlyjs=False, include_mathjax=False, full_html=False, div_id=DIV_ID,
        post_script=REDRAW_JS, config={"displaylogo": False, "responsive": True},
    )
