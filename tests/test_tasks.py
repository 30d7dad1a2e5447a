"""The previous-plus-last task: labels checked by hand, padding, reproducibility, bad input."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.tasks import IGNORE_INDEX, PAD, VOCAB_SIZE, make_batch, targets_for, token_labels


def test_targets_by_hand():
    # x = 3 1 4 1 5 (L = 5), last digit 5: y[i] = (x[i-1] + 5) % 10 for i = 1..4.
    # x = 9 2 6 (L = 3), last digit 6: y[1] = (9 + 6) % 10 = 5, y[2] = (2 + 6) % 10 = 8.
    tokens = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, PAD, PAD]])
    valid_lens = torch.tensor([5, 3])
    I = IGNORE_INDEX
    expected = torch.tensor([[I, 8, 6, 9, 6], [I, 5, 8, I, I]])
    assert torch.equal(targets_for(tokens, valid_lens), expected)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), batch=st.integers(1, 16), lo=st.integers(2, 6), extra=st.integers(0, 6))
def test_make_batch_is_consistent(seed, batch, lo, extra):
    hi = lo + extra
    b = make_batch(batch, generator=torch.Generator().manual_seed(seed), min_len=lo, max_len=hi)
    assert b.tokens.shape == b.targets.shape == (batch, hi) and b.valid_lens.shape == (batch,)
    assert len(b) == batch
    assert ((b.valid_lens >= lo) & (b.valid_lens <= hi)).all()
    padding = torch.arange(hi) >= b.valid_lens[:, None]
    assert (b.tokens[padding] == PAD).all() and (b.tokens[~padding] < VOCAB_SIZE).all()
    assert (b.targets[padding] == IGNORE_INDEX).all() and (b.targets[:, 0] == IGNORE_INDEX).all()
    # every other label follows the rule, checked with plain Python loops
    for r in range(batch):
        n = int(b.valid_lens[r])
        for i in range(1, n):
            assert b.targets[r, i] == (b.tokens[r, i - 1] + b.tokens[r, n - 1]) % VOCAB_SIZE


def test_make_batch_is_reproducible():
    a = make_batch(8, generator=torch.Generator().manual_seed(3))
    b = make_batch(8, generator=torch.Generator().manual_seed(3))
    c = make_batch(8, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.valid_lens, b.valid_lens)
    assert not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=4, min_len=1), "min_len"),
        (dict(batch_size=4, min_len=8, max_len=5), "min_len"),
        (dict(batch_size=4, vocab_size=0), "vocab_size"),
        (dict(batch_size=4, generator=3), "generator"),
    ],
)
def test_make_batch_rejects_bad_input(kwargs, match):
    kwargs.setdefault("generator", torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=match):
        make_batch(**kwargs)


def test_token_labels():
    assert token_labels(torch.tensor([7, 2, PAD]), 2) == ["0:7", "1:2", "2:pad"]


def test_targets_for_checks_its_arguments_and_takes_any_integer_dtype():
    import pytest

    from mha_lib.tasks import targets_for

    tokens, lens = torch.tensor([[1, 2, 3, 10]]), torch.tensor([3])
    want = targets_for(tokens, lens)
    torch.testing.assert_close(targets_for(tokens.to(torch.uint8), lens.int()), want)
    for args, message in [
        ((tokens.float(), lens), "tokens must be an integer tensor of shape \\(B, L\\)"),
        ((tokens, None), "valid_lens must be an integer tensor"),
        ((tokens, torch.tensor([5])), r"valid_lens must be in \[0, L = 4\]"),
        ((tokens, torch.tensor([1, 2])), r"valid_lens must have shape \(B,\) = \(1,\)"),
        ((tokens[:, :0], lens), "at least one position"),
        ((tokens, lens, 0), "vocab_size must be an integer >= 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            targets_for(*args)
    assert targets_for(tokens[:0], lens[:0]).shape == (0, 4)
