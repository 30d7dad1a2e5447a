"""mha_lib.gqa.gqa_from_mha: grouped-query attention from multi-head attention by mean-pooling."""

from __future__ import annotations

import pytest
import torch

from mha_lib.gqa import GroupedQueryAttention, gqa_from_mha, kv_head_of
from mha_lib.multihead import MultiHeadAttention


def _inputs(generator, D, dtype=torch.float32):
    x = torch.randn(2, 5, D, generator=generator, dtype=dtype)
    return x, torch.tensor([5, 3])


@pytest.mark.parametrize("bias", [False, True])
def test_as_many_kv_heads_as_query_heads_is_the_same_attention(mha_factory, generator, bias):
    mha = mha_factory(12, 4, bias=bias)
    gqa = gqa_from_mha(mha, 4)
    x, lens = _inputs(generator, 12)
    with torch.no_grad():
        torch.testing.assert_close(gqa(x, x, x, lens), mha(x, x, x, lens))


@pytest.mark.parametrize("H, Hkv", [(4, 2), (6, 3), (6, 2), (4, 1)])
def test_each_kv_head_is_the_mean_of_its_consecutive_group(mha_factory, H, Hkv):
    mha = mha_factory(2 * H, H, bias=True)  # d = 2
    gqa = gqa_from_mha(mha, Hkv)
    assert isinstance(gqa, GroupedQueryAttention) and (gqa.num_heads, gqa.num_kv_heads) == (H, Hkv)
    groups = kv_head_of(H, Hkv)
    for name in ("W_k", "W_v"):
        source, target = getattr(mha, name), getattr(gqa, name)
        for j in range(Hkv):
            heads = [h for h in range(H) if groups[h] == j]
            rows = lambda h: slice(2 * h, 2 * h + 2)  # noqa: E731
            want = torch.stack([source.weight[rows(h)] for h in heads]).mean(0)
            torch.testing.assert_close(target.weight[rows(j)], want)
            want_bias = torch.stack([source.bias[rows(h)] for h in heads]).mean(0)
            torch.testing.assert_close(target.bias[rows(j)], want_bias)
    for name in ("W_q", "W_o"):
        torch.testing.assert_close(getattr(gqa, name).weight, getattr(mha, name).weight)
        torch.testing.assert_close(getattr(gqa, name).bias, getattr(mha, name).bias)


def test_pooling_loses_nothing_when_a_group_shares_its_kv_heads(mha_factory, generator):
    """If the heads of each group already have equal K/V weights, the mean is exact."""
    H, Hkv, d = 6, 2, 3
    mha = mha_factory(H * d, H)
    with torch.no_grad():
        for name in ("W_k", "W_v"):
            W = getattr(mha, name).weight  # (H*d, D)
            per_group = W.reshape(Hkv, H // Hkv, d, -1)[:, :1]  # the group's first head
            W.copy_(per_group.expand(Hkv, H // Hkv, d, H * d).reshape(H * d, H * d))
    x, lens = _inputs(generator, H * d)
    with torch.no_grad():
        torch.testing.assert_close(gqa_from_mha(mha, Hkv)(x, x, x, lens), mha(x, x, x, lens))


def test_keeps_dtype_training_mode_dropout_and_leaves_mha_alone(mha_factory):
    mha = mha_factory(8, 4, dtype=torch.float64)
    before = {k: v.clone() for k, v in mha.state_dict().items()}
    gqa = gqa_from_mha(mha, 2)
    assert gqa.W_k.weight.dtype == torch.float64 and not gqa.training
    assert all(torch.equal(v, mha.state_dict()[k]) for k, v in before.items())
    assert gqa.W_q.weight.data_ptr() != mha.W_q.weight.data_ptr()  # a copy, not shared
    torch.manual_seed(0)
    trained = MultiHeadAttention(8, 8, 8, 8, 2, 0.25).train()
    out = gqa_from_mha(trained, 1)
    assert out.training and out.attention.dropout.p == 0.25


@pytest.mark.parametrize("make, Hkv, match", [
    (lambda f: torch.nn.Linear(8, 8), 2, "mha must be a MultiHeadAttention"),
    (lambda f: f(8, 4), 3, "num_kv_heads"),
    (lambda f: f(8, 4), 0, "num_kv_heads must be an integer >= 1"),
    (lambda f: f(8, 4, sizes=(8, 5, 8)), 2, "query_size = 5"),
])
def test_bad_input_is_a_value_error(mha_factory, make, Hkv, match):
    with pytest.raises(ValueError, match=match):
        gqa_from_mha(make(mha_factory), Hkv)
