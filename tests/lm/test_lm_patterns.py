"""The story model with a per-layer pattern (issue 47, point 4): each layer's mask and RoPE,
its cache (only what the layer reads, in bytes), training in the layout, and every consumer of
a StoryLM either carrying the pattern or refusing it by name."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mha_lib.lm import StoryLM, load_pretrained, save, train
from mha_lib.lm_eval import encode_stories, held_out_stories
from mha_lib.patterns import LayerKind

# a window of 4 (RoPE 10000), a chunk of 5 without positions (NoPE), a global layer of base 1e6
PATTERN = (LayerKind("window", 4), LayerKind("chunk", 5, rope_base=None), LayerKind(rope_base=1e6))
PROMPTS = ["Mia has a red kite.", "Leo", "One day, Ada and Tom go to the park. Ada has a blue ball. Tom"]


def _patterned(small_config, pattern=PATTERN, seed=0, dtype=torch.float32) -> StoryLM:
    config = dataclasses.replace(small_config, num_layers=len(pattern), pattern=pattern)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return StoryLM(config).eval().to(dtype)


@pytest.fixture(scope="module")
def patterned(small_config):
    return _patterned(small_config)


def _keep(kind: LayerKind, L: int) -> torch.Tensor:
    """(L, L) True where query i may see key j under ``kind``, written out by hand."""
    i, j = torch.arange(L)[:, None], torch.arange(L)[None]
    keep = j <= i
    if kind.mask == "window":
        keep &= i - j < kind.size
    elif kind.mask == "chunk":
        keep &= i // kind.size == j // kind.size
    return keep


def test_no_pattern_gives_todays_logits_and_all_global_equals_it(pretrained, tokenizer, stories):
    model, _ = pretrained
    ids, lens = encode_stories(tokenizer, stories[:4])
    assert model.config.pattern is None
    assert model.config.kinds == (LayerKind(),) * model.config.num_layers
    with torch.no_grad():
        logits = model(ids, lens)
        # today's computation, written without the pattern: causal + padding as (B, L) lengths
        x = model.token_embedding(ids)
        L = ids.shape[1]
        lengths = torch.minimum(torch.arange(1, L + 1).expand(len(lens), L), lens[:, None])
        for block in model.blocks:
            x = block(x, lengths)
        assert torch.equal(logits, model.unembedding(model.norm(x)))
        every = StoryLM(dataclasses.replace(model.config, pattern=(LayerKind(),) * model.config.num_layers))
        every.load_state_dict(model.state_dict())  # the same state dict
        assert torch.equal(every.eval()(ids, lens), logits)


def test_each_layers_weights_are_zero_outside_its_window_or_chunk(patterned, tokenizer, stories):
    ids, lens = encode_stories(tokenizer, stories[:3])
    with torch.no_grad():
        logits, weights = patterned(ids, lens, need_weights=True)  # (B, N, H, L, L)
    L = ids.shape[1]
    padding = torch.arange(L)[None, :] < lens[:, None]  # (B, L) real keys
    for n, kind in enumerate(PATTERN):
        keep = _keep(kind, L)[None, None] & padding[:, None, None, :]  # (B, 1, L, L)
        assert (weights[:, n][~keep.expand_as(weights[:, n])] == 0).all(), kind
        sums = weights[:, n].sum(-1).transpose(1, 2)[padding]  # (B, H, L) -> (real queries, H)
        torch.testing.assert_close(sums, torch.ones_like(sums))
    # padding changes nothing at the real positions (each story alone)
    for b in range(3):
        alone = patterned(ids[b:b + 1, :lens[b]])
        torch.testing.assert_close(logits[b, :lens[b]], alone[0], atol=1e-5, rtol=1e-5)
    # each layer's positions: RoPE 10000, NoPE, RoPE 1e6
    ropes = [block.attention.qk.rope for block in patterned.blocks]
    assert ropes[1] is None and ropes[0].base == 10000.0 and ropes[2].base == 1e6


def test_decoding_with_the_cache_equals_the_whole_forward(small_config, tokenizer, stories):
    model = _patterned(small_config, dtype=torch.float64)
    ids, lens = encode_stories(tokenizer, stories[:1])
    ids = ids[:, :lens[0]]  # (1, L)
    L = ids.shape[1]
    with torch.no_grad():
        whole = model(ids)
        cache = model.new_cache()
        prompt = model(ids[:, :7], cache=cache)  # a prompt, then one token at a time
        steps = torch.cat([prompt] + [model(ids[:, t:t + 1], cache=cache) for t in range(7, L)], 1)
    torch.testing.assert_close(steps, whole, rtol=0, atol=1e-10)
    # the cache keeps only what each layer reads, and says so in bytes
    assert [len(layer.keys[0, 0]) for layer in cache.layers] == [3, L % 5, L]
    assert [layer.nbytes for layer in cache.layers] == model.cache_bytes(L)
    # greedy tokens: with the cache, without it, one prompt at a time; sampling alike
    prompts = [tokenizer.encode(t) for t in PROMPTS]
    cached = model.generate(prompts, 12)
    assert cached == model.generate(prompts, 12, use_cache=False)
    assert cached == [model.generate([p], 12)[0] for p in prompts]
    assert model.generate(prompts, 12, temperature=1.0, seed=5) == \
        model.generate(prompts, 12, temperature=1.0, seed=5, use_cache=False)


def test_cache_bytes_equal_a_hand_count(patterned):
    # 2 (keys, values) x B x Hkv x kept positions x d x 4 bytes (float32); d = 16 / 4
    count = lambda kept, B=1: 2 * B * 4 * kept * 4 * 4  # noqa: E731
    assert patterned.cache_bytes(23) == [count(3), count(23 % 5), count(23)]
    assert patterned.cache_bytes(10, B=2) == [count(3, 2), 0, count(10, 2)]
    assert patterned.cache_bytes(0) == [0, 0, 0]
    plain = StoryLM(dataclasses.replace(patterned.config, pattern=None))
    assert plain.cache_bytes(23) == [count(23)] * 3


def test_a_pattern_model_trains_and_decodes(small_config, tokenizer):
    config = dataclasses.replace(small_config, pattern=PATTERN[:2], steps=40, batch_size=8, lr=1e-2,
                                 warmup=4, eval_every=40)
    result = train(config, progress=False)
    loss = torch.as_tensor(result.history["train_loss"])
    assert loss[-5:].mean() < loss[:5].mean() - 0.5, loss
    prompts = [tokenizer.encode(t) for t in PROMPTS]
    new = result.model.generate(prompts, 6)
    assert new == result.model.generate(prompts, 6, use_cache=False) and all(len(n) == 6 for n in new)


def test_every_consumer_carries_the_pattern_or_refuses_it(patterned, tokenizer, tmp_path, small_config):
    from mha_lib.lm_export import export
    from mha_lib.lm_sinks import sink_mass, streaming_losses
    from mha_lib.viz.text_explorer import text_explorer_html
    stories = held_out_stories(6)
    # refused by name: the page's forward pass and GPT-NeoX run every layer global, RoPE 10000
    with pytest.raises(ValueError, match=r"config\.pattern must be None .* for export"):
        export(patterned, tokenizer)
    with pytest.raises(ValueError, match=r"config\.pattern must be None .* for export"):
        text_explorer_html(patterned, tokenizer)
    transformers = pytest.importorskip("mha_lib.lm_transformers")
    with pytest.raises(ValueError, match=r"config\.pattern must be None .* for to_transformers"):
        transformers.to_transformers(patterned)
    # an all-global pattern is today's model: exported as such
    plain = _patterned(small_config, (LayerKind(),) * 2)
    assert export(plain, tokenizer)["config"]["num_layers"] == 2
    # carried: the measurements read each layer's mask through forward (evaluate, find_heads,
    # ablate, the sinks), the sinks' decoding each layer's cache
    from mha_lib.lm_eval import evaluate
    from mha_lib.lm_heads import ablate, find_heads
    assert all(torch.isfinite(torch.tensor(v)) for v in evaluate(patterned, stories).values())
    heads = find_heads(patterned, stories)
    losses = [pair for r in ablate(patterned, stories, heads).values() for pair in r.values()]  # (before, after)
    assert heads and torch.isfinite(torch.tensor(losses)).all()
    mass = sink_mass(patterned, stories)
    assert mass["first"].shape == (3, 4) and torch.isfinite(mass["first"]).all()
    losses, nbytes = streaming_losses(patterned, stories, length=20)
    length = 20
    assert losses.shape == (6, 19) and nbytes == sum(patterned.cache_bytes(length, B=6))
    ids, _ = encode_stories(tokenizer, stories)
    with torch.no_grad():
        whole = patterned(ids[:, :length])
    expected = torch.nn.functional.cross_entropy(whole[:, :-1].transpose(1, 2), ids[:, 1:length], reduction="none")
    torch.testing.assert_close(losses, expected, atol=1e-5, rtol=1e-5)
    # carried: a saved pattern model reloads with its pattern and its logits
    result = train(dataclasses.replace(small_config, pattern=PATTERN[:2], steps=2), progress=False)
    model, _ = load_pretrained(save(result, tmp_path / "pattern.pt"))
    assert model.config.pattern == PATTERN[:2]
    ids = ids[:2, :9]
    torch.testing.assert_close(model(ids), result.model(ids), rtol=0, atol=0)
    # refused: positions with a window layer's cache (it only appends); weights of layers
    # whose caches keep different keys
    cache = patterned.new_cache()
    with pytest.raises(ValueError, match="positions"):
        patterned(ids, cache=cache, positions=torch.arange(9).expand(2, 9))
    with pytest.raises(ValueError, match="need_weights"):
        patterned(ids, cache=patterned.new_cache(), need_weights=True)


@pytest.mark.parametrize("pattern, match", [
    ((LayerKind(),), r"config\.pattern must give each of the 2 layers"),
    ("global", r"config\.pattern must be a sequence"),
    ((LayerKind(), "window"), r"config\.pattern\[1\] must be a mha_lib\.patterns\.LayerKind"),
    ((LayerKind(), {"mask": "window", "width": 3}), r"config\.pattern\[1\] must be a LayerKind or its fields"),
    ((LayerKind(), {"mask": "window", "size": 0}), r"size"),
])
def test_bad_patterns_raise_value_error_naming_config_pattern(small_config, pattern, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(small_config, pattern=pattern)
