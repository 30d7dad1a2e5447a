"""Read it anywhere (issue 30): the website on a phone and a laptop, by mouse, touch and keyboard.

At 1366 x 900 and 390 x 844:

* the story of chapter 12 wraps inside its block (that no output of any page has a line past
  the right edge of its block, and that long code shows that it scrolls, is checked on the page
  load of ``test_site.py``'s ``test_page``);
* the theme switch shows the other theme at the first click and at every click after, and a
  page opened on a system set to dark is dark;
* every keyboard stop of a chapter's first 40 shows a focus ring;
* each explorer is reached from the top of its page in a few key presses (skip links);
* each explorer's controls stay on screen, uncovered, while the reader scrolls through its
  figure (chapter 4 at 8 heads, chapter 12);
* search shows snippets holding the words searched for, ranks the chapter that teaches rotary
  positions first, and downloads less than a megabyte per query.
"""

from __future__ import annotations

import pytest

from conftest import VIEWPORTS, reach_lm_explorer
from mha_lib.book.site_audit import _EXPLORERS, key_presses_to, search_results

CHAPTER4 = "chapters/04_exploring_heads.html"
CHAPTER12 = "chapters/12_language_model.html"
CHAPTER7 = "chapters/07_head_importance.html"


def _open(open_context, site_url: str, path: str, viewport: str, dark: bool = False):
    page = open_context(viewport)
    if dark:
        page.emulate_media(color_scheme="dark")
    response = page.goto(site_url + path, wait_until="load")
    assert response is not None and response.ok, path
    return page


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_the_story_of_chapter_12_wraps(open_context, site_url, viewport):
    page = _open(open_context, site_url, CHAPTER12, viewport)
    story = page.locator(".cell_output pre", has_text="Dev and Tariq go to the market").first
    width = story.evaluate("(pre) => [pre.scrollWidth, pre.clientWidth]")
    assert width[0] <= width[1] + 1, f"the story runs {width[0] - width[1]} px past its block"


def _theme(page) -> str:
    return page.evaluate("() => document.documentElement.dataset.theme")


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_the_theme_switch_changes_the_page_at_every_click(open_context, site_url, viewport):
    page = _open(open_context, site_url, CHAPTER4, viewport)
    assert _theme(page) == "light"  # the system's setting (light in a fresh browser)
    button = page.locator(".theme-switch-button:visible").first
    seen = []
    for _ in range(4):
        button.click()
        seen.append(_theme(page))
    assert seen == ["dark", "light", "dark", "light"]
    page.keyboard.press("Tab")  # the keyboard's Enter on the button switches too
    button.focus()
    page.keyboard.press("Enter")
    assert _theme(page) == "dark"
    page.reload(wait_until="load")
    assert _theme(page) == "dark", "the reader's choice is kept"


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_a_dark_system_gets_a_dark_page(open_context, site_url, viewport):
    page = _open(open_context, site_url, CHAPTER4, viewport, dark=True)
    assert _theme(page) == "dark"
    page.locator(".theme-switch-button:visible").first.click()
    assert _theme(page) == "light"


# The focused element's ring: its outline (style, width) or a box shadow, and its size.
_FOCUS_JS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const s = getComputedStyle(el), r = el.getBoundingClientRect();
  return {what: el.tagName + "." + el.className + "#" + el.id, style: s.outlineStyle,
          width: parseFloat(s.outlineWidth), shadow: s.boxShadow, size: r.width * r.height};
}"""


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_every_control_shows_its_focus(open_context, site_url, viewport):
    page = _open(open_context, site_url, CHAPTER4, viewport)
    missing = []
    for _ in range(40):
        page.keyboard.press("Tab")
        focus = page.evaluate(_FOCUS_JS)
        if focus is None or focus["size"] == 0:
            continue
        ring = (focus["style"] != "none" and focus["width"] >= 2) or focus["shadow"] != "none"
        if not ring:
            missing.append(focus["what"])
    assert missing == [], f"keyboard stops without a focus ring at {viewport}: {missing}"


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_a_keyboard_reader_reaches_each_explorer_in_a_few_presses(open_context, site_url, viewport):
    for path, explorers in _EXPLORERS.items():
        for name, selector in explorers:
            page = _open(open_context, site_url, path, viewport)
            if page.locator(".mha-lm").count():  # chapters 12, 12d: controls at once, the model when reached
                page.wait_for_selector(".mha-lm-live", state="visible")
            presses = key_presses_to(page, selector, limit=12)
            assert presses is not None and presses <= 6, f"{path} {name}: {presses} presses"
            page.wait_for_function("(sel) => { const r = document.querySelector(sel).getBoundingClientRect();"
                                   " return r.top >= 0 && r.bottom <= innerHeight; }", arg=selector)


# The control's centre is on screen, and what is drawn there is the control (not covered).
_ON_SCREEN_JS = """(sel) => {
  const el = document.querySelector(sel), r = el.getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  if (y < 0 || y > innerHeight || x < 0 || x > innerWidth) return false;
  const hit = document.elementFromPoint(x, y);
  return el === hit || el.contains(hit) || hit.contains(el);
}"""


def _figure_in_view_of(page, figure: str, control: str) -> list[float]:
    """Scroll through the figure (its top, middle and bottom at the middle of the screen) and
    return the scroll positions where the control was off screen or covered."""
    box = page.evaluate("(sel) => { const r = document.querySelector(sel).getBoundingClientRect();"
                        " return [r.top + scrollY, r.height]; }", figure)
    lost = []
    for part in (0.1, 0.5, 0.9):
        y = box[0] + part * box[1] - page.viewport_size["height"] / 2
        page.evaluate("(y) => window.scrollTo(0, y)", y)
        page.wait_for_function("(y) => Math.abs(scrollY - Math.max(0, Math.min(y, "
                               "document.documentElement.scrollHeight - innerHeight))) < 2", arg=y)
        if not page.evaluate(_ON_SCREEN_JS, control):
            lost.append(y)
    return lost


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("path, control", [(CHAPTER4, "heads"), (CHAPTER7, "len-0")])
def test_static_explorers_keep_their_controls_in_view_of_their_figures(open_context, site_url, path,
                                                                       control, viewport):
    page = _open(open_context, site_url, path, viewport)
    page.wait_for_function("() => document.getElementById('mha-static-explorer')?.dataset.drawn")
    if control == "heads":
        page.locator("#mha-static-explorer-controls-heads").focus()
        page.keyboard.press("End")  # 8 heads: the tallest figure
        page.wait_for_function("() => { const gd = document.getElementById('mha-static-explorer');"
                               " return gd.dataset.drawn === gd.dataset.state && gd.mhaExplorer.graph().data.length >= 16; }")
    lost = _figure_in_view_of(page, "#mha-static-explorer", f"#mha-static-explorer-controls-{control}")
    assert lost == [], f"control {control} left the screen at scroll positions {lost}"


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_chapter_12_keeps_its_text_box_in_view_of_its_heads(open_context, site_url, viewport):
    page = _open(open_context, site_url, CHAPTER12, viewport)
    reach_lm_explorer(page)
    lost = _figure_in_view_of(page, ".mha-lm-figure", "#lm-input")
    assert lost == [], f"the text box left the screen at scroll positions {lost}"
    layer = page.locator("input[name=lm-layer]").first
    assert page.evaluate(_ON_SCREEN_JS, "input[name=lm-layer]"), "the layer choice scrolled away"
    assert layer.is_visible()


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_chapter_12_does_not_jump_from_a_grid_to_a_column_as_the_text_grows(open_context, site_url, viewport):
    page = _open(open_context, site_url, CHAPTER12, viewport)
    reach_lm_explorer(page)
    heights = []
    for words in (12, 24, 40):
        text = " ".join(["Mia has a red kite and Leo has a ball ."] * 4).split()[:words]
        before = page.evaluate("() => document.querySelector('.mha-lm').mhaLM.rendered")
        page.fill("#lm-input", " ".join(text))
        page.wait_for_function(f"() => document.querySelector('.mha-lm').mhaLM.rendered > {before}")
        heights.append(page.evaluate("() => document.querySelector('.mha-lm-figure').getBoundingClientRect().height"))
    assert max(heights) - min(heights) < 0.1 * min(heights), f"figure heights {heights}"


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_search_shows_the_words_searched_for(open_context, site_url, viewport):
    page = open_context(viewport)
    for query in ("rotary", "softmax", "mask"):
        result = search_results(page, site_url, query)
        assert len(result["hits"]) >= 3, result
        without = [h["title"] for h in result["hits"] if query not in h["snippet"].lower()]
        assert without == [], f"{query!r}: snippets without the word: {without}"
        assert "\\(" not in " ".join(h["snippet"] for h in result["hits"]), "raw TeX in a snippet"
        assert result["bytes"] < 1_000_000, f"{query!r} downloads {result['bytes']} bytes"
        if query == "rotary":  # the chapter that teaches rotary positions first
            assert result["hits"][0]["title"] == "Positions, cross-attention and the Transformer block"
        if query == "softmax":  # the chapter that defines it, or the one named after it, first
            titles = [h["title"] for h in result["hits"][:2]]
            assert "The model" in titles, titles
            assert titles[0] in ("The model", "What softmax buys: linear attention and the hybrids"), titles
