"""Mask conventions: valid lengths, keep masks and padding masks, and the named converters
between them.

Shape legend
    B   batch size
    Lq  number of queries
    Lk  number of key-value pairs

Three mask conventions meet in the literature; the named helpers below convert between them
(never convert ad hoc):

* valid lengths, as in the d2l.ai chapter: :func:`keep_mask_from_valid_lens`,
  :func:`padding_mask_from_valid_lens`, and back, :func:`valid_lens_from_keep_mask`;
* a *keep* mask, ``True`` = may attend, as in ``torch.nn.functional.scaled_dot_product_attention``;
* a *padding* mask, ``True`` = masked out, as in ``nn.MultiheadAttention`` (``key_padding_mask``)
  and the einsum notes: :func:`keep_to_padding`, :func:`padding_to_keep`.

:func:`check_attention_mask` checks a boolean mask of either convention and any layout (the
other libraries' conventions of :mod:`mha_lib.variants` take one). The masks themselves are
built in one place, :mod:`mha_lib.masking` (:func:`~mha_lib.masking.mask_from_valid_lens`),
which also holds the masked softmax.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from mha_lib._checks import check_bool_mask, check_not_meta, check_size, tracing
from mha_lib.lengths import check_valid_lens, lens_rows
from mha_lib.masking import mask_from_valid_lens

__all__ = [
    "check_attention_mask",
    "keep_mask_from_valid_lens",
    "keep_to_padding",
    "padding_mask_from_valid_lens",
    "padding_to_keep",
    "valid_lens_from_keep_mask",
]


# --- valid lengths, keep masks and padding masks ----------------------------------------------


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
    valid_lens = check_valid_lens(valid_lens, lens_rows(valid_lens), num_queries, num_keys)
    keep, _ = mask_from_valid_lens(valid_lens, num_keys)  # (B, 1 or Lq, Lk)
    return keep.expand(-1, num_queries, -1).contiguous()  # (B, Lq, Lk)


def padding_mask_from_valid_lens(valid_lens: Tensor | Sequence[float], num_keys: int) -> Tensor:
    """``key_padding_mask`` of ``nn.MultiheadAttention`` (``True`` = masked) from (B,) lengths.

    Returns:
        (B, Lk) bool: ``mask[b, j] = j >= valid_lens[b]``.

    Raises:
        ValueError: as :func:`check_valid_lens`, or lengths that are not one per example (B,).
    """
    wrong = "a key padding mask holds one length per example: valid_lens must have shape (B,), got {}"
    if isinstance(valid_lens, Tensor) and valid_lens.dim() != 1:
        raise ValueError(wrong.format(tuple(valid_lens.shape)))
    valid_lens = check_valid_lens(valid_lens, lens_rows(valid_lens), 1, num_keys)
    if valid_lens.dim() != 1:
        raise ValueError(wrong.format(tuple(valid_lens.shape)))
    keep, _ = mask_from_valid_lens(valid_lens, num_keys)  # (B, 1, Lk)
    return keep_to_padding(keep[:, 0])  # (B, Lk)


def keep_to_padding(mask: Tensor) -> Tensor:
    """Convert a keep mask (``True`` = may attend) to a padding mask (``True`` = masked).

    Raises:
        ValueError: mask not boolean (``~`` of an integer tensor flips bits, not meaning).
    """
    return ~check_bool_mask(mask, "mask")


def padding_to_keep(mask: Tensor) -> Tensor:
    """Convert a padding mask (``True`` = masked) to a keep mask (``True`` = may attend).

    Raises:
        ValueError: mask not a boolean tensor.
    """
    return ~check_bool_mask(mask, "mask")


# --- boolean masks of any layout (used by mha_lib.variants) -------------------------------------

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
