"""Grouped-query attention against MultiHeadAttention and F.scaled_dot_product_attention."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib.decoding import KVCache, kv_cache_bytes
from mha_lib.gqa import GroupedQueryAttention, grouped_attention, kv_head_of
from mha_lib.heads import merge_heads, split_heads
from mha_lib.mask_conventions import keep_mask_from_valid_lens
from mha_lib.masking import causal_valid_lens


def _reference(gqa, queries, keys, values, valid_lens=None):
    """The same projections around F.scaled_dot_product_attention(enable_gqa=True)."""
    q = split_heads(gqa.W_q(queries), gqa.num_heads)  # (B, Lq, D) -> (B, H, Lq, d)
    k = split_heads(gqa.W_k(keys), gqa.num_kv_heads)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
    v = split_heads(gqa.W_v(values), gqa.num_kv_heads)
    keep = None
    if valid_lens is not None:
        Lq = queries.shape[1] if valid_lens.dim() == 2 else 1
        keep = keep_mask_from_valid_lens(valid_lens, Lq, keys.shape[1])[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
    if valid_lens is not None:  # the library's convention: a row with nothing to see is 0
        empty = (valid_lens == 0).reshape(queries.shape[0], 1, -1, 1)
        out = out.masked_fill(empty, 0.0)
    return gqa.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)


def test_equal_heads_is_multi_head_attention():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, 4, 0.0, bias=True).eval()
    mha = MultiHeadAttention(16, 16, 16, 16, 4, 0.0, bias=True).eval()
    mha.load_state_dict({name: p for name, p in gqa.state_dict().items()})
    q, k = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    for valid_lens in (None, torch.tensor([7, 2]), torch.tensor([[1, 2, 3, 4, 0]] * 2)):
        out, w = gqa(q, k, k, valid_lens, need_weights=True)
        ref, ref_w = mha(q, k, k, valid_lens, need_weights=True)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    heads=st.sampled_from([(1, 1), (2, 1), (4, 1), (4, 2), (6, 3), (8, 2), (8, 8)]),
    B=st.integers(1, 3),
    Lq=st.integers(1, 6),
    Lk=st.integers(1, 6),
    masked=st.sampled_from(["none", "example", "query"]),
    seed=st.integers(0, 2**16),
)
def test_matches_sdpa_enable_gqa(heads, B, Lq, Lk, masked, seed):
    H, Hkv = heads
    torch.manual_seed(seed)
    gqa = GroupedQueryAttention(2 * H, H, Hkv, 0.0).eval()
    queries, keys, values = torch.randn(B, Lq, 2 * H), torch.randn(B, Lk, 2 * H), torch.randn(B, Lk, 2 * H)
    valid_lens = {
        "none": None,
        "example": torch.randint(0, Lk + 1, (B,)),
        "query": torch.randint(0, Lk + 1, (B, Lq)),
    }[masked]
    out = gqa(queries, keys, values, valid_lens)
    assert not out.isnan().any()
    torch.testing.assert_close(out, _reference(gqa, queries, keys, values, valid_lens),
                               atol=1e-5, rtol=1e-5)


def test_query_heads_share_their_groups_key_value_head():
    assert kv_head_of(8, 2) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert kv_head_of(4, 4) == [0, 1, 2, 3]
    assert kv_head_of(4, 1) == [0, 0, 0, 0]
    # Two query heads with equal queries in one group see the same keys: equal weights.
    q = torch.randn(1, 1, 3, 2).expand(1, 4, 3, 2)  # (B, H, Lq, d), every head the same
    k, v = torch.randn(1, 2, 5, 2), torch.randn(1, 2, 5, 2)  # Hkv = 2
    _, w = grouped_attention(q, k, v)
    torch.testing.assert_close(w[0, 0], w[0, 1])
    assert not torch.allclose(w[0, 1], w[0, 2])


def test_with_cache_equals_causal_attention_and_cache_shrinks():
    torch.manual_seed(3)
    x = torch.randn(2, 9, 16)
    sizes = {}
    for Hkv in (8, 4, 2, 1):
        gqa = GroupedQueryAttention(16, 8, Hkv, 0.0).eval()
        full = gqa(x, x, x, causal_valid_lens(2, 9))
        cache = KVCache()
        steps = [gqa(x[:, :4], x[:, :4], x[:, :4], cache=cache)]
        steps += [gqa(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(4, 9)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
        sizes[Hkv] = cache.nbytes
        assert cache.nbytes == kv_cache_bytes(9, B=2, num_kv_heads=Hkv, head_size=2)
    assert sizes[8] == 2 * sizes[4] == 4 * sizes[2] == 8 * sizes[1]


def test_dropout_in_training_only():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(8, 4, 2, 0.5)
    x = torch.randn(1, 6, 8)
    assert not torch.equal(gqa(x, x, x), gqa(x, x, x))
    gqa.eval()
    assert torch.equal(gqa(x, x, x), gqa(x, x, x))


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="num_kv_heads"):
        GroupedQueryAttention(16, 4, 3, 0.0)
    with pytest.raises(ValueError, match="num_kv_heads"):
        GroupedQueryAttention(16, 4, 0, 0.0)
    with pytest.raises(ValueError, match="d_model"):
        GroupedQueryAttention(10, 4, 2, 0.0)
    with pytest.raises(ValueError, match="dropout"):
        GroupedQueryAttention(16, 4, 2, 1.0)
    with pytest.raises(ValueError, match="num_kv_heads"):
        kv_head_of(4, 3)
    gqa = GroupedQueryAttention(16, 4, 2, 0.0)
    x = torch.randn(2, 3, 16)
    with pytest.raises(ValueError, match="feature size"):
        gqa(x, torch.randn(2, 3, 8), torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="valid_lens"):
        gqa(x, x, x, torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="self-attention"):
        gqa(x, torch.randn(2, 5, 16), torch.randn(2, 5, 16), cache=KVCache())
    with pytest.raises(ValueError, match="valid_lens must be <= "):
        gqa(x, x, x, torch.tensor([4, 3]), cache=KVCache())  # with a cache: at most L + n
    with pytest.raises(ValueError, match="positions are used with rope=True or with a cache"):
        gqa(x, x, x, positions=torch.arange(3))
    with pytest.raises(ValueError, match="head_mask must have shape"):
        gqa(x, x, x, head_mask=torch.ones(2))
    with pytest.raises(ValueError, match="rope=True rotates pairs of features"):
        GroupedQueryAttention(12, 4, 2, 0.0, rope=True)  # d = 3
    with pytest.raises(ValueError, match="rope must be True or False"):
        GroupedQueryAttention(16, 4, 2, 0.0, rope=1)
    with pytest.raises(ValueError, match="cache must be"):
        gqa(x, x, x, cache=[])
    with pytest.raises(ValueError, match="k and v"):
        grouped_attention(torch.randn(1, 4, 2, 3), torch.randn(1, 3, 2, 3), torch.randn(1, 3, 2, 3))
