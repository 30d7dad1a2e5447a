/* The mask lab without a kernel (mha_lib/viz/mask_lab_site.py writes its HTML; loaded by
 * mha_lib/book/sphinx_ext.py after plotly.js and mha-figures.js on the page that shows it).
 *
 * The reader composes up to three kinds of mask with & and | (& first, as in Python), adds a
 * score modification, and sees the mask, one head's weights and the tiles of tiled attention.
 * Everything is computed here, as the library computes it (the browser tests compare this
 * script with mha_lib case by case):
 *   - the predicates keep(i, j) and the tile rules of mha_lib/masks/kinds.py, composed with the
 *     three-valued logic of mha_lib/masks/_base.py (a tile is hidden, full, or partial);
 *   - the score modifications of mha_lib/scores.py (alibi, softcap, temperature, >>);
 *   - the weights of one head, as Visible.softmax does: scores = q k^T / sqrt(d) ->
 *     modification -> mask -> softmax, zeros for a query that sees nothing. The queries and
 *     keys of every head of a seeded MultiHeadAttention are in the page (JSON).
 * window.mhaMaskLab.compute(data, spec) is that computation; the page's box gets data-drawn
 * (the spec on screen) and a "mha-masklab-drawn" event once Plotly has drawn it.
 */
(function () {
  "use strict";

  function fdiv(a, b) { return Math.floor(a / b); }

  // --- the kinds: keep(i, j), tiles(block) -> [hidden, full], repr, FlexAttention's mask_mod --
  function kind(name, n, L) {
    var docs = function (p) { return fdiv(p * n, L); };  // packed documents of equal length
    switch (name) {
      case "causal": return {
        keep: function (i, j) { return j <= i; },
        tiles: function (t) { return [t.klo > t.qhi, t.khi <= t.qlo]; },
        repr: "causal()", flex: "(kv_idx <= q_idx)"};
      case "sliding_window": return {
        keep: function (i, j) { return j <= i && j > i - n; },
        tiles: function (t) { return [t.klo > t.qhi || t.khi <= t.qlo - n, t.khi <= t.qlo && t.klo > t.qhi - n]; },
        repr: "sliding_window(" + n + ")", flex: "((kv_idx <= q_idx) & (kv_idx > q_idx - " + n + "))"};
      case "chunked": return {
        keep: function (i, j) { return j <= i && fdiv(j, n) === fdiv(i, n); },
        tiles: function (t) {
          var hidden = t.klo > t.qhi || fdiv(t.khi, n) < fdiv(t.qlo, n) || fdiv(t.klo, n) > fdiv(t.qhi, n);
          var one = fdiv(t.qlo, n) === fdiv(t.qhi, n) && fdiv(t.klo, n) === fdiv(t.qlo, n) && fdiv(t.khi, n) === fdiv(t.qlo, n);
          return [hidden, one && t.khi <= t.qlo];
        },
        repr: "chunked(" + n + ")", flex: "((kv_idx <= q_idx) & (kv_idx // " + n + " == q_idx // " + n + "))"};
      case "prefix_lm": return {
        keep: function (i, j) { return j <= i || j < n; },
        tiles: function (t) { return [t.klo > t.qhi && t.klo >= n, t.khi <= t.qlo || t.khi < n]; },
        repr: "prefix_lm(" + n + ")", flex: "((kv_idx <= q_idx) | (kv_idx < " + n + "))"};
      case "sinks": return {
        keep: function (i, j) { return j < n && j <= i; },
        tiles: function (t) { return [t.klo >= n || t.klo > t.qhi, t.khi < n && t.khi <= t.qlo]; },
        repr: "sinks(" + n + ")", flex: "((kv_idx < " + n + ") & (kv_idx <= q_idx))"};
      case "padding": return {
        keep: function (i, j) { return j < n; },
        tiles: function (t) { return [t.klo >= n, t.khi < n]; },
        repr: "padding([" + n + "])", flex: "(kv_idx < " + n + ")"};
      case "document": {
        var ids = [];
        for (var p = 0; p < L; p++) ids.push(docs(p));
        return {
          keep: function (i, j) { return docs(i) === docs(j); },
          tiles: function (t) {  // the documents of a block: from its first to its last position
            var qlo = docs(t.qlo), qhi = docs(t.qhi), klo = docs(t.klo), khi = docs(t.khi);
            return [khi < qlo || klo > qhi, qlo === qhi && klo === khi && klo === qlo];
          },
          repr: "document([[" + ids.join(", ") + "]])",
          flex: "(q_idx * " + n + " // " + L + " == kv_idx * " + n + " // " + L + ")"};
      }
    }
    throw new Error("unknown kind of mask: " + name);
  }

  // The & chains of the terms, joined by | (Python's precedence).
  function groups(spec) {
    var out = [[kind(spec.terms[0][0], spec.terms[0][1], spec.L)]];
    for (var t = 1; t < spec.terms.length; t++) {
      var k = kind(spec.terms[t][0], spec.terms[t][1], spec.L);
      if (spec.ops[t - 1] === "&") out[out.length - 1].push(k); else out.push([k]);
    }
    return out;
  }

  function keepOf(gs, i, j) {
    return gs.some(function (g) { return g.every(function (k) { return k.keep(i, j); }); });
  }

  function tileOf(gs, t) {  // & : hidden by one, full by all; | : hidden by all, full by one
    var hidden = true, full = false;
    gs.forEach(function (g) {
      var h = false, f = true;
      g.forEach(function (k) { var r = k.tiles(t); h = h || r[0]; f = f && r[1]; });
      hidden = hidden && h;
      full = full || f;
    });
    return [hidden, full && !hidden];
  }

  function reprOf(gs) {
    var parts = gs.map(function (g) {
      var s = g.map(function (k) { return k.repr; }).join(" & ");
      return g.length > 1 && gs.length > 1 ? "(" + s + ")" : s;
    });
    return parts.join(" | ");
  }

  function flexOf(gs) {
    return gs.map(function (g) {
      var s = g.map(function (k) { return k.flex; }).join(" & ");
      return g.length > 1 && gs.length > 1 ? "(" + s + ")" : s;
    }).join(" | ");
  }

  // --- score modifications (mha_lib/scores.py) ----------------------------------------------
  function modifications(spec, H) {
    var h = spec.head, cap = spec.cap, fs = spec.floor_scale, sc = spec.scale;
    var slope = Math.fround(Math.pow(2, -8 * (h + 1) / H));  // float32, as alibi stores it
    var alibi = {
      apply: function (s, i, j) { return s + Math.fround(-slope * (i - j)); },
      repr: "alibi(" + H + ")", flex: "score - 2 ** (-8 * (h + 1) / " + H + ") * (q_idx - kv_idx)",
      note: "head " + h + "'s slope " + slope};
    var soft = {
      apply: function (s) { return Math.tanh(s / cap) * cap; },
      repr: "softcap(" + cap + ")", flex: cap + " * torch.tanh(score / " + cap + ")"};
    var temp = {
      apply: function (s, i) { return s * (1 + sc * Math.log1p(Math.floor((i + 1) / fs))); },
      repr: "temperature(" + fs + ", " + sc + ")",
      flex: "score * (1 + " + sc + " * torch.log1p(torch.floor((q_idx + 1) / " + fs + ")))"};
    switch (spec.mod) {
      case "none": return null;
      case "alibi": return alibi;
      case "softcap": return soft;
      case "temperature": return temp;
      case "alibi>>softcap": return {
        apply: function (s, i, j) { return soft.apply(alibi.apply(s, i, j), i, j); },
        repr: alibi.repr + " >> " + soft.repr, note: alibi.note,
        flex: cap + " * torch.tanh((" + alibi.flex + ") / " + cap + ")"};
    }
    throw new Error("unknown score modification: " + spec.mod);
  }

  // --- the computation ------------------------------------------------------------------------
  function compute(data, spec) {
    var L = spec.L, b = spec.block, gs = groups(spec), mod = modifications(spec, data.num_heads);
    var q = data.q[spec.head], k = data.k[spec.head], d = data.head_dim;
    var keep = [], weights = [], modified = [], kept = 0;
    for (var i = 0; i < L; i++) {
      var row = [], scores = [], raw = [], top = -Infinity;
      for (var j = 0; j < L; j++) {
        var yes = keepOf(gs, i, j);
        row.push(yes);
        kept += yes ? 1 : 0;
        var s = 0;
        for (var c = 0; c < d; c++) s += q[i][c] * k[j][c];
        s = s / Math.sqrt(d);
        if (mod) s = mod.apply(s, i, j);
        raw.push(s);
        scores.push(yes ? s : -Infinity);
        if (yes && s > top) top = s;
      }
      keep.push(row);
      modified.push(raw);
      var sum = 0, w = scores.map(function (v) { var e = v === -Infinity ? 0 : Math.exp(v - top); sum += e; return e; });
      weights.push(w.map(function (e) { return sum > 0 ? e / sum : 0; }));  // a row that sees nothing: zeros
    }
    var n = Math.ceil(L / b), tiles = [], computed = 0, full = 0;
    for (var r = 0; r < n; r++) {
      var trow = [];
      for (var cb = 0; cb < n; cb++) {
        var t = {qlo: r * b, qhi: Math.min((r + 1) * b, L) - 1, klo: cb * b, khi: Math.min((cb + 1) * b, L) - 1};
        var hf = tileOf(gs, t);
        trow.push(hf[0] ? 0 : hf[1] ? 2 : 1);
        computed += hf[0] ? 0 : 1;
        full += hf[1] ? 1 : 0;
      }
      tiles.push(trow);
    }
    return {keep: keep, weights: weights, scores: modified, tiles: tiles, computed: computed, full: full, total: n * n,
            kept: kept, repr: reprOf(gs), mod: mod,
            mask_mod: "lambda b, h, q_idx, kv_idx: " + flexOf(gs),
            score_mod: mod ? "lambda score, b, h, q_idx, kv_idx: " + mod.flex : null};
  }

  // --- the page -------------------------------------------------------------------------------
  var MASKED = "#d9d9d9";  // mha_lib.viz.masks.MASKED_COLOUR
  var TILE_TEXT = ["skipped", "computed with the mask", "computed, no mask needed"];
  var config = {responsive: true, displaylogo: false, displayModeBar: false};

  function range(n) { var a = []; for (var i = 0; i < n; i++) a.push(i); return a; }

  function figure(data, spec, out, narrow) {
    var L = spec.L, ticks = range(L), n = out.tiles.length;
    var scores = spec.panel === "scores";
    function cellText(z, what) {
      return z.map(function (row, i) {
        return row.map(function (w, j) { return out.keep[i][j] ? what + " " + w.toFixed(3) : "hidden by the mask"; });
      });
    }
    var weightText = cellText(out.weights, "weight"), scoreText = cellText(out.scores, "score");
    var traces = [
      {type: "heatmap", x: ticks, y: ticks, xaxis: "x", yaxis: "y", colorscale: "Cividis", zmin: 0, zmax: 1,
       showscale: false, z: out.keep.map(function (r) { return r.map(Number); }),
       text: out.keep.map(function (r) { return r.map(function (v) { return v ? "may see" : "hidden"; }); }),
       hovertemplate: "query %{y}, key %{x}: %{text}<extra></extra>"},
      Object.assign({type: "heatmap", x: ticks, y: ticks, xaxis: "x2", yaxis: "y2", colorscale: "Cividis",
       showscale: false, text: scores ? scoreText : weightText, hoverongaps: false,
       z: (scores ? out.scores : out.weights).map(function (r, i) {
         return r.map(function (w, j) { return out.keep[i][j] ? w : null; });
       }), hovertemplate: "query %{y}, key %{x}: %{text}<extra></extra>"}, scores ? {} : {zmin: 0, zmax: 1}),
      {type: "heatmap", x: range(n), y: range(n), xaxis: "x3", yaxis: "y3", colorscale: "Cividis", zmin: 0, zmax: 2,
       showscale: false, z: out.tiles,
       text: out.tiles.map(function (r) { return r.map(function (s) { return TILE_TEXT[s]; }); }),
       hovertemplate: "tile (%{y}, %{x}): %{text}<extra></extra>"},
    ];
    var layout = JSON.parse(JSON.stringify(narrow ? data.narrow_layout : data.layout));
    var step = L <= 8 ? 1 : L <= 16 && !narrow ? 2 : L <= 16 ? 1 : 4;  // integer ticks
    ["", "2", "3"].forEach(function (a) {
      ["xaxis", "yaxis"].forEach(function (name) {
        var cells = a === "3" ? n : L, ends = name === "yaxis" ? [cells - 0.5, -0.5] : [-0.5, cells - 0.5];
        layout[name + a] = Object.assign({}, layout[name + a], {tickmode: "linear", tick0: 0,
          dtick: a === "3" ? 1 : step, range: ends, autorange: false, constrain: "domain"});
      });
    });
    layout.annotations = layout.annotations.map(function (a, p) {  // the panels' titles
      return p === 1 ? Object.assign({}, a, {text: scores ? "scores, modified" : "weights"}) : a;
    });
    // masked cells of the second panel (no weight, transparent) on a light grey: told apart from
    // the lowest weight in both themes (a borderless data mark, which dark mode keeps as it is)
    layout.shapes = [{type: "rect", xref: "x2", yref: "y2", x0: -0.5, x1: L - 0.5, y0: -0.5, y1: L - 0.5,
                      layer: "below", fillcolor: MASKED, line: {width: 0}}];
    // the tiles' edges over the mask and the weights
    ["x", "x2"].forEach(function (xa, p) {
      for (var e = spec.block; e < L; e += spec.block) {
        [[e - 0.5, -0.5, e - 0.5, L - 0.5], [-0.5, e - 0.5, L - 0.5, e - 0.5]].forEach(function (c) {
          layout.shapes.push({type: "line", xref: xa, yref: "y" + xa.slice(1), x0: c[0], y0: c[1], x1: c[2], y1: c[3],
                              line: {color: "#d62728", width: 1, dash: "dot"}});
        });
      }
    });
    return {traces: traces, layout: layout};
  }

  function init(box) {
    if (box.mhaMaskLab) return;
    var waiting = box.querySelector(".mha-masklab-waiting");
    if (waiting) waiting.remove();  // the note for a page without this script
    var payload = JSON.parse(box.querySelector(".mha-masklab-data").textContent);
    var data = payload.data, spec = payload.spec;
    var gd = box.querySelector(".mha-masklab-figure");
    function control(name) { return box.querySelector("[data-lab=" + JSON.stringify(name) + "]"); }
    function outSpan(name) { return box.querySelector("[data-lab-out=" + JSON.stringify(name) + "]"); }
    function show(input, yes) { input.closest(".mha-control").hidden = !yes; }

    function sizeControl(t, keepValue) {  // the size's label, bounds and value for term t's kind
      var name = control("kind" + t).value, size = control("size" + t), L = Number(control("L").value);
      var k = data.kinds[name];
      show(size, Boolean(k && k.size));
      if (t) show(control("op" + t), Boolean(name));
      if (!k || !k.size) return;
      var lo = k.min, hi = L, value = keepValue ? Number(size.value) : k.default;
      size.min = lo;
      size.max = hi;
      size.value = Math.max(lo, Math.min(hi, value));
      size.closest(".mha-control").querySelector("[data-label]").textContent = k.size;
    }

    function read() {  // the spec the controls describe
      var s = {L: Number(control("L").value), block: Number(control("block").value),
               head: Number(control("head").value), terms: [], ops: [], mod: control("mod").value,
               cap: Number(control("cap").value), floor_scale: Number(control("floor_scale").value),
               scale: spec.scale, panel: control("panel").value};
      for (var t = 0; t < 3; t++) {
        var name = control("kind" + t).value;
        if (!name) continue;
        if (s.terms.length) s.ops.push(control("op" + t).value);
        s.terms.push([name, data.kinds[name].size ? Number(control("size" + t).value) : 0]);
      }
      return s;
    }

    function labels() {
      box.querySelectorAll("input[type=range]").forEach(function (input) {
        var v = document.getElementById(input.id + "-value");
        if (v) v.textContent = input.value;
        input.setAttribute("aria-valuetext", input.value);
      });
      var mod = control("mod").value;
      show(control("cap"), mod === "softcap" || mod === "alibi>>softcap");
      show(control("floor_scale"), mod === "temperature");
    }

    var shownKey = null, pending = false, narrowShown = null;
    function redraw() {
      pending = false;
      labels();
      var s = read(), key = JSON.stringify(s), narrow = window.mhaIsNarrow ? window.mhaIsNarrow(gd) : box.clientWidth < 560;
      if (key === shownKey && narrow === narrowShown) return Promise.resolve();
      shownKey = key;
      narrowShown = narrow;
      var out = compute(data, s), f = figure(data, s, out, narrow);
      outSpan("library").textContent = "mha_lib: mask = " + out.repr +
        (out.mod ? ", score_mod = " + out.mod.repr + (out.mod.note ? " (" + out.mod.note + ")" : "") : "");
      outSpan("flex").textContent = "FlexAttention: mask_mod = " + out.mask_mod +
        (out.score_mod ? "; score_mod = " + out.score_mod : "");
      outSpan("counts").textContent = "Pairs seen: " + out.kept + " of " + (s.L * s.L) + ". Tiles of " +
        s.block + " x " + s.block + ": " + out.computed + " of " + out.total + " computed (" + out.full +
        " without the mask), " + (out.total - out.computed) + " skipped.";
      box.dataset.state = key;
      gd.style.height = f.layout.height + "px";
      gd.dataset.mhaLayout = narrow ? "narrow" : "wide";
      return Plotly.react(gd, f.traces, f.layout, config).then(function () {
        if (shownKey !== key) return;
        box.dataset.drawn = key;
        box.dispatchEvent(new CustomEvent("mha-masklab-drawn", {detail: key}));
      });
    }
    function later() {
      if (pending) return;
      pending = true;
      requestAnimationFrame(redraw);
    }
    box.querySelectorAll("select, input").forEach(function (input) {
      input.addEventListener("input", function () {
        var m = /^kind(\d)$/.exec(input.dataset.lab);
        if (m) sizeControl(Number(m[1]), false);
        if (input.dataset.lab === "L") for (var t = 0; t < 3; t++) sizeControl(t, true);
        labels();  // at once: the values and which controls show
        later();
      });
    });
    window.addEventListener("resize", function () {
      var narrow = window.mhaIsNarrow ? window.mhaIsNarrow(gd) : box.clientWidth < 560;
      if (narrow !== narrowShown) redraw();
    });
    for (var t = 0; t < 3; t++) sizeControl(t, true);
    box.mhaMaskLab = {data: data, read: read, redraw: redraw, compute: function (s) { return compute(data, s); }};
    redraw();
  }

  window.mhaMaskLab = {compute: compute, init: init};
  function ready() { document.querySelectorAll(".mha-masklab").forEach(init); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
