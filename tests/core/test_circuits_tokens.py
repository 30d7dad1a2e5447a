"""Token-by-token circuits: each table entry equals what the layers' own forward passes compute
on one-hot tokens, and the diagonal and copying scores mean what they say."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib.circuits import copying_scores, diagonal_scores, token_k_composition, token_ov_circuits


def _one_head(H, h):
    """Gates (H,) that keep head h alone."""
    gates = torch.zeros(H, dtype=torch.float64)
    gates[h] = 1.0
    return gates


def _written(layer, E, h1):
    """What head h1 of ``layer`` writes when its only value is token b, for every b: (V, D)."""
    V = E.shape[0]
    onehot = torch.eye(V, dtype=torch.float64)  # (V, V): token b as a one-hot row
    values = (onehot @ E)[:, None]  # (V, 1, Dv): one key-value pair, so its weight is 1
    q = torch.randn(V, 1, layer.W_q.in_features, dtype=torch.float64)
    k = torch.randn(V, 1, layer.W_k.in_features, dtype=torch.float64)
    return layer(q, k, values, head_mask=_one_head(layer.num_heads, h1))[:, 0].detach()  # (V, D)


@settings(max_examples=20, deadline=None)
@given(H1=st.integers(1, 3), H2=st.integers(1, 3), d=st.integers(1, 3), V=st.integers(2, 6),
       width=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_k_composition_table_is_the_score_the_forward_pass_gives(H1, H2, d, V, width, seed):
    torch.manual_seed(seed)
    D = H2 * d  # later's output width; earlier writes D1 = H1 * d1 into the stream
    D1 = H1 * 2
    earlier = MultiHeadAttention(width, width, width, D1, H1, 0.0).double().eval()
    later = MultiHeadAttention(D1, width, D1, D, H2, 0.0).double().eval()
    E = torch.randn(V, width, dtype=torch.float64)
    table = token_k_composition(earlier, later, E)
    assert table.shape == (H2, H1, V, V)
    for h1 in range(H1):
        keys = _written(earlier, E, h1)  # (V, D1): row b, what head h1 wrote after reading b
        # later, query token a, keys [what h1 wrote for b, a zero key]: the zero key scores 0, so
        # log(weight on the first / weight on the second) is the first key's score
        queries = E[:, None, None].expand(V, V, 1, width).reshape(V * V, 1, width)  # (V*V, 1, width)
        pair = torch.stack([keys, torch.zeros_like(keys)], dim=1)  # (V, 2, D1)
        pair = pair[None].expand(V, V, 2, D1).reshape(V * V, 2, D1)  # (V*V, 2, D1): [a, b]
        _, w = later(queries, pair, pair, need_weights=True)  # (V*V, H2, 1, 2)
        scores = (w[..., 0, 0] / w[..., 0, 1]).log().reshape(V, V, H2).permute(2, 0, 1)  # (H2, V, V)
        torch.testing.assert_close(table[:, h1], scores.detach())


@settings(max_examples=20, deadline=None)
@given(H=st.integers(1, 3), d=st.integers(1, 3), V=st.integers(2, 6), V_out=st.integers(1, 6),
       width=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_ov_table_is_what_the_head_adds_to_the_logits(H, d, V, V_out, width, seed):
    torch.manual_seed(seed)
    D = H * d
    layer = MultiHeadAttention(width, width, width, D, H, 0.0).double().eval()
    E = torch.randn(V, width, dtype=torch.float64)
    unembedding = torch.nn.Linear(D, V_out).double()
    table = token_ov_circuits(layer, E, unembedding.weight)
    assert table.shape == (H, V, V_out)
    for h in range(H):
        logits = unembedding(_written(layer, E, h)) - unembedding.bias  # (V, V_out), the bias left out
        torch.testing.assert_close(table[h], logits.detach())


def test_diagonal_and_copying_scores():
    V = 6
    eye = torch.eye(V)
    torch.manual_seed(0)
    noise = 0.1 * torch.randn(V, V)
    tables = torch.stack([eye + noise, -eye + noise, noise.roll(1, dims=1) + eye.roll(1, dims=1)])
    top, z = diagonal_scores(tables)
    assert top.tolist() == [1.0, 0.0, 0.0]
    assert z[0] > 1.5 and z[1] < -1.5
    copying = copying_scores(tables)
    assert copying[0] > 0.9 and copying[1] < -0.9 and abs(copying[2]) < 0.3  # a permutation: eigenvalues on the circle
    # by hand, for one table: the mean z-score of the diagonal within its row
    T = tables[0]
    by_hand = sum((T[i, i] - T[i].mean()) / T[i].std() for i in range(V)) / V
    torch.testing.assert_close(z[0], by_hand)
    torch.testing.assert_close(copying[0], torch.trace(T) / torch.linalg.eigvals(T.double()).abs().sum().float())


def test_constant_and_zero_tables_give_numbers_not_nan():
    top, z = diagonal_scores(torch.ones(2, 3, 3))
    assert top.tolist() == [0.0, 0.0] and z.tolist() == [0.0, 0.0]  # a tie is not "the largest"
    assert copying_scores(torch.zeros(4, 4)).item() == 0.0


def test_bad_input():
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0)
    with pytest.raises(ValueError, match="embedding"):
        token_k_composition(mha, mha, torch.randn(5, 3))
    with pytest.raises(ValueError, match="embedding"):
        token_ov_circuits(mha, torch.randint(0, 2, (5, 4)), torch.randn(5, 4))
    with pytest.raises(ValueError, match="unembedding"):
        token_ov_circuits(mha, torch.randn(5, 4), torch.randn(5, 3))
    with pytest.raises(ValueError, match="key_size"):
        token_k_composition(mha, MultiHeadAttention(6, 4, 6, 6, 2, 0.0), torch.randn(5, 4))
    with pytest.raises(ValueError, match="bias"):
        token_ov_circuits(MultiHeadAttention(4, 4, 4, 4, 2, 0.0, bias=True), torch.randn(5, 4), torch.randn(5, 4))
    with pytest.raises(ValueError, match="square"):
        diagonal_scores(torch.randn(3, 4))
    with pytest.raises(ValueError, match="square"):
        copying_scores(torch.randn(1, 1))
    with pytest.raises(ValueError, match="finite"):
        copying_scores(torch.tensor([[1.0, math.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="tables"):
        diagonal_scores([[1.0, 0.0], [0.0, 1.0]])
