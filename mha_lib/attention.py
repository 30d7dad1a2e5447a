"""Scaled dot-product attention, the function every head computes.

``DotProductAttention`` is the version the book teaches (``masked_softmax``);
``FiniteDotProductAttention`` computes the same numbers for finite inputs in fewer passes over
the scores, and is the one ``MultiHeadAttention`` attends with when it returns the weights.

Shape legend
    B   batch size (for multi-head attention after folding the heads in: B*H)
    Lq  number of queries
    Lk  number of key-value pairs
    d   query/key size
    dv  value size
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from mha_lib._checks import check_bool, check_probability, check_tensor, quiet_when_traced
from mha_lib.masking import CheckedLens, mask_from_valid_lens, masked_softmax, read_valid_lens

__all__ = ["DotProductAttention", "FiniteDotProductAttention", "check_qkv"]


def check_qkv(queries: Tensor, keys: Tensor, values: Tensor, *, dot: bool = False) -> None:
    """Check that queries, keys and values are 3-D and agree on batch size and length.

    With ``dot`` the queries and keys also meet in a dot product: one feature size d >= 1.

    Raises:
        ValueError: naming the argument that does not fit.
    """
    check_tensor(queries, "queries", 3)
    check_tensor(keys, "keys", 3)
    check_tensor(values, "values", 3)
    if not queries.shape[0] == keys.shape[0] == values.shape[0]:
        raise ValueError(
            "queries, keys and values must have the same batch size, got "
            f"{queries.shape[0]}, {keys.shape[0]} and {values.shape[0]}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            "keys and values must have the same length Lk, got "
            f"{keys.shape[1]} keys and {values.shape[1]} values"
        )
    for name, x in (("keys", keys), ("values", values)):
        if x.dtype != queries.dtype or x.device != queries.device:
            raise ValueError(
                f"{name} must have the dtype and device of the queries ({queries.dtype} on "
                f"{queries.device}), got {x.dtype} on {x.device}: convert one with .to(...)"
            )
    if dot and queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            "queries and keys must have the same feature size d, got "
            f"{queries.shape[-1]} and {keys.shape[-1]}"
        )
    if dot and queries.shape[-1] == 0:
        raise ValueError("queries and keys must have at least one feature (d >= 1), got d = 0")


class DotProductAttention(nn.Module):
    """Scaled dot-product attention ``softmax(Q K^T / sqrt(d)) V`` with dropout on the weights.

    Shapes:
        queries: (B, Lq, d)
        keys: (B, Lk, d)
        values: (B, Lk, dv)
        valid_lens: None, (B,) or (B, Lq)
        output: (B, Lq, dv); weights: (B, Lq, Lk)

    Args:
        dropout: probability of zeroing an attention weight in training mode.
    """

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from every query to the valid keys.

        Returns:
            output (B, Lq, dv), or ``(output, weights)`` with weights (B, Lq, Lk) when
            ``need_weights`` is true. The weights are those before dropout.
        """
        _check_attention(queries, keys, values, need_weights)
        d = queries.shape[-1]
        # Scale the queries rather than the scores: the same numbers, Lk/d times less work.
        scores = torch.bmm(queries / math.sqrt(d), keys.transpose(1, 2))  # (B, Lq, Lk)
        weights = masked_softmax(scores, valid_lens, inplace=True)  # the scores are ours to overwrite
        output = torch.bmm(self.dropout(weights), values)  # (B, Lq, dv)
        return (output, weights) if need_weights else output


@quiet_when_traced
def _check_attention(queries: Tensor, keys: Tensor, values: Tensor, need_weights: object) -> None:
    """The checks of :meth:`DotProductAttention.forward` (valid_lens: in masked_softmax)."""
    check_qkv(queries, keys, values, dot=True)
    check_bool(need_weights, "need_weights")


class FiniteDotProductAttention(DotProductAttention):
    """:class:`DotProductAttention` for finite inputs, in fewer passes over the (B, Lq, Lk) scores.

    ``MultiHeadAttention`` attends with it when it returns the weights: its inputs are finite by
    then (its rule for NaN and inf replaces the others). For finite scores the numbers are those
    of ``masked_softmax`` (``tests/core/test_fast_path.py`` proves it), computed with less
    traffic through memory:

    * the mask enters the score product as a bias, ``baddbmm(bias, Q, K^T)``: 0 where a query
      may attend, -inf elsewhere (x - inf = -inf, whose exponential is exactly 0, as is that
      of ``masked_softmax``'s most negative float), instead of overwriting the scores;
    * a query with valid length 0 may attend anywhere, and its weights are zeroed after the
      softmax (only when some valid length may be 0);
    * the softmax writes over the scores when autograd does not need them.

    In float16 and bfloat16 the scores and the softmax are computed in float32: a score past
    65504 would overflow half precision to inf and the softmax to NaN.

    Unlike :class:`DotProductAttention` it does not shield a query from an infinite or NaN
    score of a key it may not attend to (such a query's row becomes NaN).

    Shapes and arguments: as :class:`DotProductAttention`; ``valid_lens`` may also be a
    :class:`mha_lib.masking.CheckedLens` (then its values are not read again).
    """

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | CheckedLens | None = None,
        *,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        valid_lens = _check_finite_attention(queries, keys, values, valid_lens, need_weights)
        dtype = queries.dtype
        if dtype in (torch.float16, torch.bfloat16):  # scores and softmax in float32
            queries, keys = queries.float(), keys.float()
        queries = queries / math.sqrt(queries.shape[-1])
        if valid_lens is None:
            scores = torch.bmm(queries, keys.transpose(1, 2))  # (B, Lq, Lk)
        else:  # bias: (B, 1 or Lq, Lk), 0 = may attend, -inf = masked
            bias, empty = mask_from_valid_lens(valid_lens.lens, keys.shape[1],
                                               fill_empty=valid_lens.lowest in (None, 0),
                                               bias_dtype=queries.dtype)
            scores = torch.baddbmm(bias, queries, keys.transpose(1, 2))  # (B, Lq, Lk)
        if scores.requires_grad:
            weights = torch.softmax(scores, dim=-1)
        else:  # nothing needs the scores again: the weights overwrite them
            weights = torch.softmax(scores, dim=-1, out=scores)
        if valid_lens is not None and empty is not None:  # some query may keep nothing: zeros
            fill = weights.masked_fill if weights.requires_grad else weights.masked_fill_
            weights = fill(empty, 0.0)
        weights = weights.to(dtype)
        output = torch.bmm(self.dropout(weights), values)  # (B, Lq, dv)
        return (output, weights) if need_weights else output


@quiet_when_traced
def _check_finite_attention(queries, keys, values, valid_lens, need_weights) -> CheckedLens | None:
    """The checks of :meth:`FiniteDotProductAttention.forward`; returns the checked valid
    lengths (on the queries' device) or None."""
    _check_attention(queries, keys, values, need_weights)
    valid_lens, _ = read_valid_lens(valid_lens, queries.shape[0], queries.shape[1], keys.shape[1],
                                    device=queries.device)
    return valid_lens
