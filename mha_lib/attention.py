"""Scaled dot-product attention, the function every head computes.

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
from mha_lib.masking import masked_softmax


def check_qkv(queries: Tensor, keys: Tensor, values: Tensor) -> None:
    """Check that queries, keys and values are 3-D and agree on batch size and length.

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
    check_qkv(queries, keys, values)
    check_bool(need_weights, "need_weights")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            "queries and keys must have the same feature size d, got "
            f"{queries.shape[-1]} and {keys.shape[-1]}"
        )
    if queries.shape[-1] == 0:
        raise ValueError("queries and keys must have at least one feature (d >= 1), got d = 0")
