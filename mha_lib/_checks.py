"""Small argument checks shared by every layer (the lowest layer: imports only torch).

Each check raises a ``ValueError`` that names the argument, what was expected and what came.
"""

from __future__ import annotations

import functools
import numbers
import warnings
from typing import Callable, TypeVar

import torch
from torch import Tensor

__all__ = [
    "as_tensor",
    "check_bool",
    "check_bool_mask",
    "check_compute_dtype",
    "check_device",
    "check_not_meta",
    "check_positive_int",
    "check_positive_number",
    "check_probability",
    "check_size",
    "check_tensor",
    "quiet_when_traced",
    "read_scalars",
    "tracing",
]


def check_tensor(x: object, name: str, ndim: int | tuple[int, ...]) -> Tensor:
    """Return ``x`` if it is a floating-point tensor with ``ndim`` dimensions, else raise."""
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    check_not_meta(x, name)
    if x.dim() not in dims:
        want = " or ".join(str(n) for n in dims)
        raise ValueError(
            f"{name} must have {want} dimensions, got shape {tuple(x.shape)} ({x.dim()} dimensions)"
        )
    return check_compute_dtype(x, name)


#: The floating-point dtypes attention computes in (float8 types only store numbers).
_COMPUTE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_compute_dtype(x: Tensor, name: str) -> Tensor:
    """Return ``x`` if its dtype is one attention computes in (:data:`_COMPUTE_DTYPES`), else a
    ValueError (an integer tensor, or a float8 type, which PyTorch stores but does not compute
    softmaxes in)."""
    if x.dtype not in _COMPUTE_DTYPES:
        hint = ": float8 is a storage format, convert with .to(torch.bfloat16)" if x.is_floating_point() else ""
        raise ValueError(f"{name} must be a floating-point tensor of float16, bfloat16, float32 or "
                         f"float64, got dtype {x.dtype}{hint}")
    return x


def check_not_meta(x: Tensor, name: str) -> Tensor:
    """Return ``x`` unless it lives on the ``meta`` device (shapes only, no numbers to compute with)."""
    if x.is_meta:
        raise ValueError(
            f"{name} must hold values, but {name} is on the meta device (a shape without "
            f"numbers, {tuple(x.shape)}): pass a tensor with data, e.g. on the CPU"
        )
    return x


def check_bool_mask(mask: object, name: str) -> Tensor:
    """Return ``mask`` if it is a boolean tensor with values, else raise a ValueError naming ``name``."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must be a boolean torch.Tensor, got {getattr(mask, 'dtype', type(mask).__name__)}"
        )
    return check_not_meta(mask, name)


def check_device(value: object, name: str = "device") -> torch.device:
    """``value`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``) as a device this
    PyTorch can use, else a ValueError naming ``name``: an unknown kind, the meta device that
    holds no numbers, and for a name (not a ``torch.device``, which a tensor hands over) a CUDA
    device without CUDA or an index past the last GPU."""
    try:
        device = torch.device(value)
    except (TypeError, RuntimeError, ValueError):
        raise ValueError(f"{name} must be a device such as 'cpu' or 'cuda', got {value!r}") from None
    if device.type == "meta":
        raise ValueError(f"{name} must be a device with data, not 'meta' (shapes only), got {value!r}")
    if device.type != "cpu" and not isinstance(value, torch.device):  # (a device object: a tensor's)
        module = getattr(torch, device.type, None)
        available = getattr(module, "is_available", lambda: False)()
        count = getattr(module, "device_count", lambda: 0)() if available else 0
        if not available or (device.index is not None and device.index >= count):
            raise ValueError(
                f"{name} {value!r} is not available here ({device.type}: "
                f"{count} device(s)); use 'cpu'" + (", or see torch.cuda.is_available()" if device.type == "cuda" else "")
            )
    return device


def as_tensor(value: object, name: str, what: str) -> Tensor:
    """``value`` as a tensor with data (a list of numbers is converted), else a ValueError
    saying that ``name`` must be ``what``."""
    if not isinstance(value, Tensor):
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{name} must be {what}, got {type(value).__name__}") from None
    return check_not_meta(value, name)


def read_scalars(*scalars: Tensor) -> list[float]:
    """The values of several 0-d tensors, read from their device in ONE host synchronisation.

    Reading a value (``.item()``, ``bool(...)``, ``.tolist()``) waits for the device to finish
    all queued work; reading several at once waits only once.
    """
    if not scalars:
        return []
    device = scalars[0].device
    return torch.stack([s if s.dtype == torch.float64 and s.device == device
                        else s.to(device=device, dtype=torch.float64) for s in scalars]).tolist()


#: The largest size a tensor can have (torch counts in 64-bit integers).
_LARGEST_SIZE = 2**63 - 1


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is an integer >= 1 (bools excluded) that a tensor size can hold,
    else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if value > _LARGEST_SIZE:
        raise ValueError(f"{name} must be at most 2**63 - 1 (a tensor size), got {value!r}")
    return int(value)


def check_probability(value: object, name: str) -> float:
    """Return ``value`` if it is a number in [0, 1), else raise (a dropout rate)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)


def tracing() -> bool:
    """True while ``torch.compile``, ``torch.export`` or ``torch.jit.trace`` records the code.

    Checks that look at tensor *values* (a valid length out of range, a mask that is not 0/1)
    need the data, which a graph does not have while it is being recorded: they are skipped
    there (and a traced graph computes every valid length correctly because the computation
    itself has no data-dependent branch). Checks of types, shapes and dtypes always run.
    """
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is True or False, else raise."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_size(value: object, name: str) -> int:
    """Return ``value`` if it is an integer >= 0 (bools excluded), else raise (a tensor size)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if value > _LARGEST_SIZE:
        raise ValueError(f"{name} must be at most 2**63 - 1 (a tensor size), got {value!r}")
    return int(value)


F = TypeVar("F", bound=Callable)


def quiet_when_traced(check: F) -> F:
    """Decorate a check so that ``torch.jit.trace`` does not warn about it.

    A check compares sizes, which ``torch.jit.trace`` records as tensors, and warns that
    "converting a tensor to a Python boolean might cause the trace to be incorrect". A check
    only raises or passes; it never changes what is computed, so the trace is correct.
    """

    @functools.wraps(check)
    def wrapper(*args, **kwargs):
        if not torch.jit.is_tracing():
            return check(*args, **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            return check(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def check_callable(value: object, name: str) -> Callable:
    """Return ``value`` if it can be called, else raise."""
    if not callable(value):
        raise ValueError(f"{name} must be callable, got {type(value).__name__}")
    return value


def check_positive_number(value: object, name: str) -> float:
    """Return ``value`` as a float if it is a finite real number > 0 (bools excluded), else raise."""
    import math

    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_sequence(
    values: object, name: str, what: str, check: Callable[[object, str], object]
) -> list:
    """Return ``values`` as a list if it is a non-empty sequence whose entries pass ``check``.

    ``check(entry, f"{name}[i]")`` raises for a bad entry; ``what`` names the entries in the
    message ("integers >= 1"). A string, a mapping or a single non-iterable value is refused.
    """
    from collections.abc import Iterable, Mapping

    if isinstance(values, (str, bytes, Mapping, Tensor)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a sequence of {what}, got {values!r}")
    values = list(values)
    if not values:
        raise ValueError(f"{name} must hold at least one of {what}, got none")
    for i, value in enumerate(values):
        check(value, f"{name}[{i}]")
    return values
