/* Small fixes on every page of the book (added by mha_lib/book/sphinx_ext.py).
 *
 * Scrolling regions: a region that scrolls sideways (a wide table or a long code line on a
 * phone) must be reachable with the keyboard to be scrolled without a mouse (WCAG 2.1.1; axe
 * "scrollable-region-focusable"): each one gets a tab stop and a name, and the class
 * mha-scrolls (mha-site.css draws a shadow on the edge where more content waits), kept up to
 * date when the window is resized.
 *
 * The theme switch: the theme cycles auto -> dark -> light, so one click in three changes
 * nothing the reader sees (auto on a light device is light). Here a click shows the other
 * theme than the one on screen, every time, and the choice is kept; until the reader chooses,
 * the site follows the system's dark setting (html_context.default_mode: auto in _config.yml).
 *
 * Inline code: a <wbr> after each separator (_ . /) of a long identifier, so that it wraps
 * there (in a narrow table cell, or a phone's line) rather than mid-name or not at all.
 *
 * Skip links: on a page with an explorer, the theme's "Skip to main content" link is followed
 * by one link per explorer that moves the focus to its first control (two Tab presses and
 * Enter from the top of the page, instead of Tab through every link of the sidebars).
 */
(function () {
  "use strict";
  var SCROLLERS = ".bd-article .pst-scrollable-table-container, .bd-article .cell_output, " +
                  ".bd-article div.highlight pre, .bd-article .output";

  function tabStops() {
    document.querySelectorAll(SCROLLERS).forEach(function (el) {
      var scrolls = el.scrollWidth > el.clientWidth + 1;
      el.classList.toggle("mha-scrolls", scrolls);
      if (scrolls && !el.hasAttribute("tabindex")) {
        el.setAttribute("tabindex", "0");
        if (!el.hasAttribute("role")) el.setAttribute("role", "region");
        if (!el.hasAttribute("aria-label")) el.setAttribute("aria-label", "scrollable content");
      }
    });
  }

  function otherTheme(event) {
    var button = event.target.closest && event.target.closest(".theme-switch-button");
    if (!button) return;
    event.stopImmediatePropagation();
    event.preventDefault();
    var root = document.documentElement;
    var next = root.dataset.theme === "dark" ? "light" : "dark";
    root.dataset.mode = next;
    root.dataset.theme = next;
    document.querySelectorAll(".dropdown-menu").forEach(function (menu) {
      menu.classList.toggle("dropdown-menu-dark", next === "dark");
    });
    try {
      localStorage.setItem("mode", next);
      localStorage.setItem("theme", next);
    } catch (e) { /* storage refused (private window): the choice lasts for this page */ }
    var media = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)");
    if (media) media.onchange = null;  // the reader chose: the system's setting no longer rules
  }

  function heading(el) {
    // the nearest section heading before el, for the skip link's text
    var section = el.closest("section");
    var h = section && section.querySelector("h1, h2, h3, h4");
    return h ? h.textContent.replace(/#\s*$/, "").trim() : "";
  }

  function skipLinks() {
    var box = document.getElementById("pst-skip-link");
    if (!box || box.querySelector("[data-mha-skip]")) return;
    var targets = [];
    document.querySelectorAll(".bd-article .mha-explorer-controls:not(.mha-figure-controls), .bd-article .mha-lm").forEach(function (root) {
      var control = root.querySelector("#lm-input") || root.querySelector("input, select, button");
      if (control && control.id) targets.push(control);
    });
    targets.forEach(function (control, i) {
      var link = document.createElement("a");
      link.href = "#" + control.id;
      link.setAttribute("data-mha-skip", "");
      var where = heading(control);
      link.textContent = targets.length === 1 ? "Skip to the explorer"
        : "Skip to explorer " + (i + 1) + (where ? " (" + where + ")" : "");
      link.addEventListener("click", function (event) {
        event.preventDefault();
        control.scrollIntoView({block: "center", behavior: "instant"});
        control.focus({preventScroll: true});
      });
      box.appendChild(document.createTextNode(" \u00b7 "));
      box.appendChild(link);
    });
  }

  function stickyTop() {
    // the height of the theme's sticky header(s): where the explorers' controls stick
    var bottom = 0;
    document.querySelectorAll(".bd-header, .bd-header-article").forEach(function (el) {
      var style = getComputedStyle(el);
      if (style.position === "sticky" || style.position === "fixed") {
        bottom = Math.max(bottom, el.offsetHeight + (el.classList.contains("bd-header-article") ? el.getBoundingClientRect().top - window.scrollY * 0 : 0));
      }
    });
    document.documentElement.style.setProperty("--mha-sticky-top", Math.round(bottom) + "px");
  }

  function breakAtSeparators() {
    document.querySelectorAll(".bd-article code.literal").forEach(function (code) {
      if (code.dataset.mhaWbr) return;
      code.dataset.mhaWbr = "1";
      var walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT), texts = [];
      while (walker.nextNode()) texts.push(walker.currentNode);
      texts.forEach(function (node) {
        var parts = node.nodeValue.split(/(?<=[A-Za-z0-9][_./])(?=[A-Za-z0-9])/);
        if (parts.length < 2 || node.nodeValue.length < 12) return;
        var frag = document.createDocumentFragment();
        parts.forEach(function (part, i) {
          if (i) frag.appendChild(document.createElement("wbr"));
          frag.appendChild(document.createTextNode(part));
        });
        node.parentNode.replaceChild(frag, node);
      });
    });
  }

  function ready() {
    breakAtSeparators();
    stickyTop();
    tabStops();
    skipLinks();
  }

  document.addEventListener("click", otherTheme, true);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
  window.addEventListener("load", tabStops);
  window.addEventListener("resize", tabStops);
  window.addEventListener("resize", stickyTop);
})();
