"""Splitting features into heads and back: ``transpose_qkv`` and ``transpose_output``.

``split_heads`` / ``merge_heads`` give the (B, H, L, d) layout, with heads as their own axis;
``transpose_qkv`` / ``transpose_output`` go one step further and fold the heads into the
batch axis, (B*H, L, d).

Shape legend
    B   batch size
    H   number of heads
    L   sequence length (Lq or Lk)
    d   head size
    D   H*d, the model width

The heads fold into the batch axis so that one batched matrix product computes every head of
every example at once. Row ``b*H + h`` of the folded tensor holds head ``h`` of example ``b``
(batch-major), which is why valid lengths are repeated with ``repeat_interleave``.
"""

from __future__ import annotations

from torch import Tensor

from mha_lib._checks import check_positive_int, check_tensor


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    """Split the last axis into heads and move the heads in front of the positions.

    Shapes:
        X: (B, L, D) with D = H*d
        returns: (B, H, L, d), a view of X (no copy)

    Raises:
        ValueError: X not 3-D, num_heads < 1, or D not divisible by num_heads.
    """
    check_tensor(X, "X", 3)
    H = check_positive_int(num_heads, "num_heads")
    B, L, D = X.shape
    if D % H:
        raise ValueError(
            f"the feature size of X ({D}) must be divisible by num_heads ({H})"
        )
    X = X.reshape(B, L, H, D // H)  # (B, L, D) -> (B, L, H, d)
    return X.permute(0, 2, 1, 3)  # (B, L, H, d) -> (B, H, L, d)


def merge_heads(X: Tensor) -> Tensor:
    """Undo :func:`split_heads`: concatenate the heads of every position.

    Shapes:
        X: (B, H, L, d)
        returns: (B, L, D) with D = H*d

    Raises:
        ValueError: X not 4-D.
    """
    check_tensor(X, "X", 4)
    B, H, L, d = X.shape
    X = X.permute(0, 2, 1, 3)  # (B, H, L, d) -> (B, L, H, d)
    return X.reshape(B, L, H * d)  # (B, L, H, d) -> (B, L, D)


def transpose_qkv(X: Tensor, num_heads: int) -> Tensor:
    """Split the last axis into heads and fold the heads into the batch axis.

    Shapes:
        X: (B, L, D) with D = H*d
        returns: (B*H, L, d); row ``b*H + h`` is head ``h`` of example ``b``

    Args:
        X: projected queries, keys or values.
        num_heads: H; must divide D.

    Raises:
        ValueError: X not 3-D, num_heads < 1, or D not divisible by num_heads.
    """
    X = split_heads(X, num_heads)  # (B, L, D) -> (B, L, H, d) -> (B, H, L, d)
    B, H, L, d = X.shape
    return X.reshape(B * H, L, d)  # (B, H, L, d) -> (B*H, L, d)


def transpose_output(X: Tensor, num_heads: int) -> Tensor:
    """Undo :func:`transpose_qkv`: unfold the heads and concatenate them along the features.

    Shapes:
        X: (B*H, L, d)
        returns: (B, L, D) with D = H*d

    Raises:
        ValueError: X not 3-D, num_heads < 1, or the first axis not divisible by num_heads.
    """
    check_tensor(X, "X", 3)
    H = check_positive_int(num_heads, "num_heads")
    BH, L, d = X.shape
    if BH % H:
        raise ValueError(
            f"the first axis of X ({BH}) must be B*num_heads, divisible by num_heads ({H})"
        )
    X = X.reshape(BH // H, H, L, d)  # (B*H, L, d) -> (B, H, L, d)
    return merge_heads(X)  # (B, H, L, d) -> (B, L, H, d) -> (B, L, D)
