"""KV cache: decoding step by step equals full causal attention; misuse raises ValueError."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib.decoding import KVCache, LayerCache, _layer_cache, causal_keep_mask, kv_cache_bytes
from mha_lib.masking import causal_valid_lens


def _mha(D=16, H=4, seed=0, bias=True):
    torch.manual_seed(seed)
    return MultiHeadAttention(D, D, D, D, H, 0.0, bias=bias).eval()


def test_one_token_at_a_time_equals_causal_attention_at_every_step():
    mha = _mha()
    x = torch.randn(2, 24, 16)
    full = mha(x, x, x, causal_valid_lens(2, 24))
    cache = KVCache()
    for t in range(24):
        x_t = x[:, t : t + 1]
        with torch.no_grad():  # inference: the cache writes into its growing storage
            y = mha(x_t, x_t, x_t, cache=cache)
        torch.testing.assert_close(y, full[:, t : t + 1], atol=1e-5, rtol=1e-5)
        assert len(cache) == t + 1
    assert cache.nbytes == kv_cache_bytes(24, B=2, num_kv_heads=4, head_size=4)


@settings(max_examples=25, deadline=None)
@given(
    chunks=st.lists(st.integers(1, 7), min_size=1, max_size=6),
    B=st.integers(1, 3),
    H=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 2**16),
)
def test_chunks_of_any_size_equal_causal_attention(chunks, B, H, seed):
    mha = _mha(D=8, H=H, seed=seed)
    L = sum(chunks)
    x = torch.randn(B, L, 8, generator=torch.Generator().manual_seed(seed))
    full = mha(x, x, x, causal_valid_lens(B, L))
    cache, start, outs = KVCache(), 0, []
    for n in chunks:
        x_t = x[:, start : start + n]
        with torch.set_grad_enabled(seed % 2 == 0):  # both ways of appending
            outs.append(mha(x_t, x_t, x_t, cache=cache))
        start += n
    out = torch.cat(outs, dim=1)
    assert not out.isnan().any()
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-5)


def test_cache_grows_past_its_capacity_and_keeps_the_old_positions():
    layer = LayerCache()
    k = torch.randn(1, 2, 40, 3)
    for t in range(40):
        keys, values = layer.update(k[:, :, t : t + 1], -k[:, :, t : t + 1])
    assert torch.equal(keys, k) and torch.equal(values, -k)
    assert layer.nbytes == 2 * k.numel() * 4
    layer.reset()
    assert len(layer) == 0 and layer.nbytes == 0 and layer.keys is None


def test_head_mask_with_cache():
    mha = _mha()
    x = torch.randn(1, 6, 16)
    gates = torch.tensor([1.0, 0.0, 0.5, 1.0])
    full = mha(x, x, x, causal_valid_lens(1, 6), head_mask=gates)
    cache = KVCache()
    out = torch.cat([mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache,
                         head_mask=gates) for t in range(6)], dim=1)
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-5)


def test_layers_of_a_cache_are_independent():
    cache = KVCache(num_layers=2)
    m1, m2 = _mha(seed=1), _mha(seed=2)
    x = torch.randn(1, 5, 16)
    for t in range(5):
        h = m1(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache[0])
        m2(h, h, h, cache=cache[1])
    assert len(cache[0]) == len(cache[1]) == len(cache) == 5
    assert cache.nbytes == 2 * cache[0].nbytes
    cache.reset()
    assert len(cache) == 0


def test_causal_keep_mask():
    assert causal_keep_mask(2, 3).tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]
    with pytest.raises(ValueError, match="num_cached"):
        causal_keep_mask(-1, 1)
    with pytest.raises(ValueError, match="num_new"):
        causal_keep_mask(0, 0)


def test_misuse_raises_value_error():
    mha = _mha()
    x = torch.randn(2, 3, 16)
    cache = KVCache()
    with pytest.raises(ValueError, match="self-attention"):
        mha(x, torch.randn(2, 5, 16), torch.randn(2, 5, 16), cache=cache)
    with pytest.raises(ValueError, match=r"valid_lens must be <= the number of key-value pairs Lk = 3"):
        mha(x, x, x, torch.tensor([4, 2]), cache=cache)  # with a cache: at most L + n
    with pytest.raises(ValueError, match="valid_lens must be >= 0"):
        mha(x, x, x, torch.tensor([-1, 2]), cache=cache)
    with pytest.raises(ValueError, match=r"positions must have shape \(n,\) = \(3,\) or \(B, n\)"):
        mha(x, x, x, cache=cache, positions=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"positions must lie in \[0, L \+ n\) = \[0, 3\)"):
        mha(x, x, x, cache=cache, positions=torch.tensor([0, 1, 3]))
    with pytest.raises(ValueError, match="positions must hold integers"):
        mha(x, x, x, cache=cache, positions=torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="positions place new tokens in a cache"):
        mha(x, x, x, positions=torch.arange(3))
    with pytest.raises(ValueError, match="cache must be"):
        mha(x, x, x, cache={})
    assert len(cache) == 0  # a refused call stores nothing
    mha(x, x, x, cache=cache)
    with pytest.raises(ValueError, match="batch or layer"):
        mha(x[:1], x[:1], x[:1], cache=cache)  # another batch size
    with pytest.raises(ValueError, match="batch or layer"):
        _mha(H=2)(x, x, x, cache=cache)  # another layer (other head count)
    with pytest.raises(ValueError, match="layers"):
        mha(x, x, x, cache=KVCache(num_layers=2))
    with pytest.raises(ValueError, match="layer index"):
        KVCache(2)[2]
    with pytest.raises(ValueError, match="num_layers"):
        KVCache(0)
    with pytest.raises(ValueError, match="cache must be"):
        _layer_cache("cache")
    with pytest.raises(ValueError, match="same shape|one shape"):
        LayerCache().update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))
    with pytest.raises(ValueError, match="length"):
        kv_cache_bytes(-1, B=1, num_kv_heads=1, head_size=1)


def test_gradients_flow_through_the_cache():
    mha = _mha(D=8, H=2)
    x = torch.randn(1, 5, 8, dtype=torch.float64, requires_grad=True)
    mha = mha.double()
    cache = KVCache()
    steps = [mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(5)]
    (grad_cached,) = torch.autograd.grad(torch.cat(steps, dim=1).square().sum(), x)
    full = mha(x, x, x, causal_valid_lens(1, 5))
    (grad_full,) = torch.autograd.grad(full.square().sum(), x)
    torch.testing.assert_close(grad_cached, grad_full)
    with torch.no_grad():  # a cache filled with gradients can go on without them
        mha(x[:, :1], x[:, :1], x[:, :1], cache=cache)
    assert len(cache) == 6
