"""The two RoPE conventions of mha_lib.positions.rotary and the permutation between them.

Interleaved pairs (2i, 2i+1) and halves pairs (i, i + d/2) rotate by the same angles; once the
output features of W_q and W_k are permuted by rope_permutation, the rotated queries and keys
are the same vectors permuted, and every score q . k is the same.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.heads import split_heads
from mha_lib.positions import rope_permutation, rotary

SETTINGS = settings(max_examples=25, deadline=None)


def _halves_by_formula(x, positions, base=10000.0):
    """Hugging Face's rotate_half, written out: x cos + rotate_half(x) sin."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = positions[..., None].double() * inv_freq  # (L, d/2)
    emb = torch.cat((angles, angles), dim=-1)  # (L, d)
    rotate_half = torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)
    return (x.double() * emb.cos() + rotate_half.double() * emb.sin()).to(x.dtype)


def _interleaved_by_complex_numbers(x, positions, base=10000.0):
    """Meta's original LLaMA code: one complex number per pair (2i, 2i+1)."""
    d = x.shape[-1]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    rot = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64),
                      positions[:, None].double() * freqs)  # (L, d/2)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).flatten(-2).to(x.dtype)  # (..., d/2, 2) -> (..., d)


def test_the_default_is_interleaved_and_unchanged(generator):
    x = torch.randn(2, 3, 5, 8, generator=generator, dtype=torch.float64)
    positions = torch.arange(5) * 7
    torch.testing.assert_close(rotary(x, positions), rotary(x, positions, pairs="interleaved"))
    torch.testing.assert_close(rotary(x, positions), _interleaved_by_complex_numbers(x, positions))


def test_halves_is_hugging_face_rotate_half(generator):
    x = torch.randn(2, 3, 5, 8, generator=generator, dtype=torch.float64)
    positions = torch.arange(3, 8)
    torch.testing.assert_close(rotary(x, positions, pairs="halves"),
                               _halves_by_formula(x, positions))
    torch.testing.assert_close(rotary(x, positions, 500.0, pairs="halves"),
                               _halves_by_formula(x, positions, 500.0))


def test_the_conventions_differ(generator):
    x = torch.randn(1, 1, 4, 8, generator=generator)
    positions = torch.arange(4)
    assert not torch.allclose(rotary(x, positions), rotary(x, positions, pairs="halves"))


def test_rope_permutation_values():
    assert rope_permutation(6).tolist() == [0, 2, 4, 1, 3, 5]
    assert rope_permutation(4, 2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    assert rope_permutation(2).tolist() == [0, 1]
    assert rope_permutation(8, 3).dtype == torch.long
    assert sorted(rope_permutation(8, 3).tolist()) == list(range(24))


def test_rope_permutation_is_hugging_face_conversion():
    """convert_llama_weights_to_hf's permute: (h d two) n -> (h two d) n on the rows."""
    H, d, n = 3, 8, 5
    w = torch.arange(H * d * n, dtype=torch.float32).reshape(H * d, n)
    hf = w.view(H, d // 2, 2, n).transpose(1, 2).reshape(H * d, n)
    torch.testing.assert_close(w[rope_permutation(d, H)], hf)


@given(half=st.integers(1, 6), L=st.integers(1, 6), offset=st.integers(0, 1000),
       seed=st.integers(0, 2**16))
@SETTINGS
def test_rotated_vectors_agree_after_permuting(half, L, offset, seed):
    d = 2 * half
    x = torch.randn(2, 3, L, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    positions = torch.arange(offset, offset + L)
    perm = rope_permutation(d)
    torch.testing.assert_close(rotary(x[..., perm], positions, pairs="halves"),
                               rotary(x, positions)[..., perm])
    back = torch.argsort(perm)
    torch.testing.assert_close(rotary(x[..., back], positions)[..., perm],
                               rotary(x, positions, pairs="halves")[..., back][..., perm])


@given(H=st.integers(1, 3), half=st.integers(1, 4), Lq=st.integers(1, 5), Lk=st.integers(1, 5),
       seed=st.integers(0, 2**16), bias=st.booleans())
@SETTINGS
def test_scores_agree_once_W_q_and_W_k_are_permuted(H, half, Lq, Lk, seed, bias):
    """A model trained interleaved, converted to halves by permuting W_q's and W_k's rows."""
    d = 2 * half
    D = H * d
    g = torch.Generator().manual_seed(seed)
    W_q, W_k = torch.nn.Linear(D, D, bias=bias).double(), torch.nn.Linear(D, D, bias=bias).double()
    with torch.no_grad():
        for W in (W_q, W_k):
            W.weight.copy_(torch.randn(D, D, generator=g))
            if bias:
                W.bias.copy_(torch.randn(D, generator=g))
    x_q = torch.randn(2, Lq, D, generator=g, dtype=torch.float64)
    x_k = torch.randn(2, Lk, D, generator=g, dtype=torch.float64)
    q_pos, k_pos = torch.arange(Lk, Lk + Lq), torch.arange(Lk)  # queries after the keys

    def scores(weights, pairs):
        (wq, bq), (wk, bk) = weights
        q = split_heads(torch.nn.functional.linear(x_q, wq, bq), H)  # (B, Lq, D) -> (B, H, Lq, d)
        k = split_heads(torch.nn.functional.linear(x_k, wk, bk), H)  # (B, Lk, D) -> (B, H, Lk, d)
        q, k = rotary(q, q_pos, pairs=pairs), rotary(k, k_pos, pairs=pairs)
        return q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, H, Lq, Lk)

    original = [(W.weight, W.bias) for W in (W_q, W_k)]
    perm = rope_permutation(d, H)
    converted = [(w[perm], None if b is None else b[perm]) for w, b in original]
    reference = scores(original, "interleaved")
    torch.testing.assert_close(scores(converted, "halves"), reference)
    wrong = scores(original, "halves")  # trained interleaved, run with halves unpermuted
    assert torch.allclose(wrong, reference) == (d == 2)  # d = 2: one pair, (0, 1) in both


@pytest.mark.parametrize("pairs", ["interleaved", "halves"])
def test_positions_per_example(pairs, generator):
    """(B, L) positions: one row per example, shared by the heads."""
    x = torch.randn(2, 3, 4, 6, generator=generator)
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])  # (B, L)
    out = rotary(x, positions, pairs=pairs)
    torch.testing.assert_close(out[:1], rotary(x[:1], torch.arange(4), pairs=pairs))
    torch.testing.assert_close(out[1:], rotary(x[1:], torch.arange(5, 9), pairs=pairs))
    torch.testing.assert_close(out, rotary(x, positions[:, None], pairs=pairs))  # (B, 1, L)


def test_positions_per_example_when_B_equals_H(generator):
    """A (B, L) row belongs to an example even when B == H (not broadcast as (H, L))."""
    x = torch.randn(2, 2, 3, 4, generator=generator)
    positions = torch.tensor([[0, 1, 2], [10, 11, 12]])
    out = rotary(x, positions)
    torch.testing.assert_close(out[1], rotary(x[1:], torch.arange(10, 13))[0])


@pytest.mark.parametrize("pairs", ["interleaved", "halves"])
def test_both_conventions_keep_norms_and_depend_on_the_offset_only(pairs, generator):
    q, k = torch.randn(2, 1, 1, 1, 8, generator=generator, dtype=torch.float64).unbind(0)
    torch.testing.assert_close(rotary(q, [5], pairs=pairs).norm(), q.norm())

    def score(m, n):
        return (rotary(q, [m], pairs=pairs) * rotary(k, [n], pairs=pairs)).sum()

    torch.testing.assert_close(score(7, 3), score(104, 100))
    assert rotary(q.half(), [3], pairs=pairs).dtype == torch.float16


@pytest.mark.parametrize("kwargs, match", [
    (dict(pairs="half"), "pairs must be one of"),
    (dict(pairs=None), "pairs must be one of"),
    (dict(positions=torch.zeros(3, 4, dtype=torch.long)), r"\(B, L\) = \(2, 4\)"),
    (dict(positions=torch.zeros(2, 5, dtype=torch.long)), "positions must have shape"),
])
def test_rotary_rejects_bad_input(kwargs, match):
    args = dict(x=torch.zeros(2, 3, 4, 6), positions=torch.arange(4)) | kwargs
    with pytest.raises(ValueError, match=match):
        rotary(**args)


@pytest.mark.parametrize("args, match", [
    ((5,), "d must be an even integer"),
    ((0,), "d must be an integer >= 1"),
    ((4.0,), "d must be an integer >= 1"),
    ((4, 0), "num_heads must be an integer >= 1"),
    ((4, True), "num_heads must be an integer >= 1"),
])
def test_rope_permutation_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        rope_permutation(*args)
