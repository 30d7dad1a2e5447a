"""A synthetic task whose solution needs two different attention patterns.

The *previous-plus-last* task. A sequence holds ``L`` digits ``x[0], ..., x[L-1]`` (``L`` varies
from example to example, the rest of the row is padding). At every position ``i >= 1`` the
model must output

    y[i] = (x[i-1] + x[L-1]) mod V

the units digit of "the previous digit plus the last digit" (``V = 10``). Position 0 has no
previous digit and padding has no target: both are marked :data:`IGNORE_INDEX`.

Two kinds of attention solve it: a *previous-token* head (query ``i`` looks at key ``i-1``, a
fixed offset) and a *last-token* head (every query looks at key ``L-1``, which moves with the
valid length). The last-token head only works if padding is masked: without ``valid_lens`` the
"rightmost key" would be a padding slot.

Shape legend
    B   batch size
    L   padded sequence length (``max_len``)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mha_lib._checks import check_positive_int, check_size

VOCAB_SIZE = 10
"""V: the digits 0..9."""
PAD = VOCAB_SIZE
"""Token id of a padding slot (one past the digits)."""
MIN_LEN = 4
MAX_LEN = 12
IGNORE_INDEX = -100
"""Target of positions without a label (``nn.CrossEntropyLoss``'s default ``ignore_index``)."""


@dataclass(frozen=True)
class TaskBatch:
    """A batch of the previous-plus-last task.

    Attributes:
        tokens: (B, L) long; digits, then ``PAD`` after each valid length.
        valid_lens: (B,) long; how many positions of each row are real digits.
        targets: (B, L) long; ``(x[i-1] + x[L-1]) mod V``, or ``IGNORE_INDEX`` at position 0
            and on padding.
    """

    tokens: Tensor
    valid_lens: Tensor
    targets: Tensor

    def __len__(self) -> int:
        return self.tokens.shape[0]


def targets_for(tokens: Tensor, valid_lens: Tensor, vocab_size: int = VOCAB_SIZE) -> Tensor:
    """The labels of the task for given digits and lengths.

    Shapes:
        tokens: (B, L); valid_lens: (B,); returns (B, L).

    Returns:
        ``(tokens[b, i-1] + tokens[b, valid_lens[b]-1]) % vocab_size`` for ``1 <= i < valid_lens[b]``,
        ``IGNORE_INDEX`` elsewhere.

    Raises:
        ValueError: tokens not a (B, L) integer tensor, valid_lens not (B,) integers in
            [0, L], or vocab_size not an integer >= 1.
    """
    tokens, valid_lens = _check_tokens_and_lens(tokens, valid_lens, vocab_size)  # as int64
    B, L = tokens.shape
    positions = torch.arange(L, device=tokens.device)  # (L,)
    last = tokens.gather(1, (valid_lens - 1).clamp(min=0)[:, None])  # (B,) -> (B, 1)
    previous = torch.cat([torch.zeros_like(tokens[:, :1]), tokens[:, :-1]], dim=1)  # (B, L)
    targets = (previous + last) % vocab_size  # (B, L)
    labelled = (positions >= 1) & (positions < valid_lens[:, None])  # (B, L)
    return targets.masked_fill(~labelled, IGNORE_INDEX)


def _check_tokens_and_lens(
    tokens: object, valid_lens: object, vocab_size: object
) -> tuple[Tensor, Tensor]:
    """The checks of :func:`targets_for`; returns tokens and valid_lens as int64."""
    check_positive_int(vocab_size, "vocab_size")
    for name, x, ndim in (("tokens", tokens, 2), ("valid_lens", valid_lens, 1)):
        if (
            not isinstance(x, Tensor) or x.dim() != ndim or x.is_floating_point()
            or x.is_complex() or x.dtype == torch.bool
        ):
            got = f"{x.dtype} of shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
            want = "(B, L)" if ndim == 2 else "(B,)"
            raise ValueError(f"{name} must be an integer tensor of shape {want}, got {got}")
    B, L = tokens.shape
    if L == 0:
        raise ValueError(f"tokens must have at least one position, got shape {tuple(tokens.shape)}")
    if valid_lens.shape != (B,):
        raise ValueError(f"valid_lens must have shape (B,) = ({B},), got {tuple(valid_lens.shape)}")
    if B and (valid_lens.min() < 0 or valid_lens.max() > L):
        raise ValueError(f"valid_lens must be in [0, L = {L}], got {valid_lens.tolist()}")
    return tokens.long(), valid_lens.to(tokens.device).long()


def make_batch(
    batch_size: int,
    *,
    generator: torch.Generator,
    vocab_size: int = VOCAB_SIZE,
    min_len: int = MIN_LEN,
    max_len: int = MAX_LEN,
) -> TaskBatch:
    """Draw a random batch of the previous-plus-last task.

    Lengths are uniform in ``[min_len, max_len]``, digits uniform in ``[0, vocab_size)``.
    The padding token is ``vocab_size``.

    Args:
        batch_size: B.
        generator: the seeded source of randomness (required, so every batch is reproducible).
        vocab_size: V, number of digit values.
        min_len: shortest sequence (>= 2, so that there is at least one target).
        max_len: L, the padded length.

    Returns:
        A :class:`TaskBatch` with tensors of shape (B, max_len) and (B,).

    Raises:
        ValueError: a size that is not a positive integer, ``min_len < 2`` or
            ``min_len > max_len``, or a generator that is not a ``torch.Generator``.
    """
    B = check_positive_int(batch_size, "batch_size")
    V = check_positive_int(vocab_size, "vocab_size")
    lo = check_positive_int(min_len, "min_len")
    hi = check_positive_int(max_len, "max_len")
    if lo < 2 or lo > hi:
        raise ValueError(f"min_len must be in [2, max_len={hi}], got {lo}")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    valid_lens = torch.randint(lo, hi + 1, (B,), generator=generator)  # (B,)
    digits = torch.randint(0, V, (B, hi), generator=generator)  # (B, L)
    padding = torch.arange(hi) >= valid_lens[:, None]  # (B, L)
    tokens = digits.masked_fill(padding, V)
    return TaskBatch(tokens, valid_lens, targets_for(tokens, valid_lens, V))


def token_labels(tokens: Tensor, valid_len: int) -> list[str]:
    """Axis labels for one example: ``"0:3", "1:1", ...`` (position:digit), ``"i:pad"`` past ``valid_len``."""
    if not isinstance(tokens, Tensor) or tokens.dim() != 1:
        raise ValueError(f"tokens must be a 1-D tensor (one example), got {type(tokens).__name__}")
    check_size(valid_len, "valid_len")
    return [f"{i}:{int(t)}" if i < valid_len else f"{i}:pad" for i, t in enumerate(tokens)]
