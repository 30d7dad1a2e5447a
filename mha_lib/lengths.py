"""Valid lengths, d2l's way of masking: how many keys each example (B,) or query (B, Lq) may see.

The checks every path runs on them (one host read for all values, :class:`CheckedLens` so that
they are not read again), and the positions of new tokens. :mod:`mha_lib.masks` turns valid
lengths into a mask (``padding(valid_lens)``), one kind among others.

Shape legend
    B   batch size
    Lq  number of queries
    Lk  number of key-value pairs
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import Tensor

from mha_lib._checks import as_tensor, check_size, read_scalars, tracing

__all__ = ["CheckedLens", "check_positions", "check_valid_lens", "lens_rows", "read_valid_lens"]


class CheckedLens(NamedTuple):
    """Valid lengths that passed the checks, with the smallest and largest entry the check read.

    Accepted wherever valid lengths are: a function that gets a ``CheckedLens`` checks its shape
    but does not read its values again (no second host synchronisation), and may use what is
    known: ``lowest > 0`` means that no query has an empty row.

    Attributes:
        lens: (B,) or (B, Lq) ``torch.long``.
        lowest: the smallest entry, or None when unknown (while a graph is recorded, or no entry).
        highest: the largest entry, or None when unknown.
    """

    lens: Tensor
    lowest: int | None = None
    highest: int | None = None


def read_valid_lens(
    valid_lens: Tensor | Sequence[float] | CheckedLens | None,
    batch_size: int,
    num_queries: int,
    num_keys: int,
    *also: Tensor,
    device: torch.device | None = None,
) -> tuple[CheckedLens | None, list[float | None]]:
    """Check valid lengths, reading their values and the 0-d tensors ``also`` in ONE host read.

    :func:`check_valid_lens` without the extras. A caller that must read a value of its own
    (say, whether its inputs are finite) passes it as ``also`` and pays one synchronisation
    with the device instead of two.

    Returns:
        ``(CheckedLens or None, values of also)``; while a graph is recorded nothing is read:
        ``lowest``/``highest`` and the values of ``also`` are None.

    Raises:
        ValueError: as :func:`check_valid_lens`.
    """
    if not tracing():  # torch.jit.trace hands sizes over as tensors
        for value, name in ((batch_size, "batch_size"), (num_queries, "num_queries"), (num_keys, "num_keys")):
            check_size(value, name)
    if valid_lens is None:
        return None, _read(also)
    if isinstance(valid_lens, CheckedLens):
        _check_lens_shape(valid_lens.lens, batch_size, num_queries)
        if valid_lens.highest is not None and valid_lens.highest > num_keys:
            _raise_too_long(valid_lens.lens, num_keys)
        lens = valid_lens if device is None else valid_lens._replace(lens=valid_lens.lens.to(device))
        return lens, _read(also)
    lens = _as_lens_tensor(valid_lens)
    _check_lens_shape(lens, batch_size, num_queries)
    if tracing() or lens.numel() == 0:  # value checks need the data (see mha_lib._checks.tracing)
        values = _read(also)
        lowest = highest = None
    else:
        summary = _lens_summary(lens)
        lowest, highest, *values = read_scalars(*summary, *also)
        if len(summary) == 3:  # floats: whether every entry is a whole number
            _check_whole(lens, values.pop(0))
        _check_lens_values(lens, lowest, highest, num_keys)
        lowest, highest = int(lowest), int(highest)
    lens = lens.long() if device is None else lens.to(device=device, dtype=torch.long)
    return CheckedLens(lens, lowest, highest), values


def check_valid_lens(
    valid_lens: Tensor | Sequence[float] | CheckedLens | None,
    batch_size: int,
    num_queries: int,
    num_keys: int,
) -> Tensor | None:
    """Validate valid lengths and return them as an integer tensor.

    Args:
        valid_lens: None, shape (B,) or (B, Lq); integers (any integer dtype) or whole-number
            floats in [0, Lk]; or a :class:`CheckedLens`.
        batch_size: B.
        num_queries: Lq.
        num_keys: Lk.

    Returns:
        None, or a ``torch.long`` tensor of shape (B,) or (B, Lq).

    Raises:
        ValueError: wrong type, dtype, device (meta), number of dimensions, batch size or shape,
            an entry that is negative, not a whole number, or larger than Lk.
    """
    lens, _ = read_valid_lens(valid_lens, batch_size, num_queries, num_keys)
    return None if lens is None else lens.lens


def _read(scalars: Sequence[Tensor]) -> list[float | None]:
    """Read ``scalars`` in one host read, or give Nones while a graph is recorded."""
    return [None] * len(scalars) if tracing() else read_scalars(*scalars)


def _as_lens_tensor(valid_lens: object) -> Tensor:
    """Valid lengths as a tensor of integers or floats (not yet checked for shape or values)."""
    valid_lens = as_tensor(valid_lens, "valid_lens", "a tensor or a list of numbers")
    if valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise ValueError(
            f"valid_lens must hold integers or whole-number floats, got dtype {valid_lens.dtype}"
        )
    return valid_lens


def _check_lens_shape(valid_lens: Tensor, batch_size: int, num_queries: int) -> None:
    if valid_lens.dim() not in (1, 2):
        raise ValueError(
            "valid_lens must have shape (B,) or (B, Lq), "
            f"got {valid_lens.dim()} dimensions (shape {tuple(valid_lens.shape)})"
        )
    if valid_lens.shape[0] != batch_size:
        raise ValueError(
            f"valid_lens has {valid_lens.shape[0]} rows but the batch has {batch_size}"
        )
    if valid_lens.dim() == 2 and valid_lens.shape[1] != num_queries:
        raise ValueError(
            f"valid_lens of shape {tuple(valid_lens.shape)} must be (B, Lq) = "
            f"({batch_size}, {num_queries}): {valid_lens.shape[1]} columns but {num_queries} queries"
        )


def _lens_summary(valid_lens: Tensor) -> tuple[Tensor, ...]:
    """Smallest entry, largest entry and, for floats, 1 if every entry is a whole number:
    0-d tensors, to be read at once."""
    lowest, highest = torch.aminmax(valid_lens)  # one pass for both
    if not valid_lens.is_floating_point():
        return lowest, highest
    whole = (torch.isfinite(valid_lens) & (valid_lens == valid_lens.round())).all()
    return lowest, highest, whole


def _check_whole(valid_lens: Tensor, whole: float) -> None:
    if not whole:
        raise ValueError(f"valid_lens must be whole numbers, got {valid_lens.tolist()}")


def _check_lens_values(valid_lens: Tensor, lowest, highest, num_keys: int) -> None:
    """Raise unless every entry lies in [0, Lk] (from the values read at once)."""
    if lowest < 0:
        raise ValueError(f"valid_lens must be >= 0, got {valid_lens.tolist()}")
    if highest > num_keys:
        _raise_too_long(valid_lens, num_keys)


def _raise_too_long(valid_lens: Tensor, num_keys: int) -> None:
    raise ValueError(
        f"valid_lens must be <= the number of key-value pairs Lk = {num_keys}, "
        f"got {valid_lens.tolist()}"
    )

def lens_rows(valid_lens: object) -> int:
    """The batch size valid lengths claim (their first axis), for converters that take no B."""
    if valid_lens is None:
        raise ValueError("valid_lens must be a tensor or a list of numbers, got None")
    if isinstance(valid_lens, CheckedLens):
        valid_lens = valid_lens.lens
    shape = getattr(valid_lens, "shape", None)
    if shape is None:
        try:
            shape = torch.as_tensor(valid_lens).shape
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"valid_lens must be a tensor or a list of numbers: {err}") from None
    if len(shape) == 0:
        raise ValueError("valid_lens must have shape (B,) or (B, Lq), got a scalar")
    return shape[0]

def check_positions(positions: object, batch_size: int, num_new: int | None = None, *,
                    name: str = "positions", expand: bool = True) -> Tensor:
    """THE check of positions, for every path: return them as a ``torch.long`` tensor, or raise.

    Positions number the tokens of a sequence (0, 1, ...) for decoding with a cache, for
    rotary embeddings and for masks; a causal query at position p has the valid length p + 1.
    Only the type and shape are checked here (no value is read); ``mha_lib.decoding.LayerCache.update``
    checks their values against the cache.

    Shapes:
        positions: (n,) (the same for every example), (1, n) or (B, n), integers; n must be
            ``num_new`` when given.
        returns: (B, n), possibly an expanded view; with ``expand=False`` (1 or B, n).

    Args:
        name: the argument's name in the error messages (``q_positions``, ...).
    """
    if not tracing():  # (torch.jit.trace hands sizes over as tensors)
        check_size(batch_size, "batch_size")
        if num_new is not None:
            check_size(num_new, "num_new")
    positions = as_tensor(positions, name, "a tensor of integers")
    if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
        raise ValueError(f"{name} must hold integers, got dtype {positions.dtype}")
    n = num_new if num_new is not None or positions.dim() == 0 else positions.shape[-1]
    if positions.shape not in ((n,), (1, n), (batch_size, n)):
        expected = (f"(L,), (1, L) or (B, L) with B = {batch_size}" if num_new is None
                    else f"(n,) = ({n},) or (B, n) = ({batch_size}, {n})")
        raise ValueError(f"{name} must have shape {expected}, got {tuple(positions.shape)}")
    positions = positions.long()
    if positions.dim() == 1:
        positions = positions[None]  # (n,) -> (1, n)
    return positions.expand(batch_size, n) if expand else positions
