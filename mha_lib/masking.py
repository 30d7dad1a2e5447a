"""Masking: valid lengths, attention masks, and the masked softmax.

Shape legend
    B   batch size (for multi-head attention after folding: B*H)
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
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from mha_lib._checks import check_positive_int, check_tensor


def check_valid_lens(
    valid_lens: Tensor | Sequence[float] | None,
    batch_size: int,
    num_queries: int,
    num_keys: int,
) -> Tensor | None:
    """Validate valid lengths and return them as an integer tensor.

    Args:
        valid_lens: None, shape (B,) or (B, Lq); integers or whole-number floats in [0, Lk].
        batch_size: B.
        num_queries: Lq.
        num_keys: Lk.

    Returns:
        None, or a ``torch.long`` tensor of shape (B,) or (B, Lq).

    Raises:
        ValueError: wrong number of dimensions, wrong batch size or shape, an entry that is
            negative, not a whole number, or larger than Lk.
    """
    if valid_lens is None:
        return None
    if not isinstance(valid_lens, Tensor):
        try:
            valid_lens = torch.as_tensor(valid_lens)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"valid_lens must be a tensor or a list of numbers: {err}") from None
    if valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise ValueError(f"valid_lens must hold integers or whole-number floats, got {valid_lens.dtype}")
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
    if valid_lens.is_floating_point():
        if not torch.isfinite(valid_lens).all() or (valid_lens != valid_lens.round()).any():
            raise ValueError(f"valid_lens must be whole numbers, got {valid_lens.tolist()}")
    if (valid_lens < 0).any():
        raise ValueError(f"valid_lens must be >= 0, got {valid_lens.tolist()}")
    if (valid_lens > num_keys).any():
        raise ValueError(
            f"valid_lens must be <= the number of key-value pairs Lk = {num_keys}, "
            f"got {valid_lens.tolist()}"
        )
    return valid_lens.long()


def keep_mask_from_valid_lens(valid_lens: Tensor, num_queries: int, num_keys: int) -> Tensor:
    """Boolean mask, ``True`` = may attend, from checked valid lengths.

    Args:
        valid_lens: (B,) or (B, Lq), as returned by :func:`check_valid_lens`.
        num_queries: Lq.
        num_keys: Lk.

    Returns:
        (B, Lq, Lk) bool: ``mask[b, i, j] = j < valid_lens[b(, i)]``.
    """
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None].expand(-1, num_queries)  # (B,) -> (B, Lq)
    positions = torch.arange(num_keys, device=valid_lens.device)  # (Lk,)
    return positions < valid_lens[:, :, None]  # (B, Lq, 1) vs (Lk,) -> (B, Lq, Lk)


def padding_mask_from_valid_lens(valid_lens: Tensor, num_keys: int) -> Tensor:
    """``key_padding_mask`` of ``nn.MultiheadAttention`` (``True`` = masked) from (B,) lengths.

    Returns:
        (B, Lk) bool: ``mask[b, j] = j >= valid_lens[b]``.
    """
    if valid_lens.dim() != 1:
        raise ValueError(
            "a key padding mask holds one length per example: valid_lens must have shape (B,), "
            f"got {tuple(valid_lens.shape)}"
        )
    return torch.arange(num_keys, device=valid_lens.device) >= valid_lens[:, None]


def keep_to_padding(mask: Tensor) -> Tensor:
    """Convert a keep mask (``True`` = may attend) to a padding mask (``True`` = masked)."""
    return ~mask


def padding_to_keep(mask: Tensor) -> Tensor:
    """Convert a padding mask (``True`` = masked) to a keep mask (``True`` = may attend)."""
    return ~mask


def masked_softmax(
    X: Tensor, valid_lens: Tensor | Sequence[float] | None = None, *, inplace: bool = False
) -> Tensor:
    """Softmax over the last axis that ignores the keys past each valid length.

    Masked entries come out exactly 0. A row whose valid length is 0 attends to nothing and
    comes out all zeros: not NaN (what filling with ``-inf`` gives) and not uniform (what
    filling with ``-1e6`` gives).

    Shapes:
        X: (B, Lq, Lk) scores.
        valid_lens: None, (B,) or (B, Lq).

    Args:
        X: attention scores.
        valid_lens: how many keys each example (or each query) may attend to.
        inplace: overwrite the masked entries of ``X`` instead of copying it first. Saves one
            (B, Lq, Lk) allocation; only for scores the caller owns, such as the fresh output
            of a matrix product.

    Returns:
        (B, Lq, Lk) attention weights; every row sums to 1, or to 0 when its valid length is 0.
    """
    check_tensor(X, "X", 3)
    B, Lq, Lk = X.shape
    valid_lens = check_valid_lens(valid_lens, B, Lq, Lk)
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    valid_lens = valid_lens.to(X.device)
    if bool((valid_lens == Lk).all()):
        return torch.softmax(X, dim=-1)  # every key is valid: nothing to mask
    # One length per example masks the same keys for every query: a (B, 1, Lk) mask that
    # broadcasts over the queries is enough, and costs Lq times less to build than (B, Lq, Lk).
    keep = keep_mask_from_valid_lens(valid_lens, Lq if valid_lens.dim() == 2 else 1, Lk)
    # keep: (B, Lq, Lk) or (B, 1, Lk)
    empty_rows = bool((valid_lens == 0).any())
    return softmax_over_kept(X, keep, zero_empty_rows=empty_rows, inplace=inplace)


def softmax_over_kept(
    X: Tensor, keep: Tensor, zero_empty_rows: bool = True, inplace: bool = False
) -> Tensor:
    """The masked softmax itself: ignore the scores where ``keep`` is False.

    Masked scores are replaced by the most negative *finite* number, not ``-inf``: a row with
    nothing to keep then stays finite (uniform) inside the softmax instead of becoming
    0/0 = NaN, and the multiplication by ``keep`` turns it into zeros. In a row that keeps at
    least one key the masked entries come out exactly 0 (exp(lowest - max) underflows to 0).

    Shapes:
        X: (..., Lk) scores; keep: bool, broadcastable to X (True = may attend).

    Args:
        X: finite scores (an infinite score makes its row NaN, as in any softmax).
        keep: which scores to use.
        zero_empty_rows: skip the final product when the caller knows every row keeps a key.
        inplace: write the fill into ``X`` itself (see :func:`masked_softmax`).
    """
    lowest = torch.finfo(X.dtype).min
    if inplace:
        scores = X.masked_fill_(~keep, lowest)
    else:  # torch.where writes new scores in one pass; X.masked_fill would copy X first
        scores = torch.where(keep, X, lowest)
    weights = torch.softmax(scores, dim=-1)
    return weights * keep if zero_empty_rows else weights  # rows with nothing to keep -> 0


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
        ValueError: not a tensor, not boolean (or 0/1 integers), or not broadcastable.
    """
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name} must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        if mask.is_floating_point() or mask.is_complex() or not ((mask == 0) | (mask == 1)).all():
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


def masked_softmax_keep(X: Tensor, keep: Tensor) -> Tensor:
    """Softmax over the last axis that only looks at the entries where ``keep`` is True.

    The general form of :func:`masked_softmax` for a boolean mask that need not come from
    valid lengths (any layout: the heads may sit on any leading axis). Masked entries come out
    exactly 0, and a row with nothing to keep comes out all zeros, never NaN.

    Shapes:
        X: (..., Lk) scores, e.g. (B, H, Lq, Lk) or (H, B, Lq, Lk).
        keep: bool, broadcastable to X's shape, e.g. (B, 1, Lq, Lk); True = may attend.
        returns: X's shape.

    Raises:
        ValueError: X not a floating-point tensor, keep not boolean or not broadcastable to X.
    """
    if not isinstance(X, Tensor) or not X.is_floating_point():
        raise ValueError(f"X must be a floating-point tensor, got {getattr(X, 'dtype', type(X))}")
    if not isinstance(keep, Tensor) or keep.dtype != torch.bool:
        raise ValueError(f"keep must be a boolean tensor, got {getattr(keep, 'dtype', type(keep))}")
    try:
        fits = torch.broadcast_shapes(keep.shape, X.shape) == X.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"keep must be broadcastable to the scores' shape {tuple(X.shape)}, "
            f"got {tuple(keep.shape)}"
        )
    return softmax_over_kept(X, keep)


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
    B = check_positive_int(batch_size, "batch_size")
    Lq = check_positive_int(num_queries, "num_queries")
    return torch.arange(1, Lq + 1).expand(B, Lq)  # (Lq,) -> (B, Lq)
