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

from mha_lib._checks import check_tensor


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


def masked_softmax(X: Tensor, valid_lens: Tensor | Sequence[float] | None = None) -> Tensor:
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

    Returns:
        (B, Lq, Lk) attention weights; every row sums to 1, or to 0 when its valid length is 0.
    """
    check_tensor(X, "X", 3)
    B, Lq, Lk = X.shape
    valid_lens = check_valid_lens(valid_lens, B, Lq, Lk)
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    keep = keep_mask_from_valid_lens(valid_lens.to(X.device), Lq, Lk)  # (B, Lq, Lk)
    # The most negative finite number, not -inf: a row with nothing to keep then stays finite
    # (uniform) inside the softmax, and the multiplication by `keep` below zeroes it.
    scores = X.masked_fill(~keep, torch.finfo(X.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if (valid_lens == 0).any():
        weights = weights * keep  # rows with valid length 0 -> all zeros
    return weights
