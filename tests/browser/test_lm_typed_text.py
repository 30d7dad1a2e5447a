"""Any text typed into chapter 12's explorer (issue 30), at 1366 x 900 and 390 x 844.

* Words with accents or in other scripts stay whole and are marked unknown ("Zoë", "café",
  "東京"), with words (not punctuation) to try instead; a sign the model lacks is one token,
  marked; at most 3 rows of suggestions, however many unknown tokens.
* On ASCII text the page's tokenizer (``_static/mha-lm.js``) splits exactly as
  ``mha_lib.stories.Tokenizer`` does.
"""

from __future__ import annotations

import pytest

from conftest import VIEWPORTS, reach_lm_explorer
from mha_lib.stories import Tokenizer

CHAPTER12 = "chapters/12_language_model.html"
ASCII_TEXTS = [
    "Mia has a red kite. Leo helps Mia because she",
    "Wow! Mia\u2019s kite, Leo's ball... and 42 cats?",
    "don't stop: it's 3 o'clock -- (really) [sic] a+b=c; x_y",
    "  MIXED case,, double  spaces...and42numbers's",
]

# What the explorer shows: the tokens, those marked unknown, and the rows of suggestions.
_SHOWN_JS = """() => {
  const root = document.querySelector(".mha-lm");
  return {
    tokens: root.mhaLM.state.tokens,
    marked: [...root.querySelectorAll(".mha-lm-tok.mha-lm-unk")].map((c) => c.firstChild.textContent),
    rows: [...root.querySelectorAll(".mha-lm-hint .mha-lm-row")].map(
      (row) => [...row.querySelectorAll("button")].map((b) => b.textContent)),
  };
}"""


def _open(open_context, site_url: str, viewport: str):
    page = open_context(viewport)
    page.goto(site_url + CHAPTER12, wait_until="load")
    reach_lm_explorer(page)
    return page


def _type(page, text: str) -> dict:
    before = page.evaluate("() => document.querySelector('.mha-lm').mhaLM.rendered")
    page.fill("#lm-input", text)
    page.wait_for_function(f"() => document.querySelector('.mha-lm').mhaLM.rendered > {before}")
    return page.evaluate(_SHOWN_JS)


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_words_of_any_script_stay_whole_and_are_marked(open_context, site_url, viewport):
    page = _open(open_context, site_url, viewport)
    shown = _type(page, "Zoe\u0308's café \u2014 東京 Mia")  # "ë" typed as e + a combining mark
    assert shown["tokens"] == ["zoë", "'s", "café", "\u2014", "東京", "mia"]
    assert shown["marked"] == ["zoë", "café", "\u2014", "東京"]
    assert len(shown["rows"]) == 3  # the first three unknown tokens
    punctuation = {".", ",", "!", "?", ":", "'s"}
    for row in shown["rows"][:2]:  # words to try for the words, not punctuation
        assert row and not set(row) & punctuation, row
    assert set(shown["rows"][2]) <= punctuation  # a sign: the punctuation the model knows


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_punctuation_gives_few_suggestions(open_context, site_url, viewport):
    page = _open(open_context, site_url, viewport)
    shown = _type(page, "Mia ; : - ( ) [ ] { } @ # % & * + = ~ ^ | / \\ < > $ \u20ac 12 345")
    assert len(shown["rows"]) <= 3
    assert sum(len(row) for row in shown["rows"]) <= 9
    assert "mia" in shown["tokens"] and ";" in shown["marked"]


@pytest.mark.browser
def test_the_page_splits_ascii_text_as_the_library_does(open_context, site_url):
    page = _open(open_context, site_url, "desktop")
    tokenizer = Tokenizer()
    for text in ASCII_TEXTS:
        page_tokens = page.evaluate("(t) => document.querySelector('.mha-lm').mhaLM.model.tokenize(t)", text)
        assert page_tokens == tokenizer.tokenize(text), text
