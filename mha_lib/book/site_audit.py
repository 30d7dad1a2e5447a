"""Measurements of the built website in a browser, as a reader gets it (numbers, not tests).

Usage::

    python -m mha_lib.book.site_audit _build/html             # every measurement
    python -m mha_lib.book.site_audit _build/html --only search

* ``blocks``: per viewport (1366 x 900, 390 x 844), the code and output blocks of every page
  whose lines run past their right edge, and how many of those show no cue that they scroll;
* ``tabs``: key presses (Tab, and Enter on a skip link) from the top of a page to the first
  control of each explorer;
* ``search``: bytes a search downloads beyond the search page itself, and the top hits.

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

# Explorers of the book: page -> (name, CSS selector of its first control).
_EXPLORERS = {
    "chapters/04_exploring_heads.html": [("heads sliders", "#mha-static-explorer-controls input")],
    "chapters/08_induction_heads.html": [("layer slider", "#mha-given-explorer-controls input"),
                                         ("circuit slider", "#mha-induction-circuit-controls input")],
    "chapters/12_language_model.html": [("text box", "#lm-input")],
}


def cut_off_blocks(page) -> list[dict]:
    """The visible code/output blocks of the page: ``kind``, ``hidden_px`` (how far the longest
    line runs past the right edge, 0 if none), ``cue`` (a scroll shadow), ``wraps``."""
    return page.evaluate(_BLOCKS_JS)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built website (e.g. _build/html)")
    parser.add_argument("--only", choices=["blocks", "tabs", "search"], action="append")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        parser.error(f"site: expected the built website (with index.html), got {args.site}")
    only = set(args.only or ["blocks", "tabs", "search"])
    from playwright.sync_api import sync_playwright

    sizes = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
    with serve(args.site) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"])
        for name, viewport in sizes.items():
            phone = name == "phone"
            context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
            page = context.new_page()
            if "blocks" in only:
                total = cut = silent = 0
                for path in _pages(args.site):
                    page.goto(base + path, wait_until="load")
                    blocks = cut_off_blocks(page)
                    over = [b for b in blocks if b["hidden_px"]]
                    total, cut = total + len(blocks), cut + len(over)
                    silent += sum(not b["cue"] for b in over)
                    worst = max(over, key=lambda b: b["hidden_px"], default=None)
                    if over:
                        print(f"  {name} {path}: {len(over)}/{len(blocks)} past the edge"
                              f" (worst {worst['hidden_px']} px, {worst['kind']}: {worst['text'][:40]!r})")
                print(f"blocks {name}: {cut} of {total} code/output blocks have lines past the "
                      f"right edge; {silent} of them without a scroll cue")
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
