"""transpose_qkv and transpose_output."""

import einops
import pytest
import torch

from mha_lib import merge_heads, split_heads, transpose_output, transpose_qkv


def test_shapes_and_exact_round_trip():
    X = torch.randn(2, 3, 8)
    folded = transpose_qkv(X, 4)
    assert folded.shape == (8, 3, 2)
    assert torch.equal(transpose_output(folded, 4), X)


def test_row_b_times_h_plus_h_holds_head_h_of_example_b():
    B, L, H, d = 2, 3, 4, 5
    X = torch.randn(B, L, H * d)
    folded = transpose_qkv(X, H)
    for b in range(B):
        for h in range(H):
            assert torch.equal(folded[b * H + h], X[b, :, h * d:(h + 1) * d])


def test_same_as_the_einops_pattern():
    X = torch.randn(3, 4, 6)
    assert torch.equal(transpose_qkv(X, 2), einops.rearrange(X, "b l (h d) -> (b h) l d", h=2))
    Y = torch.randn(6, 4, 3)
    assert torch.equal(transpose_output(Y, 2), einops.rearrange(Y, "(b h) l d -> b l (h d)", h=2))


def test_errors_are_named():
    with pytest.raises(ValueError, match=r"feature size of X \(10\) must be divisible by num_heads \(3\)"):
        transpose_qkv(torch.randn(1, 2, 10), 3)
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1, got 0"):
        transpose_qkv(torch.randn(1, 2, 10), 0)
    with pytest.raises(ValueError, match=r"first axis of X \(5\)"):
        transpose_output(torch.randn(5, 2, 3), 2)
    with pytest.raises(ValueError, match="X must have 3 dimensions"):
        transpose_output(torch.randn(5, 2), 1)


def test_split_and_merge_heads():
    X = torch.randn(2, 3, 8)
    split = split_heads(X, 4)
    assert split.shape == (2, 4, 3, 2)
    assert torch.equal(split, einops.rearrange(X, "b l (h d) -> b h l d", h=4))
    assert torch.equal(merge_heads(split), X)


def test_merge_heads_needs_four_dimensions():
    with pytest.raises(ValueError, match="X must have 4 dimensions"):
        merge_heads(torch.randn(2, 3, 4))
