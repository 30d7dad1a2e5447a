"""Bad input to the language model's chapter (mha_lib.stories, mha_lib.lm, mha_lib.lm_heads).

Hypothesis puts junk (wrong types, shapes, zero/negative/huge sizes, NaN and infinities, meta
tensors, bools where integers go, empty sequences, stories of one token) in one argument of a
public entry point at a time, the others valid: the call either works, with finite numbers
where the docstring promises them, or raises a ValueError naming the argument. Examples the
issue (26) reported are pinned below.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mha_lib import lm, lm_eval, lm_export, lm_heads
from mha_lib.stories import Story, Tokenizer, check_stories, link_mask, sample_stories

STORIES = sample_stories(3, 0)
ONE = Story("Mia", ["mia"], {})
TOKENIZER = Tokenizer()

_tensors = st.sampled_from([
    torch.tensor([2.7]), torch.tensor([[2, 3]]), torch.tensor([[2.0, 3.0]]), torch.zeros(2, 0, dtype=torch.long),
    torch.tensor([[True, False]]), torch.tensor([[10**6]]), torch.tensor([[-1, 2]]),
    torch.empty(1, 3, dtype=torch.long, device="meta"), torch.empty(2, 4, device="meta"),
    torch.full((2, 4), float("nan")), torch.full((2, 4), float("inf")), torch.ones(2, 4) * 1e30,
    torch.zeros(2, 4, dtype=torch.complex64), torch.zeros(3, 5, 4, 2, 2), torch.zeros(()),
])
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 1, 2, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.binary(max_size=3),
    st.lists(st.integers(-3, 300), max_size=4), st.lists(st.lists(st.integers(-3, 300), max_size=3), max_size=3),
    st.just([]), st.just(()), st.just({}), st.just({"recall": "x"}), st.just(ONE), st.just([ONE]),
    st.just([ONE, 3]), st.just(STORIES[0]), st.just("recall"), _tensors,
)
FUZZ = settings(max_examples=int(__import__('os').environ.get('FUZZ_EXAMPLES', 40)), deadline=None, suppress_health_check=list(HealthCheck))


def _accepts_or_refuses(call):
    """Run ``call``: a ValueError is a refusal; anything else but a result fails the test."""
    try:
        return call()
    except ValueError as err:
        assert str(err), "a ValueError without a message"
        return None


def _finite(value) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(value.isfinite().all())
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, tuple):
        return all(_finite(v) for v in value)
    return not isinstance(value, float) or math.isfinite(value)


@pytest.fixture(scope="module")
def model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return lm.StoryLM(lm.Config(d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, d_ff=32)).eval()


# --- junk in one argument -------------------------------------------------------------------------

@FUZZ
@given(junk=JUNK, which=st.sampled_from(["n", "seed"]))
def test_sample_stories(junk, which):
    args = {"n": 2, "seed": 0, which: junk}
    if which == "n" and isinstance(junk, int) and 100 < junk <= 10**6:
        return  # valid, but slow
    _accepts_or_refuses(lambda: sample_stories(**args))


@FUZZ
@given(junk=JUNK, method=st.sampled_from(["tokenize", "encode", "unknown", "decode", "init"]))
def test_tokenizer(junk, method):
    if method == "init":
        _accepts_or_refuses(lambda: Tokenizer(junk))
    else:
        _accepts_or_refuses(lambda: getattr(TOKENIZER, method)(junk))


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["text", "tokens", "links"]))
def test_story(junk, which):
    args = {"text": "Mia runs.", "tokens": ["mia", "runs", "."], "links": {}, which: junk}
    _accepts_or_refuses(lambda: Story(**args))


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["stories", "relation", "shape"]))
def test_link_mask_and_check_stories(junk, which):
    args = {"stories": STORIES, "relation": "recall", "shape": (3, 80), which: junk}
    _accepts_or_refuses(lambda: link_mask(**args))
    _accepts_or_refuses(lambda: check_stories(junk, predict=True))


@FUZZ
@given(junk=JUNK, field=st.sampled_from([f.name for f in dataclasses.fields(lm.Config)]))
def test_config(junk, field):
    _accepts_or_refuses(lambda: lm.Config(**{field: junk}))


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["ids", "valid_lens", "need_weights", "head_mask", "cache", "positions"]))
def test_forward(model, junk, which):
    args = {"ids": torch.tensor([[2, 3, 4], [5, 6, 0]]), "valid_lens": torch.tensor([3, 2]), which: junk}
    if which in ("cache", "positions"):
        args.pop("valid_lens")
    out = _accepts_or_refuses(lambda: model(**args))
    assert out is None or _finite(out)


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["prompts", "max_new_tokens", "temperature", "top_k", "use_cache",
                                         "seed", "head_mask"]))
def test_generate(model, junk, which):
    args = {"prompts": [[2, 3], [4]], "max_new_tokens": 3, "temperature": 0.7, "seed": 0, which: junk}
    if which == "max_new_tokens" and isinstance(junk, int) and junk > 50:
        return  # valid, but slow
    _accepts_or_refuses(lambda: model.generate(**args))


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["model", "ids", "valid_lens", "head_mask"]))
def test_next_token_losses(model, junk, which):
    args = {"model": model, "ids": torch.tensor([[2, 3, 4], [5, 6, 0]]), "valid_lens": torch.tensor([3, 2]),
            which: junk}
    _accepts_or_refuses(lambda: lm_eval.next_token_losses(**args))


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["model", "stories", "head_mask"]))
def test_evaluate_and_encode(model, junk, which):
    args = {"model": model, "stories": STORIES, which: junk}
    result = _accepts_or_refuses(lambda: lm_eval.evaluate(**args))
    assert result is None or math.isfinite(result["loss"])
    _accepts_or_refuses(lambda: lm_eval.encode_stories(TOKENIZER, junk))
    _accepts_or_refuses(lambda: lm_eval.encode_stories(junk, STORIES))
    _accepts_or_refuses(lambda: lm_export.export(junk, TOKENIZER))
    try:  # a path where no file is, is the documented FileNotFoundError
        _accepts_or_refuses(lambda: lm.load_pretrained(junk))
    except FileNotFoundError:
        pass


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["weights", "stories", "relation"]))
def test_link_weights(junk, which):
    args = {"weights": torch.rand(3, 2, 4, 80, 80), "stories": STORIES, "relation": "recall", which: junk}
    out = _accepts_or_refuses(lambda: lm_heads.link_weights(**args))
    assert out is None or out.shape == (2, 4, 2)


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["model", "stories", "heads"]))
def test_find_heads_and_ablate(model, junk, which):
    args = {"model": model, "stories": STORIES, which: junk}
    if which != "heads":
        _accepts_or_refuses(lambda: lm_heads.find_heads(args["model"], args["stories"]))
    result = _accepts_or_refuses(lambda: lm_heads.ablate(**args))
    assert result is None or _finite(result)


@FUZZ
@given(junk=JUNK, which=st.sampled_from(["stories", "vocab_size", "smoothing", "table"]))
def test_bigram(junk, which):
    if which == "table":
        loss = _accepts_or_refuses(lambda: lm_heads.bigram_loss(junk, STORIES))
        assert loss is None or not isinstance(junk, torch.Tensor) or not junk.isfinite().all() or math.isfinite(loss)
        return
    args = {"stories": STORIES, "vocab_size": None, "smoothing": 0.1, which: junk}
    table = _accepts_or_refuses(lambda: lm_heads.bigram_table(**args))
    if table is not None:
        assert table.isfinite().all()
        assert math.isfinite(lm_heads.bigram_loss(table, STORIES))


# --- the issue's examples ---------------------------------------------------------------------------

@pytest.mark.parametrize("call, match", [
    (lambda m: lm_heads.bigram_table(STORIES, vocab_size=10), "vocab_size must be"),
    (lambda m: lm_heads.bigram_loss(lm_heads.bigram_table(STORIES), [ONE]), "at least two tokens"),
    (lambda m: lm_heads.ablate(m, STORIES, heads="x"), "heads must map"),
    (lambda m: link_mask(STORIES, "recall", (2, 5)), "shape must be"),
    (lambda m: Tokenizer(123), "vocab must be"),
    (lambda m: TOKENIZER.decode(torch.tensor([2.7])), "ids must be"),
    (lambda m: m.generate([[2]], 2, temperature=1.0, seed=2**64), "seed must be"),
    (lambda m: m.generate([[2]], 10**6), "max_new_tokens must be"),
    (lambda m: lm_eval.evaluate(None, STORIES), "model must be"),
    (lambda m: lm_eval.evaluate(m, [ONE]), "at least two tokens"),
    (lambda m: m(torch.tensor([[2, 3]]), head_mask=torch.full((2, 4), 1e30)), "head_mask must"),
    (lambda m: m(torch.tensor([[2, 3]]), head_mask=torch.full((2, 4), float("nan"))), "head_mask must"),
    (lambda m: sample_stories(10**7, 0), "n must be at most"),
    (lambda m: Story("Mia runs.", ["mia", "runs", "."], {"recall": [(5, 0)]}), "links"),
    (lambda m: Story("Mia runs.", ["x"]), "tokens must be"),
])
def test_the_issues_examples_are_value_errors(model, call, match):
    with pytest.raises(ValueError, match=match):
        call(model)


def test_a_tiny_temperature_is_greedy(model):
    prompts = [[2, 3], [4]]
    assert model.generate(prompts, 4, temperature=1e-300, seed=0) == model.generate(prompts, 4)


def test_load_pretrained_refuses_a_vocabulary_that_does_not_fit(tmp_path):
    ckpt = torch.load(lm.PRETRAINED_PATH, weights_only=True)
    ckpt["extra"]["vocab"] = ckpt["extra"]["vocab"][:-1]
    path = tmp_path / "short_vocab.pt"
    torch.save(ckpt, path)
    with pytest.raises(ValueError, match="path .* vocabulary"):
        lm.load_pretrained(path)


def test_bigram_table_with_a_huge_smoothing_is_finite_and_uniform():
    table = lm_heads.bigram_table(STORIES, smoothing=1e308)
    V = TOKENIZER.vocab_size
    torch.testing.assert_close(table, torch.full((V, V), -math.log(V)))
