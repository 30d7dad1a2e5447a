"""The kernel-free explorer for the website: precomputed weights, native sliders, a little JavaScript.

The sliders are HTML range inputs with labels (mouse, touch and keyboard), above the figure.
Without a kernel nothing can be recomputed, so every state the sliders can reach is computed
in advance by :meth:`mha_lib.viz.scene.Source.weights` (the real MultiHeadAttention) and
stored in the figure (``layout.meta["explorer"]``). The examples of a batch do not influence
each other, so the weights of example ``b`` depend only on (H, its own valid length): the
figure stores one state per (H, example, valid length), and a short script combines the
sliders' positions: plotly draws each head count's frame once, and the weights are pictures
swapped over its panels (see :data:`_REDRAW_JS`). That keeps the page small (the default
explorer holds 4 head counts x 2 examples x 7 valid lengths states, not 4 x 7 x 7) and a slider
move cheap.

Shape legend
    B   number of examples (one valid-length slider each)
    H   number of heads
    Lq  number of queries, Lk number of key-value pairs
"""

from __future__ import annotations

import html
import json
import numbers

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from mha_lib._checks import check_positive_int
from mha_lib.viz.heatmaps import DEFAULT_MAX_COLS, colour_stops
from mha_lib.viz.scene import Source, make_source

__all__ = ["CONTROLS_ID", "DIV_ID", "static_explorer", "static_explorer_html"]

DIV_ID = "mha-static-explorer"
CONTROLS_ID = DIV_ID + "-controls"

# The page's script, after plotly.js. "__STATES__" is replaced by the explorer's states.
#
# Plotly draws the frame of a head count: axes, panel titles, the grey background of each panel,
# the colour bar, and one transparent heatmap per panel that only answers hovering. The weights
# themselves are pictures over the panels (layout images, one pixel per cell, masked keys
# transparent so the grey shows), coloured from the stored weights with the figure's colour scale
# (mhaWeightsPicture in mha-figures.js). Each frame is drawn once (Plotly.react), in its own
# plotly div, when its head count (or the phone layout) is first chosen; after that a change of
# any control shows that frame and swaps the pictures that differ (Plotly.relayout of
# images[i].source, which redraws nothing else). Drawing a frame costs plotly dozens of forced
# layouts; swapping pictures costs none, which is what keeps the sliders responsive on a slow
# phone. The hover box (example, head, query, key, weight) shows the state on screen
# (mhaHoverBox in mha-figures.js). A drag's many input events are drawn once per animation frame
# (the latest position); once a state is on screen the box's data-drawn says which, and the box
# sends a "mha-explorer-drawn" event.
_REDRAW_JS = """
(function () {
  var box = document.getElementById("__DIV__");  // the figure's box: its label, one plotly div per frame
  var ex = __STATES__;
  var config = {responsive: true, displaylogo: false, displayModeBar: false};
  // the heads input (absent when the module fixes H), then one valid length per example
  var headsInput = document.getElementById("__CONTROLS__-heads");
  var lenInputs = Array.prototype.slice.call(
    document.querySelectorAll("#__CONTROLS__ input[type=range]")).filter(function (i) { return i !== headsInput; });
  var inputs = (headsInput ? [headsInput] : []).concat(lenInputs);
  function narrow() {
    return window.mhaIsNarrow ? window.mhaIsNarrow(box) : box.parentElement.clientWidth < 560;
  }
  function active() {  // [head count index, valid length of each example]
    return [headsInput ? Number(headsInput.value) : ex.heads_index].concat(
      lenInputs.map(function (input) { return Number(input.value); }));
  }
  function describe(state) {
    var H = ex.heads[state[0]];
    var lens = state.slice(1).map(function (v, b) { return "example " + b + " sees " + v + " key" + (v === 1 ? "" : "s"); });
    return ex.description + " Now: " + H + " head" + (H === 1 ? "" : "s") + "; " + lens.join(", ") + ".";
  }
  function labels(state) {
    if (headsInput) {
      var H = ex.heads[state[0]];
      headsInput.setAttribute("aria-valuetext", H + (H === 1 ? " head" : " heads"));
      document.getElementById(headsInput.id + "-value").textContent = String(H);
    }
    lenInputs.forEach(function (input, b) {
      input.setAttribute("aria-valuetext", state[1 + b] + " of " + input.max + " keys");
      document.getElementById(input.id + "-value").textContent = String(state[1 + b]);
    });
    box.setAttribute("aria-label", describe(state));
  }

  // --- pictures of the weights (window.mhaWeightsPicture, in mha-figures.js) ---------------
  var pictures = {};
  function picture(key, z) {  // (Lq, Lk) weights, masked keys null -> a PNG data URL ("" if all masked)
    return key in pictures ? pictures[key] : (pictures[key] = window.mhaWeightsPicture(z, ex.colorscale));
  }
  function weightsOf(trace, state) {  // the (Lq, Lk) weights a panel shows in `state`, masked keys null
    var b = trace.meta.example, byLength = ex.weights[state[0]][b], Lk = byLength.length - 1;
    return byLength[state[1 + b]][trace.meta.head].map(function (row) {  // stored: the visible keys
      return row.concat(new Array(Lk - row.length).fill(null));
    });
  }
  function sources(traces, state) {
    return traces.map(function (trace) {
      var b = trace.meta.example;
      return picture([state[0], b, state[1 + b], trace.meta.head].join(), weightsOf(trace, state));
    });
  }

  // --- the frame of a head count -------------------------------------------------------------
  function frame(hi, isNarrow, state) {
    var traces = (isNarrow ? ex.narrow_traces : ex.traces)[hi].map(function (t) {
      // zeros, not drawn (opacity 0): the colour bar and the hover need a heatmap of the scale
      var m = t.meta, Lq = m.queries.length, Lk = m.keys.length, z = [];
      for (var i = 0; i < Lq; i++) { z.push([]); for (var j = 0; j < Lk; j++) z[i].push(0); }
      var trace = Object.assign({}, t, {z: z, opacity: 0, hoverinfo: "none"});
      delete trace.hovertemplate;
      return trace;
    });
    var pics = sources(traces, state);
    var layout = Object.assign({}, (isNarrow ? ex.narrow_layouts : ex.layouts)[hi], {
      images: traces.map(function (t, i) {
        return {source: pics[i], xref: t.xaxis, yref: t.yaxis, x: t.x0 - 0.5, y: t.y0 - 0.5,
                sizex: t.meta.keys.length, sizey: t.meta.queries.length, sizing: "stretch",
                xanchor: "left", yanchor: "top", layer: "above"};
      })});
    return {traces: traces, layout: layout};
  }

  // --- hover: the weight under the pointer, from the state on screen ------------------------
  var tip = window.mhaHoverBox(box.parentElement);
  function hover(event) {
    var point = event.points && event.points[0], e = event.event || {};
    if (!point || !shown) return;
    var m = point.data.meta, i = point.pointNumber[0], j = point.pointNumber[1];
    var w = weightsOf(point.data, shown)[i][j];
    tip.show([point.data.name, "query " + m.queries[i], "key " + m.keys[j],
              w === null ? "masked" : "weight " + w.toFixed(3)], e.clientX || 0, e.clientY || 0);
  }

  // --- frames: one plotly div per head count (and phone or wide layout), drawn once -----------
  // The frame on screen is in the page's flow; the others wait hidden on top of it, drawn at the
  // same width, so that moving the heads slider back to a head count only swaps pictures.
  var frames = {}, onScreen = null;
  function show(hi, isNarrow, state) {
    var name = hi + (isNarrow ? "-narrow" : "-wide"), f = frames[name];
    if (!f) {
      f = frames[name] = {gd: document.createElement("div"), drawn: null};
      f.gd.className = "mha-explorer-frame";
      box.appendChild(f.gd);
    }
    if (onScreen && onScreen !== f) onScreen.gd.classList.remove("mha-explorer-on-screen");
    f.gd.classList.add("mha-explorer-on-screen");
    onScreen = f;
    var done;
    if (!f.drawn) {
      f.drawn = frame(hi, isNarrow, state);
      f.gd.style.height = f.drawn.layout.height + "px";
      done = Plotly.react(f.gd, f.drawn.traces, f.drawn.layout, config);
      f.gd.on("plotly_hover", hover);
      f.gd.on("plotly_unhover", tip.hide);
    } else {  // swap the pictures that differ from the state this frame last showed
      var pics = sources(f.drawn.traces, state), update = {};
      var images = f.drawn.layout.images.map(function (image, i) {
        if (image.source === pics[i]) return image;
        update["images[" + i + "].source"] = pics[i];
        return Object.assign({}, image, {source: pics[i]});
      });
      f.drawn = {traces: f.drawn.traces, layout: Object.assign({}, f.drawn.layout, {images: images})};
      f.gd.mhaSource = {data: f.drawn.traces, layout: f.drawn.layout, config: config};  // for a theme switch
      done = Object.keys(update).length ? Plotly.relayout(f.gd, update) : Promise.resolve();
    }
    box.style.height = f.drawn.layout.height + "px";
    return done;
  }

  var shownNarrow = null, shownKey = null, shown = null, pending = false;
  function redraw() {
    pending = false;
    var state = active(), isNarrow = narrow(), key = JSON.stringify(state);
    if (key === shownKey && isNarrow === shownNarrow) return Promise.resolve();
    shownNarrow = isNarrow;
    shownKey = key;
    shown = state;
    labels(state);
    box.dataset.state = key;
    tip.hide();
    return show(state[0], isNarrow, state).then(function () {
      if (shownKey !== key) return;
      box.dataset.drawn = key;  // the figure shows this state
      box.dispatchEvent(new CustomEvent("mha-explorer-drawn", {detail: key}));
    });
  }
  // a drag sends many input events: draw once per frame, the latest position
  function later() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(redraw);
  }
  inputs.forEach(function (input) { input.addEventListener("input", later); });
  window.addEventListener("resize", function () { if (narrow() !== shownNarrow) redraw(); });
  box.mhaExplorer = {
    states: ex,
    redraw: redraw,
    graph: function () { return onScreen.gd; },  // the plotly div on screen
    // what is on screen: every panel's example, head and weights (masked keys null)
    shown: function () {
      return onScreen.drawn.traces.map(function (t) {
        return {example: t.meta.example, head: t.meta.head, z: weightsOf(t, shown)};
      });
    },
  };
  redraw();
})();
"""


def _one_subplot_per_example(traces: list[dict], layout: dict) -> tuple[list[dict], dict]:
    """The panels of :func:`mha_lib.viz.heatmaps.heatmap_parts` redrawn faster: each example's
    heatmaps share one subplot, where they sit at the panels' places.

    plotly redraws every subplot (axes, tick labels) whenever a heatmap changes; with one
    subplot per example instead of one per head, a redraw draws 2 pairs of axes, not 2 * H. The
    figure looks the same: each heatmap covers its panel (keys on x, queries top to bottom), its
    grey background shows through the masked keys, the titles stay; the keys are named under
    the example's last row of panels and the queries left of each row. Axes have fixed ranges
    and no automargin (nothing for plotly to measure again). The traces keep their ``meta``
    (``example``, ``head``) and gain the tokens (``queries``, ``keys``) for the hover texts.
    """
    out = {k: v for k, v in layout.items() if not k.startswith(("xaxis", "yaxis"))}
    shapes, new_traces, axes = [], [], {}
    for trace in traces:
        if not trace["visible"]:
            continue
        b = trace["meta"]["example"]
        xaxis, yaxis = layout["xaxis" + trace["xaxis"][1:]], layout["yaxis" + trace["yaxis"][1:]]
        axes.setdefault(b, []).append((trace, xaxis, yaxis))
    for n, (b, panels) in enumerate(sorted(axes.items()), start=1):
        _, x0, y0 = panels[0]
        Lq, Lk = len(panels[0][0]["y"]), len(panels[0][0]["x"])
        width = x0["domain"][1] - x0["domain"][0]  # one panel, as a fraction of the plot
        height = y0["domain"][1] - y0["domain"][0]
        left = min(x["domain"][0] for _, x, _ in panels)
        right = max(x["domain"][1] for _, x, _ in panels)
        bottom = min(y["domain"][0] for _, _, y in panels)
        top = max(y["domain"][1] for _, _, y in panels)
        xs, ys = {}, {}  # panel offsets (in cells) -> tick positions and texts
        for trace, xaxis, yaxis in panels:
            dx = round((xaxis["domain"][0] - left) / width * Lk, 6)
            dy = round((top - yaxis["domain"][1]) / height * Lq, 6)
            new_traces.append({
                **{k: v for k, v in trace.items() if k not in ("x", "y")},
                "xaxis": f"x{n if n > 1 else ''}", "yaxis": f"y{n if n > 1 else ''}",
                "x0": dx, "dx": 1, "y0": dy, "dy": 1,
                "meta": {**trace["meta"], "queries": trace["y"], "keys": trace["x"]},
                "hovertemplate": trace["hovertemplate"].replace("%{y}", "%{customdata[0]}")
                                                       .replace("%{x}", "%{customdata[1]}"),
            })
            shapes.append({"type": "rect", "xref": new_traces[-1]["xaxis"],
                           "yref": new_traces[-1]["yaxis"], "x0": dx - 0.5, "x1": dx + Lk - 0.5,
                           "y0": dy - 0.5, "y1": dy + Lq - 0.5, "layer": "below",
                           "fillcolor": layout["shapes"][0]["fillcolor"], "line": {"width": 0}})
            if yaxis["domain"][0] == bottom:
                xs[dx] = xaxis
            if xaxis["domain"][0] == left:
                ys[dy] = yaxis
        index = ({t: i for i, t in enumerate(panels[0][0]["x"])},  # category -> position
                 {t: i for i, t in enumerate(panels[0][0]["y"])})
        # no automargin, no hiding of overflowing tick labels: nothing for plotly to measure
        common = {"showgrid": False, "zeroline": False, "fixedrange": True, "automargin": False,
                  "tickangle": 0, "tickfont": x0["tickfont"], "tickmode": "array",
                  "ticklabeloverflow": "allow"}
        suffix = str(n) if n > 1 else ""
        out["xaxis" + suffix] = {
            **common, "domain": [left, right], "anchor": "y" + suffix,
            "range": [-0.5, (right - left) / width * Lk - 0.5],
            "title": {"text": "key", "standoff": 2},
            "tickvals": [dx + index[0][v] for dx, a in sorted(xs.items()) for v in a["tickvals"]],
            "ticktext": [t for _, a in sorted(xs.items()) for t in a["ticktext"]]}
        out["yaxis" + suffix] = {
            **common, "domain": [bottom, top], "anchor": "x" + suffix,
            "range": [(top - bottom) / height * Lq - 0.5, -0.5],  # reversed: query 0 on top
            "title": {"text": "query", "standoff": 2},
            "tickvals": [dy + index[1][v] for dy, a in sorted(ys.items()) for v in a["tickvals"]],
            "ticktext": [t for _, a in sorted(ys.items()) for t in a["ticktext"]]}
    out["shapes"] = shapes
    return new_traces, out


def _cells(queries: list[str], keys: list[str]) -> list[list[list[str]]]:
    """(Lq, Lk) cells of a panel, each [its query, its key] (the hover text names both)."""
    return [[[q, k] for k in keys] for q in queries]


def _state(weights: np.ndarray, valid_len: int, decimals: int) -> list:
    """(H, Lq, valid_len) weights of one example as nested lists, rounded: the masked keys are
    left out (the page puts them back as null: a third of the explorer's bytes were nulls)."""
    return np.round(weights[..., :valid_len], decimals).tolist()


def _explorer_states(source: Source, *, seed: int | None = None, decimals: int = 4) -> list:
    """Every state of the static explorer: ``states[i][b][v]`` = head count ``i``, example ``b``,
    valid length ``v``, a (H, Lq, v) nested list (the visible keys only), rounded to ``decimals``.

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
    The figure shows the initial configuration; its controls (a "heads" range input over the
    head counts dividing d_model, and one "valid length" range input per example) are
    native HTML added by :func:`static_explorer_html`. The states live in
    ``fig.layout.meta["explorer"]``: ``heads``, ``weights`` (see :func:`_explorer_states`), per
    head count the ``traces`` (without weights), the ``layouts``, and the phone's
    ``narrow_traces`` and ``narrow_layouts`` (each example's heatmaps on one subplot, see
    :func:`_one_subplot_per_example`), ``batch_size``, ``num_keys``, the initial ``valid_lens`` and
    ``heads_index``, and a ``description`` (the figure's text alternative, also
    ``meta["description"]``).

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
    lens, Lk = list(source.scene.valid_lens), source.scene.num_keys
    states = _explorer_states(source, decimals=decimals)
    skeletons, layouts, narrow_skeletons, narrow_layouts = [], [], [], []
    for i, H in enumerate(heads):
        weights = source.weights(H, lens)
        traces, layout = source.parts(weights, lens, max_cols, num_slots=H)
        traces, layout = _one_subplot_per_example(traces, layout)
        narrow_traces, narrow = _one_subplot_per_example(
            *source.parts(weights, lens, max_cols, num_slots=H, narrow=True))
        for trace in traces:  # the stored state, so the page shows exactly what the controls do
            b, h = trace["meta"]["example"], trace["meta"]["head"]
            trace["z"] = [row + [None] * (Lk - len(row)) for row in states[i][b][lens[b]][h]]
            trace["customdata"] = _cells(trace["meta"]["queries"], trace["meta"]["keys"])
        skeletons.append([{k: v for k, v in t.items() if k not in ("z", "text", "customdata")}
                          for t in traces])
        narrow_skeletons.append([{k: v for k, v in t.items() if k not in ("z", "text", "customdata")}
                                 for t in narrow_traces])
        layouts.append(layout)
        narrow_layouts.append(narrow)
        if H == num_heads:
            initial_traces, initial_layout = traces, dict(layout)
    B, Lk = source.scene.batch_size, source.scene.num_keys
    on = (f"the given MultiHeadAttention ({heads[0]} heads) on {B} example{'s' if B > 1 else ''}"
          if source.fixed is not None else
          f"MultiHeadAttention on {B} short sentence{'s' if B > 1 else ''}")
    description = (
        f"Attention weights of {on}: one heatmap per example and head, keys left to right, "
        "queries top to bottom, colour from 0 (dark purple) to 1 (yellow), masked keys grey. "
        f"The controls above choose {'the number of heads and ' if len(heads) > 1 else ''}"
        f"each example's valid length."
    )
    initial_layout.update(meta={
        "description": description,
        "explorer": {"heads": heads, "weights": states, "traces": skeletons,
                     "colorscale": colour_stops(initial_layout["coloraxis"]["colorscale"]),
                     "narrow_traces": narrow_skeletons,
                     "layouts": layouts, "narrow_layouts": narrow_layouts, "batch_size": B,
                     "num_keys": Lk, "valid_lens": lens, "heads_index": heads.index(num_heads),
                     "description": description},
    })
    return go.Figure(data=initial_traces, layout=initial_layout)


def _range(input_id: str, label: str, value: int, maximum: int, shown: str) -> str:
    """One labelled native range input with its current value in an ``<output>``."""
    return (
        f'<div class="mha-control"><label for="{input_id}">{label}: '
        f'<output id="{input_id}-value" for="{input_id}">{shown}</output></label>'
        f'<input type="range" id="{input_id}" min="0" max="{maximum}" step="1" '
        f'value="{value}"></div>'
    )


def _controls_html(explorer: dict) -> str:
    """The explorer's controls: a "Heads" range input (a plain text when the module fixes H) and
    one "valid length" per example."""
    heads, hi = explorer["heads"], explorer["heads_index"]
    B, Lk = explorer["batch_size"], explorer["num_keys"]
    parts = [_range(f"{CONTROLS_ID}-heads", "Heads", hi, len(heads) - 1, str(heads[hi])) if len(heads) > 1
             else f'<div class="mha-control mha-control-fixed">Heads: {heads[0]} (the model\'s)</div>']
    for b, v in enumerate(explorer["valid_lens"]):
        label = "Valid length" if B == 1 else f"Valid length of example {b}"
        parts.append(_range(f"{CONTROLS_ID}-len-{b}", label, v, Lk, str(v)))
    return (f'<div class="mha-explorer-controls" id="{CONTROLS_ID}" role="group" '
            f'aria-label="Explorer controls">{"".join(parts)}</div>')


def static_explorer_html(fig: go.Figure | None = None, **kwargs) -> str:
    """HTML for the website: native controls, the figure's div (fixed id) and its script.

    The controls are ``<input type="range">`` elements with ``<label>``s (mouse, touch and
    keyboard: arrow keys, Home, End). plotly.js and ``mha-figures.js`` (the pictures of
    weights) are served by the book's own ``_static`` (see ``mha_lib.book.sphinx_ext``): the
    HTML has no CDN link and no MathJax. Show it with ``IPython.display.HTML(...)``.

    Args:
        fig: a figure from :func:`static_explorer`; built from ``kwargs`` when None.
        **kwargs: the arguments of :func:`static_explorer`, without ``fig``.

    Raises:
        ValueError: ``fig`` not a figure from :func:`static_explorer`, both ``fig`` and
            ``kwargs``, or bad ``kwargs`` (see :func:`static_explorer`).
    """
    if fig is None:
        fig = static_explorer(**kwargs)
    elif kwargs:
        raise ValueError(f"pass fig or the explorer's arguments, not both: got fig and "
                         f"{sorted(kwargs)}")
    elif not isinstance(fig, go.Figure) or not isinstance(fig.layout.meta, dict) \
            or "heads" not in fig.layout.meta.get("explorer", {}):
        raise ValueError(f"fig must be a figure from static_explorer, got {type(fig).__name__}")
    explorer = json.loads(pio.to_json(fig.layout.meta["explorer"], validate=False))
    script = (_REDRAW_JS.replace("__DIV__", DIV_ID).replace("__CONTROLS__", CONTROLS_ID)
              .replace("__STATES__", json.dumps(explorer, separators=(",", ":"))))
    label = html.escape(explorer["description"], quote=True)
    script = script.replace("</", "<\\/")  # the JSON cannot close the script early
    return (
        f'<div class="mha-explorer">{_controls_html(explorer)}'
        f'<div id="{DIV_ID}" class="plotly-graph-div mha-figure mha-explorer-figure" role="img" aria-label="{label}" '
        f'style="height:{int(fig.layout.height)}px"></div></div>\n'
        f'<script type="text/javascript">{script}</script>'
    )
