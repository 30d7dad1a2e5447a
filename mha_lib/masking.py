"""Masking: valid lengths, attention masks, and the masked softmax.

Shape legend
    B   batch size (for multi-head attention after folding: B*H)
    H   number of heads (the masks of the head layout (B, H, Lq, Lk) broadcast over it)
    Lq  number of queries
    Lk  number of key-value pairs

A *valid length* says how many key-value pairs a query may look at: with ``valid_lens[b] = 3``
every query of example ``b`` attends to keys 0, 1 and 2 only. It is given per example, shape
(B,), or per query, shape (B, Lq) (a causal mask is ``valid_lens[b, i] = i + 1``).

Three mask conventions meet in the literature; the named helpers below convert between them:

* valid lengths, as in the d2l.ai chapter;
* a *keep* mask, ``True`` = may attend, as in ``torch.nn.functional.scaled_dot_product_attention``;
* a *padding* mask, ``True`` = masked out, as in ``nn.MultiheadAttention`` (``key_padding_mask``)
  and the einsum notes.

Every attention path of the library turns valid lengths into a mask in ONE place,
:func:`mask_from_valid_lens`: the teaching ``masked_softmax``, the additive bias of the weights
path, the keep mask of the fused kernel, the blocks of ``mha_lib.flash`` and the causal masks of
decoding with a cache.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import Tensor

from mha_lib._checks import (
    as_tensor,
    check_bool,
    check_not_meta,
    check_size,
    check_tensor,
    quiet_when_traced,
    read_scalars,
    tracing,
)

__all__ = [
    "CheckedLens",
    "causal_valid_lens",
    "check_attention_mask",
    "check_positions",
    "check_valid_lens",
    "keep_mask_from_valid_lens",
    "keep_to_padding",
    "mask_from_valid_lens",
    "masked_softmax",
    "padding_mask_from_valid_lens",
    "padding_to_keep",
    "read_valid_lens",
    "softmax_over_kept",
    "valid_lens_from_keep_mask",
]


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


def mask_from_valid_lens(
    valid_lens: Tensor,
    num_keys: int,
    *,
    heads: bool = False,
    first_key: int = 0,
    fill_empty: bool = False,
    bias_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """THE valid-lengths -> mask builder: every attention path of the library builds its mask here.

    Key ``first_key + j`` may be attended by query ``i`` of example ``b`` when it lies below
    the valid length ``valid_lens[b]`` (or ``valid_lens[b, i]``). One length per example gives
    one row of keys that broadcasts over the queries (Lq times less to build than a full
    mask). The values are not read (no host synchronisation, no branch on them: a recorded
    graph holds for any lengths), so check them first with :func:`check_valid_lens`.

    Shapes:
        valid_lens: (B,) or (B, Lq), integers.
        returns: ``mask`` (B, 1 or Lq, n) with n = ``num_keys``, and ``empty`` (B, 1 or Lq, 1)
            or None; with ``heads`` both get a heads axis, (B, 1, 1 or Lq, n) and
            (B, 1, 1 or Lq, 1), that broadcasts over the H heads of (B, H, Lq, Lk) scores.

    Args:
        valid_lens: the lengths.
        num_keys: n, how many keys the mask covers.
        heads: add the heads axis.
        first_key: the position of the first key covered (a block of keys, as in
            :mod:`mha_lib.flash`).
        fill_empty: a query with valid length 0 may then attend to *every* key, and the caller
            zeroes its output with ``empty`` (a row that keeps nothing gives NaN or zeros,
            depending on the fused kernel and its version; a filled row gives neither).
        bias_dtype: return an additive bias of this dtype instead of the keep mask: 0 where a
            query may attend, -inf elsewhere (added to a score, -inf has exp() exactly 0).

    Returns:
        ``(mask, empty)``: the keep mask (``True`` = may attend) or the bias, and, with
        ``fill_empty``, ``empty``: True for a query whose valid length is 0 (else None).
    """
    _check_mask_args(valid_lens, num_keys, first_key, bias_dtype)
    if valid_lens.dim() == 2:
        lens = valid_lens[:, :, None]  # (B, Lq) -> (B, Lq, 1)
    else:
        lens = valid_lens[:, None, None]  # (B,) -> (B, 1, 1)
    if heads:
        lens = lens[:, None]  # (B, Lq or 1, 1) -> (B, 1, Lq or 1, 1): the same for every head
    positions = torch.arange(first_key, first_key + num_keys, device=lens.device)  # (n,)
    keep = positions < lens  # (..., Lq or 1, 1) vs (n,) -> (..., Lq or 1, n)
    empty = None
    if fill_empty:
        empty = lens == 0  # (..., Lq or 1, 1)
        keep = keep | empty
    if bias_dtype is None:
        return keep, empty
    return torch.zeros(keep.shape, dtype=bias_dtype, device=keep.device).masked_fill_(
        ~keep, float("-inf")
    ), empty


@quiet_when_traced
def _check_mask_args(valid_lens: object, num_keys: object, first_key: object, bias_dtype: object) -> None:
    """The checks of :func:`mask_from_valid_lens`: types and shapes only (no value is read)."""
    if not isinstance(valid_lens, Tensor) or valid_lens.is_floating_point() or valid_lens.is_complex() \
            or valid_lens.dtype == torch.bool or valid_lens.dim() not in (1, 2):
        raise ValueError(
            "valid_lens must be an integer tensor of shape (B,) or (B, Lq) (checked by "
            f"check_valid_lens), got {getattr(valid_lens, 'dtype', type(valid_lens).__name__)} of "
            f"shape {tuple(getattr(valid_lens, 'shape', ()))}"
        )
    check_not_meta(valid_lens, "valid_lens")
    if not tracing():  # (torch.jit.trace hands sizes over as tensors)
        check_size(num_keys, "num_keys")
        check_size(first_key, "first_key")
    if bias_dtype is not None and not (isinstance(bias_dtype, torch.dtype) and bias_dtype.is_floating_point):
        raise ValueError(f"bias_dtype must be None or a floating-point torch.dtype, got {bias_dtype!r}")


def keep_mask_from_valid_lens(
    valid_lens: Tensor | Sequence[float], num_queries: int, num_keys: int
) -> Tensor:
    """Boolean mask, ``True`` = may attend, from valid lengths.

    Args:
        valid_lens: (B,) or (B, Lq), checked by :func:`check_valid_lens`.
        num_queries: Lq (1 gives a (B, 1, Lk) mask that broadcasts over the queries when the
            lengths are per example).
        num_keys: Lk.

    Returns:
        (B, Lq, Lk) bool: ``mask[b, i, j] = j < valid_lens[b(, i)]``.

    Raises:
        ValueError: as :func:`check_valid_lens`; per-query lengths (B, Lq) with another Lq.
    """
    valid_lens = check_valid_lens(valid_lens, _rows(valid_lens), num_queries, num_keys)
    keep, _ = mask_from_valid_lens(valid_lens, num_keys)  # (B, 1 or Lq, Lk)
    return keep.expand(-1, num_queries, -1).contiguous()  # (B, Lq, Lk)


def padding_mask_from_valid_lens(valid_lens: Tensor | Sequence[float], num_keys: int) -> Tensor:
    """``key_padding_mask`` of ``nn.MultiheadAttention`` (``True`` = masked) from (B,) lengths.

    Returns:
        (B, Lk) bool: ``mask[b, j] = j >= valid_lens[b]``.

    Raises:
        ValueError: as :func:`check_valid_lens`, or lengths that are not one per example (B,).
    """
    if isinstance(valid_lens, Tensor) and valid_lens.dim() != 1:
        raise ValueError(
            "a key padding mask holds one length per example: valid_lens must have shape (B,), "
            f"got {tuple(valid_lens.shape)}"
        )
    valid_lens = check_valid_lens(valid_lens, _rows(valid_lens), 1, num_keys)
    if valid_lens.dim() != 1:
        raise ValueError(
            "a key padding mask holds one length per example: valid_lens must have shape (B,), "
            f"got {tuple(valid_lens.shape)}"
        )
    keep, _ = mask_from_valid_lens(valid_lens, num_keys)  # (B, 1, Lk)
    return keep_to_padding(keep[:, 0])  # (B, Lk)


def _rows(valid_lens: object) -> int:
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


def keep_to_padding(mask: Tensor) -> Tensor:
    """Convert a keep mask (``True`` = may attend) to a padding mask (``True`` = masked).

    Raises:
        ValueError: mask not a boolean tensor (``~`` of an integer tensor flips its bits, not
            its meaning).
    """
    return ~_check_bool_mask(mask, "mask")


def padding_to_keep(mask: Tensor) -> Tensor:
    """Convert a padding mask (``True`` = masked) to a keep mask (``True`` = may attend).

    Raises:
        ValueError: mask not a boolean tensor.
    """
    return ~_check_bool_mask(mask, "mask")


def _check_bool_mask(mask: object, name: str) -> Tensor:
    """Return ``mask`` if it is a boolean tensor, else raise a ValueError naming ``name``."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must be a boolean torch.Tensor, got {getattr(mask, 'dtype', type(mask).__name__)}"
        )
    return check_not_meta(mask, name)


def masked_softmax(
    X: Tensor, valid_lens: Tensor | Sequence[float] | None = None, *, inplace: bool = False
) -> Tensor:
    """Softmax over the last axis that ignores the keys past each valid length.

    Masked entries come out exactly 0. A row whose valid length is 0 attends to nothing and
    comes out all zeros (not NaN, not uniform). ``inplace=True`` overwrites the masked scores
    of ``X`` instead of copying it: only for scores the caller owns, such as a fresh product.

    Shapes:
        X: (B, Lq, Lk) scores; valid_lens: None, (B,) or (B, Lq); returns: (B, Lq, Lk).
    """
    valid_lens = _check_masked_softmax(X, valid_lens, inplace)
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    # (B, 1, Lk) for one length per example (broadcasts over the queries), else (B, Lq, Lk)
    keep, _ = mask_from_valid_lens(valid_lens, X.shape[-1])
    return softmax_over_kept(X, keep, inplace=inplace)


@quiet_when_traced
def _check_masked_softmax(X: object, valid_lens: object, inplace: object) -> Tensor | None:
    """The checks of :func:`masked_softmax`; returns the valid lengths on X's device."""
    check_tensor(X, "X", 3)
    check_bool(inplace, "inplace")
    valid_lens = check_valid_lens(valid_lens, *X.shape)
    return None if valid_lens is None else valid_lens.to(X.device)


def softmax_over_kept(X: Tensor, keep: Tensor, inplace: bool = False) -> Tensor:
    """The masked softmax itself: ignore the scores where ``keep`` is False.

    Any layout works (the heads may sit on any leading axis), so this is also the softmax for
    boolean masks that do not come from valid lengths. Masked scores become the most negative
    *finite* number, not ``-inf``: a row with nothing to keep stays finite (uniform) instead of
    0/0 = NaN, and the product with ``keep`` then zeroes it. In a row that keeps a key,
    exp(lowest - max) underflows to exactly 0. Masked entries come out exactly 0, and a row
    with nothing to keep comes out all zeros, never NaN.

    Shapes:
        X: (..., Lk) scores, e.g. (B, Lq, Lk), (B, H, Lq, Lk) or (H, B, Lq, Lk).
        keep: bool, broadcastable to X (True = may attend), e.g. (B, 1, Lq, Lk).
        returns: X's shape.

    Raises:
        ValueError: X not a floating-point tensor, keep not boolean or not broadcastable to X,
            or ``inplace`` on a tensor that may not be overwritten.
    """
    _check_kept(X, keep, inplace)
    lowest = torch.finfo(X.dtype).min
    # torch.where writes new scores in one pass; masked_fill_ overwrites X (inplace=True)
    scores = X.masked_fill_(~keep, lowest) if inplace else torch.where(keep, X, lowest)
    weights = torch.softmax(scores, dim=-1)
    # Rows with nothing to keep -> 0; in place, unless autograd needs the softmax's output.
    return weights * keep if weights.requires_grad else weights.mul_(keep)


@quiet_when_traced
def _check_kept(X: object, keep: object, inplace: object) -> None:
    """The checks of :func:`softmax_over_kept`."""
    if not isinstance(X, Tensor) or not X.is_floating_point():
        raise ValueError(
            f"X must be a floating-point torch.Tensor, got {getattr(X, 'dtype', type(X).__name__)}"
        )
    check_not_meta(X, "X")
    _check_bool_mask(keep, "keep")
    check_bool(inplace, "inplace")
    try:
        fits = torch.broadcast_shapes(keep.shape, X.shape) == X.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"keep must be broadcastable to the scores' shape {tuple(X.shape)}, "
            f"got {tuple(keep.shape)}"
        )
    if keep.device != X.device:
        raise ValueError(f"keep is on {keep.device} but X is on {X.device}")
    if inplace:
        _check_writable(X, "X")


def _check_writable(X: Tensor, name: str) -> None:
    """Raise unless ``X`` may be overwritten in place: no two of its elements share memory
    (an ``expand``-ed view would write one entry through many), and autograd allows it."""
    if any(stride == 0 and size > 1 for stride, size in zip(X.stride(), X.shape)) or (
        not tracing() and torch._debug_has_internal_overlap(X) == 1
    ):
        raise ValueError(
            f"{name} shares memory between its elements (an expanded view, shape "
            f"{tuple(X.shape)}, strides {X.stride()}): inplace=True would write one entry through "
            "many; pass inplace=False or a contiguous copy"
        )
    if X.requires_grad and X.is_leaf:
        raise ValueError(
            f"{name} is a leaf tensor that requires grad: autograd forbids overwriting it, "
            "pass inplace=False"
        )


# --- Boolean masks of any layout (used by mha_lib.variants) -------------------------------------

def check_attention_mask(
    mask: object, batch_size: int, num_queries: int, num_keys: int, name: str = "mask"
) -> Tensor:
    """Validate a boolean attention mask and broadcast it to (B, Lq, Lk).

    The convention (keep or padding) is the caller's: this only checks type and shape. Integer
    masks holding only 0 and 1 (as in the JAX tutorials) are accepted and read as booleans.

    Shapes:
        mask: anything broadcastable to (B, Lq, Lk), e.g. (B, 1, Lk), (Lq, Lk) or (B, Lq, Lk).
        returns: (B, Lq, Lk) bool (an expanded view, no copy).

    Args:
        mask: the mask to check.
        batch_size: B.
        num_queries: Lq.
        num_keys: Lk.
        name: the argument's name in error messages.

    Raises:
        ValueError: not a tensor, not boolean (or 0/1 integers), on the meta device, or not
            broadcastable.
    """
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name} must be a boolean torch.Tensor, got {type(mask).__name__}")
    check_not_meta(mask, name)
    if not tracing():
        for value, size in ((batch_size, "batch_size"), (num_queries, "num_queries"), (num_keys, "num_keys")):
            check_size(value, size)
    if mask.dtype != torch.bool:
        zero_one = tracing() or bool(((mask == 0) | (mask == 1)).all())
        if mask.is_floating_point() or mask.is_complex() or not zero_one:
            raise ValueError(
                f"{name} must be boolean (or integers 0/1), got dtype {mask.dtype}"
            )
        mask = mask != 0
    target = (batch_size, num_queries, num_keys)
    try:
        fits = mask.dim() <= 3 and torch.broadcast_shapes(mask.shape, target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} must be broadcastable to (B, Lq, Lk) = {target}, got shape {tuple(mask.shape)}"
        )
    return mask.expand(target)


def valid_lens_from_keep_mask(keep: Tensor) -> Tensor:
    """Per-query valid lengths from a keep mask, the inverse of :func:`keep_mask_from_valid_lens`.

    Only a mask whose every row is a prefix (True ... True False ... False) is a set of valid
    lengths; any other mask (say, one that hides a key in the middle) raises.

    Shapes:
        keep: (B, Lq, Lk) bool, True = may attend.
        returns: (B, Lq) long.

    Raises:
        ValueError: keep not a 3-D boolean tensor, or a row that is not a prefix.
    """
    if not isinstance(keep, Tensor) or keep.dtype != torch.bool or keep.dim() != 3:
        raise ValueError(
            "keep must be a boolean tensor of shape (B, Lq, Lk), got "
            f"{getattr(keep, 'dtype', type(keep))} of shape {tuple(getattr(keep, 'shape', ()))}"
        )
    check_not_meta(keep, "keep")
    valid_lens = keep.sum(dim=-1)  # (B, Lq, Lk) -> (B, Lq)
    if not torch.equal(keep_mask_from_valid_lens(valid_lens, keep.shape[1], keep.shape[2]), keep):
        raise ValueError(
            "keep is not a valid-length mask: some row is not of the form True...True False...False"
        )
    return valid_lens


def causal_valid_lens(batch_size: int, num_queries: int) -> Tensor:
    """Valid lengths of a causal mask: query ``i`` may attend to keys ``0 .. i``.

    Returns:
        (B, Lq) long, ``valid_lens[b, i] = i + 1``.
    """
    B = check_size(batch_size, "batch_size")
    Lq = check_size(num_queries, "num_queries")
    return torch.arange(1, Lq + 1).expand(B, Lq)  # (Lq,) -> (B, Lq)


def check_positions(positions: object, batch_size: int, num_new: int) -> Tensor:
    """Return the positions of n new tokens as a (B, n) ``torch.long`` tensor, or raise.

    Positions number the tokens of a sequence (0, 1, ...) for decoding with a cache and for
    rotary embeddings; a causal query at position p has the valid length p + 1. Only the type
    and shape are checked here (no value is read); ``mha_lib.decoding.LayerCache.update``
    checks their values against the cache.

    Shapes:
        positions: (n,) (the same for every example) or (B, n), integers.
        returns: (B, n), possibly an expanded view.
    """
    if not tracing():  # (torch.jit.trace hands sizes over as tensors)
        check_size(batch_size, "batch_size")
        check_size(num_new, "num_new")
    positions = as_tensor(positions, "positions", "a tensor of integers")
    if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
        raise ValueError(f"positions must hold integers, got dtype {positions.dtype}")
    if positions.shape not in ((num_new,), (batch_size, num_new)):
        raise ValueError(
            f"positions must have shape (n,) = ({num_new},) or (B, n) = ({batch_size}, {num_new}), "
            f"got {tuple(positions.shape)}"
        )
    return positions.long().expand(batch_size, num_new)  # (n,) or (B, n) -> (B, n)
