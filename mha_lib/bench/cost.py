"""What attention costs on a CPU: contenders, paired timers, FLOP counts and peak memory.

Shape legend
    B   batch size
    H   number of heads
    Lq  number of queries
    Lk  number of key-value pairs
    d   head size, D / H
    D   model width (queries, keys and values all have D features here)

Run ``python -m mha_lib.bench`` for the full table of the book's chapter "What attention
costs" (``--quick`` for a run of a few seconds, ``--help`` for the options).

Timings on a shared machine are noisy. Every comparison here is therefore a *paired ratio*:
the contenders run in turn inside the same repetition (in a rotating order), each repetition
gives one ratio, and the table reports the median ratio with its minimum and maximum. A burst
of load from another process slows both sides of a ratio alike, so the ratio stays put while
raw seconds would not.

The contenders, all with the same weights and inputs:

* ``weights``: ``MultiHeadAttention(..., need_weights=True)``, the clear d2l.ai path that
  materialises the (B, H, Lq, Lk) attention weights;
* ``fast``: ``MultiHeadAttention(...)``, the path through ``F.scaled_dot_product_attention``;
* ``limit``: the least any implementation must do, three ``nn.Linear`` projections, a bare
  ``F.scaled_dot_product_attention`` with a precomputed mask, and the output projection;
* ``torch``: ``nn.MultiheadAttention(need_weights=False)`` with a ``key_padding_mask``;
* ``torch_weights``: ``nn.MultiheadAttention(need_weights=True, average_attn_weights=False)``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import numbers
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib._checks import check_positive_int
from mha_lib.heads import split_heads
from mha_lib.interop import to_torch_mha
from mha_lib.masking import keep_mask_from_valid_lens, padding_mask_from_valid_lens
from mha_lib.multihead import MultiHeadAttention

__all__ = [
    "CONTENDER_LABELS",
    "FULL_SIZES",
    "QUICK_SIZES",
    "TARGETS",
    "Case",
    "Ratio",
    "Row",
    "Sizes",
    "benchmark",
    "check_agreement",
    "flop_count",
    "format_memory_table",
    "format_table",
    "loglog_slope",
    "make_case",
    "make_contenders",
    "make_modules",
    "memory_table",
    "paired_ratio",
    "peak_memory",
    "split_contenders",
    "time_paired",
    "weights_bytes",
    "attention_share",
    "scaling_times",
    "flop_figure",
    "scaling_figure",
    "memory_figure",
    "ratio_figure",
]


# --- argument checks (each raises a ValueError naming the argument) ---------------------------


def _check_sizes(sizes: object, name: str = "sizes") -> Sizes:
    if not isinstance(sizes, Sizes):
        raise ValueError(f"{name} must be a mha_lib.bench.Sizes, got {type(sizes).__name__}")
    return sizes


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


def _check_min_time(min_time: object) -> float:
    if (
        isinstance(min_time, bool)
        or not isinstance(min_time, numbers.Real)
        or not math.isfinite(min_time)
        or min_time <= 0
    ):
        raise ValueError(f"min_time must be a finite number of seconds > 0, got {min_time!r}")
    return float(min_time)


def _check_case(case: object) -> "Case":
    if not isinstance(case, Case):
        raise ValueError(
            f"case must be a mha_lib.bench.Case (see make_case), got {type(case).__name__}"
        )
    return case


def _check_rows(rows: object, kind: type, name: str) -> list:
    """A non-empty sequence of ``kind``."""
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError(f"{name} must be a non-empty sequence of {kind.__name__}, got {rows!r}")
    for i, row in enumerate(rows):
        if not isinstance(row, kind):
            raise ValueError(f"{name}[{i}] must be a {kind.__name__}, got {type(row).__name__}")
    return list(rows)


_MEMORY_KEYS = ("L", "weights_bytes", "peak_weights", "peak_fast")


def _check_memory_rows(rows: object) -> list:
    _check_rows(rows, Mapping, "rows")
    for i, row in enumerate(rows):
        missing = [key for key in _MEMORY_KEYS if key not in row]
        if missing:
            raise ValueError(f"rows[{i}] must have the keys {list(_MEMORY_KEYS)} "
                             f"(see memory_table), it lacks {missing}")
    return list(rows)


def _check_BDH(B: object, D: object, H: object) -> None:
    for value, name in ((B, "B"), (D, "D"), (H, "H")):
        check_positive_int(value, name)
    if D % H:
        raise ValueError(f"D ({D}) must be divisible by H ({H})")


def _check_float_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    return dtype


def _check_callable(fn: object, name: str) -> Callable:
    if not callable(fn):
        raise ValueError(f"{name} must be callable, got {type(fn).__name__}")
    return fn


def _check_functions(fns: object, name: str) -> Mapping[str, Callable]:
    """A non-empty mapping from names to argument-free callables."""
    if not isinstance(fns, Mapping):
        raise ValueError(
            f"{name} must be a mapping of names to functions, got {type(fns).__name__}"
        )
    if not fns:
        raise ValueError(f"{name} must hold at least one function, got none")
    for key, fn in fns.items():
        _check_callable(fn, f"{name}[{key!r}]")
    return fns


def _check_contender(name: object, arg: str) -> str:
    if not isinstance(name, str) or name not in CONTENDER_LABELS:
        raise ValueError(f"{arg} must be one of {sorted(CONTENDER_LABELS)}, got {name!r}")
    return name


def _check_items(values: object, name: str, what: str, check: Callable) -> list:
    """A non-empty sequence (not a single item) whose entries pass ``check(entry, name[i])``."""
    if isinstance(values, (str, bytes, bool, Sizes)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a sequence of {what}, got {values!r}")
    values = list(values)
    if not values:
        raise ValueError(f"{name} must hold at least one of {what}, got none")
    for i, value in enumerate(values):
        check(value, f"{name}[{i}]")
    return values


def _check_bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _check_lengths(lengths: object, name: str = "lengths") -> list[int]:
    """A non-empty sequence of integers >= 1."""
    return _check_items(lengths, name, "integers >= 1", check_positive_int)


@dataclass(frozen=True)
class Sizes:
    """One problem size: B examples, Lq queries, Lk key-value pairs, width D, H heads."""

    B: int
    Lq: int
    Lk: int
    D: int
    H: int

    def __post_init__(self) -> None:
        check_positive_int(self.Lq, "Lq")
        check_positive_int(self.Lk, "Lk")
        _check_BDH(self.B, self.D, self.H)

    @property
    def d(self) -> int:
        """The head size D / H."""
        return self.D // self.H

    def __str__(self) -> str:
        return f"({self.B}, {self.Lq}, {self.Lk}, {self.D}, {self.H})"


#: The sizes of the full table, (B, Lq, Lk, D, H).
FULL_SIZES = (Sizes(8, 128, 128, 256, 8), Sizes(8, 512, 512, 512, 8), Sizes(2, 1024, 2048, 512, 8))
#: Small sizes for ``--quick`` and for the chapter.
QUICK_SIZES = (Sizes(4, 64, 64, 128, 4), Sizes(2, 256, 256, 128, 4))

#: How the contenders are called in tables and plots.
CONTENDER_LABELS = {
    "weights": "MultiHeadAttention(need_weights=True)",
    "fast": "MultiHeadAttention (fast path)",
    "limit": "limit: Linear x3 + bare SDPA + Linear",
    "torch": "nn.MultiheadAttention(need_weights=False)",
    "torch_weights": "nn.MultiheadAttention(need_weights=True)",
}

#: The ratios the table reports: (numerator, denominator, target or None). The target
#: fast/torch <= 0.60 dates from PyTorch versions whose ``nn.MultiheadAttention`` materialised
#: the weights even with ``need_weights=False``; in torch 2.13 it calls the same fused
#: ``F.scaled_dot_product_attention`` as the fast path, so the two are about level and the
#: table marks this target MISS: it cannot be met by a faster implementation of ours.
TARGETS: tuple[tuple[str, str, float | None], ...] = (
    ("fast", "limit", 1.10),
    ("fast", "torch", 0.60),
    ("weights", "torch_weights", 1.00),
    ("weights", "fast", None),
)


@dataclass
class Case:
    """Inputs for one benchmark case.

    Shapes:
        queries: (B, Lq, D); keys, values: (B, Lk, D); valid_lens: None or (B,)
    """

    sizes: Sizes
    queries: Tensor
    keys: Tensor
    values: Tensor
    valid_lens: Tensor | None


def make_case(
    sizes: Sizes, *, masked: bool, seed: int = 0, dtype: torch.dtype = torch.float32
) -> Case:
    """Random inputs for ``sizes``; with ``masked``, random valid lengths in [1, Lk].

    Queries, keys and values are three different tensors (cross-attention), so that no
    contender can take a self-attention shortcut the others cannot.

    Raises:
        ValueError: if ``sizes`` is not a :class:`Sizes`, ``masked`` not a bool, ``seed`` not
            an integer >= 0 or ``dtype`` not a floating-point ``torch.dtype``.
    """
    _check_sizes(sizes)
    _check_bool(masked, "masked")
    _check_seed(seed)
    _check_float_dtype(dtype)
    g = torch.Generator().manual_seed(seed)
    B, Lq, Lk, D = sizes.B, sizes.Lq, sizes.Lk, sizes.D
    queries = torch.randn(B, Lq, D, generator=g, dtype=dtype)
    keys = torch.randn(B, Lk, D, generator=g, dtype=dtype)
    values = torch.randn(B, Lk, D, generator=g, dtype=dtype)
    valid_lens = torch.randint(1, Lk + 1, (B,), generator=g) if masked else None
    return Case(sizes, queries, keys, values, valid_lens)


def make_modules(
    sizes: Sizes, *, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """A ``MultiHeadAttention`` and an ``nn.MultiheadAttention`` with the same weights, in eval mode.

    Both have no biases; :func:`mha_lib.interop.to_torch_mha` copies the weights across.
    """
    _check_sizes(sizes)
    _check_seed(seed)
    _check_float_dtype(dtype)
    D, H = sizes.D, sizes.H
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mha = MultiHeadAttention(D, D, D, D, H, dropout=0.0).to(dtype).eval()
    return mha, to_torch_mha(mha)


def make_contenders(case: Case, *, seed: int = 0) -> dict[str, Callable[[], Tensor]]:
    """The five contenders of the module docstring as argument-free callables.

    Each returns its output (B, Lq, D); ``weights`` and ``torch_weights`` return
    ``(output, weights)`` with weights (B, H, Lq, Lk). The masks that ``limit`` and ``torch``
    take in their own format are built once, outside the calls, as a user would.
    """
    _check_case(case)
    _check_seed(seed)
    s = case.sizes
    mha, ref = make_modules(s, seed=seed, dtype=case.queries.dtype)
    q, k, v, valid_lens = case.queries, case.keys, case.values, case.valid_lens
    padding = keep = None
    if valid_lens is not None:
        padding = padding_mask_from_valid_lens(valid_lens, s.Lk)  # (B, Lk)
        keep = keep_mask_from_valid_lens(valid_lens, 1, s.Lk)[:, None]  # (B, 1, 1, Lk)
    B, Lq, Lk, H, d = s.B, s.Lq, s.Lk, s.H, s.d

    def limit() -> Tensor:
        # Written out bare (no argument checks, unlike split_heads/merge_heads): the least work.
        qh = mha.W_q(q).view(B, Lq, H, d).transpose(1, 2)  # (B, Lq, D) -> (B, H, Lq, d)
        kh = mha.W_k(k).view(B, Lk, H, d).transpose(1, 2)  # (B, Lk, D) -> (B, H, Lk, d)
        vh = mha.W_v(v).view(B, Lk, H, d).transpose(1, 2)  # (B, Lk, D) -> (B, H, Lk, d)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=keep)  # (B, H, Lq, d)
        return mha.W_o(out.transpose(1, 2).reshape(B, Lq, H * d))  # (B, H, Lq, d) -> (B, Lq, D)

    return {
        "weights": lambda: mha(q, k, v, valid_lens, need_weights=True),
        "fast": lambda: mha(q, k, v, valid_lens),
        "limit": limit,
        "torch": lambda: ref(q, k, v, key_padding_mask=padding, need_weights=False)[0],
        "torch_weights": lambda: ref(
            q, k, v, key_padding_mask=padding, need_weights=True, average_attn_weights=False
        ),
    }


def check_agreement(contenders: Mapping[str, Callable[[], Tensor]], **tolerances) -> None:
    """Assert that every contender computes the same output (and the same weights, if any).

    Raises:
        AssertionError: from ``torch.testing.assert_close``, naming the contender.
        ValueError: if ``contenders`` is not a non-empty mapping of callables.
    """
    _check_functions(contenders, "contenders")
    with torch.inference_mode():
        results = {name: fn() for name, fn in contenders.items()}
    outputs = {n: r[0] if isinstance(r, tuple) else r for n, r in results.items()}
    weights = {n: r[1] for n, r in results.items() if isinstance(r, tuple)}
    for group in (outputs, weights):
        if not group:
            continue
        first, *others = group
        for name in others:
            torch.testing.assert_close(
                group[name], group[first], **tolerances, msg=lambda m, n=name: f"{n}: {m}"
            )


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
    """
    _check_functions(fns, "fns")
    check_positive_int(repeats, "repeats")
    _check_min_time(min_time)
    check_positive_int(blocks, "blocks")
    if isinstance(warmup, bool) or not isinstance(warmup, numbers.Integral) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    _check_callable(timer, "timer")
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


def _seconds_per_call(fn: Callable[[], object], timer: Callable[[], float], max_calls: int = 2**16) -> float:
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
        elapsed = timer() - start
        if not isinstance(elapsed, numbers.Real) or not math.isfinite(elapsed) or elapsed < 0:
            raise ValueError(f"timer must return increasing finite seconds, got a difference of {elapsed!r}")
        if elapsed > 0:
            return elapsed / calls
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

    Raises:
        ValueError: if ``num`` or ``den`` is not a key of ``times``, the two lists differ in
            length or are empty, or a time of ``den`` is not positive.
    """
    if not isinstance(times, Mapping):
        raise ValueError(f"times must be a mapping of names to times, got {type(times).__name__}")
    for arg, name in (("num", num), ("den", den)):
        if name not in times:
            raise ValueError(f"{arg} must be one of the timed names {sorted(times)}, got {name!r}")
    if not times[num] or len(times[num]) != len(times[den]):
        raise ValueError(
            f"times[{num!r}] and times[{den!r}] must be non-empty and of one length, "
            f"got {len(times[num])} and {len(times[den])}"
        )
    if min(times[den]) <= 0:
        raise ValueError(f"times[{den!r}] must be positive to divide by, got {list(times[den])}")
    ratios = [a / b for a, b in zip(times[num], times[den], strict=True)]
    return Ratio(statistics.median(ratios), min(ratios), max(ratios))


@dataclass
class Row:
    """One line of the table: a size, with or without valid lengths, and its ratios."""

    sizes: Sizes
    masked: bool
    ratios: dict[tuple[str, str], Ratio]
    seconds: dict[str, float] = field(default_factory=dict)  # median seconds per call
    times: dict[str, list[float]] = field(default_factory=dict)  # every repetition


def benchmark(
    sizes: Iterable[Sizes] = FULL_SIZES,
    *,
    masked: Sequence[bool] = (False, True),
    repeats: int = 7,
    min_time: float = 0.05,
    contenders: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    seed: int = 0,
    timer: Callable[[], float] = time.perf_counter,
) -> list[Row]:
    """Time the contenders on every size, without and with valid lengths.

    Args:
        sizes: the problem sizes.
        masked: for each size, run without (False) and/or with (True) random valid lengths.
        repeats: repetitions, i.e. ratios per cell of the table.
        min_time: seconds the slowest contender spends in one repetition.
        contenders: which contenders to run (default: all five); only the ratios of
            :data:`TARGETS` whose two sides both ran appear in the rows.
        progress: called with a short message before each case (e.g. to print a progress line).
        seed: seed of the inputs and the weights.
        timer: the clock of :func:`time_paired`.

    Returns:
        One :class:`Row` per (size, masked) pair.

    Raises:
        ValueError: naming the argument, before anything runs.
    """
    sizes = _check_items(sizes, "sizes", "Sizes", _check_sizes)
    masked = _check_items(masked, "masked", "True/False", _check_bool)
    check_positive_int(repeats, "repeats")
    _check_min_time(min_time)
    if contenders is not None:
        contenders = _check_items(contenders, "contenders", "contender names", _check_contender)
    if progress is not None:
        _check_callable(progress, "progress")
    _check_seed(seed)
    _check_callable(timer, "timer")
    rows = []
    cases = [(s, m) for s in sizes for m in masked]
    for i, (s, m) in enumerate(cases):
        if progress is not None:
            progress(f"[{i + 1}/{len(cases)}] {s} {'valid_lens' if m else 'no mask'}")
        fns = make_contenders(make_case(s, masked=m, seed=seed), seed=seed)
        if contenders is not None:
            fns = {name: fns[name] for name in contenders}
        times = time_paired(fns, repeats=repeats, min_time=min_time, timer=timer)
        ratios = {
            (a, b): paired_ratio(times, a, b) for a, b, _ in TARGETS if a in times and b in times
        }
        seconds = {name: statistics.median(t) for name, t in times.items()}
        rows.append(Row(s, m, ratios, seconds, times))
    return rows


def format_table(rows: Sequence[Row], *, targets: bool = False) -> str:
    """The ratio table as text: median [min-max] per cell.

    With ``targets`` (the command line's table) each header names the target of
    :data:`TARGETS` and each cell says ``ok`` or ``MISS`` against it.
    """
    _check_rows(rows, Row, "rows")
    _check_bool(targets, "targets")
    columns = [
        (a, b, t if targets else None) for a, b, t in TARGETS if any((a, b) in r.ratios for r in rows)
    ]
    head = ["(B, Lq, Lk, D, H)", "valid_lens"] + [
        f"{a}/{b}" + (f" <= {t:.2f}" if t is not None else "") for a, b, t in columns
    ]
    lines = []
    for r in rows:
        cells = [str(r.sizes), "random" if r.masked else "none"]
        for a, b, t in columns:
            ratio = r.ratios.get((a, b))
            if ratio is None:
                cells.append("-")
            else:
                mark = "" if t is None else (" ok" if ratio.median <= t else " MISS")
                cells.append(f"{ratio}{mark}")
        lines.append(cells)
    widths = [max(len(c[i]) for c in [head, *lines]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*c) for c in lines]
    return "\n".join(out)


# --- where the time goes -------------------------------------------------------------------


def flop_count(sizes: Sizes) -> dict[str, int]:
    """Floating-point operations of one forward pass (a multiply-add counts as 2).

    Returns:
        ``{"projections": ..., "scores": ..., "weighted sum": ...}``: the four D x D
        projections cost 2 B (2 Lq + 2 Lk) D^2, the scores Q K^T of all heads 2 B Lq Lk D,
        and the weighted sum of the values another 2 B Lq Lk D. (The softmax, a few
        operations per score, is left out.)
    """
    _check_sizes(sizes)
    B, Lq, Lk, D = sizes.B, sizes.Lq, sizes.Lk, sizes.D
    return {
        "projections": 2 * B * (2 * Lq + 2 * Lk) * D * D,  # W_q, W_o on Lq rows; W_k, W_v on Lk
        "scores": 2 * B * Lq * Lk * D,  # H heads x (Lq x d) @ (d x Lk), with H d = D
        "weighted sum": 2 * B * Lq * Lk * D,  # H heads x (Lq x Lk) @ (Lk x d)
    }


def split_contenders(case: Case, *, seed: int = 0) -> dict[str, Callable[[], object]]:
    """The two halves of the fast path, to time apart.

    ``projections`` runs the four ``nn.Linear`` layers (W_q, W_k, W_v on the inputs and W_o
    on a (B, Lq, D) tensor); ``attention`` runs only ``F.scaled_dot_product_attention`` on
    projected, head-split inputs (with the valid lengths as a keep mask, if any).
    """
    _check_case(case)
    _check_seed(seed)
    s = case.sizes
    mha, _ = make_modules(s, seed=seed, dtype=case.queries.dtype)
    with torch.no_grad():
        q = split_heads(mha.W_q(case.queries), s.H)  # (B, Lq, D) -> (B, H, Lq, d)
        k = split_heads(mha.W_k(case.keys), s.H)  # (B, Lk, D) -> (B, H, Lk, d)
        v = split_heads(mha.W_v(case.values), s.H)  # (B, Lk, D) -> (B, H, Lk, d)
    keep = None
    if case.valid_lens is not None:
        keep = keep_mask_from_valid_lens(case.valid_lens, 1, s.Lk)[:, None]  # (B, 1, 1, Lk)
    concat = torch.zeros(s.B, s.Lq, s.D, dtype=case.queries.dtype)

    def projections() -> tuple[Tensor, ...]:
        return mha.W_q(case.queries), mha.W_k(case.keys), mha.W_v(case.values), mha.W_o(concat)

    return {
        "projections": projections,
        "attention": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
    }


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log(y) against log(x): the exponent p in y ~ c x^p."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"x and y must have the same length >= 2, got {len(x)} and {len(y)}")
    if min(x) <= 0 or min(y) <= 0:
        raise ValueError("x and y must be positive to take logarithms")
    lx = [math.log(v) for v in x]
    ly = [math.log(v) for v in y]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        raise ValueError("x must hold at least two different values")
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx


def attention_share(times: Mapping[str, Sequence[float]]) -> float:
    """Median share of the attention core in projections + attention, from paired times.

    Args:
        times: what :func:`time_paired` returns for :func:`split_contenders`.
    """
    if not isinstance(times, Mapping) or not {"attention", "projections"} <= set(times):
        raise ValueError(
            "times must map 'attention' and 'projections' to their times (see split_contenders), "
            f"got {times!r}"
        )
    shares = [
        a / (a + p) for a, p in zip(times["attention"], times["projections"], strict=True)
    ]
    return statistics.median(shares)


def scaling_times(
    lengths: Sequence[int],
    *,
    B: int = 1,
    D: int = 64,
    H: int = 4,
    path: str = "fast",
    repeats: int = 3,
    min_time: float = 0.02,
    timer: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Best seconds per call of one contender for self-attention of growing length L = Lq = Lk.

    The minimum over repetitions is the least disturbed measurement, which is what a slope
    fit on a shared machine needs.

    Args:
        lengths: the sequence lengths L.
        B, D, H: batch size, width and heads (H must divide D).
        path: which contender of :func:`make_contenders` to time.
        repeats, min_time, timer: as in :func:`time_paired`.
    """
    lengths = _check_lengths(lengths)
    _check_BDH(B, D, H)
    _check_contender(path, "path")
    check_positive_int(repeats, "repeats")
    _check_min_time(min_time)
    best = []
    for L in lengths:
        fns = make_contenders(make_case(Sizes(B, L, L, D, H), masked=False))
        times = time_paired({path: fns[path]}, repeats=repeats, min_time=min_time, timer=timer)
        best.append(min(times[path]))
    return best


# --- memory ----------------------------------------------------------------------------------


def weights_bytes(sizes: Sizes, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the attention weights (B, H, Lq, Lk) that ``need_weights=True`` materialises."""
    _check_sizes(sizes)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    return sizes.B * sizes.H * sizes.Lq * sizes.Lk * itemsize


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
    """
    _check_callable(fn, "fn")
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


def memory_table(
    lengths: Sequence[int] = (256, 512, 1024, 2048), *, B: int = 2, D: int = 256, H: int = 8
) -> list[dict[str, int]]:
    """Peak memory of the weights path and of the fast path as the sequence grows (Lq = Lk = L).

    Returns:
        One dict per length: ``L``, ``weights_bytes`` (B H L^2 floats, analytic),
        ``peak_weights`` and ``peak_fast`` (measured by :func:`peak_memory`, in bytes).
    """
    lengths = _check_lengths(lengths)
    _check_BDH(B, D, H)
    rows = []
    for L in lengths:
        s = Sizes(B, L, L, D, H)
        fns = make_contenders(make_case(s, masked=True), seed=0)
        rows.append(
            {
                "L": L,
                "weights_bytes": weights_bytes(s),
                "peak_weights": peak_memory(fns["weights"]),
                "peak_fast": peak_memory(fns["fast"]),
            }
        )
    return rows


def format_memory_table(rows: Sequence[Mapping[str, int]], *, B: int, D: int, H: int) -> str:
    """The memory table as text, in MiB (``rows`` as :func:`memory_table` returns them)."""
    _check_memory_rows(rows)
    _check_BDH(B, D, H)
    mib = 2**20
    lines = [
        f"Peak memory, B={B} D={D} H={H}, Lq = Lk = L (MiB; weights = B*H*L*L*4 bytes)",
        f"{'L':>6}  {'weights':>9}  {'peak weights path':>17}  {'peak fast path':>14}  {'ratio':>6}",
    ]
    for r in rows:
        lines.append(
            f"{r['L']:>6}  {r['weights_bytes'] / mib:>9.1f}  {r['peak_weights'] / mib:>17.1f}"
            f"  {r['peak_fast'] / mib:>14.1f}  {r['peak_weights'] / max(r['peak_fast'], 1):>6.1f}"
        )
    return "\n".join(lines)


# --- figures (plotly is imported only when a figure is drawn) -------------------------------


def _colors(n: int) -> list[str]:
    """n colour-blind-safe colours from the viridis scale (its yellow end left out)."""
    from plotly.colors import sample_colorscale

    return sample_colorscale("Viridis", [i / max(n, 1) * 0.85 for i in range(n)])


def flop_figure(lengths: Sequence[int], *, B: int = 1, D: int = 512, H: int = 8):
    """Stacked bars: FLOPs of the projections, the scores and the weighted sum against L."""
    import plotly.graph_objects as go

    lengths = _check_lengths(lengths)
    _check_BDH(B, D, H)

    parts = [flop_count(Sizes(B, L, L, D, H)) for L in lengths]
    fig = go.Figure()
    for name, color in zip(parts[0], _colors(len(parts[0]))):
        fig.add_bar(x=[str(L) for L in lengths], y=[p[name] / 1e9 for p in parts], name=name,
                    marker_color=color)
    fig.update_layout(
        barmode="stack", title=f"Where the FLOPs go (B={B}, D={D}, Lq = Lk = L)",
        xaxis_title="sequence length L", yaxis_title="GFLOP per forward pass",
        yaxis_type="log", height=380,
    )
    return fig


def scaling_figure(lengths: Sequence[int], seconds: Sequence[float], *, slope: float):
    """Log-log plot of time against length, with reference lines of slope 1 and 2."""
    import plotly.graph_objects as go

    lengths = _check_lengths(lengths)
    seconds = list(seconds)
    if len(seconds) != len(lengths) or not all(
        isinstance(t, numbers.Real) and math.isfinite(t) and t > 0 for t in seconds
    ):
        raise ValueError(
            f"seconds must hold one finite positive time per length ({len(lengths)}), "
            f"got {seconds!r}"
        )
    if isinstance(slope, bool) or not isinstance(slope, numbers.Real) or not math.isfinite(slope):
        raise ValueError(f"slope must be a finite number, got {slope!r}")

    c = _colors(3)
    fig = go.Figure()
    fig.add_scatter(x=list(lengths), y=[t * 1e3 for t in seconds], mode="lines+markers",
                    name=f"fast path (fitted slope {slope:.2f})", line_color=c[0])
    for p, color, dash in ((1, c[1], "dot"), (2, c[2], "dash")):
        ref = [seconds[-1] * 1e3 * (L / lengths[-1]) ** p for L in lengths]
        fig.add_scatter(x=list(lengths), y=ref, mode="lines", name=f"slope {p}",
                        line=dict(color=color, dash=dash))
    fig.update_layout(
        title="Time against sequence length (log-log)", xaxis_title="sequence length L",
        yaxis_title="milliseconds per forward pass", xaxis_type="log", yaxis_type="log",
        height=380,
    )
    return fig


def memory_figure(rows: Sequence[Mapping[str, int]]):
    """Peak memory of both paths and the size of the weights against L (log-log)."""
    import plotly.graph_objects as go

    rows = _check_memory_rows(rows)

    lengths = [r["L"] for r in rows]
    fig = go.Figure()
    series = (
        ("peak_weights", "need_weights=True: measured peak"),
        ("peak_fast", "fast path: measured peak"),
        ("weights_bytes", "the weights alone: B*H*L*L*4 bytes"),
    )
    for (key, name), color in zip(series, _colors(3)):
        fig.add_scatter(x=lengths, y=[r[key] / 2**20 for r in rows], mode="lines+markers",
                        name=name, line_color=color)
    fig.update_layout(
        title="Peak memory of one forward pass", xaxis_title="sequence length L",
        yaxis_title="MiB", xaxis_type="log", yaxis_type="log", height=380,
    )
    return fig


def ratio_figure(rows: Sequence[Row], *, baseline: str = "limit"):
    """Grouped bars: median time of each contender relative to ``baseline``, per case.

    Error bars show the smallest and largest paired ratio of each bar.
    """
    import plotly.graph_objects as go

    rows = _check_rows(rows, Row, "rows")
    _check_contender(baseline, "baseline")
    if not all(baseline in r.times for r in rows):
        raise ValueError(f"baseline {baseline!r} must have run in every row")

    names = [n for n in CONTENDER_LABELS if n != baseline and all(n in r.times for r in rows)]
    cases = [f"{r.sizes}<br>{'valid_lens' if r.masked else 'no mask'}" for r in rows]
    fig = go.Figure()
    for name, color in zip(names, _colors(len(names))):
        ratios = [paired_ratio(r.times, name, baseline) for r in rows]
        fig.add_bar(
            x=cases, y=[q.median for q in ratios], name=CONTENDER_LABELS[name],
            marker_color=color,
            error_y=dict(type="data", symmetric=False,
                         array=[q.max - q.median for q in ratios],
                         arrayminus=[q.median - q.min for q in ratios]),
        )
    fig.add_hline(y=1.0, line_dash="dash")  # the baseline; its name is on the y axis
    fig.update_layout(
        barmode="group",
        title=f"Time relative to the {baseline} (paired ratios, median; dashed line: equal time)",
        meta={"description": f"Bar chart: time of each contender divided by the time of the "
                             f"{baseline}, per benchmark shape, with min-max error bars."},
        xaxis_title="(B, Lq, Lk, D, H)", yaxis_title=f"time / time of the {baseline}",
        height=420, legend=dict(orientation="h", y=-0.35),
    )
    return fig


# --- command line ----------------------------------------------------------------------------


def _parse_min_time(text: str) -> float:
    try:
        return _check_min_time(float(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _parse_positive_int(text: str) -> int:
    try:
        return check_positive_int(int(text), "the value")
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None


def _parse_sizes(text: str) -> Sizes:
    try:
        values = [int(v) for v in text.replace("(", "").replace(")", "").split(",")]
        return Sizes(*values)
    except (TypeError, ValueError) as err:
        raise argparse.ArgumentTypeError(
            f"a size is B,Lq,Lk,D,H (five integers, H dividing D), got {text!r}: {err}"
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mha_lib.bench``."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_lib.bench",
        description="Paired time ratios of multi-head attention implementations on the CPU, "
        "and peak memory of the weights path against the fused path.",
    )
    parser.add_argument(
        "--size", type=_parse_sizes, action="append", metavar="B,Lq,Lk,D,H",
        help="a problem size (repeatable); default: the three sizes of the chapter",
    )
    parser.add_argument(
        "--repeats", type=_parse_positive_int, default=None, help="ratios per cell (default 9)"
    )
    parser.add_argument(
        "--min-time", type=_parse_min_time, default=None,
        help="seconds the slowest contender runs per repetition (default 0.2)",
    )
    parser.add_argument(
        "--memory-lengths", type=_parse_positive_int, nargs="*", default=None, metavar="L",
        help="sequence lengths of the memory table (default 256 512 1024 2048; none to skip)",
    )
    parser.add_argument(
        "--threads", type=_parse_positive_int, default=None, help="torch.set_num_threads"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    args = parser.parse_args(argv)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    sizes = args.size or (QUICK_SIZES if args.quick else FULL_SIZES)
    repeats = args.repeats or (3 if args.quick else 9)
    min_time = args.min_time if args.min_time is not None else (0.01 if args.quick else 0.2)
    lengths = args.memory_lengths
    if lengths is None:
        lengths = [64, 128] if args.quick else [256, 512, 1024, 2048]
    mem = dict(B=2, D=64, H=4) if args.quick else dict(B=2, D=256, H=8)

    def progress(message: str) -> None:
        print(f"\r{message:<60}", end="", file=sys.stderr, flush=True)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"median [min-max] of {repeats} paired time ratios",
        flush=True,
    )
    rows = benchmark(sizes, repeats=repeats, min_time=min_time, progress=progress)
    print("\r" + " " * 60 + "\r", end="", file=sys.stderr, flush=True)
    print(format_table(rows, targets=True), flush=True)
    if lengths:
        progress("memory ...")
        mrows = memory_table(lengths, **mem)
        print("\r" + " " * 60 + "\r", end="", file=sys.stderr, flush=True)
        print()
        print(format_memory_table(mrows, **mem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
