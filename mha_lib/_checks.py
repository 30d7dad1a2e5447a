"""Small argument checks shared by every layer (the lowest layer: imports only torch).

Each check raises a ``ValueError`` that names the argument, what was expected and what came.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor


def check_tensor(x: object, name: str, ndim: int | tuple[int, ...]) -> Tensor:
    """Return ``x`` if it is a floating-point tensor with ``ndim`` dimensions, else raise."""
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in dims:
        want = " or ".join(str(n) for n in dims)
        raise ValueError(
            f"{name} must have {want} dimensions, got shape {tuple(x.shape)} ({x.dim()} dimensions)"
        )
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is an integer >= 1 (bools excluded), else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def check_probability(value: object, name: str) -> float:
    """Return ``value`` if it is a number in [0, 1), else raise (a dropout rate)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)
