"""The page's tokenizer (``_static/mha-lm.js``, run by Chromium) splits any text exactly as
``mha_lib.stories.Tokenizer`` does: the table of typed text that the library is tested
against (``tests/lm/tokenizer_cases.json``), then hypothesis text mixing accents, combining
marks, CJK, apostrophes, digits of several scripts, punctuation, emoji and every kind of space
with any character Unicode had assigned by Python's tables (``unicodedata``; a character
assigned later may be lower-cased by the browser and not by Python).

The script is loaded into an empty page (no website needed); its ``Model.prototype.tokenize``
is called with the pattern the library exports (``Tokenizer.pattern``), as the page does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mha_lib.stories import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
CASES = json.loads((ROOT / "tests" / "lm" / "tokenizer_cases.json").read_text())
TOKENIZER = Tokenizer()
TRICKY = list(
    "aZ\u00e9\u00eb\u00df\u0130\u0131\u03a3\u03c3\u03c2\u01c5\ufb01\u212b\u00c5e\u0301\u0308\u0327"  # accents, cases
    "\u6771\u4eac\ud55c\u0645\u0928\u094d\u093c\u1f08\u1fbc"  # CJK, Korean, Arabic, Devanagari, Greek
    "'\u2019\u2018`-\u2014.,!?:;_(){}"  # apostrophes and punctuation
    "09\u0661\u0663\u0967\u00b2\u00bd\u216b"  # digits of other scripts, other numbers
    " \t\n\u00a0\u3000\u0085\ufeff\u200b\u180e\u2028\x1c"  # spaces, and characters that are not
) + ["\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F1EB\U0001F1F7", "\u200d", "'s", "\U00010400"]
_ASSIGNED = st.characters(exclude_categories=("Cs", "Cn"))  # assigned in Python's Unicode tables
_TEXT = st.lists(st.one_of(st.sampled_from(TRICKY), _ASSIGNED), max_size=40).map("".join)

_TOKENIZE_JS = """([pattern, texts]) => {
  const model = {tokenPattern: new RegExp(pattern, "gu")};
  return texts.map((t) => window.mhaLM.Model.prototype.tokenize.call(model, t));
}"""


@pytest.fixture(scope="module")
def script_page(browser):
    page = browser.new_page()
    page.add_script_tag(path=str(ROOT / "_static" / "mha-lm.js"))
    yield page
    page.close()


def _page_tokens(page, texts: list[str]) -> list[list[str]]:
    return page.evaluate(_TOKENIZE_JS, [Tokenizer.pattern, texts])


@pytest.mark.browser
def test_the_page_splits_the_table_of_typed_text_as_the_library(script_page):
    got = _page_tokens(script_page, [case["text"] for case in CASES])
    for case, tokens in zip(CASES, got):
        assert tokens == case["tokens"] == TOKENIZER.tokenize(case["text"]), case["why"]


@pytest.mark.browser
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_TEXT, min_size=1, max_size=8))
def test_the_page_splits_any_text_as_the_library(script_page, texts):
    assert _page_tokens(script_page, texts) == [TOKENIZER.tokenize(t) for t in texts]
