/* Draws the book's plotly figures (see mha_lib/book/plotly_mime.py), fits them to the screen and
 * to the theme's light or dark mode.
 *
 * mhaPlot(id, data, layout, config) draws a figure with Plotly.newPlot. When the figure's
 * box is narrower than MHA_NARROW_PX (a phone), it draws the phone layout instead:
 * layout.meta.narrow (overrides computed by the figure code, e.g. fewer heatmap columns), else
 * general rules (smaller margins and fonts, wrapped title, legend below the plot) with the
 * figure's own phone axes from layout.meta.narrow_axes (e.g. fewer tick labels) on top. Crossing
 * the threshold (rotating the phone, resizing the window) redraws with the other layout.
 *
 * Controls: a figure's own sliders and menus (layout.sliders, layout.updatemenus, which plotly
 * draws in SVG, out of reach of Tab) are replaced by the book's HTML controls above the figure
 * (figureControls below: range inputs, toggle buttons, selects; sticky, labelled, keyboard).
 *
 * Dark mode (the theme's <html data-theme="dark">): every figure drawn on the page, by mhaPlot
 * or by the kernel-free explorers' own Plotly.react calls, is drawn with dark colours, and
 * redrawn when the reader switches the theme. The figure code describes the light figure only;
 * mhaDarkLayout / mhaDarkData derive the dark one (see the comment above them).
 */
(function () {
  "use strict";
  var NARROW_PX = 560;

  function wrap(text, width) {
    // Break a title into lines of at most `width` characters (plotly does not wrap).
    if (typeof text !== "string" || text.indexOf("<br>") >= 0 || text.length <= width) return text;
    var lines = [], line = "";
    text.split(" ").forEach(function (word) {
      if (line && (line + " " + word).length > width) { lines.push(line); line = word; }
      else line = line ? line + " " + word : word;
    });
    if (line) lines.push(line);
    return lines.join("<br>");
  }

  function titleText(title) {
    return typeof title === "string" ? title : (title && title.text);
  }

  function generalNarrow(layout, data) {
    var out = Object.assign({}, layout);
    var margin = layout.margin || {};
    var text = titleText(layout.title);
    var lines = 1;
    out.font = Object.assign({}, layout.font, {size: 11});
    if (text) {
      var wrapped = wrap(text, 34);
      lines = wrapped.split("<br>").length;
      out.title = Object.assign({}, typeof layout.title === "object" ? layout.title : {},
                                {text: wrapped, font: {size: 14}, x: 0, xanchor: "left"});
    }
    var top = 30 + 20 * lines, height = layout.height || 450;
    // the legend's entries: one per name or legend group among the traces shown (a figure with a
    // seed slider holds every seed's traces, all but one seed's hidden)
    var groups = {};
    data.forEach(function (t) {
      if (t.showlegend !== false && t.name && t.visible !== false) groups[t.legendgroup || t.name] = true;
    });
    var entries = Object.keys(groups).length;
    if (entries > 1 && layout.showlegend !== false) {
      // one entry per line, between the title and the plot
      out.legend = Object.assign({}, layout.legend, {orientation: "h", x: 0, xanchor: "left",
        xref: "container", y: 1 - (top - 6) / (height + 22 * entries), yanchor: "top",
        yref: "container", font: {size: 11}});
      top += 22 * entries;
      height += 22 * entries;
    }
    out.margin = Object.assign({}, margin, {l: 56, r: 12, t: top, b: Math.max(margin.b || 0, 70)});
    out.height = height;
    if (out.title) out.title = Object.assign({}, out.title, {y: 1 - 16 / height, yanchor: "top",
                                                               yref: "container"});
    // crowded category axes: vertical labels, with room for them
    ["xaxis", "xaxis2", "xaxis3"].forEach(function (name) {
      var axis = layout[name] || {};
      var xs = (data[0] && data[0].x) || [];
      var longest = xs.reduce(function (m, x) { return Math.max(m, String(x).length); }, 0);
      if (axis.type !== "log" && typeof xs[0] === "string" && xs.length * longest * 6 > 260) {
        out[name] = Object.assign({}, axis, {tickangle: -90, automargin: true});
      }
    });
    return out;
  }

  function narrowLayout(layout, data) {
    var meta = layout.meta || {};
    if (meta.narrow) return Object.assign({}, layout, meta.narrow);
    var out = generalNarrow(layout, data);
    // meta.narrow_axes: the figure code's phone ticks (e.g. fewer labels), on the general rules
    Object.keys(meta.narrow_axes || {}).forEach(function (name) {
      out[name] = Object.assign({}, out[name] || {}, meta.narrow_axes[name]);
    });
    return out;
  }

  function isNarrow(gd) {
    var box = gd.parentElement || gd;
    return box.clientWidth < NARROW_PX;
  }

  function chooseLayout(gd, layout, data) {
    var narrow = isNarrow(gd);
    var chosen = decadeTicks(narrow ? narrowLayout(layout, data) : layout, data);
    if (chosen.height) gd.style.height = chosen.height + "px";
    gd.dataset.mhaLayout = narrow ? "narrow" : "wide";
    return chosen;
  }

  var TYPED = {f8: Float64Array, f4: Float32Array, i4: Int32Array, u4: Uint32Array, i2: Int16Array,
               u2: Uint16Array, i1: Int8Array, u1: Uint8Array};
  function values(v) {  // an array, or plotly.py's typed array {dtype, bdata: base64}, as an array
    if (Array.isArray(v)) return v;
    if (v && typeof v.bdata === "string" && TYPED[v.dtype]) {
      var bytes = Uint8Array.from(atob(v.bdata), function (c) { return c.charCodeAt(0); });
      return Array.prototype.slice.call(new TYPED[v.dtype](bytes.buffer));
    }
    return [];
  }

  function decades(data, key) {
    // how many powers of ten the data on axis `key` (xaxis, yaxis2...) spans
    var letter = key.charAt(0), ref = letter + key.slice(5), lo = Infinity, hi = -Infinity;
    (data || []).forEach(function (trace) {
      if ((trace[letter + "axis"] || letter) !== ref) return;
      values(trace[letter]).forEach(function (v) {
        if (typeof v === "number" && v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      });
    });
    return hi > lo ? Math.log10(hi / lo) : 0;
  }

  function decadeTicks(layout, data) {
    // Log axes: ticks at powers of ten only (plotly's default adds small unlabelled-looking
    // digits at 2, 5...), unless the figure code chose its ticks; data spanning less than two
    // decades also gets ticks at 2 and 5 (one tick alone gives no scale).
    var out = Object.assign({}, layout);
    Object.keys(layout).forEach(function (key) {
      var axis = layout[key];
      if (/^[xy]axis\d*$/.test(key) && axis && axis.type === "log" && axis.dtick === undefined
          && axis.tickvals === undefined) {
        out[key] = Object.assign({}, axis, {dtick: decades(data, key) < 2 ? "D2" : 1});
      }
    });
    return out;
  }

  /* A picture of (rows, cols) weights in [0, 1], for the explorers that draw weights without
   * redrawing their figure: a PNG data URL with one pixel per cell, coloured linearly in RGB
   * between the colour scale's stops ([[t, [r, g, b]], ...], mha_lib.viz.heatmaps.colour_stops;
   * plotly colours its heatmaps the same way), cells that are null transparent; "" when every
   * cell is null. Layout images of plotly figures are shown scaled up without smoothing. */
  var pictureCanvas = null;
  // scaled up without smoothing, each cell stays a sharp square (as in plotly's own heatmaps)
  var pixelated = document.createElement("style");
  pixelated.textContent = ".js-plotly-plot .layer-above .imagelayer image { image-rendering: pixelated; }";
  document.head.appendChild(pixelated);
  function colour(w, stops) {
    var k = 1;
    while (k < stops.length - 1 && stops[k][0] < w) k++;
    var a = stops[k - 1], b = stops[k], f = (w - a[0]) / (b[0] - a[0]);
    return [0, 1, 2].map(function (c) { return Math.round(a[1][c] + f * (b[1][c] - a[1][c])); });
  }
  window.mhaWeightsPicture = function (z, stops) {
    var rows = z.length, cols = rows ? z[0].length : 0, any = false;
    if (!rows || !cols) return "";
    pictureCanvas = pictureCanvas || document.createElement("canvas");
    pictureCanvas.width = cols;
    pictureCanvas.height = rows;
    var ctx = pictureCanvas.getContext("2d"), image = ctx.createImageData(cols, rows), px = image.data;
    for (var i = 0; i < rows; i++) {
      for (var j = 0; j < cols; j++) {
        var w = z[i][j];
        if (w === null || w === undefined) continue;
        var c = colour(w, stops), o = 4 * (i * cols + j);
        px[o] = c[0]; px[o + 1] = c[1]; px[o + 2] = c[2]; px[o + 3] = 255;
        any = true;
      }
    }
    ctx.putImageData(image, 0, 0);
    return any ? pictureCanvas.toDataURL("image/png") : "";
  };

  /* The hover box of the explorers that colour their weights themselves (plotly's hover would
   * show the weights plotly was given, not the state on screen): a box in `container` (which
   * is positioned), hidden from screen readers; show(lines, clientX, clientY) puts the lines
   * beside the pointer, kept inside the container; hide() hides it. */
  window.mhaHoverBox = function (container) {
    var tip = document.createElement("div");
    tip.className = "mha-explorer-tip";
    tip.setAttribute("aria-hidden", "true");
    tip.hidden = true;
    container.appendChild(tip);
    return {
      show: function (lines, clientX, clientY) {
        tip.textContent = "";
        lines.forEach(function (line) {
          var row = document.createElement("div");
          row.textContent = line;
          tip.appendChild(row);
        });
        var area = container.getBoundingClientRect();
        tip.hidden = false;
        tip.style.left = Math.max(0, Math.min(clientX - area.left + 12, area.width - tip.offsetWidth)) + "px";
        tip.style.top = (clientY - area.top + 12) + "px";
      },
      hide: function () { tip.hidden = true; },
    };
  };

  window.mhaNarrowPx = NARROW_PX;
  window.mhaIsNarrow = isNarrow;
  window.mhaChooseLayout = chooseLayout;

  /* The figure code's own controls (layout.sliders, layout.updatemenus: plotly draws them in
   * SVG, out of reach of Tab) become the book's HTML controls above the figure, as the
   * explorers': a range input per slider, a group of toggle buttons or a select per menu, with
   * labels, arrows / Enter / Space, a focus ring and a touch-sized target; they stick under the
   * header while the reader scrolls through the figure. A control applies its step to the light
   * figure the figure code described (restyle / relayout / update, as plotly would), which is
   * then drawn for the screen and theme (phone layout, dark colours) with Plotly.react.
   * A figure with a control of another kind (e.g. "animate") keeps plotly's. */
  function pathParts(path) { return String(path).replace(/\[(\d+)\]/g, ".$1").split("."); }
  function setIn(obj, parts, value) {  // a copy of obj with the value at parts (copy on write)
    if (!parts.length) return value;
    var key = parts[0], copy = Array.isArray(obj) ? obj.slice() : Object.assign({}, obj || {});
    copy[key] = setIn(obj ? obj[key] : undefined, parts.slice(1), value);
    return copy;
  }
  function commandArgs(args) {  // ("attr", value, traces) or ({attr: value}, traces)
    args = args || [];
    if (typeof args[0] === "string") {
      var update = {};
      update[args[0]] = args[1];
      return [update].concat(args.slice(2));
    }
    return args;
  }
  function restyled(data, update, traces) {
    var out = data.slice();
    var which = traces === undefined || traces === null ? data.map(function (_, i) { return i; })
      : [].concat(traces);
    Object.keys(update || {}).forEach(function (attr) {
      var v = update[attr];
      which.forEach(function (t, k) {
        out[t] = setIn(out[t], pathParts(attr), Array.isArray(v) ? v[k % v.length] : v);
      });
    });
    return out;
  }
  function relaidout(layout, update) {
    var out = layout;
    Object.keys(update || {}).forEach(function (key) { out = setIn(out, pathParts(key), update[key]); });
    return out;
  }
  var METHODS = {restyle: 1, relayout: 1, update: 1, skip: 1};
  function applied(state, step) {
    var a = commandArgs(step.args);
    if (step.method === "restyle") return {data: restyled(state.data, a[0], a[1]), layout: state.layout};
    if (step.method === "relayout") return {data: state.data, layout: relaidout(state.layout, a[0])};
    if (step.method === "update") {
      return {data: restyled(state.data, a[0], a[2]), layout: relaidout(state.layout, a[1])};
    }
    return state;
  }
  function convertible(layout) {
    var controls = (layout.sliders || []).map(function (s) { return s.steps || []; })
      .concat((layout.updatemenus || []).map(function (m) { return m.buttons || []; }));
    return controls.length > 0 && controls.every(function (steps) {
      return steps.length > 0 && steps.every(function (s) { return METHODS[s.method || "restyle"]; });
    });
  }
  function withoutControls(layout) {
    // the room the figure code left below the plot for plotly's controls is given back
    var out = Object.assign({}, layout), margin = layout.margin || {}, freed = 0;
    if ((layout.sliders || []).length) freed = 60;
    (layout.updatemenus || []).forEach(function (m) { if ((m.y === undefined ? 1 : m.y) < 0) freed = Math.max(freed, 45); });
    delete out.sliders;
    delete out.updatemenus;
    if (freed && margin.b !== undefined) out.margin = Object.assign({}, margin, {b: Math.max(70, margin.b - freed)});
    return out;
  }
  function plainLabel(text) {
    return String(text === undefined ? "" : text).replace(/<br>/g, " ").replace(/<[^>]+>/g, "").trim();
  }

  function figureControls(gd, layout, onStep) {
    var bar = document.createElement("div");
    bar.className = "mha-explorer-controls mha-figure-controls";
    bar.id = gd.id + "-controls";
    function control(k, labelText, field) {
      var box = document.createElement("div"), label = document.createElement("label");
      box.className = "mha-control";
      label.textContent = labelText;
      label.id = gd.id + "-label-" + k;
      box.appendChild(label);
      if (field) {
        label.htmlFor = field.id;
        box.appendChild(field);
      }
      bar.appendChild(box);
      return box;
    }
    (layout.sliders || []).forEach(function (slider, k) {
      var steps = slider.steps, active = slider.active || 0;
      var prefix = plainLabel((slider.currentvalue || {}).prefix) || plainLabel(slider.name) || "step";
      var name = prefix.replace(/\s*[=:]\s*$/, "");
      var input = document.createElement("input"), output = document.createElement("output");
      input.type = "range";
      input.id = gd.id + "-slider-" + k;
      input.min = 0;
      input.max = steps.length - 1;
      input.step = 1;
      input.value = active;
      function show() {
        var step = steps[+input.value], text = plainLabel(step.label !== undefined ? step.label : input.value);
        output.textContent = text;
        input.setAttribute("aria-valuetext", prefix + (/[=:]\s*$/.test(prefix) ? " " : ": ") + text);
      }
      show();
      input.addEventListener("input", function () { show(); onStep(steps[+input.value]); });
      var box = control("s" + k, name, input);
      var label = box.querySelector("label");
      label.appendChild(document.createTextNode(" "));
      output.htmlFor = input.id;
      label.appendChild(output);
    });
    (layout.updatemenus || []).forEach(function (menu, k) {
      var buttons = menu.buttons, active = menu.active === undefined ? 0 : menu.active;
      var name = plainLabel(menu.name) || "Show";
      if (menu.type === "buttons") {
        var group = document.createElement("div");
        group.className = "mha-figure-buttons";
        group.setAttribute("role", "group");
        var box = control("m" + k, name, null);
        group.setAttribute("aria-labelledby", box.querySelector("label").id);
        buttons.forEach(function (b, i) {
          var button = document.createElement("button");
          button.type = "button";
          button.className = "mha-figure-button";
          button.textContent = plainLabel(b.label);
          button.setAttribute("aria-pressed", String(i === active));
          button.addEventListener("click", function () {
            group.querySelectorAll("button").forEach(function (other) {
              other.setAttribute("aria-pressed", String(other === button));
            });
            onStep(b);
          });
          group.appendChild(button);
        });
        box.appendChild(group);
      } else {
        var select = document.createElement("select");
        select.id = gd.id + "-menu-" + k;
        buttons.forEach(function (b, i) {
          var option = document.createElement("option");
          option.value = i;
          option.textContent = plainLabel(b.label);
          option.selected = i === active;
          select.appendChild(option);
        });
        select.addEventListener("change", function () { onStep(buttons[+select.value]); });
        control("m" + k, name, select);
      }
    });
    gd.parentNode.insertBefore(bar, gd);
    return bar;
  }

  window.mhaPlot = function (id, data, layout, config) {
    var gd = document.getElementById(id);
    var templates = window.mhaTemplates || {};  // a template the page writes once (plotly_mime.share_templates)
    if (layout && typeof layout.template === "string" && templates[layout.template]) {
      layout = Object.assign({}, layout, {template: templates[layout.template]});
    }
    var shown = null;
    var state = {data: data, layout: layout}, controls = convertible(layout);
    function chosenFor() {
      var chosen = chooseLayout(gd, controls ? withoutControls(state.layout) : state.layout, state.data);
      if (controls) {  // a phone layout of the figure code's (meta.narrow) may name them again
        delete chosen.sliders;
        delete chosen.updatemenus;
      }
      return chosen;
    }
    function draw(first) {
      var mode = isNarrow(gd) ? "narrow" : "wide";
      if (mode === shown) return null;
      shown = mode;
      var chosen = chosenFor();
      return first ? Plotly.newPlot(gd, state.data, chosen, config) : Plotly.react(gd, state.data, chosen, config);
    }
    if (controls) {
      figureControls(gd, layout, function (step) {
        state = applied(state, step);
        Plotly.react(gd, state.data, chosenFor(), config);
      });
    }
    window.addEventListener("resize", function () { draw(false); });
    return draw(true);
  };
})();

/* Dark mode for plotly figures.
 *
 * Chrome (backgrounds, text, axes, grid, legend, annotations, the diagrams' boxes and arrows):
 * every colour of the layout and of its template has its lightness inverted in CIELAB, between
 * the theme's dark background (white -> --pst-color-background) and its text colour (black ->
 * --pst-color-text-base), keeping its hue. Text on a box keeps its contrast with the box, and
 * the figure's background is the page's. Not inverted: colour scales and colourways (data, the
 * colour-blind-safe viridis/cividis stay as they are) and borderless shapes in data
 * coordinates (data marks, e.g. the grey cells of masked keys).
 *
 * Data: the colours of lines, markers and bars stay, unless the darkest of a figure has less
 * than 3:1 contrast with the dark background (WCAG non-text contrast; e.g. viridis's dark
 * purple). Then all of that figure's trace colours are lightened together, the darkest to
 * 3:1, so their order in lightness (what keeps a viridis sequence readable without hue) stays.
 *
 * Plotly.newPlot and Plotly.react are wrapped so that every caller gets this (the explorers
 * redraw with Plotly.react); each figure remembers the light arguments it was drawn with, and
 * is redrawn from them when <html data-theme> changes.
 */
(function () {
  "use strict";
  if (!window.Plotly) return;
  var MIN_CONTRAST = 3;
  var SKIP_KEYS = {meta: 1, colorscale: 1, colorway: 1, colorscales: 1};
  var rawNewPlot = Plotly.newPlot, rawReact = Plotly.react;
  var themed = new WeakSet();     // layouts/data made here: passed through untouched
  var cache = new WeakMap();      // light layout -> {key, layout}
  var parsed = Object.create(null);  // colour text -> rgba
  var ctx = document.createElement("canvas").getContext("2d");

  function isDark() { return document.documentElement.dataset.theme === "dark"; }

  // --- colours -------------------------------------------------------------------------
  function rgba(text) {  // any CSS colour -> [r, g, b, a] (0-255, alpha 0-1), or null
    if (typeof text !== "string") return null;
    if (text in parsed) return parsed[text];
    var value = null, sentinel = "rgba(1, 2, 3, 0.5)";
    ctx.fillStyle = sentinel;  // the canvas normalises any colour it accepts, keeps it otherwise
    ctx.fillStyle = text;
    var out = ctx.fillStyle;
    var hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(out);
    var fn = /^rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\)$/.exec(out);
    if (out === sentinel && text.replace(/\s/g, "") !== "rgba(1,2,3,0.5)") value = null;
    else if (hex) value = [parseInt(hex[1], 16), parseInt(hex[2], 16), parseInt(hex[3], 16), 1];
    else if (fn) value = [+fn[1], +fn[2], +fn[3], fn[4] === undefined ? 1 : +fn[4]];
    parsed[text] = value;
    return value;
  }
  function toLinear(c) {  // an sRGB channel (0-255) -> linear light (0-1)
    c /= 255;
    return c <= 0.04045 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
  }
  function fromLinear(c) {
    return c <= 0.0031308 ? 12.92 * c : 1.055 * Math.pow(c, 1 / 2.4) - 0.055;
  }
  function f(t) { return t > 216 / 24389 ? Math.cbrt(t) : t * 24389 / 27 / 116 + 16 / 116; }
  function finv(t) { return t > 6 / 29 ? t * t * t : 3 * 36 / 841 * (t - 4 / 29); }
  function luminance(c) {
    return 0.2126729 * toLinear(c[0]) + 0.7151522 * toLinear(c[1]) + 0.0721750 * toLinear(c[2]);
  }
  function lab(c) {  // sRGB (0-255) -> CIELAB, D65
    var r = toLinear(c[0]), g = toLinear(c[1]), b = toLinear(c[2]);
    var x = f((0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047);
    var y = f(0.2126729 * r + 0.7151522 * g + 0.0721750 * b);
    var z = f((0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883);
    return [116 * y - 16, 500 * (x - y), 200 * (y - z)];
  }
  function labToRgb(L, A, B) {
    var y = (L + 16) / 116, x = y + A / 500, z = y - B / 200;
    var X = 0.95047 * finv(x), Y = finv(y), Z = 1.08883 * finv(z);
    return [3.2404542 * X - 1.5371385 * Y - 0.4985314 * Z,
            -0.9692660 * X + 1.8760108 * Y + 0.0415560 * Z,
            0.0556434 * X - 0.2040259 * Y + 1.0572252 * Z];
  }
  function fromLab(L, A, B, alpha) {  // CIELAB -> CSS colour, chroma reduced into the sRGB gamut
    var lin = labToRgb(L, A, B);
    for (var i = 0; i < 60 && lin.some(function (v) { return v < -1e-4 || v > 1.0001; }); i++) {
      A *= 0.93; B *= 0.93;
      lin = labToRgb(L, A, B);
    }
    var c = lin.map(function (v) {
      return Math.round(255 * fromLinear(Math.min(1, Math.max(0, v))));
    });
    if (alpha < 1) return "rgba(" + c.join(", ") + ", " + alpha + ")";
    return "#" + c.map(function (v) { return (256 + v).toString(16).slice(1); }).join("");
  }
  function contrast(y1, y2) { return (Math.max(y1, y2) + 0.05) / (Math.min(y1, y2) + 0.05); }

  function palette() {  // the theme's dark background and text colours, in CIELAB
    var style = getComputedStyle(document.documentElement);
    var bg = rgba(style.getPropertyValue("--pst-color-background").trim()) || [20, 24, 30, 1];
    var fg = rgba(style.getPropertyValue("--pst-color-text-base").trim()) || [206, 214, 221, 1];
    return {bg: lab(bg), fg: lab(fg), bgY: luminance(bg), key: bg.join() + "/" + fg.join()};
  }

  function invert(text, pal) {  // a chrome colour for the dark theme
    var c = rgba(text);
    if (!c) return text;
    var l = lab(c), t = 1 - l[0] / 100, bg = pal.bg, fg = pal.fg;
    return fromLab(bg[0] + t * (fg[0] - bg[0]), l[1] + bg[1] + t * (fg[1] - bg[1]),
                   l[2] + bg[2] + t * (fg[2] - bg[2]), c[3]);
  }

  // --- layouts ---------------------------------------------------------------------------
  function isDataMark(shape) {
    var line = shape && shape.line;
    var ref = function (r) { return r === undefined || /^[xy]\d*( domain)?$/.test(r); };
    return line && line.width === 0 && ref(shape.xref) && ref(shape.yref);
  }
  function walk(value, pal) {
    if (Array.isArray(value)) return value.map(function (v) { return walk(v, pal); });
    if (!value || typeof value !== "object") return value;
    var out = {};
    Object.keys(value).forEach(function (key) {
      var v = value[key];
      if (SKIP_KEYS[key]) out[key] = v;
      else if (key === "shapes" && Array.isArray(v)) {
        out[key] = v.map(function (s) { return isDataMark(s) ? s : walk(s, pal); });
      } else if (/color$/i.test(key) && typeof v === "string") out[key] = invert(v, pal);
      else if (/color$/i.test(key) && Array.isArray(v)) {
        out[key] = v.map(function (c) { return typeof c === "string" ? invert(c, pal) : c; });
      } else out[key] = walk(v, pal);
    });
    return out;
  }
  var DEFAULTS = {paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff", font: {color: "#444444"}};
  function darkLayout(layout, pal) {
    // plotly's own defaults (a white paper, #444 text) when neither layout nor template sets them
    var tl = (layout.template && layout.template.layout) || {};
    var base = {};
    ["paper_bgcolor", "plot_bgcolor"].forEach(function (k) {
      if (layout[k] === undefined && tl[k] === undefined) base[k] = DEFAULTS[k];
    });
    if (!(layout.font && layout.font.color) && !(tl.font && tl.font.color)) {
      base.font = Object.assign({}, layout.font, DEFAULTS.font);
    }
    return walk(Object.assign({}, layout, base), pal);
  }
  window.mhaDarkLayout = function (layout) {
    var pal = palette(), hit = cache.get(layout);
    if (hit && hit.key === pal.key) return hit.layout;
    var out = darkLayout(layout || {}, pal);
    cache.set(layout, {key: pal.key, layout: out});
    themed.add(out);
    return out;
  };

  // --- data ------------------------------------------------------------------------------
  var TRACE_COLORS = [["line", "color"], ["marker", "color"]];
  function readable(pal) {  // the least CIELAB lightness with 3:1 contrast on the background
    var lo = 0, hi = 100;
    for (var i = 0; i < 30; i++) {
      var mid = (lo + hi) / 2;
      if (contrast(finv((mid + 16) / 116), pal.bgY) < MIN_CONTRAST) lo = mid; else hi = mid;
    }
    return hi;
  }
  function readableLab(L, A, B, alpha, pal) {
    // fromLab at lightness L or a little more: rounding to 8-bit channels (and the chroma given
    // up to stay in gamut) can leave a colour bisected to exactly 3:1 just under it
    for (var i = 0; i < 40; i++, L = Math.min(100, L + 0.25)) {
      var out = fromLab(L, A, B, alpha);
      if (contrast(luminance(rgba(out)), pal.bgY) >= MIN_CONTRAST || L >= 100) return out;
    }
    return out;
  }
  function neutral(c) { var l = lab(c); return Math.sqrt(l[1] * l[1] + l[2] * l[2]) < 6; }
  window.mhaDarkData = function (data) {
    // Black and greys (a reference line, e.g. "full cache") are inverted as the chrome is: black
    // becomes the theme's text colour, not a dim grey; the colours of the data are lightened.
    var pal = palette(), darkest = null, greys = false;
    (data || []).forEach(function (trace) {
      TRACE_COLORS.forEach(function (path) {
        var c = trace[path[0]] && rgba(trace[path[0]][path[1]]);
        if (c && neutral(c)) greys = true;
        else if (c && c[3] > 0 && (darkest === null || lab(c)[0] < darkest)) darkest = lab(c)[0];
      });
    });
    if (greys) {
      data = data.map(function (trace) {
        var copy = Object.assign({}, trace);
        TRACE_COLORS.forEach(function (path) {
          var c = trace[path[0]] && rgba(trace[path[0]][path[1]]);
          if (!c || !neutral(c)) return;
          var part = {}, l = lab(rgba(invert(trace[path[0]][path[1]], pal)));
          part[path[1]] = readableLab(Math.max(l[0], readable(pal)), l[1], l[2], c[3], pal);  // 3:1 at least
          copy[path[0]] = Object.assign({}, trace[path[0]], part);
        });
        return copy;
      });
    }
    if (darkest === null) {
      if (greys) themed.add(data);
      return data;
    }
    var lo = darkest, hi = 100;  // bisect the lightness at which the darkest reaches 3:1
    for (var i = 0; i < 30; i++) {
      var mid = (lo + hi) / 2;
      if (contrast(finv((mid + 16) / 116), pal.bgY) < MIN_CONTRAST) lo = mid; else hi = mid;
    }
    if (darkest >= hi) {  // every colour already reaches 3:1 (none is left a little under it)
      if (greys) themed.add(data);
      return data;
    }
    var k = (hi - darkest) / (100 - darkest);
    var out = data.map(function (trace) {
      var copy = Object.assign({}, trace);
      TRACE_COLORS.forEach(function (path) {
        var c = trace[path[0]] && rgba(trace[path[0]][path[1]]);
        if (!c || neutral(c)) return;  // (already inverted above)
        var l = lab(c), part = {};
        part[path[1]] = readableLab(l[0] + k * (100 - l[0]), l[1], l[2], c[3], pal);
        copy[path[0]] = Object.assign({}, trace[path[0]], part);
      });
      return copy;
    });
    themed.add(out);
    return out;
  };

  // --- drawing -----------------------------------------------------------------------------
  function draw(raw, gd, data, layout, config) {
    if (typeof gd === "string") gd = document.getElementById(gd);
    if (data && !Array.isArray(data) && typeof data === "object") {  // the figure-object form
      return draw(raw, gd, data.data, data.layout, data.config);
    }
    if (themed.has(layout) || themed.has(data)) return raw.call(Plotly, gd, data, layout, config);
    gd.mhaSource = {data: data || [], layout: layout || {}, config: config};
    var dark = isDark();
    gd.dataset.mhaTheme = dark ? "dark" : "light";
    return raw.call(Plotly, gd, dark ? window.mhaDarkData(data || []) : data,
                    dark ? window.mhaDarkLayout(layout || {}) : layout, config);
  }
  Plotly.newPlot = function (gd, data, layout, config) {
    return draw(rawNewPlot, gd, data, layout, config);
  };
  Plotly.react = function (gd, data, layout, config) {
    return draw(rawReact, gd, data, layout, config);
  };

  function redrawAll() {
    var theme = isDark() ? "dark" : "light";
    document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
      var src = gd.mhaSource;
      if (src && gd.dataset.mhaTheme !== theme) Plotly.react(gd, src.data, src.layout, src.config);
    });
  }
  new MutationObserver(redrawAll).observe(document.documentElement,
                                          {attributes: true, attributeFilter: ["data-theme"]});
})();
