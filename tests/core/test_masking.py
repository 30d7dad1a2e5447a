"""masked_softmax, valid-length checks and mask converters."""

import pytest
import torch

from mha_lib import (
    check_valid_lens,
    keep_mask_from_valid_lens,
    keep_to_padding,
    masked_softmax,
    padding_mask_from_valid_lens,
    padding_to_keep,
)


def test_without_valid_lens_is_softmax():
    X = torch.randn(2, 3, 5)
    torch.testing.assert_close(masked_softmax(X), torch.softmax(X, dim=-1))


def test_masked_entries_are_exactly_zero_and_rows_sum_to_one():
    X = torch.randn(2, 2, 4)
    W = masked_softmax(X, torch.tensor([2, 3]))
    assert (W[0, :, 2:] == 0).all() and (W[1, :, 3:] == 0).all()
    torch.testing.assert_close(W.sum(-1), torch.ones(2, 2))


def test_d2l_example_per_query_lengths():
    W = masked_softmax(torch.rand(2, 2, 4), torch.tensor([[1, 3], [2, 4]]))
    assert (W[0, 0, 1:] == 0).all() and W[0, 0, 0] == 1
    assert (W[0, 1, 3:] == 0).all() and (W[1, 0, 2:] == 0).all() and (W[1, 1] > 0).all()


def test_whole_number_floats_are_accepted_like_the_djl_edition():
    X = torch.randn(2, 2, 4)
    torch.testing.assert_close(masked_softmax(X, [3.0, 2.0]), masked_softmax(X, torch.tensor([3, 2])))


def test_valid_length_zero_gives_zeros_not_nan_nor_uniform():
    X = torch.randn(2, 3, 4, requires_grad=True)
    W = masked_softmax(X, torch.tensor([0, 4]))
    assert torch.equal(W[0], torch.zeros(3, 4))
    W.sum().backward()
    assert torch.isfinite(X.grad).all()


def test_large_scores_do_not_overflow_into_masked_entries():
    X = torch.full((1, 1, 3), 1e30)
    W = masked_softmax(X, torch.tensor([2]))
    torch.testing.assert_close(W, torch.tensor([[[0.5, 0.5, 0.0]]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_is_kept(dtype):
    assert masked_softmax(torch.randn(1, 2, 3, dtype=dtype), [1]).dtype == dtype


@pytest.mark.parametrize(
    "valid_lens, message",
    [
        (torch.tensor([1, 2, 3]), "valid_lens has 3 rows but the batch has 2"),
        (torch.tensor([[1, 2, 3], [1, 1, 1]]), "must be (B, Lq) = (2, 2)"),
        (torch.ones(2, 2, 1), "must have shape (B,) or (B, Lq)"),
        (torch.tensor([-1, 2]), "must be >= 0"),
        (torch.tensor([1.5, 2.0]), "whole numbers"),
        (torch.tensor([5, 2]), "<= the number of key-value pairs Lk = 4"),
        (torch.tensor([True, False]), "integers or whole-number floats"),
        ("ab", "valid_lens must be a tensor or a list of numbers"),
    ],
)
def test_bad_valid_lens_are_named(valid_lens, message):
    with pytest.raises(ValueError, match="valid_lens") as err:
        masked_softmax(torch.randn(2, 2, 4), valid_lens)
    assert message in str(err.value)


def test_bad_scores_are_named():
    with pytest.raises(ValueError, match="X must have 3 dimensions"):
        masked_softmax(torch.randn(2, 4))
    with pytest.raises(ValueError, match="floating-point"):
        masked_softmax(torch.ones(1, 2, 3, dtype=torch.long))


def test_check_valid_lens_returns_long_or_none():
    assert check_valid_lens(None, 2, 3, 4) is None
    out = check_valid_lens([1.0, 4.0], 2, 3, 4)
    assert out.dtype == torch.long and out.tolist() == [1, 4]


def test_mask_conventions_round_trip():
    valid_lens = torch.tensor([1, 3])
    keep = keep_mask_from_valid_lens(valid_lens, num_queries=2, num_keys=4)
    assert keep.shape == (2, 2, 4)
    assert keep[0, 0].tolist() == [True, False, False, False]
    padding = padding_mask_from_valid_lens(valid_lens, num_keys=4)
    assert torch.equal(keep_to_padding(keep)[:, 0], padding)
    assert torch.equal(padding_to_keep(padding), keep[:, 0])


def test_keep_mask_per_query():
    keep = keep_mask_from_valid_lens(torch.tensor([[1, 2, 3]]), num_queries=3, num_keys=3)
    assert torch.equal(keep[0], torch.tril(torch.ones(3, 3, dtype=torch.bool)))


def test_padding_mask_needs_one_length_per_example():
    with pytest.raises(ValueError, match="valid_lens must have shape"):
        padding_mask_from_valid_lens(torch.tensor([[1, 2]]), num_keys=3)


def test_inplace_overwrites_only_when_asked_and_gives_the_same_weights():
    X = torch.randn(2, 3, 4)
    before = X.clone()
    expected = masked_softmax(X, torch.tensor([2, 0]))
    assert torch.equal(X, before)  # the default never touches X
    torch.testing.assert_close(masked_softmax(X, torch.tensor([2, 0]), inplace=True), expected)
    assert not torch.equal(X, before)  # masked scores were overwritten


def test_inplace_keeps_gradients_of_a_product():
    q = torch.randn(1, 3, 4, requires_grad=True)
    scores = q @ q.transpose(1, 2)
    masked_softmax(scores, torch.tensor([2]), inplace=True).sum().backward()
    assert torch.isfinite(q.grad).all()
