"""What attention costs on a CPU: the contenders of chapter 6, their race, FLOPs and memory.

Shapes in the book's notation (:mod:`mha_lib`): B batch, H heads, Lq queries, Lk key-value
pairs, d head size, D = H*d = ``d_model`` (queries, keys and values all
have D features here).

Run ``python -m mha_lib.bench`` for the full table of the book's chapter "What attention
costs" (``--quick`` for a run of a few seconds, ``--help`` for the options). The timings are
paired ratios (see :mod:`mha_lib.timing`): the contenders run in turns inside every
repetition, and the table reports the median ratio with its minimum and maximum.

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

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib._checks import (
    check_bool,
    check_callable,
    check_device,
    check_positive_int,
    check_positive_number,
    check_sequence,
    check_size,
)
from mha_lib.bench._checks import (
    check_BDH,
    check_bench_size,
    check_float_dtype,
    check_instance,
    check_lengths,
    check_memory_rows,
)
from mha_lib.heads import split_heads
from mha_lib.interop import to_torch_mha
from mha_lib.mask_conventions import keep_mask_from_valid_lens, padding_mask_from_valid_lens
from mha_lib.masks import causal as causal_mask_kind
from mha_lib.multihead import MultiHeadAttention
from mha_lib.timing import Ratio, paired_ratio, peak_memory, time_paired

__all__ = [
    "CONTENDER_LABELS",
    "Row",
    "Sizes",
    "attention_share",
    "benchmark",
    "flop_count",
    "format_guard_table",
    "format_memory_table",
    "format_table",
    "guard_table",
    "make_case",
    "make_contenders",
    "make_modules",
    "memory_table",
    "scaling_times",
    "split_contenders",
    "weights_bytes",
]


# --- argument checks (each raises a ValueError naming the argument) ---------------------------


def _check_sizes(sizes: object, name: str = "sizes") -> Sizes:
    return check_instance(Sizes, "mha_lib.bench.cost.Sizes")(sizes, name)


def _check_case(case: object) -> _Case:
    return check_instance(_Case, "case of make_case")(case, "case")


def _check_contender(name: object, arg: str) -> str:
    if not isinstance(name, str) or name not in CONTENDER_LABELS:
        raise ValueError(f"{arg} must be one of {sorted(CONTENDER_LABELS)}, got {name!r}")
    return name


@dataclass(frozen=True)
class Sizes:
    """One problem size: B examples, Lq queries, Lk key-value pairs, width D, H heads."""

    B: int
    Lq: int
    Lk: int
    D: int
    H: int

    def __post_init__(self) -> None:
        check_bench_size(self.Lq, "Lq")
        check_bench_size(self.Lk, "Lk")
        check_BDH(self.B, self.D, self.H)

    @property
    def d(self) -> int:
        """The head size D / H."""
        return self.D // self.H

    def __str__(self) -> str:
        return f"({self.B}, {self.Lq}, {self.Lk}, {self.D}, {self.H})"


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
_TARGETS: tuple[tuple[str, str, float | None], ...] = (
    ("fast", "limit", 1.10),
    ("fast", "torch", 0.60),
    ("weights", "torch_weights", 1.00),
    ("weights", "fast", None),
)


@dataclass
class _Case:
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
    sizes: Sizes, *, masked: bool, seed: int = 0, dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> _Case:
    """Random inputs for ``sizes`` on ``device`` (drawn on the CPU: the same numbers on every
    device); with ``masked``, random valid lengths in [1, Lk].

    Queries, keys and values are three different tensors (cross-attention), so that no
    contender can take a self-attention shortcut the others cannot.

    Raises:
        ValueError: if ``sizes`` is not a :class:`Sizes`, ``masked`` not a bool, ``seed`` not
            an integer >= 0 or ``dtype`` not a floating-point ``torch.dtype``.
    """
    _check_sizes(sizes)
    check_bool(masked, "masked")
    check_size(seed, "seed")
    check_float_dtype(dtype)
    g = torch.Generator().manual_seed(seed)
    B, Lq, Lk, D = sizes.B, sizes.Lq, sizes.Lk, sizes.D
    queries = torch.randn(B, Lq, D, generator=g, dtype=dtype)
    keys = torch.randn(B, Lk, D, generator=g, dtype=dtype)
    values = torch.randn(B, Lk, D, generator=g, dtype=dtype)
    valid_lens = torch.randint(1, Lk + 1, (B,), generator=g) if masked else None
    device = check_device(device)
    return _Case(sizes, queries.to(device), keys.to(device), values.to(device),
                 None if valid_lens is None else valid_lens.to(device))


def make_modules(
    sizes: Sizes, *, seed: int = 0, dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """A ``MultiHeadAttention`` and an ``nn.MultiheadAttention`` with the same weights, in eval mode.

    Both have no biases; :func:`mha_lib.interop.to_torch_mha` copies the weights across.
    """
    _check_sizes(sizes)
    check_size(seed, "seed")
    check_float_dtype(dtype)
    D, H = sizes.D, sizes.H
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mha = MultiHeadAttention(D, D, D, D, H, dropout=0.0).to(check_device(device), dtype).eval()
    return mha, to_torch_mha(mha)


def make_contenders(case: _Case, *, seed: int = 0, causal: bool = False) -> dict[str, Callable[[], Tensor]]:
    """The five contenders of the module docstring as argument-free callables.

    Each returns its output (B, Lq, D); ``weights`` and ``torch_weights`` return
    ``(output, weights)`` with weights (B, H, Lq, Lk). The masks that ``limit`` and ``torch``
    take in their own format are built once, outside the calls, as a user would. With
    ``causal`` every contender is also causal: ``mask=causal()`` for ours, ``is_causal`` (or
    the dense mask, with valid lengths) for SDPA, a causal ``attn_mask`` for ``torch``.
    """
    _check_case(case)
    check_size(seed, "seed")
    check_bool(causal, "causal")
    s = case.sizes
    mha, ref = make_modules(s, seed=seed, dtype=case.queries.dtype, device=case.queries.device)
    q, k, v, valid_lens = case.queries, case.keys, case.values, case.valid_lens
    padding = keep = None
    if valid_lens is not None:
        padding = padding_mask_from_valid_lens(valid_lens, s.Lk)  # (B, Lk)
        keep = keep_mask_from_valid_lens(valid_lens, 1, s.Lk)[:, None]  # (B, 1, 1, Lk)
    mask = causal_mask = None
    if causal:
        mask = causal_mask_kind()
        causal_mask = ~mask.dense(1, s.Lq, s.Lk, device=q.device)[0]  # (Lq, Lk), True = hidden
        keep = None if keep is None else keep & ~causal_mask  # (B, 1, Lq, Lk)
    B, Lq, Lk, H, d = s.B, s.Lq, s.Lk, s.H, s.d

    def limit() -> Tensor:
        # Written out bare (no argument checks, unlike split_heads/merge_heads): the least work.
        qh = mha.W_q(q).view(B, Lq, H, d).transpose(1, 2)  # (B, Lq, D) -> (B, H, Lq, d)
        kh = mha.W_k(k).view(B, Lk, H, d).transpose(1, 2)  # (B, Lk, D) -> (B, H, Lk, d)
        vh = mha.W_v(v).view(B, Lk, H, d).transpose(1, 2)  # (B, Lk, D) -> (B, H, Lk, d)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=keep,
                                             is_causal=causal and keep is None)  # (B, H, Lq, d)
        return mha.W_o(out.transpose(1, 2).reshape(B, Lq, H * d))  # (B, H, Lq, d) -> (B, Lq, D)

    theirs = dict(key_padding_mask=padding, attn_mask=causal_mask, is_causal=causal)
    return {
        "weights": lambda: mha(q, k, v, valid_lens, mask=mask, need_weights=True),
        "fast": lambda: mha(q, k, v, valid_lens, mask=mask),
        "limit": limit,
        "torch": lambda: ref(q, k, v, **theirs, need_weights=False)[0],
        "torch_weights": lambda: ref(q, k, v, **theirs, need_weights=True, average_attn_weights=False),
    }


@dataclass
class Row:
    """One line of the table: a size, with or without valid lengths, and its ratios."""

    sizes: Sizes
    masked: bool
    ratios: dict[tuple[str, str], Ratio]
    seconds: dict[str, float] = field(default_factory=dict)  # median seconds per call
    times: dict[str, list[float]] = field(default_factory=dict)  # every repetition


def benchmark(
    sizes: Sequence[Sizes],
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
        contenders: which contenders to run (default: all five); only the ratios of the
            table whose two sides both ran appear in the rows.
        progress: called with a short message before each case (e.g. to print a progress line).
        seed: seed of the inputs and the weights.
        timer: the clock of :func:`mha_lib.timing.time_paired`.

    Returns:
        One :class:`Row` per (size, masked) pair.

    Raises:
        ValueError: naming the argument, before anything runs.
    """
    sizes = check_sequence(sizes, "sizes", "Sizes", _check_sizes)
    masked = check_sequence(masked, "masked", "True/False", check_bool)
    check_positive_int(repeats, "repeats")
    check_positive_number(min_time, "min_time")
    if contenders is not None:
        contenders = check_sequence(contenders, "contenders", "contender names", _check_contender)
    if progress is not None:
        check_callable(progress, "progress")
    check_size(seed, "seed")
    check_callable(timer, "timer")
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
            (a, b): paired_ratio(times, a, b) for a, b, _ in _TARGETS if a in times and b in times
        }
        seconds = {name: statistics.median(t) for name, t in times.items()}
        rows.append(Row(s, m, ratios, seconds, times))
    return rows


def format_table(rows: Sequence[Row], *, targets: bool = False) -> str:
    """The ratio table as text: median [min-max] per cell.

    With ``targets`` (the command line's table) each header names its column's target and
    each cell says ``ok`` or ``MISS`` against it.
    """
    check_sequence(rows, "rows", "Row", check_instance(Row, "Row of benchmark"))
    check_bool(targets, "targets")
    columns = [
        (a, b, t if targets else None) for a, b, t in _TARGETS if any((a, b) in r.ratios for r in rows)
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


def split_contenders(case: _Case, *, seed: int = 0) -> dict[str, Callable[[], object]]:
    """The two halves of the fast path, to time apart.

    ``projections`` runs the four ``nn.Linear`` layers (W_q, W_k, W_v on the inputs and W_o
    on a (B, Lq, D) tensor); ``attention`` runs only ``F.scaled_dot_product_attention`` on
    projected, head-split inputs (with the valid lengths as a keep mask, if any).
    """
    _check_case(case)
    check_size(seed, "seed")
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


def attention_share(times: Mapping[str, Sequence[float]]) -> float:
    """Median share of the attention core in projections + attention, from paired times.

    Args:
        times: what :func:`mha_lib.timing.time_paired` returns for :func:`split_contenders`.

    Raises:
        ValueError: if ``times`` does not map ``"attention"`` and ``"projections"`` to lists of
            one length of times > 0.
    """
    if not isinstance(times, Mapping) or not {"attention", "projections"} <= set(times):
        raise ValueError(
            "times must map 'attention' and 'projections' to their times (see split_contenders), "
            f"got {times!r}"
        )
    attention, projections = (
        check_sequence(times[key], f"times[{key!r}]", "times in seconds", check_positive_number)
        for key in ("attention", "projections")
    )
    if len(attention) != len(projections):
        raise ValueError(
            "times['attention'] and times['projections'] must be of one length (one time per "
            f"repetition), got {len(attention)} and {len(projections)}"
        )
    return statistics.median(a / (a + p) for a, p in zip(attention, projections))



def _guard_contenders(case: _Case, *, seed: int = 0) -> dict[str, Callable[[], object]]:
    """What the guards cost beside the forward they guard (issue 49), to time paired.

    ``guards`` runs what a forward under the device policy adds (no host read: a GPU, a graph
    being recorded): the rule for NaN and infinite inputs on the inputs
    (:class:`~mha_lib.attention.NonFiniteRule`), the overflow fit of the projected queries
    (:func:`~mha_lib.attention.fit_queries`) and the rule's NaN added to the output;
    ``forward`` is the fast-path forward (``need_weights=False``) as the case's device runs it
    (on the CPU: the guards only where they would change something). Without valid lengths
    (a self-attention on the case's queries); the guards' share: :func:`guard_table`.
    """
    from mha_lib.attention import NonFiniteRule, fit_queries

    _check_case(case)
    check_size(seed, "seed")
    s = case.sizes
    mha, _ = make_modules(s, seed=seed, dtype=case.queries.dtype)
    mha = mha.to(case.queries.device)
    x = case.queries
    with torch.no_grad():
        q = split_heads(mha.W_q(x), s.H)  # (B, Lq, D) -> (B, H, Lq, d)
        k = split_heads(mha.W_k(x), s.H)
        out = torch.zeros_like(q)

    def guards() -> Tensor:
        with torch.no_grad():
            rule = NonFiniteRule.of(x, x, x, None)
            fit_queries(q, k, finite_keys=True)
            return rule.spoil(out)

    def forward() -> Tensor:
        with torch.no_grad():
            return mha(x, x, x)

    return {"guards": guards, "forward": forward}


def guard_table(sizes: Sequence[Sizes], *, repeats: int = 7, min_time: float = 0.05, seed: int = 0,
                timer: Callable[[], float] = time.perf_counter) -> list[tuple[Sizes, Ratio]]:
    """The guards' cost under the device policy (:func:`_guard_contenders`) as a share of a
    fast-path forward, paired, at each size (a self-attention, no mask): ``(sizes, ratio)``
    rows. On the CPU the forward itself skips the guards where they would change nothing."""
    sizes = check_sequence(sizes, "sizes", "Sizes", _check_sizes)
    check_positive_int(repeats, "repeats")
    check_positive_number(min_time, "min_time")
    check_callable(timer, "timer")
    rows = []
    for s in sizes:
        times = time_paired(_guard_contenders(make_case(s, masked=False, seed=seed), seed=seed),
                            repeats=repeats, min_time=min_time, timer=timer)
        rows.append((s, paired_ratio(times, "guards", "forward")))
    return rows


def format_guard_table(rows: Sequence[tuple[Sizes, Ratio]]) -> str:
    """:func:`guard_table`'s rows as text, median [min-max] per size."""
    head = "(B, Lq, Lk, D, H)"
    lines = [(str(s), str(r)) for s, r in rows]
    width = max([len(head), *(len(a) for a, _ in lines)])
    out = [f"{head:<{width}}  guards / fast-path forward (device policy: no host read)",
           f"{'-' * width}  {'-' * 56}"]
    return "\n".join(out + [f"{a:<{width}}  {b}" for a, b in lines])


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
        repeats, min_time, timer: as in :func:`mha_lib.timing.time_paired`.
    """
    lengths = check_lengths(lengths)
    check_BDH(B, D, H)
    _check_contender(path, "path")
    check_positive_int(repeats, "repeats")
    check_positive_number(min_time, "min_time")
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


def memory_table(
    lengths: Sequence[int] = (256, 512, 1024, 2048), *, B: int = 2, D: int = 256, H: int = 8
) -> list[dict[str, int]]:
    """Peak memory of the weights path and of the fast path as the sequence grows (Lq = Lk = L).

    Returns:
        One dict per length: ``L``, ``weights_bytes`` (B H L^2 floats, analytic),
        ``peak_weights`` and ``peak_fast`` (measured by :func:`mha_lib.timing.peak_memory`, in
        bytes).
    """
    lengths = check_lengths(lengths)
    check_BDH(B, D, H)
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
    check_memory_rows(rows)
    check_BDH(B, D, H)
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
