"""Per-layer patterns (``mha_lib.patterns``): each layer of a model its mask and its RoPE base or
none, and a cache that keeps only what each layer reads; decoding with it equals the forward."""

import dataclasses

import pytest
import torch

from mha_lib.decoding import LayerCache, RollingLayerCache
from mha_lib.llama import LlamaConfig, LlamaLM
from mha_lib.patterns import LayerKind, cache_bytes, check_pattern, pattern_cache
from mha_lib.positions import Rope

GEMMA = (LayerKind("window", 3), LayerKind("window", 3), LayerKind("global", rope_base=1e6))
LLAMA4 = (LayerKind("chunk", 4), LayerKind("chunk", 4), LayerKind(rope_base=None))


def _model(pattern, seed=0, dtype=torch.float64):
    config = LlamaConfig(vocab_size=31, d_model=16, num_heads=4, num_kv_heads=2,
                         num_layers=len(pattern), d_ff=24, pattern=pattern)
    torch.manual_seed(seed)
    return LlamaLM(config).to(dtype).eval()


def test_each_layer_is_built_from_its_kind():
    model = _model(GEMMA + LLAMA4)
    ropes = [block.attention.settings.rope for block in model.blocks]
    assert ropes == [True, True, Rope(base=1e6), True, True, False]
    masks = [repr(kind.attention_mask) for kind in model.config.kinds]
    assert masks == ["sliding_window(3)"] * 2 + ["causal()"] + ["chunked(4)"] * 2 + ["causal()"]


def test_the_default_is_todays_model():
    """No pattern: every layer global (or Mistral's window), plain RoPE: the same state dict."""
    plain = LlamaConfig(vocab_size=31, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, d_ff=24)
    assert plain.kinds == (LayerKind(),) * 2
    windowed = dataclasses.replace(plain, sliding_window=5)
    assert windowed.kinds == (LayerKind("window", 5),) * 2
    torch.manual_seed(0)
    a = LlamaLM(plain)
    torch.manual_seed(0)
    b = LlamaLM(dataclasses.replace(plain, pattern=(LayerKind(), LayerKind())))
    ids = torch.randint(0, 31, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(a(ids), b(ids), rtol=0, atol=0)
    assert a.state_dict().keys() == b.state_dict().keys()


@pytest.mark.parametrize("pattern", [GEMMA, LLAMA4, GEMMA + LLAMA4])
@pytest.mark.parametrize("prompt", [1, 5])
def test_decoding_with_the_pattern_cache_equals_the_forward(pattern, prompt):
    """A prompt, then one token at a time past every window and chunk: each step's logits are
    the forward's at that position, and each layer keeps only what it reads."""
    model = _model(pattern, seed=1)
    ids = torch.randint(0, 31, (2, 13), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache()
    with torch.no_grad():
        full = model(ids)
        steps = [model(ids[:, :prompt], cache=cache)]
        for t in range(prompt, 13):
            steps.append(model(ids[:, t:t + 1], cache=cache))
            kept = [layer.keys.shape[2] for layer in cache.layers]
            assert kept == [kind.kept(t + 1) for kind in pattern]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-10, atol=1e-10)
    assert cache.nbytes == sum(cache_bytes(pattern, 13, B=2, num_kv_heads=2, head_size=4,
                                           dtype=torch.float64))


def test_the_pattern_matters():
    """The same weights under another pattern give other logits (each part is read)."""
    model = _model(GEMMA + LLAMA4, seed=3)
    ids = torch.randint(0, 31, (1, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = model(ids)
        for i in range(6):
            for other in (LayerKind(), LayerKind(rope_base=None)):
                pattern = list(model.config.pattern)
                if pattern[i] == other:
                    continue
                pattern[i] = other
                changed = LlamaLM(dataclasses.replace(model.config, pattern=tuple(pattern))).double()
                changed.load_state_dict(model.state_dict())
                assert (changed.eval()(ids) - expected).abs().max() > 1e-6, (i, other)


def test_cache_bytes_by_hand():
    """After 10 positions, B=2, Hkv=3, d=4, float32: 2 (keys, values) * 2 * 3 * kept * 4 * 4 bytes."""
    pattern = (LayerKind("window", 4), LayerKind("chunk", 4), LayerKind(), LayerKind(rope_base=None))
    kept = [3, 2, 10, 10]  # the last window - 1; 10 mod 4 of the current chunk; all; all
    assert cache_bytes(pattern, 10, B=2, num_kv_heads=3, head_size=4) == [2 * 2 * 3 * k * 4 * 4 for k in kept]
    assert cache_bytes(pattern, 10, B=2, num_kv_heads=3, head_size=4, dtype=torch.bfloat16)[2] == 2 * 2 * 3 * 10 * 4 * 2
    assert cache_bytes(pattern, 0, B=1, num_kv_heads=1, head_size=2) == [0] * 4


def test_the_caches_of_each_kind():
    cache = pattern_cache((LayerKind("window", 3), LayerKind("chunk", 5), LayerKind()))
    assert [type(layer) for layer in cache.layers][0] is RollingLayerCache
    assert type(cache.layers[2]) is LayerCache
    assert repr(cache.layers[1].mask) == "chunked(5)"


@pytest.mark.parametrize("kwargs, name", [
    ({"mask": "local"}, "mask"), ({"mask": "window"}, "size"), ({"mask": "chunk", "size": 0}, "size"),
    ({"mask": "global", "size": 4}, "size"), ({"rope_base": 1.0}, "rope_base"),
    ({"rope_base": True}, "rope_base"),
])
def test_a_bad_kind_is_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LayerKind(**kwargs)


def test_a_bad_pattern_is_refused_by_name():
    sizes = dict(vocab_size=31, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, d_ff=24)
    with pytest.raises(ValueError, match="config.pattern"):
        LlamaConfig(**sizes, pattern=(LayerKind(),))  # one kind for two layers
    with pytest.raises(ValueError, match=r"config.pattern\[1\]"):
        LlamaConfig(**sizes, pattern=(LayerKind(), "global"))
    with pytest.raises(ValueError, match="config.sliding_window"):
        LlamaConfig(**sizes, sliding_window=4, pattern=(LayerKind(),) * 2)
    with pytest.raises(ValueError, match="pattern"):
        check_pattern("global", 1)
    with pytest.raises(ValueError, match="pattern"):
        pattern_cache(())
    model = _model(GEMMA)
    with pytest.raises(ValueError, match="cache"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=pattern_cache(GEMMA[:2]))
