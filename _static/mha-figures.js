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
    out.margin = Object.assign({}, margin, {l: 56, r: 12, t: 30 + 20 * lines});
    var legend = data.filter(function (t) { return t.showlegend !== false && t.name; }).length > 1
      && layout.showlegend !== false;
    if (legend) {
      out.legend = Object.assign({}, layout.legend, {orientation: "h", x: 0, xanchor: "left",
                                                     y: -0.25, yanchor: "top"});
      out.height = (layout.height || 450) + 28 * data.length;
    }
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
    var chosen = narrow ? narrowLayout(layout, data) : layout;
    if (chosen.height) gd.style.height = chosen.height + "px";
    gd.dataset.mhaLayout = narrow ? "narrow" : "wide";
    return chosen;
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
