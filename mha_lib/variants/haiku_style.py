"""Multi-head attention as the JAX/Haiku tutorial writes it, in PyTorch.

Shape legend
    B   batch size
    H   number of heads (``num_heads``)
    Lq  number of queries (S in the tutorial, where queries and keys have one length)
    Lk  number of key-value pairs
    d   head size ``d_k = d_model / num_heads``
    D   ``d_model``

The heads sit on axis 1, (B, H, L, d), made by a reshape and an axis swap; four projections of
width D (queries, keys, values, output), each with a bias; the mask (``True`` or 1 = may attend)
is broadcastable to (B, Lq, Lk) and gets a head axis so that every head is masked alike.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int
from mha_lib.attention import fit_queries
from mha_lib.mask_conventions import check_attention_mask
from mha_lib.masking import softmax_over_kept
from mha_lib.multihead import MultiHeadAttention
from mha_lib.variants._common import (
    check_qkv_for,
    check_square_mha,
    copy_linear,
)


__all__ = ["HaikuStyleMultiheadAttention", "scaled_dot_product"]

def scaled_dot_product(
    q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``softmax(q k^T / sqrt(d)) v`` over the last two axes, any leading axes.

    Shapes:
        q: (..., Lq, d); k: (..., Lk, d); v: (..., Lk, dv)
        keep: None or bool broadcastable to (..., Lq, Lk), True = may attend
        returns: values (..., Lq, dv), attention (..., Lq, Lk)

    Raises:
        ValueError: an operand that is not a floating-point tensor with at least 2 dimensions,
            operands of different dtypes or devices, q and k with different sizes d, k and v
            with different lengths Lk, leading axes that do not broadcast, d = 0, or a bad ``keep``.
    """
    _check_operands(q, k, v)
    q = fit_queries(q, k)  # rows whose scores would overflow are scaled down (attention.fit_queries)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Lq, Lk)
    if keep is None:
        attention = torch.softmax(scores, dim=-1)
    else:
        attention = softmax_over_kept(scores, keep)
    return attention @ v, attention  # (..., Lq, dv), (..., Lq, Lk)


def _check_operands(q: Tensor, k: Tensor, v: Tensor) -> None:
    """The checks of :func:`scaled_dot_product`, each error naming its argument."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 2 or not x.is_floating_point():
            raise ValueError(
                f"{name} must be a floating-point tensor (..., L, d) with at least 2 dimensions, "
                f"got dtype {x.dtype} and shape {tuple(x.shape)}"
            )
        if (x.dtype, x.device) != (q.dtype, q.device):
            raise ValueError(
                f"{name} must have the dtype and device of q ({q.dtype} on {q.device}), "
                f"got {x.dtype} on {x.device}"
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same size d, got {q.shape[-1]} and {k.shape[-1]} "
            f"(shapes {tuple(q.shape)} and {tuple(k.shape)})"
        )
    if q.shape[-1] == 0:
        raise ValueError("q and k must have at least one feature (d >= 1), got d = 0")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length Lk, got {k.shape[-2]} and {v.shape[-2]}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "the leading axes of q, k and v must broadcast, got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}"
        ) from None


class HaikuStyleMultiheadAttention(nn.Module):
    """Multi-head attention with the Haiku tutorial's design.

    Shapes:
        q: (B, Lq, D); k: (B, Lk, D); v: (B, Lk, D)
        mask: None, or bool / 0-1 integers broadcastable to (B, Lq, Lk); True = may attend
        values: (B, Lq, D); attention: (B, H, Lq, Lk)

    Args:
        d_model: D, width of every input, projection and output.
        num_heads: H; must divide d_model.
    """

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.d_k = d_model // num_heads
        self.lin_projs = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))
        for lin in self.lin_projs:  # Haiku's default: truncated normal, std 1/sqrt(fan_in)
            std = 1.0 / math.sqrt(d_model)
            nn.init.trunc_normal_(lin.weight, std=std, a=-2 * std, b=2 * std)
            nn.init.zeros_(lin.bias)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Project, split into heads, attend with the mask on every head, merge, project.

        Returns:
            ``(values, attention)``: (B, Lq, D) and (B, H, Lq, Lk). A query whose every key is
            masked gets all-zero weights (a large negative fill would spread them evenly).

        Raises:
            ValueError: inputs that are not 3-D, disagree on B or Lk, have a feature size other
                than d_model, or another dtype or device than the module; a bad mask.
        """
        check_qkv_for(q, k, v, self.d_model, self.lin_projs[0].weight)
        batch_size, seq_length, _ = q.shape
        keep = None
        if mask is not None:
            keep = check_attention_mask(mask, batch_size, seq_length, k.shape[1])  # (B, Lq, Lk)
            keep = keep[:, None]  # (B, Lq, Lk) -> (B, 1, Lq, Lk): the same mask for every head
        q, k, v = [
            # (B, L, D) -> (B, L, H, d) -> (B, H, L, d)
            lin(t).reshape(batch_size, t.shape[1], self.num_heads, self.d_k).transpose(1, 2)
            for lin, t in zip(self.lin_projs, (q, k, v))
        ]
        values, attention = scaled_dot_product(q, k, v, keep)  # (B, H, Lq, d), (B, H, Lq, Lk)
        values = values.transpose(1, 2)  # (B, H, Lq, d) -> (B, Lq, H, d)
        values = values.reshape(batch_size, seq_length, self.d_model)  # (B, Lq, H, d) -> (B, Lq, D)
        return self.lin_projs[-1](values), attention

    @classmethod
    def from_mha(cls, mha: MultiHeadAttention) -> "HaikuStyleMultiheadAttention":
        """Copy a MultiHeadAttention's weights (missing biases become zeros).

        ``from_mha(mha)(q, k, v, keep_mask_from_valid_lens(valid_lens, Lq, Lk))`` equals
        ``mha(q, k, v, valid_lens, need_weights=True)`` in eval mode, weights included.

        Raises:
            ValueError: ``mha`` has different query, key, value and model widths.
        """
        check_square_mha(mha)
        module = cls(mha.d_model, mha.num_heads)
        module = module.to(device=mha.W_q.weight.device, dtype=mha.W_q.weight.dtype)
        for mine, theirs in zip(module.lin_projs, (mha.W_q, mha.W_k, mha.W_v, mha.W_o)):
            copy_linear(mine, theirs)
        return module.train(mha.training)

    def to_mha(self, dropout: float = 0.0) -> MultiHeadAttention:
        """The equal MultiHeadAttention (with biases)."""
        D = self.d_model
        mha = MultiHeadAttention(D, D, D, D, self.num_heads, dropout=dropout, bias=True)
        mha = mha.to(device=self.lin_projs[0].weight.device, dtype=self.lin_projs[0].weight.dtype)
        for mine, theirs in zip((mha.W_q, mha.W_k, mha.W_v, mha.W_o), self.lin_projs):
            copy_linear(mine, theirs)
        return mha.train(self.training)
