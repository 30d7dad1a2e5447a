"""What the KV cache, grouped-query attention and tiling save, measured on this CPU.

Shape legend
    B    batch size
    H    number of (query) heads
    Hkv  number of key/value heads
    L    sequence length (tokens decoded, or Lq = Lk)
    d    head size, D / H
    D    model width

Run ``python -m mha_lib.bench modern`` for the tables of the chapters "Decoding with a KV
cache", "Grouped-query attention" and "FlashAttention's idea" (``--quick`` for a few seconds,
``--help`` for the options). Timings are paired ratios (see :mod:`mha_lib.timing`): the
contenders run in turns inside each repetition, and the tables show the median ratio with its
minimum and maximum.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib._checks import (
    check_bool,
    check_positive_int,
    check_positive_number,
    check_size,
)
from mha_lib.attention import DotProductAttention
from mha_lib.bench._checks import (
    check_BDH,
    check_bench_size,
    check_lengths,
    check_peak_rows,
    check_ratio,
    check_table,
    mapping_of,
)
from mha_lib.decoding import KVCache, kv_cache_bytes
from mha_lib.flash import tiled_attention
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.masking import causal_valid_lens
from mha_lib.multihead import MultiHeadAttention
from mha_lib.timing import loglog_slope, paired_ratio, peak_memory, time_paired

__all__ = [
    "cache_memory_table",
    "decoding_contenders",
    "decoding_flops",
    "decoding_table",
    "flash_memory_table",
    "flash_speed_table",
    "format_cache_memory_table",
    "format_decoding_table",
    "format_flash_memory_table",
    "format_flash_speed_table",
    "memory_slopes",
    "step_flops",
]


def _check_timing(repeats: object, min_time: object) -> None:
    check_positive_int(repeats, "repeats")
    check_positive_number(min_time, "min_time")


# --- decoding --------------------------------------------------------------------------------


def step_flops(t: int, D: int, *, cached: bool) -> int:
    """FLOPs of decoding step ``t`` (0-based) through one self-attention layer of width D.

    With the cache, step ``t`` projects one token (4 matrices of D x D: ``8 D^2``) and attends
    to ``t + 1`` keys (scores and weighted sum: ``4 (t + 1) D``). Without it, step ``t`` runs the
    layer on the whole prefix of ``t + 1`` tokens: ``8 (t + 1) D^2 + 4 (t + 1)^2 D``.
    """
    m = check_size(t, "t") + 1  # the prefix length
    D = check_positive_int(D, "D")
    check_bool(cached, "cached")
    if cached:
        return 8 * D * D + 4 * m * D
    return 8 * m * D * D + 4 * m * m * D


def decoding_flops(L: int, D: int, *, cached: bool) -> int:
    """FLOPs of decoding L tokens through one self-attention layer of width D.

    The sum of :func:`step_flops` over the steps ``t = 0 .. L - 1``, in closed form (the prefix
    lengths m = 1 .. L sum to L(L+1)/2, their squares to L(L+1)(2L+1)/6).
    """
    L = check_positive_int(L, "L")
    step_flops(0, D, cached=cached)  # checks D and cached
    if cached:
        return 8 * L * D * D + 4 * D * (L * (L + 1) // 2)
    return 8 * D * D * (L * (L + 1) // 2) + 4 * D * (L * (L + 1) * (2 * L + 1) // 6)


def decoding_contenders(
    L: int, *, B: int = 1, D: int = 64, H: int = 4, seed: int = 0
) -> dict[str, Callable[[], Tensor]]:
    """Two ways to run L decoding steps of one layer on the same inputs, each returning (B, L, D).

    * ``cached``: one position per step, attending to a :class:`~mha_lib.decoding.KVCache`;
    * ``recompute``: what a model without a cache does, the whole prefix at every step
      (causal valid lengths), keeping the last position's output.
    """
    L = check_bench_size(L, "L")
    check_BDH(B, D, H)
    check_size(seed, "seed")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mha = MultiHeadAttention(D, D, D, D, H, 0.0).eval()
        x = torch.randn(B, L, D)

    def cached() -> Tensor:
        cache = KVCache()
        steps = [mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(L)]
        return torch.cat(steps, dim=1)  # L x (B, 1, D) -> (B, L, D)

    def recompute() -> Tensor:
        steps = []
        for t in range(L):
            prefix = x[:, : t + 1]  # (B, t + 1, D)
            out = mha(prefix, prefix, prefix, causal_valid_lens(B, t + 1))
            steps.append(out[:, -1:])  # the new position only
        return torch.cat(steps, dim=1)  # L x (B, 1, D) -> (B, L, D)

    return {"cached": cached, "recompute": recompute}


def decoding_table(
    lengths: Sequence[int] = (64, 128, 256), *, B: int = 1, D: int = 64, H: int = 4,
    repeats: int = 5, min_time: float = 0.05,
) -> list[dict]:
    """Tokens per second with and without the cache, timed in turns, for each length.

    Returns:
        One dict per length: ``L``, ``tokens_per_s`` (dict by contender, median),
        ``speedup`` (a :class:`~mha_lib.timing.Ratio`, recompute time / cached time),
        ``seconds`` (median seconds to decode L tokens, by contender), ``cache_bytes``.
    """
    lengths = check_lengths(lengths)
    check_BDH(B, D, H)
    _check_timing(repeats, min_time)
    rows = []
    for L in lengths:
        fns = decoding_contenders(L, B=B, D=D, H=H)
        with torch.inference_mode():
            torch.testing.assert_close(fns["cached"](), fns["recompute"](), atol=1e-5, rtol=1e-4)
        times = time_paired(fns, repeats=repeats, min_time=min_time)
        seconds = {name: statistics.median(t) for name, t in times.items()}
        rows.append({
            "L": L,
            "seconds": seconds,
            "tokens_per_s": {name: B * L / s for name, s in seconds.items()},
            "speedup": paired_ratio(times, "recompute", "cached"),
            "cache_bytes": kv_cache_bytes(L, B=B, num_kv_heads=H, head_size=D // H),
        })
    return rows


def format_decoding_table(rows: Sequence[Mapping], *, B: int, D: int, H: int) -> str:
    """The decoding table as text (``rows`` as :func:`decoding_table` returns them)."""
    columns = {
        "L": check_positive_int,
        "tokens_per_s": mapping_of(check_positive_number, "cached", "recompute"),
        "speedup": check_ratio,
        "cache_bytes": check_size,
    }
    rows = check_table(rows, columns, "decoding_table")
    check_BDH(B, D, H)
    lines = [
        f"Decoding L tokens through one layer, B={B} D={D} H={H} (tokens/s: median)",
        f"{'L':>6}  {'cached tok/s':>12}  {'recompute tok/s':>15}  {'speed-up [min-max]':>20}"
        f"  {'cache KiB':>9}",
    ]
    for r in rows:
        t = r["tokens_per_s"]
        lines.append(
            f"{r['L']:>6}  {t['cached']:>12.0f}  {t['recompute']:>15.0f}  {str(r['speedup']):>20}"
            f"  {r['cache_bytes'] / 1024:>9.1f}"
        )
    return "\n".join(lines)


def cache_memory_table(
    lengths: Sequence[int] = (256, 1024, 4096), *, B: int = 1, D: int = 64, H: int = 8,
    kv_heads: Sequence[int] = (8, 2, 1), num_layers: int = 1,
) -> list[dict]:
    """Bytes a KV cache holds after decoding L tokens, for each number of key/value heads.

    The cache is filled by running :class:`~mha_lib.gqa.GroupedQueryAttention` on L positions
    and its ``nbytes`` is read (checked against :func:`~mha_lib.decoding.kv_cache_bytes`).

    Returns:
        One dict per length: ``L`` and ``bytes`` (dict from Hkv to bytes, all layers).
    """
    lengths = check_lengths(lengths)
    kv_heads = check_lengths(kv_heads, "kv_heads")
    check_BDH(B, D, H)
    num_layers = check_bench_size(num_layers, "num_layers")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layers = {Hkv: GroupedQueryAttention(D, H, Hkv, 0.0).eval() for Hkv in kv_heads}
        inputs = [torch.randn(B, L, D) for L in lengths]
    rows = []
    for L, x in zip(lengths, inputs):
        measured = {}
        for Hkv, layer in layers.items():
            cache = KVCache(num_layers)
            with torch.inference_mode():
                for i in range(num_layers):
                    layer(x, x, x, cache=cache[i])
            assert cache.nbytes == kv_cache_bytes(
                L, B=B, num_kv_heads=Hkv, head_size=D // H, num_layers=num_layers
            )
            measured[Hkv] = cache.nbytes
        rows.append({"L": L, "bytes": measured})
    return rows


def format_cache_memory_table(rows: Sequence[Mapping], *, B: int, D: int, H: int) -> str:
    """The KV cache memory table as text, with the ratio to the first column's Hkv.

    Sizes are in KiB when the smallest is below 1 MiB (so small caches do not round to 0.00
    MiB), else in MiB.
    """
    rows = check_table(rows, {"L": check_positive_int, "bytes": mapping_of(_check_cache_bytes)},
                       "cache_memory_table")
    check_BDH(B, D, H)
    kv_heads = list(rows[0]["bytes"])
    for i, r in enumerate(rows):
        if list(r["bytes"]) != kv_heads:
            raise ValueError(f"rows[{i}]['bytes'] must have the Hkv of rows[0] {kv_heads}, "
                             f"got {list(r['bytes'])}")
    smallest = min(n for r in rows for n in r["bytes"].values())
    unit, scale = ("KiB", 2**10) if smallest < 2**20 else ("MiB", 2**20)
    lines = [
        f"KV cache after L tokens, B={B} D={D} H={H} query heads ({unit}; ratio to Hkv = {kv_heads[0]})",
        f"{'L':>6}" + "".join(f"  {f'Hkv={h}':>14}" for h in kv_heads),
    ]
    for r in rows:
        base = r["bytes"][kv_heads[0]]
        cells = [f"{r['bytes'][h] / scale:8.1f} ({base / r['bytes'][h]:.0f}x)" for h in kv_heads]
        lines.append(f"{r['L']:>6}" + "".join(f"  {c:>14}" for c in cells))
    return "\n".join(lines)


def _check_cache_bytes(value: object, name: str) -> int:
    """Bytes of a filled cache: an integer >= 1 (a ratio divides by it)."""
    return check_positive_int(value, name)


# --- tiled attention -------------------------------------------------------------------------


def _check_flash_sizes(B: object, d: object, block_size: object) -> None:
    for value, name in ((B, "B"), (d, "d"), (block_size, "block_size")):
        check_bench_size(value, name)


def _flash_contenders(
    L: int, *, B: int = 1, d: int = 64, block_size: int = 64, seed: int = 0
) -> dict[str, Callable[[], Tensor]]:
    """Self-attention of L positions (heads folded into B) three ways, on the same inputs.

    * ``tiled``: :func:`~mha_lib.flash.tiled_attention`, the online softmax in plain PyTorch;
    * ``materialised``: ``DotProductAttention``, which holds the (B, L, L) weights;
    * ``fused``: ``F.scaled_dot_product_attention``, PyTorch's fused CPU kernel.
    """
    L = check_bench_size(L, "L")
    _check_flash_sizes(B, d, block_size)
    g = torch.Generator().manual_seed(check_size(seed, "seed"))
    q, k, v = (torch.randn(B, L, d, generator=g) for _ in range(3))
    attention = DotProductAttention(0.0).eval()
    return {
        "tiled": lambda: tiled_attention(q, k, v, block_size=block_size),
        "materialised": lambda: attention(q, k, v),
        # (B, L, d) -> (B, 1, L, d): the fused CPU kernel wants a heads axis (on 3-D inputs
        # it falls back to the materialising math path)
        "fused": lambda: F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0],
    }


def flash_memory_table(
    lengths: Sequence[int] = (256, 512, 1024, 2048), *, B: int = 4, d: int = 64,
    block_size: int = 64,
) -> list[dict]:
    """Peak bytes of tiled, materialised and fused attention as L grows (torch.profiler).

    Returns:
        One dict per length: ``L`` and ``peak`` (dict by contender, bytes).
    """
    lengths = check_lengths(lengths)
    _check_flash_sizes(B, d, block_size)
    rows = []
    for L in lengths:
        fns = _flash_contenders(L, B=B, d=d, block_size=block_size)
        rows.append({"L": L, "peak": {name: peak_memory(fn) for name, fn in fns.items()}})
    return rows


def memory_slopes(rows: Sequence[Mapping]) -> dict[str, float]:
    """Log-log slope of each contender's peak against L (1: linear, 2: quadratic).

    Args:
        rows: as :func:`flash_memory_table` returns them, at least two different lengths.
    """
    rows = check_peak_rows(rows)
    Ls = [r["L"] for r in rows]
    if len(set(Ls)) < 2:
        raise ValueError(f"rows must hold at least two different lengths L to fit a slope, got {Ls}")
    slopes = {}
    for name in rows[0]["peak"]:
        peaks = [r["peak"][name] for r in rows]
        if min(peaks) <= 0:
            raise ValueError(f"the peaks of {name!r} must be > 0 to take logarithms, got {peaks}")
        slopes[name] = loglog_slope(Ls, peaks)
    return slopes


def format_flash_memory_table(rows: Sequence[Mapping], *, B: int, d: int, block_size: int) -> str:
    """The peak-memory table as text, in MiB, with the fitted log-log slopes."""
    rows = check_peak_rows(rows, "tiled", "materialised")
    _check_flash_sizes(B, d, block_size)
    names = list(rows[0]["peak"])
    lines = [
        f"Peak memory of attention, B={B} (heads folded in) d={d}, Lq = Lk = L, "
        f"block_size={block_size} (MiB)",
        f"{'L':>6}" + "".join(f"  {n:>12}" for n in names) + f"  {'materialised/tiled':>18}",
    ]
    for r in rows:
        p = r["peak"]
        lines.append(
            f"{r['L']:>6}" + "".join(f"  {p[n] / 2**20:>12.2f}" for n in names)
            + f"  {p['materialised'] / max(p['tiled'], 1):>18.1f}"
        )
    if len({r["L"] for r in rows}) >= 2 and all(n > 0 for r in rows for n in r["peak"].values()):
        slopes = memory_slopes(rows)
        lines.append(f"{'slope':>6}" + "".join(f"  {slopes[n]:>12.2f}" for n in names))
    return "\n".join(lines)


def flash_speed_table(
    lengths: Sequence[int] = (256, 1024), *, B: int = 4, d: int = 64, block_size: int = 64,
    repeats: int = 5, min_time: float = 0.05,
) -> list[dict]:
    """Paired time ratios of tiled and materialised attention to the fused kernel.

    Returns:
        One dict per length: ``L`` and ``ratios`` (dict ``"tiled/fused"`` and
        ``"materialised/fused"`` to :class:`~mha_lib.timing.Ratio`).
    """
    lengths = check_lengths(lengths)
    _check_flash_sizes(B, d, block_size)
    _check_timing(repeats, min_time)
    rows = []
    for L in lengths:
        fns = _flash_contenders(L, B=B, d=d, block_size=block_size)
        times = time_paired(fns, repeats=repeats, min_time=min_time)
        rows.append({"L": L, "ratios": {
            f"{name}/fused": paired_ratio(times, name, "fused") for name in ("tiled", "materialised")
        }})
    return rows


def format_flash_speed_table(rows: Sequence[Mapping], *, B: int, d: int, block_size: int) -> str:
    """The speed table as text: time / fused kernel's time, median [min-max]."""
    rows = check_table(rows, {"L": check_positive_int, "ratios": mapping_of(check_ratio)},
                       "flash_speed_table")
    _check_flash_sizes(B, d, block_size)
    names = list(rows[0]["ratios"])
    lines = [
        f"Time relative to F.scaled_dot_product_attention, B={B} d={d} block_size={block_size}",
        f"{'L':>6}" + "".join(f"  {n:>22}" for n in names),
    ]
    for r in rows:
        lines.append(f"{r['L']:>6}" + "".join(f"  {str(r['ratios'].get(n, '-')):>22}" for n in names))
    return "\n".join(lines)
