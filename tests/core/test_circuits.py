"""Heads as circuits: the QK circuit predicts the layer's scores, the OV circuits its output."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention, split_heads
from mha_lib.circuits import (
    circuit_ranks,
    composition_scores,
    head_writes,
    ov_circuits,
    qk_circuits,
    scores_from_circuits,
)


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), Lq=st.integers(1, 5), Lk=st.integers(1, 5), H=st.integers(1, 3),
       d=st.integers(1, 3), sizes=st.tuples(*[st.integers(1, 9)] * 3), data=st.data(),
       seed=st.integers(0, 2**16))
def test_circuits_give_the_layers_scores_and_output(B, Lq, Lk, H, d, sizes, data, seed):
    torch.manual_seed(seed)
    key_size, query_size, value_size = sizes
    D = H * d
    mha = MultiHeadAttention(key_size, query_size, value_size, D, H, 0.0).double().eval()
    q = torch.randn(B, Lq, query_size, dtype=torch.float64)
    k = torch.randn(B, Lk, key_size, dtype=torch.float64)
    v = torch.randn(B, Lk, value_size, dtype=torch.float64)
    # the scores the layer computes: projected, split, q k^T / sqrt(d)
    qh, kh = split_heads(mha.W_q(q), H), split_heads(mha.W_k(k), H)  # (B, H, L, d)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d)
    torch.testing.assert_close(scores_from_circuits(mha, q, k), scores.detach())
    lens = torch.tensor(data.draw(st.lists(st.integers(0, Lk), min_size=B, max_size=B)))
    writes = head_writes(mha, q, k, v, lens)  # (B, H, Lq, D)
    assert writes.shape == (B, H, Lq, D)
    torch.testing.assert_close(writes.sum(1), mha(q, k, v, lens).detach())
    assert qk_circuits(mha).shape == (H, query_size, key_size)
    assert ov_circuits(mha).shape == (H, D, value_size)


def test_rank_at_most_d_in_a_wide_model():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 32, 32, 32, 8, 0.0)  # d = 4, D = 32
    assert circuit_ranks(qk_circuits(mha)) == [4] * 8
    assert circuit_ranks(ov_circuits(mha)) == [4] * 8


def test_bad_input():
    with pytest.raises(ValueError, match="mha"):
        qk_circuits(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="bias"):
        ov_circuits(MultiHeadAttention(4, 4, 4, 4, 2, 0.0, bias=True))
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0)
    with pytest.raises(ValueError, match="queries"):
        scores_from_circuits(mha, torch.randn(1, 2, 3), torch.randn(1, 2, 4))
    with pytest.raises(ValueError, match="circuits"):
        circuit_ranks(torch.randn(3, 3))


@pytest.mark.parametrize("kind", ["q", "k", "v"])
def test_composition_scores(kind):
    torch.manual_seed(0)
    first, second = (MultiHeadAttention(12, 12, 12, 12, 3, 0.0) for _ in range(2))
    scores = composition_scores(first, second, kind)
    assert scores.shape == (3, 3) and (scores > 0).all() and (scores <= 1).all()
    QK, OV1, OV2 = qk_circuits(second), ov_circuits(first), ov_circuits(second)
    for h2 in range(3):
        for h1 in range(3):
            reader = OV2[h2] if kind == "v" else QK[h2]
            product = {"q": OV1[h1].T @ QK[h2], "k": QK[h2] @ OV1[h1], "v": OV2[h2] @ OV1[h1]}[kind]
            expected = product.norm() / (reader.norm() * OV1[h1].norm())
            torch.testing.assert_close(scores[h2, h1], expected)


def test_composition_of_aligned_heads_is_one():
    torch.manual_seed(0)
    first, second = (MultiHeadAttention(4, 4, 4, 4, 1, 0.0) for _ in range(2))
    with torch.no_grad():  # rank-one circuits that line up: W_QK = a b^T, W_OV = b c^T
        a, b, c = torch.randn(4), torch.randn(4), torch.randn(4)
        for w in (first.W_q, first.W_k, first.W_v, first.W_o, second.W_q, second.W_k):
            w.weight.zero_()
        second.W_q.weight[0], second.W_k.weight[0] = a, b
        first.W_o.weight[:, 0], first.W_v.weight[0] = b, c
    torch.testing.assert_close(composition_scores(first, second, "k"), torch.ones(1, 1))


def test_composition_bad_input():
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0)
    with pytest.raises(ValueError, match="kind"):
        composition_scores(mha, mha, "x")
    with pytest.raises(ValueError, match="residual"):
        composition_scores(mha, MultiHeadAttention(6, 4, 4, 4, 2, 0.0), "k")
