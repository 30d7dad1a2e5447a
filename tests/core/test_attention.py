"""DotProductAttention."""

import math

import pytest
import torch
import torch.nn.functional as F

from mha_lib import DotProductAttention


def test_matches_sdpa_with_the_same_mask():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    attention = DotProductAttention(dropout=0.0)
    out, weights = attention(q, k, v, torch.tensor([2, 5]), need_weights=True)
    keep = torch.arange(5) < torch.tensor([2, 5])[:, None, None]
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep))
    expected = torch.softmax((q @ k.transpose(1, 2) / math.sqrt(4)).masked_fill(~keep, -math.inf), -1)
    torch.testing.assert_close(weights, expected)


def test_returns_output_only_by_default():
    out = DotProductAttention(0.0)(torch.randn(1, 2, 3), torch.randn(1, 4, 3), torch.randn(1, 4, 5))
    assert out.shape == (1, 2, 5)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    attention = DotProductAttention(dropout=0.5)
    q, k, v = torch.randn(1, 8, 4), torch.randn(1, 8, 4), torch.randn(1, 8, 4)
    attention.eval()
    assert torch.equal(attention(q, k, v), attention(q, k, v))
    attention.train()
    assert not torch.equal(attention(q, k, v), attention(q, k, v))


@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5, "0.1", True])
def test_bad_dropout(dropout):
    with pytest.raises(ValueError, match="dropout must be a number in \\[0, 1\\)"):
        DotProductAttention(dropout)


def test_bad_shapes_are_named():
    attention = DotProductAttention(0.0)
    with pytest.raises(ValueError, match="queries and keys must have the same feature size d, got 3 and 4"):
        attention(torch.randn(1, 2, 3), torch.randn(1, 4, 4), torch.randn(1, 4, 4))
    with pytest.raises(ValueError, match="keys and values must have the same length Lk, got 4 keys and 5 values"):
        attention(torch.randn(1, 2, 4), torch.randn(1, 4, 4), torch.randn(1, 5, 4))
    with pytest.raises(ValueError, match="same batch size, got 1, 2 and 2"):
        attention(torch.randn(1, 2, 4), torch.randn(2, 4, 4), torch.randn(2, 4, 4))
    with pytest.raises(ValueError, match="keys must have 3 dimensions"):
        attention(torch.randn(1, 2, 4), torch.randn(4, 4), torch.randn(1, 4, 4))
