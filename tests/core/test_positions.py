"""Tests of mha_lib.positions: the sinusoidal table against its formula, and the properties that
make RoPE what it is (rotations: norms kept, identity at 0, scores depend only on m - n)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib.positions import frequencies, rotary, sinusoidal

SETTINGS = settings(max_examples=30, deadline=None)


def test_sinusoidal_matches_the_formula():
    L, D = 7, 10
    table = sinusoidal(L, D)
    assert table.shape == (L, D) and table.dtype == torch.float32
    for pos in range(L):
        for i in range(D // 2):
            angle = pos / 10000 ** (2 * i / D)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@given(L=st.integers(0, 40), half=st.integers(1, 16), base=st.floats(2.0, 1e5))
@SETTINGS
def test_sinusoidal_property(L, half, base):
    D = 2 * half
    table = sinusoidal(L, D, base=base)
    pos = torch.arange(L, dtype=torch.float64)[:, None]
    i = torch.arange(half, dtype=torch.float64)
    angles = pos / base ** (2 * i / D)
    torch.testing.assert_close(table[:, 0::2].double(), angles.sin(), atol=1e-6, rtol=0)
    torch.testing.assert_close(table[:, 1::2].double(), angles.cos(), atol=1e-6, rtol=0)


def test_frequencies():
    torch.testing.assert_close(frequencies(4), torch.tensor([1.0, 0.01], dtype=torch.float64))


@pytest.mark.parametrize(
    "args, match",
    [((-1, 4), "L must be"), ((3, 5), "D must be an even"), ((3, 0), "D must be"),
     ((2.5, 4), "L must be"), ((True, 4), "L must be"), ((3, 4, 1.0), "base must be")],
)
def test_sinusoidal_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        sinusoidal(*args)


def _rotate_pairs_reference(x, positions, base=10000.0):
    """RoPE as the RoFormer paper writes it: a block-diagonal rotation matrix per position."""
    d = x.shape[-1]
    out = torch.empty_like(x)
    for j, p in enumerate(positions.tolist()):
        R = torch.zeros(d, d, dtype=torch.float64)
        for i in range(d // 2):
            theta = p * base ** (-2 * i / d)
            c, s = math.cos(theta), math.sin(theta)
            R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
        out[..., j, :] = (x[..., j, :].double() @ R.T).to(x.dtype)
    return out


def test_rotary_matches_the_rotation_matrix():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 8)
    positions = torch.tensor([0, 1, 4, 9, 30])
    torch.testing.assert_close(rotary(x, positions), _rotate_pairs_reference(x, positions))


@st.composite
def rotary_cases(draw):
    B, H, L, half = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**16))
    positions = draw(st.lists(st.integers(0, 200), min_size=L, max_size=L))
    torch.manual_seed(seed)
    return torch.randn(B, H, L, 2 * half, dtype=torch.float64), torch.tensor(positions)


@given(rotary_cases())
@SETTINGS
def test_rotary_preserves_norms(case):
    x, positions = case
    torch.testing.assert_close(rotary(x, positions).norm(dim=-1), x.norm(dim=-1))


@given(rotary_cases())
@SETTINGS
def test_rotary_at_position_zero_is_the_identity(case):
    x, _ = case
    zeros = torch.zeros(x.shape[2], dtype=torch.long)
    torch.testing.assert_close(rotary(x, zeros), x, atol=0, rtol=0)


@given(half=st.integers(1, 8), m=st.integers(0, 100), n=st.integers(0, 100),
       shift=st.integers(-100, 100), seed=st.integers(0, 2**16))
@SETTINGS
def test_rotary_score_depends_only_on_the_offset(half, m, n, shift, seed):
    torch.manual_seed(seed)
    q, k = torch.randn(2, 1, 1, 1, 2 * half, dtype=torch.float64).unbind(0)  # (1, 1, 1, d) each
    score = lambda a, b: (rotary(q, torch.tensor([a])) * rotary(k, torch.tensor([b]))).sum()  # noqa: E731
    torch.testing.assert_close(score(m + shift, n + shift), score(m, n))


def test_rotary_broadcasts_positions_per_example():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 4, 6)
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])[:, None]  # (B, 1, L)
    out = rotary(x, positions)
    torch.testing.assert_close(out[0], rotary(x[:1], torch.arange(4))[0])
    torch.testing.assert_close(out[1], rotary(x[1:], torch.arange(5, 9))[0])
    assert rotary(x.half(), torch.arange(4)).dtype == torch.float16


@pytest.mark.parametrize(
    "x, positions, match",
    [
        (torch.randn(1, 1, 3, 5), torch.arange(3), "even head size"),
        (torch.randn(1, 3, 4), torch.arange(3), "4 dimensions"),
        (torch.randn(1, 1, 3, 4), torch.arange(4), "positions must have shape"),
        (torch.randn(1, 1, 3, 4), torch.tensor([0.0, 1.0, 2.0]), "integers"),
        (torch.randn(1, 1, 3, 4), torch.tensor([True, False, True]), "integers"),
        (torch.randn(1, 1, 3, 4), torch.tensor(1), "positions must have shape"),
        (torch.randn(1, 1, 3, 4), torch.zeros(2, 1, 3, dtype=torch.long), "broadcast"),
        (torch.randn(1, 1, 3, 4), "abc", "positions must"),
        (torch.arange(12).reshape(1, 1, 3, 4), torch.arange(3), "floating-point"),
    ],
)
def test_rotary_rejects_bad_input(x, positions, match):
    with pytest.raises(ValueError, match=match):
        rotary(x, positions)


def test_rotary_accepts_a_list_of_positions():
    x = torch.randn(1, 2, 3, 4)
    torch.testing.assert_close(rotary(x, [0, 1, 2]), rotary(x, torch.arange(3)))


@given(B=st.integers(1, 2), L=st.integers(1, 6), H=st.integers(1, 3), d=st.integers(1, 3),
       seed=st.integers(0, 2**16), cross=st.booleans())
@SETTINGS
def test_multihead_attention_is_permutation_equivariant(B, L, H, d, seed, cross):
    """Without positions, permuting the tokens permutes the output (self-attention), and
    permuting the key-value pairs leaves it unchanged (cross-attention)."""
    torch.manual_seed(seed)
    D = H * d
    mha = MultiHeadAttention(D, D, D, D, H, 0.0, bias=True).double().eval()
    x = torch.randn(B, L, D, dtype=torch.float64)
    perm = torch.randperm(L)
    if cross:
        q = torch.randn(B, 3, D, dtype=torch.float64)
        torch.testing.assert_close(mha(q, x[:, perm], x[:, perm]), mha(q, x, x))
    else:
        torch.testing.assert_close(mha(x[:, perm], x[:, perm], x[:, perm]), mha(x, x, x)[:, perm])
