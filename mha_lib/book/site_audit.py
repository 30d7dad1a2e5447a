"""Measurements of the built website in a browser, as a reader gets it (numbers, not tests).

Usage::

    python -m mha_lib.book.site_audit _build/html             # every measurement
    python -m mha_lib.book.site_audit _build/html --only search

* ``blocks``: per viewport (1366 x 900, 390 x 844), the code and output blocks of every page
  whose lines run past their right edge, and how many of those show no cue that they scroll;
* ``tabs``: key presses (Tab, and Enter on a skip link) from the top of a page to the first
  control of each explorer;
* ``search``: bytes a search downloads beyond the search page itself, and the top hits;
* ``pages``: per page and viewport, on a cold load: bytes, Markdown tables left as pipe text,
  words broken inside table cells, object reprs in outputs, plotly's own controls (out of reach
  of Tab) and the book's figure controls that are not in the Tab order.

The page-side functions take a Playwright ``page`` and are shared with the browser tests
(``tests/browser/test_read_anywhere.py``). Nothing here asserts anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mha_lib.book.loopback import serve

__all__ = ["cut_off_blocks", "key_presses_to", "main",
           "search_results"]

# Every code (cell input, listing) and output block of the article: whether a line runs past
# its right edge, and whether it then shows a cue that it scrolls (a shadow on that edge).
_BLOCKS_JS = """
() => {
  const seen = new Set(), out = [];
  const selector = ".bd-article div.highlight pre, .bd-article .cell_output pre, " +
                   ".bd-article .output pre, .bd-article pre";
  for (const pre of document.querySelectorAll(selector)) {
    if (seen.has(pre)) continue;
    seen.add(pre);
    if (!pre.offsetParent || pre.clientWidth === 0) continue;  // folded away
    const over = pre.scrollWidth - pre.clientWidth;
    const style = getComputedStyle(pre);
    out.push({
      kind: pre.closest(".cell_input") ? "code"
        : (pre.closest(".cell_output, .output") && !pre.closest(".text_html") ? "output" : "listing"),
      hidden_px: over > 1 ? over : 0,
      cue: /gradient/.test(style.backgroundImage) || pre.classList.contains("mha-scrolls"),
      wraps: /pre-wrap|break-spaces/.test(style.whiteSpace),
      text: pre.textContent.slice(0, 60),
    });
  }
  return out;
}
"""

# Tables as a reader sees them: Markdown tables left as pipe text (outside code), and words of
# table cells broken across lines (a word: a run of letters and digits; a break at a space, a
# hyphen or an identifier's separator _ . / is no broken word).
_TABLES_JS = """
() => {
  const pipes = [], broken = [];
  const separator = /\\|\\s*:?-{3,}:?\\s*\\|/;  // "| --- |": a Markdown table's rule
  for (const el of document.querySelectorAll(".bd-article p, .bd-article .cell_output, .bd-article .output")) {
    if (el.closest(".cell_input, div.highlight") || el.querySelector("table")) continue;
    if (separator.test(el.innerText || "")) pipes.push((el.innerText || "").trim().slice(0, 60));
  }
  const range = document.createRange();
  for (const cell of document.querySelectorAll(".bd-article td, .bd-article th")) {
    if (!cell.offsetParent) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode, re = /[A-Za-z0-9\u00C0-\u024F]+/g;
      let m;
      while ((m = re.exec(node.nodeValue))) {
        if (m[0].length < 2) continue;
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0)
                             .map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return {pipe_tables: pipes, broken_words: broken};
}
"""

# Object reprs that leaked into outputs (``<torch._C.Generator at 0x7f...>``).
_REPRS_JS = """
() => [...document.querySelectorAll(".bd-article .cell_output, .bd-article .output")]
  .map((el) => (el.innerText || "").match(/<[\\w.]+( object)? at 0x[0-9a-fA-F]+>/))
  .filter(Boolean).map((m) => m[0])
"""

# The controls of every plotly figure: plotly's own (drawn in SVG, out of reach of Tab) and the
# book's HTML controls above a figure (mha-figures.js), with whether each is in the Tab order.
_FIGURE_CONTROLS_JS = """
() => {
  const plotly = [...document.querySelectorAll(
      ".js-plotly-plot .slider-container, .js-plotly-plot .updatemenu-container")]
    .filter((el) => el.getBoundingClientRect().width > 0).length;
  const html = [...document.querySelectorAll(".mha-figure-controls input, .mha-figure-controls select, " +
                                             ".mha-figure-controls button")].map((el) => ({
    id: el.id || el.textContent.trim(),
    tabbable: el.tabIndex >= 0 && !el.disabled && !el.closest("[inert], [aria-hidden=true]")
              && el.getBoundingClientRect().width > 0,
  }));
  return {plotly_controls: plotly, html_controls: html};
}
"""

# Explorers of the book: page -> (name, CSS selector of its first control).
_EXPLORERS = {
    "chapters/04_exploring_heads.html": [("heads sliders", "#mha-static-explorer-controls input")],
    "chapters/08_induction_heads.html": [("layer slider", "#mha-given-explorer-controls input"),
                                         ("circuit slider", "#mha-induction-circuit-controls input")],
    "chapters/12_language_model.html": [("text box", "#lm-input")],
    "chapters/12d_linear_attention.html": [("text box", "#lm-input")],
}


def cut_off_blocks(page) -> list[dict]:
    """The visible code/output blocks of the page: ``kind``, ``hidden_px`` (how far the longest
    line runs past the right edge, 0 if none), ``cue`` (a scroll shadow), ``wraps``."""
    return page.evaluate(_BLOCKS_JS)


def _table_problems(page) -> dict:
    """``pipe_tables`` (Markdown tables shown as text) and ``broken_words`` (words of a table
    cell broken across two lines) of the page."""
    return page.evaluate(_TABLES_JS)


def _stray_reprs(page) -> list[str]:
    """Object reprs with a memory address in the page's outputs."""
    return page.evaluate(_REPRS_JS)


def _figure_controls(page) -> dict:
    """``plotly_controls``: plotly's own sliders and menus drawn on the page (out of reach of
    Tab); ``html_controls``: the book's controls of figures, each with ``tabbable``."""
    return page.evaluate(_FIGURE_CONTROLS_JS)


def _listing_share(blocks: list[dict]) -> tuple[int, int]:
    """(listings whose lines run past their right edge, listings) among :func:`cut_off_blocks`."""
    listings = [b for b in blocks if b["kind"] == "listing"]
    return sum(bool(b["hidden_px"]) for b in listings), len(listings)


def key_presses_to(page, selector: str, limit: int = 300) -> int | None:
    """Tab presses from the top of the page until the focus is on ``selector``; Enter on a skip
    link to it (``a[data-mha-skip]`` whose target holds the control) counts as one press.
    None when ``limit`` presses do not get there."""
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    presses = 0
    while presses < limit:
        page.keyboard.press("Tab")
        presses += 1
        where = page.evaluate(
            """(sel) => {
              const a = document.activeElement;
              if (!a) return "none";
              if (a.matches(sel)) return "there";
              if (a.matches("a[data-mha-skip]")) {
                const target = document.querySelector(a.getAttribute("href"));
                if (target && (target.matches(sel) || target.querySelector(sel))) return "skip";
              }
              return "on";
            }""", selector)
        if where == "there":
            return presses
        if where == "skip":
            page.keyboard.press("Enter")
            presses += 1
            if page.evaluate("(sel) => document.activeElement && document.activeElement.matches(sel)", selector):
                return presses
    return None


def search_results(page, base_url: str, query: str) -> dict:
    """Search ``query`` on the search page: the hits (title, snippet) in order, and the bytes the
    query downloads (what the page fetches to show the hits; the search page and its index,
    loaded once, are not counted)."""
    page.goto(f"{base_url}search.html?q={query}", wait_until="load")
    page.wait_for_function(
        "() => /Search finished|did not match/.test(document.querySelector('#search-results')?.innerText || '')",
        timeout=60000)
    page.wait_for_load_state("networkidle")
    page.wait_for_function(  # every hit shown has its snippet, or its fetch has ended
        """() => performance.getEntriesByType('resource').filter((e) => e.initiatorType === 'fetch')
                 .every((e) => e.responseEnd > 0)""")
    fetched = page.evaluate("""() => performance.getEntriesByType('resource')
        .filter((e) => e.initiatorType === 'fetch' || e.initiatorType === 'xmlhttprequest')
        .reduce((sum, e) => sum + e.encodedBodySize, 0)""")
    hits = page.evaluate("""() => [...document.querySelectorAll('#search-results ul.search li')].map(
        (li) => ({title: li.querySelector('a').textContent.trim(),
                  snippet: (li.querySelector('p.context') || {textContent: ''}).textContent.trim()}))""")
    return {"query": query, "bytes": fetched, "hits": hits}


def _pages(site: Path) -> list[str]:
    """The pages of the book (``_toc.yml``), in reading order."""
    from mha_lib.book.pdf import book_pages

    return [f"{doc}.html" for doc in book_pages()]


def _pages_report(browser, base: str, site: Path, name: str, viewport: dict) -> None:
    """Per page, in a fresh context (a cold load): bytes, raw pipe tables, words broken in
    table cells, stray reprs, plotly's own controls and the book's untabbable ones."""
    phone = name == "phone"
    totals = {"pipe": 0, "broken": 0, "reprs": 0, "plotly": 0, "untabbable": 0}
    for path in _pages(site):
        context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
        page = context.new_page()
        page.set_default_timeout(120_000)  # a loaded machine
        sizes: dict[str, int] = {}
        page.on("requestfinished", lambda r: sizes.__setitem__(r.url, r.sizes()["responseBodySize"]))
        page.goto(base + path, wait_until="load")
        page.wait_for_load_state("networkidle")
        tables, reprs, controls = _table_problems(page), _stray_reprs(page), _figure_controls(page)
        untabbable = [c["id"] for c in controls["html_controls"] if not c["tabbable"]]
        found = {"pipe": len(tables["pipe_tables"]), "broken": len(tables["broken_words"]),
                 "reprs": len(reprs), "plotly": controls["plotly_controls"], "untabbable": len(untabbable)}
        for key, value in found.items():
            totals[key] += value
        print(f"  {name} {path}: {sum(sizes.values()) / 1e6:.2f} MB, {found}"
              + (f" broken: {tables['broken_words'][:6]}" if tables["broken_words"] else ""))
        context.close()
    print(f"pages {name}: {totals}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built website (e.g. _build/html)")
    parser.add_argument("--only", choices=["pages", "blocks", "tabs", "search"], action="append")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        parser.error(f"site: expected the built website (with index.html), got {args.site}")
    only = set(args.only or ["pages", "blocks", "tabs", "search"])
    from playwright.sync_api import sync_playwright

    sizes = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
    with serve(args.site) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"])
        for name, viewport in sizes.items():
            phone = name == "phone"
            context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
            page = context.new_page()
            page.set_default_timeout(120_000)
            if "pages" in only:
                _pages_report(browser, base, args.site, name, viewport)
            if "blocks" in only:
                total = cut = silent = 0
                listed = listings = 0
                for path in _pages(args.site):
                    page.goto(base + path, wait_until="load")
                    blocks = cut_off_blocks(page)
                    over_listings, all_listings = _listing_share(blocks)
                    listed, listings = listed + over_listings, listings + all_listings
                    over = [b for b in blocks if b["hidden_px"]]
                    total, cut = total + len(blocks), cut + len(over)
                    silent += sum(not b["cue"] for b in over)
                    worst = max(over, key=lambda b: b["hidden_px"], default=None)
                    if over:
                        print(f"  {name} {path}: {len(over)}/{len(blocks)} past the edge"
                              f" (worst {worst['hidden_px']} px, {worst['kind']}: {worst['text'][:40]!r})")
                print(f"blocks {name}: {cut} of {total} code/output blocks have lines past the "
                      f"right edge; {silent} of them without a scroll cue; listings: {listed} of "
                      f"{listings} scroll sideways")
            if "tabs" in only and not phone:
                for path, explorers in _EXPLORERS.items():
                    for label, selector in explorers:
                        page.goto(base + path, wait_until="load")
                        print(f"tabs {path} {label}: {key_presses_to(page, selector)} key presses")
            if "search" in only and not phone:
                for query in ("rotary", "softmax", "mask"):
                    result = search_results(page, base, query)
                    print(f"search {query!r}: {result['bytes'] / 1e3:.0f} kB, "
                          f"{len(result['hits'])} hits")
                    for hit in result["hits"][:3]:
                        print(f"    {hit['title']}: {hit['snippet'][:110]!r}")
            context.close()
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
