"""The stories' grammar, its links (right by construction, one test per relation), the tokenizer."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.stories import (
    _COLOURS,
    GENDER,
    _OBJECTS,
    _PRONOUNS,
    RELATIONS,
    Story,
    Tokenizer,
    sample_stories,
)

STORIES = sample_stories(400, 7)
TOKENIZER = Tokenizer()
SUBJECT, OBJECT, POSSESSIVE = 0, 1, 2
# Typed text and its tokens; tests/browser/test_tokenizer_agrees.py runs the page's tokenizer on them too.
TOKENIZER_CASES = json.loads((Path(__file__).parent / "tokenizer_cases.json").read_text())


def _sentence_start(tokens: list[str], i: int) -> int:
    """Index of the first token of the sentence holding token i."""
    start = i
    while start > 0 and tokens[start - 1] != ".":
        start -= 1
    return start


def _names_in(tokens: list[str], start: int, stop: int) -> list[int]:
    return [k for k in range(start, stop) if tokens[k] in GENDER]


def _links(relation: str):
    for story in STORIES:
        for i, j in story.links[relation]:
            yield story.tokens, i, j


def test_every_story_lists_every_relation_and_links_point_back():
    for story in STORIES:
        assert isinstance(story, Story) and set(story.links) == set(RELATIONS)
        for pairs in story.links.values():
            assert all(0 <= j < i < len(story.tokens) for i, j in pairs)
    counts = {r: sum(len(s.links[r]) for s in STORIES) for r in RELATIONS}
    assert all(count >= len(STORIES) for count in counts.values()), counts


def test_antecedent_links_a_pronoun_to_the_name_it_refers_to():
    for tokens, i, j in _links("antecedent"):
        name, pronoun = tokens[j], tokens[i]
        assert name in GENDER
        forms = _PRONOUNS[GENDER[name]]
        start = _sentence_start(tokens, i)
        names = _names_in(tokens, start, i)
        before = tokens[i - 1]
        if before == "because":  # she/he: the subject of this sentence
            assert pronoun == forms[SUBJECT] and j == names[0]
        elif before == "likes":  # her/him: the object of this sentence
            assert pronoun == forms[OBJECT] and j == names[1]
        else:  # her/his: the subject's
            assert before == "with" or tokens[i - 2] == "shows"
            assert pronoun == forms[POSSESSIVE] and j == names[0]


def test_recall_links_a_colour_to_the_sentence_that_fixed_it():
    for tokens, i, j in _links("recall"):
        colour, thing = tokens[i], tokens[i - 2]
        assert colour in _COLOURS and tokens[j] == colour and tokens[i - 1] == "is"
        assert tokens[j - 1] == "a" and tokens[j + 1] == thing and thing in _OBJECTS
        # The colour is stated once: no other colour before i.
        assert [k for k in range(i) if tokens[k] in _COLOURS] == [j]


def test_possession_links_an_object_to_where_its_owner_got_it():
    for tokens, i, j in _links("possession"):
        thing = tokens[i]
        assert thing in _OBJECTS and tokens[j] == thing
        start = _sentence_start(tokens, j)
        owner = tokens[start]
        assert tokens[start + 1 : start + 3] in (["has", "a"], ["brings", "a"]) and owner in GENDER
        assert j in (start + 3, start + 4)  # "Mia has a kite" or "Mia has a red kite"
        if tokens[i - 1] == "'s":
            assert tokens[i - 2] == owner
        else:
            assert tokens[i - 1] == _PRONOUNS[GENDER[owner]][POSSESSIVE]
        # Each thing belongs to one character of the story.
        assert sum(tokens[k] == thing and tokens[k - 1] in ("a", *_COLOURS) for k in range(1, len(tokens))) == 1


def test_stories_are_seeded_and_prefix_stable():
    again = sample_stories(400, 7)
    assert [s.text for s in again] == [s.text for s in STORIES]
    assert [s.links for s in again] == [s.links for s in STORIES]
    assert sample_stories(3, 7)[2] == STORIES[2]
    assert sample_stories(3, 8)[0].text != STORIES[0].text


def test_story_tokens_are_the_tokenizers_and_decode_gives_the_text():
    for story in STORIES:
        assert TOKENIZER.tokenize(story.text) == story.tokens
        assert TOKENIZER.decode(TOKENIZER.encode(story.text)) == story.text
        assert TOKENIZER.unk_id not in TOKENIZER.encode(story.text)
        assert story.text[0].isupper() and story.text.endswith(".")


def test_vocabulary_has_a_few_hundred_words_all_used():
    assert 200 <= TOKENIZER.vocab_size <= 400
    used = {t for s in sample_stories(3000, 0) for t in s.tokens}
    assert set(TOKENIZER.vocab[2:]) == used


@pytest.mark.parametrize("args, match", [((0, 0), "n must"), ((2, -1), "seed must"),
                                          ((2.0, 0), "n must"), ((2, 1.5), "seed must")])
def test_sample_stories_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        sample_stories(*args)


# --- the tokenizer -------------------------------------------------------------------------------

def test_tokenizer_splits_typed_text_sensibly():
    assert TOKENIZER.tokenize("Mia's KITE is red!") == ["mia", "'s", "kite", "is", "red", "!"]
    assert TOKENIZER.tokenize("Leo\u2019s  ball,is blue.") == ["leo", "'s", "ball", ",", "is", "blue", "."]
    assert TOKENIZER.tokenize("") == [] and TOKENIZER.encode("   ") == []


@pytest.mark.parametrize("case", TOKENIZER_CASES, ids=lambda c: c["why"])
def test_typed_text_of_any_script_splits_as_the_table_says(case):
    assert TOKENIZER.tokenize(case["text"]) == case["tokens"]


def test_words_with_accents_or_other_scripts_stay_whole_and_unknown():
    text = "Zo\u00eb's caf\u00e9 \u2014 \u6771\u4eac"  # "Zoë's café — 東京"
    assert TOKENIZER.tokenize(text) == ["zo\u00eb", "'s", "caf\u00e9", "\u2014", "\u6771\u4eac"]
    assert TOKENIZER.unknown(text) == ["zo\u00eb", "caf\u00e9", "\u2014", "\u6771\u4eac"]
    assert TOKENIZER.tokenize("Zoe\u0308") == TOKENIZER.tokenize("Zo\u00eb")  # a combining accent joins


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs", "Cn"))))
def test_tokens_cover_every_visible_character_of_the_text(text):
    tokens = TOKENIZER.tokenize(text)
    lowered = unicodedata.normalize("NFC", text).lower().replace("\u2019", "'").replace("\u2018", "'")
    assert "".join(tokens) == "".join(c for c in lowered if not c.isspace() or c in "\x1c\x1d\x1e\x1f")
    assert all(t and not any(c.isspace() and c not in "\x1c\x1d\x1e\x1f" for c in t) for t in tokens)
    assert len(TOKENIZER.encode(text)) == len(tokens)


def test_unknown_words_become_unk_never_an_exception():
    ids = TOKENIZER.encode("Mia has a zebra, 42 of them & don't care")
    tokens = TOKENIZER.tokenize("Mia has a zebra, 42 of them & don't care")
    assert len(ids) == len(tokens)
    assert ids[3] == TOKENIZER.unk_id and tokens[3] == "zebra"
    assert TOKENIZER.unknown("Mia has a zebra and a zebra") == ["zebra"]
    assert TOKENIZER.decode(ids[:4]) == "Mia has a <unk>"


def test_decode_round_trip_and_capitals():
    ids = TOKENIZER.encode("one day, mia and leo go to the park. leo's kite is red.")
    assert TOKENIZER.decode(ids) == "One day, Mia and Leo go to the park. Leo's kite is red."
    assert TOKENIZER.tokenize(TOKENIZER.decode(ids)) == [TOKENIZER.vocab[i] for i in ids]
    assert TOKENIZER.decode([TOKENIZER.pad_id, *ids[:2]]) == "One day"  # padding is dropped


@pytest.mark.parametrize("call, match", [
    (lambda t: t.tokenize(3), "text must be a str"),
    (lambda t: t.encode(None), "text must be a str"),
    (lambda t: t.decode([1, 10**6]), "ids must be"),
    (lambda t: t.decode(["a"]), "ids must be"),
    (lambda t: t.decode([1.0]), "ids must be"),
    (lambda t: t.decode(5), "ids must be"),
    (lambda t: Tokenizer(["a", "b"]), "vocab must start"),
    (lambda t: Tokenizer("<pad>"), "vocab must be"),
])
def test_tokenizer_rejects_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call(TOKENIZER)
