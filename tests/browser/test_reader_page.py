"""The chapters as a reader sees them on the website (issue 20, items 1 and 2).

* The checks behind the claims are not on the page: the code a reader sees holds at most 20
  assertion lines in the whole book, and no chapter shows the check cells' source.
* Predict, then run: the output of every Predict exercise's run cell is folded until the
  reader opens it (the cell is tagged ``hide-output``); a click shows it.
"""

from __future__ import annotations

import re

import pytest

from conftest import toc_pages

pytestmark = pytest.mark.browser

CHAPTERS = [p for p in toc_pages() if p.startswith("chapters/")]
ASSERTION = re.compile(r"\bassert\b|assert_close|testing\.")

_VISIBLE_CODE_JS = """() => [...document.querySelectorAll('.cell .cell_input pre')]
  .filter(el => el.offsetParent !== null).map(el => el.innerText)"""


@pytest.fixture(scope="module")
def visible_code(browser, site_url):
    """Chapter page -> the text of every code listing of a cell input the reader sees."""
    context = browser.new_context()
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(site_url) else r.abort())
    code = {}
    for path in CHAPTERS:
        page.goto(site_url + path)
        code[path] = page.evaluate(_VISIBLE_CODE_JS)
    context.close()
    return code


def test_every_chapter_shows_code(visible_code):
    assert all(visible_code[p] for p in CHAPTERS), [p for p in CHAPTERS if not visible_code[p]]


def test_the_website_shows_at_most_20_assertion_lines(visible_code):
    counts = {p: sum(1 for listing in visible_code[p] for line in listing.splitlines()
                     if ASSERTION.search(line)) for p in CHAPTERS}
    assert sum(counts.values()) <= 20, counts


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_predict_outputs_are_folded_until_the_reader_opens_them(open_context, site_url, viewport):
    page = open_context(viewport)
    folded = 0
    for path in CHAPTERS:
        page.goto(site_url + path)
        cells = page.locator(".cell.tag_hide-output")
        for i in range(cells.count()):
            cell = cells.nth(i)
            output = cell.locator(".cell_output").first
            if output.count() == 0:
                continue
            assert not output.is_visible(), f"{path}: a folded output is shown"
            cell.locator("details > summary").first.click()
            output.wait_for(state="visible")
            folded += 1
    assert folded >= 5, f"only {folded} folded outputs"
