"""The chapters as a reader sees them on the website (issue 20, items 1 and 2).

* The checks behind the claims are not on the page: the code a reader sees holds at most 20
  assertion lines in the whole book, and no chapter shows the check cells' source.
* Predict, then run: the output of every Predict exercise's run cell is folded until the
  reader opens it (the cell is tagged ``hide-output``); a click shows it.
"""

from __future__ import annotations

import re

import pytest

from conftest import VIEWPORTS, toc_pages

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("reader_page")]  # one pass per viewport

CHAPTERS = [p for p in toc_pages() if p.startswith("chapters/")]
ASSERTION = re.compile(r"\bassert\b|assert_close|testing\.")

_VISIBLE_CODE_JS = """() => [...document.querySelectorAll('.cell .cell_input pre')]
  .filter(el => el.offsetParent !== null).map(el => el.innerText)"""


def _read_chapters(page, site_url: str, with_code: bool) -> dict:
    """Every chapter, loaded once: the code listings a reader sees (``with_code``), then each
    folded Predict output opened with a click. Returns ``code`` (chapter page -> listings),
    ``folded`` (outputs that were folded and showed on the click) and ``problems``."""
    code, folded, problems = {}, 0, []
    for path in CHAPTERS:
        page.goto(site_url + path)
        if with_code:
            code[path] = page.evaluate(_VISIBLE_CODE_JS)
        cells = page.locator(".cell.tag_hide-output")
        for i in range(cells.count()):
            cell = cells.nth(i)
            output = cell.locator(".cell_output").first
            if output.count() == 0:
                continue
            if output.is_visible():
                problems.append(f"{path}: a folded output is shown")
                continue
            cell.locator("details > summary").first.click()
            output.wait_for(state="visible")
            folded += 1
    return {"code": code, "folded": folded, "problems": problems}


@pytest.fixture(scope="session")  # not "module": it survives the worker running other modules in between
def chapters_read(browser, site_url):
    """``chapters_read(viewport)``: :func:`_read_chapters` at that viewport (the code at the
    laptop's), each viewport's pass made once for the module's tests (one xdist group)."""
    done = {}

    def read(viewport: str) -> dict:
        if viewport not in done:
            phone = viewport == "phone"
            context = browser.new_context(viewport=VIEWPORTS[viewport], is_mobile=phone,
                                          has_touch=phone, device_scale_factor=1)
            page = context.new_page()
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(site_url) else r.abort())
            try:
                done[viewport] = _read_chapters(page, site_url, with_code=viewport == "desktop")
            finally:
                context.close()
        return done[viewport]

    return read


def test_every_chapter_shows_code(chapters_read):
    visible_code = chapters_read("desktop")["code"]
    assert all(visible_code[p] for p in CHAPTERS), [p for p in CHAPTERS if not visible_code[p]]


def test_the_website_shows_at_most_20_assertion_lines(chapters_read):
    visible_code = chapters_read("desktop")["code"]
    counts = {p: sum(1 for listing in visible_code[p] for line in listing.splitlines()
                     if ASSERTION.search(line)) for p in CHAPTERS}
    assert sum(counts.values()) <= 20, counts


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_predict_outputs_are_folded_until_the_reader_opens_them(chapters_read, viewport):
    read = chapters_read(viewport)
    assert read["problems"] == []
    assert read["folded"] >= 5, f"only {read['folded']} folded outputs"
