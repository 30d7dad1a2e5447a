"""Splitting features into heads and back: ``transpose_qkv`` and ``transpose_output``.

``split_heads`` / ``merge_heads`` give the (B, H, L, d) layout, with heads as their own axis;
``transpose_qkv`` / ``transpose_output`` go one step further and fold the heads into the
batch axis, (B*H, L, d).

Shape legend
    B   batch size
    H   number of heads
    L   sequence length (Lq or Lk)
    d   head size
    D   H*d, the model width (d_model)

The heads fold into the batch axis so that one batched matrix product computes every head of
every example at once. Row ``b*H + h`` of the folded tensor holds head ``h`` of example ``b``
(batch-major), which is why valid lengths are repeated with ``repeat_interleave``.

Every function raises a ``ValueError`` for a tensor that is not floating-point or has the wrong
number of dimensions, and for a head count that is not an integer >= 1 dividing its axis.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mha_lib._checks import check_positive_int, check_tensor, quiet_when_traced

__all__ = ["gate_heads", "merge_heads", "split_heads", "transpose_output", "transpose_qkv"]


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    """Split the last axis into heads and move the heads in front of the positions.

    Shapes:
        X: (B, L, D) with D = H*d
        returns: (B, H, L, d), a view of X (no copy)
    """
    H = _check_divides(X, 3, -1, num_heads, "the feature size of X")
    B, L, D = X.shape
    X = X.reshape(B, L, H, D // H)  # (B, L, D) -> (B, L, H, d)
    return X.permute(0, 2, 1, 3)  # (B, L, H, d) -> (B, H, L, d)


def merge_heads(X: Tensor) -> Tensor:
    """Undo :func:`split_heads`: concatenate the heads of every position.

    Shapes:
        X: (B, H, L, d)
        returns: (B, L, D) with D = H*d
    """
    B, H, L, d = check_tensor(X, "X", 4).shape
    X = X.permute(0, 2, 1, 3)  # (B, H, L, d) -> (B, L, H, d)
    return X.reshape(B, L, H * d)  # (B, L, H, d) -> (B, L, D)


def gate_heads(X: Tensor, gate_logits: Tensor) -> Tensor:
    """Scale each head's output by sigmoid gates: one per head, or one per feature.

    The output gate of gated attention (Qiu et al., 2025; Qwen3-Next): ``sigmoid(logits)`` in
    (0, 1) lets a head say "nothing here" without spending weight on a key.

    Shapes:
        X: (B, H, Lq, d), the heads' outputs
        gate_logits: (B, Lq, H) head-wise, or (B, Lq, H*d) element-wise
        returns: (B, H, Lq, d)
    """
    H = X.shape[1]
    gates = torch.sigmoid(gate_logits)
    if gates.shape[-1] == H:  # head-wise: one gate per head
        gates = gates.transpose(1, 2)[..., None]  # (B, Lq, H) -> (B, H, Lq, 1)
    else:  # element-wise: one gate per feature of each head's output
        gates = split_heads(gates, H)  # (B, Lq, H*d) -> (B, H, Lq, d)
    return X * gates


def transpose_qkv(X: Tensor, num_heads: int) -> Tensor:
    """Split the last axis into heads and fold the heads into the batch axis.

    Shapes:
        X: (B, L, D) with D = H*d, projected queries, keys or values
        returns: (B*H, L, d); row ``b*H + h`` is head ``h`` of example ``b``
    """
    X = split_heads(X, num_heads)  # (B, L, D) -> (B, L, H, d) -> (B, H, L, d)
    B, H, L, d = X.shape
    return X.reshape(B * H, L, d)  # (B, H, L, d) -> (B*H, L, d)


def transpose_output(X: Tensor, num_heads: int) -> Tensor:
    """Undo :func:`transpose_qkv`: unfold the heads and concatenate them along the features.

    Shapes:
        X: (B*H, L, d)
        returns: (B, L, D) with D = H*d
    """
    H = _check_divides(X, 3, 0, num_heads, "the first axis of X")
    BH, L, d = X.shape
    X = X.reshape(BH // H, H, L, d)  # (B*H, L, d) -> (B, H, L, d)
    return merge_heads(X)  # (B, H, L, d) -> (B, L, H, d) -> (B, L, D)


@quiet_when_traced
def _check_divides(X: object, ndim: int, axis: int, num_heads: object, what: str) -> int:
    """Check X (floating point, ``ndim`` dimensions) and that num_heads divides its ``axis``."""
    check_tensor(X, "X", ndim)
    H = check_positive_int(num_heads, "num_heads")
    if X.shape[axis] % H:
        raise ValueError(f"{what} ({X.shape[axis]}) must be divisible by num_heads ({H})")
    return H
