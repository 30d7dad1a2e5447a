"""Measuring on a shared CPU: paired timings, their ratios, peak memory and log-log slopes.

Timings on a shared machine are noisy. Every comparison here is therefore a *paired ratio*:
the contenders run in turn inside the same repetition (in a rotating order), each repetition
gives one ratio, and a comparison reports the median ratio with its minimum and maximum. A
burst of load from another process slows both sides of a ratio alike, so the ratio stays put
while raw seconds would not.

* :func:`time_paired`     seconds per call of several functions, measured in turns
* :func:`paired_ratio`    time[num] / time[den] per repetition, as a :class:`Ratio`
* :func:`check_agreement` the contenders of a race compute the same thing (check it first)
* :func:`peak_memory`     peak bytes a call holds at once (``torch.profiler``)
* :func:`kernels_called`  which PyTorch operators a call runs (``torch.profiler``)
* :func:`loglog_slope`    the exponent p of y ~ c x^p, fitted on log-log axes

The benchmarks of the chapters build on these: :mod:`mha_lib.bench.cost` (chapter 6) and
:mod:`mha_lib.bench.modern` (chapters 9-11).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mha_lib._checks import (
    check_callable,
    check_positive_int,
    check_positive_number,
    check_sequence,
    check_size,
)

__all__ = [
    "Ratio",
    "check_agreement",
    "kernels_called",
    "loglog_slope",
    "paired_ratio",
    "peak_memory",
    "time_paired",
]


def _check_functions(fns: object, name: str) -> Mapping[str, Callable]:
    """A non-empty mapping from names to argument-free callables."""
    if not isinstance(fns, Mapping):
        raise ValueError(
            f"{name} must be a mapping of names to functions, got {type(fns).__name__}"
        )
    if not fns:
        raise ValueError(f"{name} must hold at least one function, got none")
    for key, fn in fns.items():
        check_callable(fn, f"{name}[{key!r}]")
    return fns


def _check_number(value: object, name: str, *, positive: bool) -> float:
    """A finite real number (bools excluded), > 0 with ``positive``, else >= 0."""
    if positive:
        return check_positive_number(value, name)
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _numbers(values: object, name: str, *, positive: bool) -> list[float]:
    """A non-empty sequence of finite numbers (> 0 with ``positive``, else >= 0), as floats."""
    what = "finite numbers > 0" if positive else "finite numbers >= 0"
    check = lambda v, n: _check_number(v, n, positive=positive)  # noqa: E731
    return [float(v) for v in check_sequence(values, name, what, check)]


# --- time -------------------------------------------------------------------------------------


def time_paired(
    fns: Mapping[str, Callable[[], object]],
    *,
    repeats: int = 7,
    min_time: float = 0.05,
    blocks: int = 3,
    warmup: int = 1,
    timer: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Seconds per call of each function, one number per repetition, measured in turns.

    A *block* runs one function ``number`` times in a row; ``number`` is chosen once, so that
    a block of the slowest function takes about ``min_time / blocks`` seconds. In every
    repetition the functions take turns block by block (A B C A B C ...), starting from a
    different function each time, and a function's time for the repetition is its fastest
    block: a burst of load from another process lengthens some blocks, never shortens one.

    Args:
        fns: argument-free functions to time, by name.
        repeats: repetitions, i.e. times per function.
        min_time: seconds (> 0) the slowest function spends in one repetition.
        blocks: blocks per function and repetition.
        warmup: untimed calls of each function first (>= 0).
        timer: the clock, in seconds (tests pass a fake one).

    Returns:
        ``{name: [seconds per call in repetition 0, 1, ...]}``.

    Raises:
        ValueError: naming the argument, before anything runs; or if ``timer`` runs backwards
            or never advances.
    """
    _check_functions(fns, "fns")
    check_positive_int(repeats, "repeats")
    check_positive_number(min_time, "min_time")
    check_positive_int(blocks, "blocks")
    check_size(warmup, "warmup")
    check_callable(timer, "timer")
    names = list(fns)
    with torch.inference_mode():
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        slowest = max(_seconds_per_call(fn, timer) for fn in fns.values())
        number = max(1, math.ceil(min_time / blocks / slowest))
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(repeats):
            shift = r % len(names)
            order = names[shift:] + names[:shift]
            best = dict.fromkeys(names, math.inf)
            for _ in range(blocks):
                for name in order:
                    fn = fns[name]
                    start = timer()
                    for _ in range(number):
                        fn()
                    best[name] = min(best[name], (timer() - start) / number)
            for name in names:
                times[name].append(best[name])
    return times


def _seconds_per_call(
    fn: Callable[[], object], timer: Callable[[], float], max_calls: int = 2**16
) -> float:
    """Seconds one call of ``fn`` takes, calling it 1, 2, 4, ... times until ``timer`` advances.

    Raises:
        ValueError: the timer returns no number, runs backwards, or has not advanced after
            ``max_calls`` calls (a clock that never moves would otherwise ask for endless calls).
    """
    calls = 1
    while True:
        start = timer()
        for _ in range(calls):
            fn()
        end = timer()
        finite = all(isinstance(t, numbers.Real) and math.isfinite(t) for t in (start, end))
        if not finite or end < start:
            raise ValueError(
                f"timer must return increasing finite seconds, got {start!r} then {end!r}"
            )
        if end > start:
            return (end - start) / calls
        if calls >= max_calls:
            raise ValueError(
                f"timer did not advance during {calls} calls: pass a clock that measures time, "
                "such as time.perf_counter"
            )
        calls *= 2


@dataclass(frozen=True)
class Ratio:
    """Median, minimum and maximum of per-repetition time ratios."""

    median: float
    min: float
    max: float

    def __str__(self) -> str:
        return f"{self.median:.2f} [{self.min:.2f}-{self.max:.2f}]"


def paired_ratio(times: Mapping[str, Sequence[float]], num: str, den: str) -> Ratio:
    """The ratio time[num] / time[den], repetition by repetition, summarised.

    Args:
        times: what :func:`time_paired` returns: per name, seconds per repetition.
        num, den: the names of the numerator and the denominator.

    Raises:
        ValueError: if ``times`` is not a mapping, ``num`` or ``den`` is not one of its keys,
            the two lists are empty or differ in length, a time is not a finite number >= 0,
            or a time of ``den`` is 0.
    """
    if not isinstance(times, Mapping):
        raise ValueError(f"times must be a mapping of names to times, got {type(times).__name__}")
    for arg, name in (("num", num), ("den", den)):
        if not isinstance(name, str) or name not in times:
            raise ValueError(f"{arg} must be one of the timed names {list(times)}, got {name!r}")
    a = _numbers(times[num], f"times[{num!r}]", positive=False)
    b = _numbers(times[den], f"times[{den!r}]", positive=True)
    if len(a) != len(b):
        raise ValueError(
            f"times[{num!r}] and times[{den!r}] must be of one length (one time per "
            f"repetition), got {len(a)} and {len(b)}"
        )
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return Ratio(statistics.median(ratios), min(ratios), max(ratios))


def check_agreement(
    contenders: Mapping[str, Callable[[], object]],
    *,
    atol: float | None = None,
    rtol: float | None = None,
) -> None:
    """Assert that every contender computes the same output (and the same weights, if any).

    Each contender returns a tensor, or a tuple ``(output, weights)`` of tensors; outputs are
    compared with the first contender's output, weights with the first contender's weights.

    Args:
        contenders: argument-free functions by name, as for :func:`time_paired`.
        atol, rtol: tolerances of ``torch.testing.assert_close`` (both or neither; default
            that function's for the dtype).

    Raises:
        AssertionError: from ``torch.testing.assert_close``, naming the contender.
        ValueError: if ``contenders`` is not a non-empty mapping of callables, the tolerances
            are not numbers >= 0 given together, or a contender returns something else than a
            tensor or a tuple of two tensors.
    """
    _check_functions(contenders, "contenders")
    if (atol is None) != (rtol is None):
        raise ValueError(
            f"atol and rtol must be given together or not at all, got {atol!r} and {rtol!r}"
        )
    tolerances = {}
    if atol is not None:
        tolerances = {
            "atol": _check_number(atol, "atol", positive=False),
            "rtol": _check_number(rtol, "rtol", positive=False),
        }
    with torch.inference_mode():
        results = {name: fn() for name, fn in contenders.items()}
    outputs, weights = {}, {}
    for name, result in results.items():
        if isinstance(result, Tensor):
            outputs[name] = result
        elif (
            isinstance(result, tuple) and len(result) == 2
            and all(isinstance(t, Tensor) for t in result)
        ):
            outputs[name], weights[name] = result
        else:
            raise ValueError(
                f"contenders[{name!r}] must return a tensor or a tuple (output, weights) of "
                f"tensors, got {type(result).__name__}"
            )
    for group in (outputs, weights):
        if not group:
            continue
        first, *others = group
        for name in others:
            torch.testing.assert_close(
                group[name], group[first], **tolerances, msg=lambda m, n=name: f"{n}: {m}"
            )


# --- memory and kernels (torch.profiler) -------------------------------------------------------


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (the profiler's C++ start/stop log lines)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes that ``fn()`` holds at once on the CPU, above what was allocated before.

    Measured with ``torch.profiler`` (``profile_memory=True``): every allocation and free
    inside the call is an event; the running sum of their sizes, in time order, peaks at the
    returned number. It counts the tensors the call returns (they are alive at its end), and
    allocations inside fused kernels too.

    Raises:
        ValueError: if ``fn`` is not callable.
    """
    check_callable(fn, "fn")
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), _quiet_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            result = fn()
        del result
    events = prof.profiler.kineto_results.events()
    deltas = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    peak = current = 0
    for _, nbytes in deltas:
        current += nbytes
        peak = max(peak, current)
    return peak


def kernels_called(fn: Callable[[], object]) -> set[str]:
    """Names of the PyTorch operators (``aten::...``) that ``fn()`` runs, from torch.profiler.

    Shows which kernel ``F.scaled_dot_product_attention`` picked, e.g.
    ``aten::_scaled_dot_product_flash_attention_for_cpu``.

    Raises:
        ValueError: if ``fn`` is not callable.
    """
    check_callable(fn, "fn")
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), _quiet_stderr():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    return {event.name for event in prof.events()}


# --- fits -------------------------------------------------------------------------------------


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log(y) against log(x): the exponent p in y ~ c x^p.

    Args:
        x, y: sequences of one length >= 2 of finite numbers > 0; ``x`` must hold at least two
            different values.

    Raises:
        ValueError: naming ``x`` or ``y`` if that is not so.
    """
    xs = _numbers(x, "x", positive=True)
    ys = _numbers(y, "y", positive=True)
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(
            f"x and y must have the same length >= 2, got {len(xs)} and {len(ys)}"
        )
    lx = [math.log(v) for v in xs]
    ly = [math.log(v) for v in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        raise ValueError(f"x must hold at least two different values, got {xs}")
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx
