/* Draws the book's plotly figures (see mha_lib/book/plotly_mime.py) and fits them to the screen.
 *
 * mhaPlot(id, data, layout, config) draws a figure with Plotly.newPlot. When the figure's
 * box is narrower than MHA_NARROW_PX (a phone), it draws the phone layout instead:
 * layout.meta.narrow (overrides computed by the figure code, e.g. fewer heatmap columns), else
 * general rules (smaller margins and fonts, wrapped title, legend below the plot). Crossing
 * the threshold (rotating the phone, resizing the window) redraws with the other layout.
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
    var entries = data.filter(function (t) { return t.showlegend !== false && t.name; }).length;
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
    return generalNarrow(layout, data);
  }

  function isNarrow(gd) {
    var box = gd.parentElement || gd;
    return box.clientWidth < NARROW_PX;
  }

  function chooseLayout(gd, layout, data) {
    var narrow = isNarrow(gd);
    var chosen = decadeTicks(narrow ? narrowLayout(layout, data) : layout);
    if (chosen.height) gd.style.height = chosen.height + "px";
    gd.dataset.mhaLayout = narrow ? "narrow" : "wide";
    return chosen;
  }

  function decadeTicks(layout) {
    // Log axes: ticks at powers of ten only (plotly's default adds small unlabelled-looking
    // digits at 2, 5...), unless the figure code chose its ticks.
    var out = Object.assign({}, layout);
    Object.keys(layout).forEach(function (key) {
      var axis = layout[key];
      if (/^[xy]axis\d*$/.test(key) && axis && axis.type === "log" && axis.dtick === undefined
          && axis.tickvals === undefined) {
        out[key] = Object.assign({}, axis, {dtick: 1});
      }
    });
    return out;
  }

  window.mhaNarrowPx = NARROW_PX;
  window.mhaIsNarrow = isNarrow;
  window.mhaChooseLayout = chooseLayout;

  window.mhaPlot = function (id, data, layout, config) {
    var gd = document.getElementById(id);
    var shown = null;
    function draw(first) {
      var mode = isNarrow(gd) ? "narrow" : "wide";
      if (mode === shown) return null;
      shown = mode;
      var chosen = chooseLayout(gd, layout, data);
      return first ? Plotly.newPlot(gd, data, chosen, config) : Plotly.react(gd, data, chosen, config);
    }
    window.addEventListener("resize", function () { draw(false); });
    return draw(true);
  };
})();
