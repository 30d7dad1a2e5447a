"""Every page of the website, on a laptop and on a phone, as a first-time reader gets it.

For each page of ``_toc.yml`` (plus Sphinx's index and search pages) at 1366 x 900 and
390 x 844, in a fresh browser context (cold cache), the test

* writes a full-page screenshot to ``_build/screenshots/<page>-<viewport>.png``;
* checks it works offline: no request leaves the loopback server, no console error, maths
  typeset by the MathJax copy in ``_static``, every plotly figure drawn;
* checks the transferred bytes stay within :data:`MAX_PAGE_BYTES`: what the page transfers as
  it opens, before the test scrolls. A language-model explorer's model (chapters 12 and 12d,
  0.6-0.73 MB) is a file of its own that the page loads only when the reader reaches the
  explorer (``_static/mha-lm.js``), so it is not in that count unless the explorer sits near
  the top of its page; ``tests/browser/test_lm_explorer.py`` holds each model file, with the
  explorer's HTML and script, to the explorer's own allowance (800 kB) and checks that reaching
  the explorer loads it;
* checks no page is wider than the viewport (no sideways scrolling);
* checks every figure has a text alternative (``role="img"`` and an ``aria-label``) and that
  no two pieces of its text (titles, tick labels, annotations, legend) overlap;
* checks no output (printed text, messages, logs) has a line past the right edge of its block,
  and that a code line that stays long scrolls and shows a shadow on the edge where more code
  waits (``mha_lib.book.site_audit._BLOCKS_JS``; issue 30, "read it anywhere");
* checks tables render as tables (no Markdown pipe text) with no word broken inside a cell, no
  object repr (``<... at 0x...>``) in an output, every figure control is an HTML control in the
  Tab order (no plotly slider or menu, which Tab cannot reach), and at 1366 px at most 5% of
  the listings scroll sideways (issue 46, "finished pages");
* runs axe-core (from ``axe-playwright-python``, injected locally) and fails on critical or
  serious violations;
* then, as a reader looking for something: one search control is on screen and not covered,
  before and after scrolling half-way down the page; Ctrl+K (laptop) or a tap on it (phone)
  opens the search box with the cursor in it (its text clear of the magnifying glass drawn
  over it); a typed query goes to the search page, offline.

One page load per page and viewport serves all of these (a chapter page takes seconds to load
and lay out). The search page itself, which every search box leads to with the same address,
is checked once per viewport: it lists the matching pages, offline.

The navigation test clicks the theme's "Toggle primary sidebar" and "On this page" buttons and
checks that each opens and closes its sidebar, at both viewports.
"""

from __future__ import annotations

import re

import pytest

from conftest import VIEWPORTS, serious_axe_violations, toc_pages
from mha_lib.book.site_audit import (cut_off_blocks, _figure_controls, _listing_share, _stray_reprs,
                                     _table_problems)

MAX_PAGE_BYTES = 3_000_000  # transferred on a first visit (the test server does not compress); the heaviest, chapter 7, weighs 2.97 MB (chapter 5: 2.94 MB)
PAGES = toc_pages()
CHAPTER = next(p for p in PAGES if p.startswith("chapters/"))
QUERY = "valid length"
SEARCH_CONTROL = "button.search-button__button"

# The search controls the reader can see: displayed, inside the viewport, and the element at
# their centre is the control itself (nothing covers it).
_ON_SCREEN_JS = """(selector) => [...document.querySelectorAll(selector)].filter(el => {
  const style = getComputedStyle(el), r = el.getBoundingClientRect();
  if (style.display === "none" || style.visibility === "hidden" || r.width < 10 || r.height < 10)
    return false;
  if (r.top < 0 || r.left < 0 || r.bottom > innerHeight || r.right > innerWidth) return false;
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return el.contains(hit);
}).length"""

# The focused search box's text starts right of the magnifying glass the theme draws over it.
_TEXT_CLEAR_OF_ICON_JS = """() => {
  const box = document.activeElement;
  const icon = box.parentElement.querySelector(".fa-magnifying-glass");
  if (!icon) return true;
  const start = box.getBoundingClientRect().left + parseFloat(getComputedStyle(box).paddingLeft);
  return start >= icon.getBoundingClientRect().right;
}"""

# Text boxes of a plotly figure that must not overlap: [label, left, top, right, bottom] each.
FIGURE_TEXT_JS = """
(gd) => {
  const selector = [".gtitle", ".g-gtitle text", ".g-xtitle text", ".g-ytitle text",
    "[class^='g-x'][class$='title'] text", "[class^='g-y'][class$='title'] text",
    ".xtick text", ".ytick text", ".annotation-text", ".legendtext", ".cbtitle text",
    ".cbaxis text", ".slider-label", ".slider-group text"].join(",");
  const seen = new Set();
  const out = [];
  for (const el of gd.querySelectorAll(selector)) {
    if (seen.has(el)) continue;
    seen.add(el);
    const text = el.textContent.trim();
    const r = el.getBoundingClientRect();
    if (!text || r.width < 1 || r.height < 1) continue;
    if (getComputedStyle(el).visibility === "hidden" || getComputedStyle(el).opacity === "0") continue;
    out.push([text, r.left, r.top, r.right, r.bottom]);
  }
  const box = gd.getBoundingClientRect();
  return {texts: out, box: [box.left, box.top, box.right, box.bottom]};
}
"""


def _overlaps(texts: list, tolerance: float = 2.0) -> list[tuple[str, str]]:
    """Pairs of text boxes that overlap by more than ``tolerance`` px in both directions."""
    pairs = []
    for i, (a, al, at, ar, ab) in enumerate(texts):
        for b, bl, bt, br, bb in texts[i + 1:]:
            width = min(ar, br) - max(al, bl)
            height = min(ab, bb) - max(at, bt)
            if width > tolerance and height > tolerance:
                pairs.append((a, b))
    return pairs


def _slug(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "-", path.removesuffix(".html")).strip("-")


def _wait_for_math(page, path: str, problems: list[str]) -> None:
    if not page.locator(".math").count():
        return
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
    page.evaluate("() => MathJax.startup.promise")
    untypeset = page.evaluate(
        "() => [...document.querySelectorAll('.math')]"
        ".filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60))"
    )
    if untypeset:
        problems.append(f"math not typeset: {untypeset[:3]}")


def _check_figures(page, problems: list[str]) -> None:
    figures = page.locator(".plotly-graph-div")
    for i in range(figures.count()):
        figure = figures.nth(i)
        figure.scroll_into_view_if_needed()
        figure.locator(".main-svg").first.wait_for(state="attached", timeout=10_000)
        box = figure.bounding_box()
        if not (box and box["width"] > 100 and box["height"] > 100):
            problems.append(f"figure {i} is not drawn")
            continue
        role = figure.get_attribute("role")
        label = figure.get_attribute("aria-label") or ""
        if role != "img" or len(label) < 15:
            problems.append(f"figure {i} has no text alternative (role={role!r}, label={label!r})")
        found = figure.evaluate(FIGURE_TEXT_JS)
        overlapping = _overlaps(found["texts"])
        if overlapping:
            problems.append(f"figure {i} ({label[:50]!r}): text overlaps {overlapping[:4]}")
        left, top, right, bottom = found["box"]
        outside = [t[0] for t in found["texts"]
                   if t[1] < left - 2 or t[3] > right + 2 or t[2] < top - 2 or t[4] > bottom + 2]
        if outside:
            problems.append(f"figure {i} ({label[:50]!r}): text outside the figure {outside[:4]}")


def _check_blocks(page, path: str, problems: list[str]) -> None:
    """No output with a line past the right edge of its block; code past it shows a scroll cue."""
    found = cut_off_blocks(page)
    if path.startswith("chapters/") and not found:
        problems.append("no code or output block found")
    cut = [(b["text"][:40], b["hidden_px"]) for b in found if b["hidden_px"] and b["kind"] == "output"]
    silent = [b["text"][:40] for b in found if b["hidden_px"] and not b["cue"]]
    if cut:
        problems.append(f"outputs with lines past the right edge: {cut[:5]}")
    if silent:
        problems.append(f"code past the right edge without a scroll cue: {silent[:5]}")


def _check_listings_fit(blocks: list[dict], problems: list[str]) -> None:
    """At a laptop's width, at most 5% of the page's listings (show_source, code in the prose)
    scroll sideways: show_source breaks the library's long lines (mha_lib.book.show)."""
    over, listings = _listing_share(blocks)
    if over > 0.05 * listings:
        wide = [(b["text"][:40], b["hidden_px"]) for b in blocks if b["kind"] == "listing" and b["hidden_px"]]
        problems.append(f"{over} of {listings} listings scroll sideways at 1366 px: {wide[:4]}")


def _check_tables_and_outputs(page, problems: list[str]) -> None:
    """Tables render as tables, their words whole; no object repr leaked into an output."""
    tables = _table_problems(page)
    if tables["pipe_tables"]:
        problems.append(f"Markdown tables shown as pipe text: {tables['pipe_tables'][:3]}")
    if tables["broken_words"]:
        problems.append(f"words broken inside table cells: {tables['broken_words'][:8]}")
    reprs = _stray_reprs(page)
    if reprs:
        problems.append(f"object reprs in outputs: {reprs[:3]}")


def _check_figure_controls(page, problems: list[str]) -> None:
    """Every control of a figure is the book's HTML control, in the Tab order (plotly's own
    sliders and menus are SVG that Tab never reaches)."""
    controls = _figure_controls(page)
    if controls["plotly_controls"]:
        problems.append(f"{controls['plotly_controls']} plotly slider(s)/menu(s) out of reach of Tab")
    untabbable = [c["id"] for c in controls["html_controls"] if not c["tabbable"]]
    if untabbable:
        problems.append(f"figure controls not in the Tab order: {untabbable[:4]}")


def _open_search_box(page, path: str, viewport: str) -> None:
    """Ctrl+K (laptop) or a tap on the search control (phone): the cursor in a search box the
    reader can see, its text clear of the magnifying glass."""
    if viewport == "desktop":
        page.keyboard.press("Control+k")
    else:
        page.locator(f"{SEARCH_CONTROL}:visible").first.tap()
    page.wait_for_function(
        "() => { const el = document.activeElement;"
        " return el && el.name === 'q' && el.getBoundingClientRect().width > 50; }", timeout=30_000)
    assert page.evaluate(_TEXT_CLEAR_OF_ICON_JS), f"{path}: the icon covers the typed text"


def _search_control_on_screen(page, path: str, viewport: str) -> None:
    """One search control on the first screen, still there half-way down; it opens the search
    box (closed again with Escape)."""
    page.evaluate("() => window.scrollTo(0, 0)")
    assert page.evaluate(_ON_SCREEN_JS, SEARCH_CONTROL) == 1, (
        f"{path} at {viewport}: no search control on the first screen")
    page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight / 2)")
    assert page.evaluate(_ON_SCREEN_JS, SEARCH_CONTROL) == 1, (
        f"{path} at {viewport}: the search control leaves the screen when the page scrolls")
    page.evaluate("() => window.scrollTo(0, 0)")
    _open_search_box(page, path, viewport)
    page.keyboard.press("Escape")
    page.wait_for_function("() => !document.activeElement || document.activeElement.name !== 'q'")


def _search_from_the_page(page, site_url: str, path: str, viewport: str) -> None:
    """A query typed into the page's search box goes to the one search page of the site (whose
    results test_search_page_lists_matching_pages checks), offline."""
    page.evaluate("() => window.scrollTo(0, 0)")
    _open_search_box(page, path, viewport)
    page.keyboard.type(QUERY)
    with page.expect_navigation() as navigation:
        page.keyboard.press("Enter")
    assert page.url.split("#")[0] == f"{site_url}search.html?q=valid+length", page.url
    assert navigation.value is not None and navigation.value.ok, page.url
    assert page.external_requests == []


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("path", PAGES)
def test_page(open_context, site_url, site_dir, screenshot_dir, path, viewport):
    assert (site_dir / path).exists(), f"{path} was not built"
    page = open_context(viewport)
    response = page.goto(site_url + path, wait_until="load")
    assert response is not None and response.ok
    if path == "index.html":  # Jupyter Book's index redirects to the root page
        page.wait_for_url(re.compile(r".*/intro\.html$"))
    page.wait_for_load_state("networkidle")
    problems: list[str] = []
    _wait_for_math(page, path, problems)
    page.wait_for_load_state("networkidle")
    # the page as it opens, before any scrolling: a reader pays for an explorer's model (loaded
    # when the explorer comes near the viewport) only on reaching it, and _check_figures scrolls
    transferred = sum(page.bytes_received.values())
    _check_blocks(page, path, problems)
    if viewport == "desktop":
        _check_listings_fit(cut_off_blocks(page), problems)
    _check_tables_and_outputs(page, problems)
    _check_figures(page, problems)
    _check_figure_controls(page, problems)
    page.evaluate("() => window.scrollTo(0, 0)")
    _search_control_on_screen(page, path, viewport)
    page.screenshot(path=str(screenshot_dir / f"{_slug(path)}-{viewport}.png"), full_page=True)

    if transferred > MAX_PAGE_BYTES:
        biggest = sorted(page.bytes_received.items(), key=lambda kv: -kv[1])[:4]
        problems.append(f"{transferred} bytes transferred (> {MAX_PAGE_BYTES}): {biggest}")
    # against the configured width: a phone browser widens its layout viewport to fit the page
    widths = [page.evaluate("() => document.documentElement.scrollWidth"),
              VIEWPORTS[viewport]["width"]]
    if widths[0] > widths[1] + 1:
        wide = page.evaluate(
            "() => [...document.querySelectorAll('.bd-article *')]"
            ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)"
            ".slice(0, 3).map(e => e.tagName + '.' + e.className)"
        )
        problems.append(f"page is {widths[0]} px wide in a {widths[1]} px viewport: {wide}")
    if page.external_requests:
        problems.append(f"asked the network for {page.external_requests}")
    if page.console_errors:
        problems.append(f"console errors: {page.console_errors}")
    # axe re-fetches stylesheets itself (and resolves one @import against the page's URL). Code
    # listings (Pygments colours, checked once upstream) and the plotly SVGs (images with a text
    # alternative) are left out: the contrast of every token takes axe half a minute per page.
    skipped = ["div.highlight", ".js-plotly-plot"]
    problems += [f"axe: {v}" for v in serious_axe_violations(page, skipped)]
    assert problems == [], f"{path} at {viewport}:\n  " + "\n  ".join(problems)
    _search_from_the_page(page, site_url, path, viewport)  # last: it leaves the page


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_search_page_lists_matching_pages(open_context, site_url, viewport):
    """Where every page's search box leads (test_page): the pages matching the query, offline."""
    page = open_context(viewport)
    response = page.goto(f"{site_url}search.html?q=valid+length", wait_until="load")
    assert response is not None and response.ok
    page.wait_for_load_state("networkidle")
    results = page.locator("#search-results ul.search li a")
    results.first.wait_for(state="attached", timeout=10_000)
    titles = results.all_text_contents()
    assert any("implementation" in t.lower() for t in titles), titles
    assert page.external_requests == []
    assert page.console_errors == []


@pytest.mark.browser
def test_search_stays_on_screen_when_the_chapter_list_is_hidden(open_context, site_url):
    """On a laptop, a reader who hides the chapter list (and its search field) gets the
    header's search button instead, and it opens the search box."""
    page = open_context("desktop")
    page.goto(site_url + CHAPTER, wait_until="load")
    page.wait_for_load_state("networkidle")
    page.locator("button[aria-label='Toggle primary sidebar']").first.click()
    page.wait_for_function("() => getComputedStyle(document.querySelector('.bd-sidebar-primary'))"
                           ".visibility === 'hidden'")
    assert page.evaluate(_ON_SCREEN_JS, SEARCH_CONTROL) == 1
    page.locator(f"{SEARCH_CONTROL}:visible").first.click()
    page.wait_for_function("() => document.activeElement && document.activeElement.name === 'q'")


_VISIBLE_JS = """(selector) => {
          const el = document.querySelector(selector);
          if (!el) return false;
          const style = getComputedStyle(el), r = el.getBoundingClientRect();
          return style.display !== "none" && style.visibility !== "hidden" && r.width > 10
            && r.height > 10 && r.right > 0 && r.left < window.innerWidth;
        }"""


def _visible(page, selector: str) -> bool:
    """Whether the element is on screen: displayed, not hidden, and inside the viewport."""
    return page.evaluate(_VISIBLE_JS, selector)


def _becomes(page, selector: str, visible: bool, timeout_ms: int = 30_000) -> bool:
    """Wait (the theme animates its sidebars) until the element is (not) visible; False if never."""
    try:
        page.wait_for_function(f"(s) => ({_VISIBLE_JS})(s) === {str(visible).lower()}",
                               arg=selector, timeout=timeout_ms)
        return True
    except Exception:
        return False


TOGGLES = {  # button -> the sidebar it opens and closes
    "Toggle primary sidebar": ".bd-sidebar-primary",
    "Toggle secondary sidebar": ".bd-sidebar-secondary",  # "On this page" / "Contents"
}


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_sidebar_toggles_open_and_close_their_sidebars(open_context, site_url, viewport):
    """Each sidebar toggle opens and closes its sidebar; one search box.

    On a laptop the primary toggle hides and shows the chapter list, and the page's table of
    contents is always shown (the theme then hides its toggle). On a phone both sidebars are
    off screen; each toggle slides its sidebar in, and a tap beside it closes it again.
    """
    page = open_context(viewport)
    page.goto(site_url + CHAPTER, wait_until="load")
    page.wait_for_load_state("networkidle")
    searches = page.locator("button.search-button__button:visible, form.bd-search:visible")
    assert searches.count() == 1, f"{searches.count()} search boxes are shown at {viewport}"
    width = VIEWPORTS[viewport]["width"]

    for label, sidebar in TOGGLES.items():
        button = page.locator(f"button[aria-label='{label}']")
        shown = _visible(page, sidebar)
        if not button.first.is_visible():
            assert viewport == "desktop" and shown, f"no {label!r} button at {viewport}"
            continue
        button.first.click()
        assert _becomes(page, sidebar, not shown), f"{label!r} did not change {sidebar} at {viewport}"
        if shown:  # hidden on a laptop: the same button shows it again
            button.first.click()
        else:  # an overlay on a phone: a tap beside the sidebar closes it
            x = width - 20 if "primary" in sidebar else 20  # primary slides in from the left
            page.mouse.click(x, VIEWPORTS[viewport]["height"] / 2)
        assert _becomes(page, sidebar, shown), f"{label!r} did not restore {sidebar} at {viewport}"
    assert page.console_errors == []


@pytest.mark.browser
def test_toc_pages_are_all_linked_from_the_home_page(browser_page, site_url):
    browser_page.goto(site_url + "intro.html")
    links = browser_page.eval_on_selector_all(
        "nav.bd-links a.reference.internal", "els => els.map(e => e.getAttribute('href'))"
    )
    chapters = [p for p in PAGES if p.startswith("chapters/")]
    for chapter in chapters:
        assert any(chapter in (link or "") for link in links), f"{chapter} missing from the navigation"
