"""Stories the library writes, and the tokenizer of the language model that reads them.

Real text has no answer key: nobody knows which earlier word a model *should* look at to
predict the next one. These stories come from a small grammar, so the library knows. Each
:class:`Story` lists its **links**, ``relation -> [(i, j), ...]`` with ``j < i``: token ``i``
can be predicted only by looking back at token ``j``. The grammar is built so that at a linked
position the right token is *determined* by the context:

* ``"antecedent"``: a pronoun and the name it refers to. A subject pronoun always follows
  "because" and refers to the subject of its sentence (``Mia helps Leo because she ...``); an
  object pronoun always follows "likes" and refers to the sentence's object (``... because
  she likes him``); a possessive always follows "with" or "shows NAME" and refers to the
  subject (``Leo plays with his kite``). Names have a fixed gender (``she/her/her`` or
  ``he/him/his``), so the token is fixed by the name at ``j``.
* ``"recall"``: a colour fixed by an earlier mention. ``Mia has a red kite . ... Mia 's kite
  is red .``: the colour at ``i`` is the one at ``j``, and nothing else in the story says it
  (colours are drawn uniformly, and each character owns one object, different from the others').
* ``"possession"``: the object after a possessive (``Mia 's kite``, ``her kite``, ``his
  kite``) is the one its owner has: ``j`` is the object in the sentence that gave it to them.

Names, objects, colours, places, actions and sentences are drawn with a seeded
``random.Random``: ``sample_stories(n, seed)`` is a pure function of its arguments.
Nothing here is copied from anywhere.

The :class:`Tokenizer` lower-cases, splits punctuation and the possessive ``'s`` into tokens of
their own and maps a word it does not know to ``<unk>`` (never an exception); ``decode`` puts
capitals and spacing back, so ``decode(encode(story.text)) == story.text``. Any text can be
typed: a word in any script stays one token ("zoë", "café", "東京", unknown to the model), and
the page's explorer (``_static/mha-lm.js``) splits with the same pattern, :attr:`Tokenizer.pattern`.
"""

from __future__ import annotations

import numbers
import random
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Sequence

import regex
import torch
from torch import Tensor

from mha_lib._checks import check_not_meta, check_positive_int, check_size

__all__ = [
    "GENDER",
    "RELATIONS",
    "Story",
    "Tokenizer",
    "check_stories",
    "link_mask",
    "sample_stories",
]

RELATIONS = ("antecedent", "recall", "possession")
"""The relations every :class:`Story` lists in ``links`` (each possibly empty)."""

_FEMALE = ("mia", "emma", "lily", "zoe", "anna", "ella", "ruby", "nora", "ava", "ivy", "lucy",
          "maya", "rosa", "lena", "sara", "grace", "alice", "hana", "clara", "ada", "june",
          "iris", "nina", "eva", "mei", "priya", "leila", "dana", "tess", "wren", "kim", "fay")
_MALE = ("leo", "max", "sam", "ben", "tom", "jack", "omar", "noah", "finn", "ravi", "hugo",
        "luca", "theo", "eli", "kai", "adam", "oscar", "felix", "jonah", "milo", "ivan", "arlo",
        "ezra", "jude", "raj", "tariq", "paul", "dev", "ken", "carl", "nico", "ugo")
_OBJECTS = ("kite", "ball", "hat", "book", "cup", "bike", "box", "bag", "coat", "drum", "boat",
           "car", "lamp", "sock", "scarf", "shell", "toy", "train", "doll", "flag", "bell",
           "pen", "chair", "mug", "key", "map", "rope", "shoe", "brush", "basket", "bowl",
           "tent", "sled", "wagon", "ring", "kettle")
_COLOURS = ("red", "blue", "green", "yellow", "pink", "purple", "silver", "black", "white",
           "brown", "gray", "gold")
_PLACES = ("park", "garden", "river", "beach", "school", "market", "forest", "hill", "farm",
          "lake", "library", "kitchen", "zoo", "yard", "town", "pond", "shop", "field", "bridge",
          "castle")
_ACTIONS = ("runs", "walks", "jumps", "sings", "reads", "draws", "dances", "swims", "laughs",
           "sleeps", "waits", "rests", "sits", "hides", "smiles", "claps", "whistles", "hums",
           "skips", "writes")
_FEELINGS = ("happy", "tired", "hungry", "sad", "bored", "sleepy", "cold", "busy", "excited",
            "proud", "brave", "kind", "lonely", "curious", "scared", "calm", "glad", "shy",
            "silly", "cross")
_SOCIAL = ("helps", "thanks", "calls", "visits", "hugs", "meets", "follows", "finds", "watches",
          "teaches", "greets", "tickles", "chases", "remembers")
_FOODS = ("pear", "cake", "bread", "soup", "plum", "cookie", "banana", "peach", "pie", "bun",
         "carrot", "melon")
_ANIMALS = ("dog", "cat", "bird", "duck", "frog", "fish", "horse", "cow", "goat", "sheep", "bee",
           "fox", "hen", "rabbit", "mouse", "snail", "pony", "crab")
_WEATHER = {"sun": "warm", "wind": "soft", "sky": "clear", "grass": "wet", "moon": "bright",
           "air": "fresh"}
"""Things of the weather and the one word that always describes them."""
_PRONOUNS = {  # gender -> (subject, object, possessive)
    "f": ("she", "her", "her"),
    "m": ("he", "him", "his"),
}
_FUNCTION_WORDS = ("a", "the", "is", "has", "brings", "and", "because", "likes", "plays",
                  "with", "shows", "go", "goes", "walk", "to", "at", "eats", "one", "day",
                  "in", "morning", "then", "later", "after", "that", "end", "home", "night",
                  "everyone", "sees", "'s", ".", ",")
_SPECIALS = ("<pad>", "<unk>")
GENDER = {**{name: "f" for name in _FEMALE}, **{name: "m" for name in _MALE}}
"""The gender of every name (``"f"`` or ``"m"``), which fixes its pronouns."""

_PUNCTUATION = {".", ",", "'s", "!", "?", ":"}
_TOKEN_RE = regex.compile(r"\p{L}[\p{L}\p{M}]*(?:'\p{L}[\p{L}\p{M}]*)*|\p{Nd}+|[^\p{White_Space}]")
"""A word (letters of any script with their marks, inner apostrophes: ``mia's``), a number
(decimal digits of any script) or any other visible character. The syntax is the one both
Python's ``regex`` and JavaScript's ``RegExp(pattern, "u")`` read, with the same meaning."""
_MAX_STORIES = 10**6
"""The most stories one call writes (a million stories are about a gigabyte of Python objects)."""


@dataclass(frozen=True)
class Story:
    """One story: its text, its tokens and the true dependencies between them.

    Attributes:
        text: the story as a reader sees it.
        tokens: ``Tokenizer().tokenize(text)``.
        links: for each relation of :data:`RELATIONS`, the pairs ``(i, j)``, ``j < i``: token
            ``i`` is determined by token ``j`` (indices into ``tokens``).
    """

    text: str
    tokens: list[str]
    links: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Raise a ValueError unless ``tokens`` are the text's and every link points back
        inside them (a story whose ``links`` lacks a relation has no link of it)."""
        if not isinstance(self.text, str):
            raise ValueError(f"text must be a str, got {type(self.text).__name__}")
        if not isinstance(self.tokens, list) or self.tokens != _tokenize(self.text):
            raise ValueError(f"tokens must be the list Tokenizer().tokenize(text), got {self.tokens!r:.80}")
        if not isinstance(self.links, Mapping) or not set(self.links) <= set(RELATIONS):
            raise ValueError(f"links must be a dict whose keys are among {RELATIONS}, got {self.links!r:.80}")
        L = len(self.tokens)
        for relation, pairs in self.links.items():
            ok = isinstance(pairs, Sequence) and not isinstance(pairs, str)
            ok = ok and all(isinstance(p, tuple) and len(p) == 2 and all(_is_int(k) for k in p)
                            and 0 <= p[1] < p[0] < L for p in pairs)
            if not ok:
                raise ValueError(f"links[{relation!r}] must be a list of pairs (i, j) of token "
                                 f"indices with 0 <= j < i < {L} (the story's tokens), got {pairs!r:.80}")


class Tokenizer:
    """Word-level tokenizer of the stories' vocabulary.

    ``tokenize`` normalises the text (Unicode NFC: an accent typed as a combining mark joins its
    letter), lower-cases it and splits it into words (runs of letters of any script, so "Zoë"
    and "東京" stay whole), numbers, the possessive ``'s`` and single other characters (a
    punctuation mark, a symbol, an emoji); curly quotes count as straight ones. ``encode``
    maps each token to its id, a word outside the vocabulary to ``unk_id``. ``decode`` joins
    tokens with spaces (none before punctuation or ``'s``) and capitalises names and the first
    word of every sentence.

    Attributes:
        vocab: the tokens, index = id; ``vocab[0]`` is ``<pad>``, ``vocab[1]`` is ``<unk>``.
    """

    pad_id = 0
    """Id of ``<pad>``: fills batches of different lengths, never predicted."""
    unk_id = 1
    """Id of ``<unk>``: every word outside the vocabulary."""
    pattern = _TOKEN_RE.pattern
    """The regular expression that finds the tokens of normalised, lower-cased text (the page's
    tokenizer, ``_static/mha-lm.js``, compiles this string as ``new RegExp(pattern, "gu")``)."""

    def __init__(self, vocab: Sequence[str] | None = None) -> None:
        if vocab is None:
            vocab = _default_vocab()
        got = vocab
        vocab = None if isinstance(vocab, (str, bytes, Mapping, Tensor)) \
            or not isinstance(vocab, Iterable) else list(vocab)
        if vocab is None or not all(isinstance(t, str) and t for t in vocab):
            raise ValueError(f"vocab must be a sequence of non-empty strings, got {got!r:.80}")
        if vocab[: len(_SPECIALS)] != list(_SPECIALS) or len(set(vocab)) != len(vocab):
            raise ValueError(
                f"vocab must start with {list(_SPECIALS)} and hold each token once, "
                f"got {vocab[:4]!r}... with {len(vocab) - len(set(vocab))} repeats"
            )
        self.vocab = vocab
        self._ids = {token: i for i, token in enumerate(vocab)}

    @property
    def vocab_size(self) -> int:
        """V, the number of tokens (with ``<pad>`` and ``<unk>``)."""
        return len(self.vocab)


    def tokenize(self, text: str) -> list[str]:
        """Split ``text`` into lower-case tokens (words the vocabulary lacks are kept as typed)."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        return _tokenize(text)

    def encode(self, text: str) -> list[int]:
        """The ids of ``tokenize(text)``; unknown words become ``unk_id``."""
        return [self._ids.get(token, self.unk_id) for token in self.tokenize(text)]

    def unknown(self, text: str) -> list[str]:
        """The tokens of ``text`` that the vocabulary does not know (each once, in order)."""
        return list(dict.fromkeys(t for t in self.tokenize(text) if t not in self._ids))

    def decode(self, ids: Sequence[int]) -> str:
        """Text for token ids: spaces, capitals and punctuation put back (``<pad>`` dropped).

        Args:
            ids: a sequence of integers, or a 1-d integer tensor.

        Raises:
            ValueError: ``ids`` not a sequence of integers in ``[0, vocab_size)``.
        """
        tokens = [self.vocab[i] for i in self._check_ids(ids) if i != self.pad_id]
        return _detokenize(tokens)

    def _check_ids(self, ids: object) -> list[int]:
        got = ids
        if isinstance(ids, Tensor):  # a 1-d integer tensor; a float tensor is not token ids
            check_not_meta(ids, "ids")
            ids = ids.tolist() if ids.dim() == 1 and not (ids.is_floating_point() or ids.is_complex()) \
                and ids.dtype != torch.bool else None
        elif isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
            ids = None
        if ids is not None:
            ids = list(ids)
            ids = [int(i) for i in ids] if all(_is_int(i) for i in ids) else None
        if ids is None or any(not 0 <= i < self.vocab_size for i in ids):
            raise ValueError(
                f"ids must be a sequence of integers in [0, {self.vocab_size}), got {got!r:.80}"
            )
        return ids


def _is_int(value: object) -> bool:
    """An integer (a Python or numpy one), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _tokenize(text: str) -> list[str]:
    """:meth:`Tokenizer.tokenize` of a str."""
    text = unicodedata.normalize("NFC", text).lower().replace("\u2019", "'").replace("\u2018", "'")
    tokens = []
    for token in _TOKEN_RE.findall(text):
        if token.endswith("'s") and len(token) > 2:
            tokens += [token[:-2], "'s"]  # "mia's" -> "mia", "'s"
        else:
            tokens.append(token)
    return tokens


def _detokenize(tokens: Sequence[str]) -> str:
    """Join tokens into text: no space before punctuation, capitals for names and sentence starts."""
    words, start = [], True
    for token in tokens:
        word = token.capitalize() if (start or token in GENDER) and token.isalpha() else token
        if words and token in _PUNCTUATION:
            words[-1] += word
        else:
            words.append(word)
        if token in {".", "!", "?"}:
            start = True
        elif token not in _PUNCTUATION:
            start = False
    return " ".join(words)


def _default_vocab() -> list[str]:
    words = (_FEMALE + _MALE + _OBJECTS + _COLOURS + _PLACES + _ACTIONS + _FEELINGS + _SOCIAL + _FOODS
             + _ANIMALS + tuple(_WEATHER) + tuple(_WEATHER.values()) + tuple(_PRONOUNS["f"]) + tuple(_PRONOUNS["m"]) + _FUNCTION_WORDS)
    return list(_SPECIALS) + list(dict.fromkeys(words))


# --- the grammar ------------------------------------------------------------------------------

class _Writer:
    """Appends tokens and records links; ``mark()`` is the index of the next token."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.links: dict[str, list[tuple[int, int]]] = {r: [] for r in RELATIONS}

    def mark(self) -> int:
        return len(self.tokens)

    def add(self, *tokens: str) -> None:
        self.tokens.extend(tokens)

    def link(self, relation: str, token: str, source: int) -> None:
        """Append ``token``, determined by the token at ``source``."""
        self.links[relation].append((self.mark(), source))
        self.tokens.append(token)


@dataclass
class _Character:
    name: str
    where: int = -1  # index of the name's latest mention as a subject or object
    thing: str = ""  # the one object the character has
    thing_at: int = -1  # index of that object in the sentence that gave it

    def pronoun(self, case: int) -> str:
        """Case 0: subject (she/he), 1: object (her/him), 2: possessive (her/his)."""
        return _PRONOUNS[GENDER[self.name]][case]


def _subject(w: _Writer, c: _Character) -> None:
    """Write the name of the sentence's subject; its pronouns will point back here."""
    c.where = w.mark()
    w.add(c.name)


def _because(w: _Writer, rng: random.Random, a: _Character, b: _Character | None) -> None:
    """``... because she is happy`` or, with an object ``b``, ``... because she likes him``."""
    w.add("because")
    w.link("antecedent", a.pronoun(0), a.where)
    if b is None:
        w.add("is", rng.choice(_FEELINGS))
    else:
        w.add("likes")
        w.link("antecedent", b.pronoun(1), b.where)


def _possessed(w: _Writer, a: _Character) -> None:
    """``his kite``: the possessive (an antecedent) and the object it fixes (a possession)."""
    w.link("antecedent", a.pronoun(2), a.where)
    w.link("possession", a.thing, a.thing_at)


def _sentence(w: _Writer, rng: random.Random, cast: list[_Character]) -> None:
    """One sentence from the middle of a story (a random template)."""
    if rng.random() < 0.35:
        w.add(*rng.choice((("then", ","), ("later", ","), ("after", "that", ","))))
    a = rng.choice(cast)
    others = [c for c in cast if c is not a]
    kind = rng.choice(("feeling", "feeling", "likes", "likes", "plays", "shows", "weather", "filler"))
    if kind == "likes" and others:
        b = rng.choice(others)
        _subject(w, a)
        w.add(rng.choice(_SOCIAL), b.name)
        b.where = w.mark() - 1
        if rng.random() < 0.4:
            w.add("at", "the", rng.choice(_PLACES))
        _because(w, rng, a, b)
    elif kind == "plays":
        _subject(w, a)
        w.add("plays", "with")
        _possessed(w, a)
    elif kind == "shows" and others:
        b = rng.choice(others)
        _subject(w, a)
        w.add("shows", b.name)
        _possessed(w, a)
    elif kind == "weather":
        _weather(w, rng)
    elif kind == "filler":
        if rng.random() < 0.5:
            w.add(a.name, "eats", rng.choice(("a", "the")), rng.choice(_FOODS))
        else:
            w.add(a.name, rng.choice(_ACTIONS), "at", "the", rng.choice(_PLACES))
    else:
        _subject(w, a)
        w.add(rng.choice(_ACTIONS))
        _because(w, rng, a, None)
    w.add(".")


def _weather(w: _Writer, rng: random.Random) -> None:
    """``the sun is warm``: the last word is fixed by the word two before it."""
    thing = rng.choice(tuple(_WEATHER))
    w.add("the", thing, "is", _WEATHER[thing])


def _story(rng: random.Random) -> Story:
    w = _Writer()
    size = rng.choice((2, 2, 3))
    cast = [_Character(name) for name in rng.sample(_FEMALE + _MALE, size)]
    # Opening: who goes where.
    w.add(*rng.choice((("one", "day", ","), ("in", "the", "morning", ","), ())))
    for k, c in enumerate(cast):
        if k:
            w.add("and" if k == size - 1 else ",")
        w.add(c.name)
    w.add(rng.choice(("go", "walk")), "to", "the", rng.choice(_PLACES), ".")
    # Who has what; one thing has a colour: the fact the story needs at its end.
    coloured = rng.choice(cast)
    for c, thing in zip(rng.sample(cast, size), rng.sample(_OBJECTS, size)):
        _subject(w, c)
        w.add(rng.choice(("has", "brings")), "a")
        if c is coloured:
            colour, colour_at = rng.choice(_COLOURS), w.mark()
            w.add(colour)
        c.thing, c.thing_at = thing, w.mark()
        w.add(thing, ".")
    for _ in range(rng.randint(2, 4)):
        if rng.random() < 0.2:
            w.add(rng.choice(cast).name, "sees", "a", rng.choice(_ANIMALS), ".")
        else:
            _sentence(w, rng, cast)
    # Recall: the colour stated at the start, needed now.
    if rng.random() < 0.4:
        w.add(*rng.choice((("in", "the", "end", ","), ("later", ","))))
    if rng.random() < 0.5:
        w.add(coloured.name, "'s")
        w.link("possession", coloured.thing, coloured.thing_at)
    else:
        w.add("the", coloured.thing)
    w.add("is")
    w.link("recall", colour, colour_at)
    w.add(".")
    if rng.random() < 0.5:
        w.add("at", "night", ",", "everyone", "goes", "home", ".")
    elif rng.random() < 0.5:
        _weather(w, rng)
        w.add(".")
    return Story(_detokenize(w.tokens), w.tokens, w.links)


def check_stories(stories: object, name: str = "stories", *, predict: bool = False) -> list[Story]:
    """``stories`` as a list if it is a non-empty sequence of :class:`Story` each with at least
    one token (with ``predict``, one of them with two: something to predict), else a ValueError
    naming ``name``."""
    if isinstance(stories, (Story, str, bytes, Mapping, Tensor)) or not isinstance(stories, Iterable):
        raise ValueError(f"{name} must be a non-empty list of Story, got {type(stories).__name__}")
    stories = list(stories)
    bad = next((k for k, s in enumerate(stories) if not isinstance(s, Story) or not s.tokens), None)
    if not stories or bad is not None:
        got = "an empty list" if not stories else f"{name}[{bad}] = {stories[bad]!r:.60}"
        raise ValueError(f"{name} must be a non-empty list of Story with at least one token each, got {got}")
    if predict and all(len(s.tokens) < 2 for s in stories):
        raise ValueError(f"{name} must hold a story of at least two tokens: nothing is predicted "
                         "from a story of one token")
    return stories


def link_mask(stories: Sequence[Story], relation: str, shape: tuple[int, int]) -> Tensor:
    """(B, L) bool: True at the tokens ``i`` of the stories' links of ``relation``.

    ``shape`` is that of the stories' ids: B = len(stories), L at least the longest story.
    """
    stories = check_stories(stories)
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    longest = max(len(s.tokens) for s in stories)
    if not (isinstance(shape, tuple) and len(shape) == 2 and all(isinstance(n, int) for n in shape)
            and shape[0] == len(stories) and shape[1] >= longest):
        raise ValueError(f"shape must be (B, L) with B = {len(stories)} stories and L >= {longest} "
                         f"(the longest story's tokens), got {shape!r:.60}")
    mask = torch.zeros(shape, dtype=torch.bool)
    for b, story in enumerate(stories):
        for i, _ in story.links.get(relation, ()):
            mask[b, i] = True
    return mask


def sample_stories(n: int, seed: int) -> list[Story]:
    """``n`` stories from the grammar, a pure function of ``(n, seed)``.

    Each story has two or three characters (names of either gender drawn at random), each with
    one coloured object, a few sentences about them, and one or more sentences recalling an
    object's colour. Story ``k`` of ``sample_stories(n, seed)`` is the same for every ``n > k``.

    Args:
        n: number of stories, 1 .. 1,000,000.
        seed: integer >= 0.

    Returns:
        a list of :class:`Story`.
    """
    if check_positive_int(n, "n") > _MAX_STORIES:
        raise ValueError(f"n must be at most {_MAX_STORIES:,} stories, got {n!r}")
    rng = random.Random(check_size(seed, "seed"))
    return [_story(rng) for _ in range(n)]
