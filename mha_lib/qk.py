"""Queries and keys through one pipeline: QK-norm, then positions.

Shape legend
    B    batch size
    H    query heads; Hkv key/value heads
    Lq   queries; Lk keys
    d    head size

Between splitting the heads and the scores, today's models change queries and keys, always in
this order, and the cache keeps the keys after both:

1. **QK-norm**: an RMSNorm of each query and key, with a learned weight: per head, over its d
   features (``qk_norm="head"``: Qwen 3, Gemma 3), or over the whole projection, H*d features
   for the queries and Hkv*d for the keys (``"width"``: OLMo 2); or per head without a
   weight (``"l2"``: Llama 4's L2 norm on its RoPE layers). Scores then cannot grow without
   bound (Dehghani et al., 2023; Wortsman et al., 2023).
2. **Positions**: a :class:`mha_lib.positions.Rope` (plain RoPE and its base, position
   interpolation, NTK-aware, YaRN, partial rotation), or none (NoPE).

A layer holds one :class:`QKTransform`, ``layer.qk``, and applies it in one place: every path
(the fused kernel, the weights path, a cache) sees the same queries and keys.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_tensor
from mha_lib.heads import merge_heads, split_heads
from mha_lib.positions import Rope

__all__ = ["QKTransform", "RMSNorm"]

QK_NORMS = (None, "head", "width", "l2")
"""The values of a layer's ``qk_norm``: none, per head, over the width, per head unweighted."""


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last axis (computed in float32 at least).

    Shapes:
        x: (..., D); returns: the same shape and dtype.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = _check_eps(eps)
        self.weight = nn.Parameter(torch.ones(check_positive_int(d_model, "d_model")))

    def forward(self, x: Tensor) -> Tensor:
        check_tensor(x, "x", tuple(range(1, 9)))
        if x.shape[-1] != self.weight.shape[0]:
            raise ValueError(f"x must have feature size {self.weight.shape[0]}, got shape {tuple(x.shape)}")
        return self.weight * _unweighted_rms(x, self.eps)  # (..., D)


class QKTransform(nn.Module):
    """What a layer does to its queries and keys before the scores: ``norm``, then ``rope``.

    Shapes:
        q: (B, H, Lq, d); k: (B, Hkv, Lk, d)
        q_positions: (1 or B, Lq); k_positions: (Lk,) or (B, Lk) (read only with ``rope``)
        returns: q, k of the same shapes

    Args:
        qk_norm: ``"head"``, ``"width"``, ``"l2"`` or None (see the module); the norms are
            ``self.q_norm``, ``self.k_norm`` (:class:`RMSNorm`, eps 1e-6), or None (also
            ``"l2"``: no weight).
        rope: a :class:`~mha_lib.positions.Rope`, or None (no positions here).
        num_heads, num_kv_heads, head_size: H, Hkv, d.
    """

    def __init__(self, qk_norm: str | None, rope: Rope | None, num_heads: int,
                 num_kv_heads: int, head_size: int) -> None:
        super().__init__()
        if qk_norm not in QK_NORMS:
            raise ValueError(f'qk_norm must be None, "head", "width" or "l2", got {qk_norm!r}')
        if rope is not None and not isinstance(rope, Rope):
            raise ValueError(f"rope must be a mha_lib.positions.Rope or None, got {type(rope).__name__}")
        if rope is not None:
            rope.rotated(head_size)  # (checks that d fits it)
        self.qk_norm, self.rope, self.num_heads = qk_norm, rope, num_heads
        widths = {"head": (head_size, head_size),  # (None and "l2": no weights)
                  "width": (num_heads * head_size, num_kv_heads * head_size)}.get(qk_norm)
        self.q_norm = RMSNorm(widths[0]) if widths else None
        self.k_norm = RMSNorm(widths[1]) if widths else None

    def forward(self, q: Tensor, k: Tensor, q_positions: Tensor | None = None,
                k_positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if self.qk_norm == "head":  # over each head's d features
            q, k = self.q_norm(q), self.k_norm(k)
        elif self.qk_norm == "l2":  # over each head's d features, no weight (Llama 4)
            q, k = _unweighted_rms(q), _unweighted_rms(k)
        elif self.qk_norm == "width":  # (B, H, L, d) -> (B, L, H*d) -> norm -> (B, H, L, d)
            q = split_heads(self.q_norm(merge_heads(q)), q.shape[1])
            k = split_heads(self.k_norm(merge_heads(k)), k.shape[1])
        if self.rope is not None:
            q, k = self.rope(q, q_positions), self.rope(k, k_positions)
        return q, k

    def extra_repr(self) -> str:
        return f"qk_norm={self.qk_norm!r}, rope={self.rope!r}"


def _unweighted_rms(x: Tensor, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x**2) + eps)`` over the last axis, in float32 at least."""
    x32 = x.float() if x.element_size() < 4 else x
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _check_eps(eps: object, name: str = "eps") -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {eps!r}")
    return float(eps)
