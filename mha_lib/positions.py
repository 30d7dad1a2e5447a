"""Where position comes from: sinusoidal position tables and rotary position embeddings (RoPE).

Attention alone treats its inputs as a set (permuting the tokens permutes the output). A model
learns about order only if positions enter the computation:

* :func:`sinusoidal` the (L, D) table of Vaswani et al. (2017), added to the token embeddings;
* :func:`rotary`     RoPE (Su et al., RoFormer): rotate queries and keys by angles proportional
  to their position, so that the score of query position m and key position n depends on m - n.

Shape legend
    B   batch size
    H   number of heads
    L   sequence length (Lq for queries, Lk for keys)
    d   head size (even for RoPE)
    D   model width (even for the sinusoidal table)
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor

from mha_lib._checks import check_tensor


def frequencies(width: int, base: float = 10000.0) -> Tensor:
    """The width/2 angular frequencies ``base ** (-2i / width)``, i = 0, 1, ..., shape (width/2,)."""
    return base ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)


def sinusoidal(L: int, D: int, base: float = 10000.0) -> Tensor:
    """The sinusoidal position table of Vaswani et al.: sine on even columns, cosine on odd.

    ``P[pos, 2i] = sin(pos / base**(2i/D))`` and ``P[pos, 2i+1] = cos(pos / base**(2i/D))``.
    Column pair i turns like a clock hand at its own speed; low i fast, high i slowly.

    Shapes:
        returns: (L, D), float32. Add it to token embeddings of shape (B, L, D).

    Args:
        L: number of positions, >= 0.
        D: model width, even and >= 2.
        base: the wavelength scale, > 1 (10000 in the paper).
    """
    _check_table_args(L, D, base)
    angles = torch.arange(L, dtype=torch.float64)[:, None] * frequencies(D, base)  # (L, D/2)
    table = torch.empty(L, D, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()
    return table.float()


def rotary(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (RoPE, Su et al.): rotate queries or keys by their positions.

    Feature pair ``(x[..., 2i], x[..., 2i+1])`` at position p is rotated by the angle
    ``p * base**(-2i/d)``. Rotations preserve lengths, and the dot product of a query rotated
    to position m with a key rotated to position n depends only on m - n.

    Shapes:
        x: (B, H, L, d), d even (queries or keys, after the heads are split)
        positions: (L,) integers, or any integer shape that broadcasts to (B, H, L)
        returns: (B, H, L, d), same dtype as ``x``

    Args:
        x: queries or keys.
        positions: the position of every row of ``x``.
        base: the wavelength scale, > 1.
    """
    positions = _check_rotary_args(x, positions, base)
    d = x.shape[-1]
    angles = positions[..., None].double() * frequencies(d, base).to(x.device)  # (..., L, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (B, H, L, d) -> 2 x (B, H, L, d/2)
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)  # (B, H, L, d/2, 2) -> (B, H, L, d), pairs back in place


def _check_base(base: object) -> None:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not base > 1:
        raise ValueError(f"base must be a number > 1, got {base!r}")


def _check_table_args(L: object, D: object, base: object) -> None:
    if isinstance(L, bool) or not isinstance(L, numbers.Integral) or L < 0:
        raise ValueError(f"L must be an integer >= 0 (the number of positions), got {L!r}")
    if isinstance(D, bool) or not isinstance(D, numbers.Integral) or D < 2 or D % 2:
        raise ValueError(
            f"D must be an even integer >= 2 (sine and cosine columns come in pairs), got {D!r}"
        )
    _check_base(base)


def _check_rotary_args(x: object, positions: object, base: object) -> Tensor:
    """Check the arguments of :func:`rotary`; return the positions as a tensor on x's device."""
    check_tensor(x, "x", 4)
    d = x.shape[-1]
    if d % 2:
        raise ValueError(
            f"x must have an even head size d (features are rotated in pairs), "
            f"got d = {d} (shape {tuple(x.shape)})"
        )
    if not isinstance(positions, Tensor):
        try:
            positions = torch.as_tensor(positions)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(
                f"positions must be a tensor of integers, got {type(positions).__name__}"
            ) from None
    if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
        raise ValueError(f"positions must hold integers, got dtype {positions.dtype}")
    B, H, L, _ = x.shape
    if positions.dim() == 0 or positions.dim() > 3 or positions.shape[-1] != L:
        raise ValueError(
            f"positions must have shape (L,) = ({L},) or broadcast to (B, H, L) = ({B}, {H}, {L}), "
            f"got {tuple(positions.shape)}"
        )
    try:
        fits = torch.broadcast_shapes(positions.shape, (B, H, L)) == (B, H, L)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} do not broadcast to "
            f"(B, H, L) = ({B}, {H}, {L})"
        )
    _check_base(base)
    return positions.to(x.device)
