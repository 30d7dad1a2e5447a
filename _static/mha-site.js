/* Small fixes on every page of the book (added by mha_lib/book/sphinx_ext.py).
 *
 * A region that scrolls sideways (a wide table or output on a phone) must be reachable with
 * the keyboard to be scrolled without a mouse (WCAG 2.1.1; axe "scrollable-region-focusable"):
 * give each one a tab stop and a name, and keep doing so when the window is resized.
 */
(function () {
  "use strict";
  var SELECTOR = ".bd-article .pst-scrollable-table-container, .bd-article .cell_output, " +
                 ".bd-article div.highlight pre, .bd-article .output";
  function tabStops() {
    document.querySelectorAll(SELECTOR).forEach(function (el) {
      if (el.scrollWidth > el.clientWidth + 1 && !el.hasAttribute("tabindex")) {
        el.setAttribute("tabindex", "0");
        if (!el.hasAttribute("role")) el.setAttribute("role", "region");
        if (!el.hasAttribute("aria-label")) el.setAttribute("aria-label", "scrollable content");
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", tabStops);
  else tabStops();
  window.addEventListener("load", tabStops);
  window.addEventListener("resize", tabStops);
})();
