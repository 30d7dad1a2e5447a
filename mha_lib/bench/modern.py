"""What the KV cache, grouped-query attention and tiling save, measured on this CPU.

Shape legend
    B    batch size
    H    number of (query) heads
    Hkv  number of key/value heads
    L    sequence length (tokens decoded, or Lq = Lk)
    d    head size, D / H
    D    model width

Run ``python -m mha_lib.bench_modern`` for the tables of the chapters "Decoding with a KV
cache", "Grouped-query attention" and "FlashAttention's idea" (``--quick`` for a few seconds,
``--help`` for the options). Timings are paired ratios, as in :mod:`mha_lib.bench`: the
contenders run in turns inside each repetition, and the table shows the median ratio with its
minimum and maximum.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib._checks import check_positive_int
from mha_lib.attention import DotProductAttention
from mha_lib.bench import Ratio, _check_callable, _quiet_stderr, loglog_slope, paired_ratio, peak_memory, time_paired
from mha_lib.decoding import KVCache, kv_cache_bytes
from mha_lib.flash import tiled_attention
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.masking import causal_valid_lens
from mha_lib.multihead import MultiHeadAttention

__all__ = [
    "cache_memory_table",
    "decoding_contenders",
    "decoding_flops",
    "decoding_table",
    "flash_contenders",
    "flash_memory_table",
    "flash_speed_table",
    "format_cache_memory_table",
    "format_decoding_table",
    "format_flash_memory_table",
    "format_flash_speed_table",
    "kernels_called",
    "main",
]


def _check_lengths(lengths: object, name: str = "lengths") -> list[int]:
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence) or not lengths:
        raise ValueError(f"{name} must be a non-empty sequence of integers >= 1, got {lengths!r}")
    return [check_positive_int(L, f"{name}[{i}]") for i, L in enumerate(lengths)]


def _check_BDH(B: object, D: object, H: object) -> None:
    for value, name in ((B, "B"), (D, "D"), (H, "H")):
        check_positive_int(value, name)
    if D % H:
        raise ValueError(f"D ({D}) must be divisible by H ({H})")


# --- decoding --------------------------------------------------------------------------------


def decoding_flops(L: int, D: int, *, cached: bool) -> int:
    """FLOPs of decoding L tokens through one self-attention layer of width D.

    With the cache, step ``t`` projects one token (4 matrices of D x D: ``8 D^2``) and attends
    to ``t + 1`` keys (scores and weighted sum: ``4 (t + 1) D``). Without it, step ``t`` runs the
    layer on the whole prefix of ``t + 1`` tokens: ``8 (t + 1) D^2 + 4 (t + 1)^2 D``.
    """
    L, D = check_positive_int(L, "L"), check_positive_int(D, "D")
    n = range(1, L + 1)  # prefix length t + 1 at step t
    if cached:
        return sum(8 * D * D + 4 * m * D for m in n)
    return sum(8 * m * D * D + 4 * m * m * D for m in n)


def decoding_contenders(
    L: int, *, B: int = 1, D: int = 64, H: int = 4, seed: int = 0
) -> dict[str, Callable[[], Tensor]]:
    """Two ways to run L decoding steps of one layer on the same inputs, each returning (B, L, D).

    * ``cached``: one position per step, attending to a :class:`~mha_lib.decoding.KVCache`;
    * ``recompute``: what a model without a cache does, the whole prefix at every step
      (causal valid lengths), keeping the last position's output.
    """
    L = check_positive_int(L, "L")
    _check_BDH(B, D, H)
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
        ``speedup`` (a :class:`~mha_lib.bench.Ratio`, recompute time / cached time),
        ``seconds`` (median seconds to decode L tokens, by contender), ``cache_bytes``.
    """
    lengths = _check_lengths(lengths)
    _check_BDH(B, D, H)
    rows = []
    for L in lengths:
        fns = decoding_contenders(L, B=B, D=D, H=H)
        with torch.inference_mode():
            torch.testing.assert_close(fns["cached"](), fns["recompute"](), atol=1e-5, rtol=1e-4)
        times = time_paired(fns, repeats=repeats, min_time=min_time)
        seconds = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
        rows.append({
            "L": L,
            "seconds": seconds,
            "tokens_per_s": {name: B * L / s for name, s in seconds.items()},
            "speedup": paired_ratio(times, "recompute", "cached"),
            "cache_bytes": kv_cache_bytes(L, B=B, num_kv_heads=H, head_size=D // H),
        })
    return rows


def format_decoding_table(rows: Sequence[dict], *, B: int, D: int, H: int) -> str:
    """The decoding table as text (``rows`` as :func:`decoding_table` returns them)."""
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
    lengths = _check_lengths(lengths)
    kv_heads = _check_lengths(kv_heads, "kv_heads")
    _check_BDH(B, D, H)
    num_layers = check_positive_int(num_layers, "num_layers")
    torch.manual_seed(0)
    layers = {Hkv: GroupedQueryAttention(D, H, Hkv, 0.0).eval() for Hkv in kv_heads}
    rows = []
    for L in lengths:
        x = torch.randn(B, L, D)
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


def format_cache_memory_table(rows: Sequence[dict], *, B: int, D: int, H: int) -> str:
    """The KV cache memory table as text, with the ratio to full multi-head (Hkv = H).

    Sizes are in KiB when the smallest is below 1 MiB (so small caches do not round to 0.00
    MiB), else in MiB.
    """
    kv_heads = list(rows[0]["bytes"])
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


# --- tiled attention -------------------------------------------------------------------------


def flash_contenders(
    L: int, *, B: int = 1, d: int = 64, block_size: int = 64, seed: int = 0
) -> dict[str, Callable[[], Tensor]]:
    """Self-attention of L positions (heads folded into B) three ways, on the same inputs.

    * ``tiled``: :func:`~mha_lib.flash.tiled_attention`, the online softmax in plain PyTorch;
    * ``materialised``: ``DotProductAttention``, which holds the (B, L, L) weights;
    * ``fused``: ``F.scaled_dot_product_attention``, PyTorch's fused CPU kernel.
    """
    L = check_positive_int(L, "L")
    check_positive_int(B, "B")
    check_positive_int(d, "d")
    block_size = check_positive_int(block_size, "block_size")
    g = torch.Generator().manual_seed(seed)
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
    lengths = _check_lengths(lengths)
    rows = []
    for L in lengths:
        fns = flash_contenders(L, B=B, d=d, block_size=block_size)
        rows.append({"L": L, "peak": {name: peak_memory(fn) for name, fn in fns.items()}})
    return rows


def memory_slopes(rows: Sequence[dict]) -> dict[str, float]:
    """Log-log slope of each contender's peak against L (1: linear, 2: quadratic)."""
    Ls = [r["L"] for r in rows]
    return {name: loglog_slope(Ls, [r["peak"][name] for r in rows]) for name in rows[0]["peak"]}


def format_flash_memory_table(rows: Sequence[dict], *, B: int, d: int, block_size: int) -> str:
    """The peak-memory table as text, in MiB, with the fitted log-log slopes."""
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
            + f"  {p['materialised'] / p['tiled']:>18.1f}"
        )
    if len(rows) >= 2:
        slopes = memory_slopes(rows)
        lines.append(f"{'slope':>6}" + "".join(f"  {slopes[n]:>12.2f}" for n in names))
    return "\n".join(lines)


def kernels_called(fn: Callable[[], object]) -> set[str]:
    """Names of the PyTorch operators (``aten::...``) that ``fn()`` runs, from torch.profiler.

    Shows which kernel ``F.scaled_dot_product_attention`` picked, e.g.
    ``aten::_scaled_dot_product_flash_attention_for_cpu``.
    """
    _check_callable(fn, "fn")
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), _quiet_stderr():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    return {event.name for event in prof.events()}


def flash_speed_table(
    lengths: Sequence[int] = (256, 1024), *, B: int = 4, d: int = 64, block_size: int = 64,
    repeats: int = 5, min_time: float = 0.05,
) -> list[dict]:
    """Paired time ratios of tiled and materialised attention to the fused kernel.

    Returns:
        One dict per length: ``L`` and ``ratios`` (dict ``"tiled/fused"`` and
        ``"materialised/fused"`` to :class:`~mha_lib.bench.Ratio`).
    """
    lengths = _check_lengths(lengths)
    rows = []
    for L in lengths:
        fns = flash_contenders(L, B=B, d=d, block_size=block_size)
        times = time_paired(fns, repeats=repeats, min_time=min_time)
        rows.append({"L": L, "ratios": {
            f"{name}/fused": paired_ratio(times, name, "fused") for name in ("tiled", "materialised")
        }})
    return rows


def format_flash_speed_table(rows: Sequence[dict], *, B: int, d: int, block_size: int) -> str:
    """The speed table as text: time / fused kernel's time, median [min-max]."""
    names = list(rows[0]["ratios"])
    lines = [
        f"Time relative to F.scaled_dot_product_attention, B={B} d={d} block_size={block_size}",
        f"{'L':>6}" + "".join(f"  {n:>22}" for n in names),
    ]
    for r in rows:
        lines.append(f"{r['L']:>6}" + "".join(f"  {str(r['ratios'][n]):>22}" for n in names))
    return "\n".join(lines)


# --- command line ----------------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        return check_positive_int(int(text), "value")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mha_lib.bench_modern``."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_lib.bench_modern",
        description="Decoding with and without a KV cache, KV cache memory with grouped-query "
        "attention, and peak memory and speed of tiled (online-softmax) attention.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--decode-lengths", type=_positive, nargs="*", default=None, metavar="L",
                        help="tokens to decode (default 64 128 256 512; none to skip)")
    parser.add_argument("--memory-lengths", type=_positive, nargs="*", default=None, metavar="L",
                        help="lengths of the peak-memory table (default 512 1024 2048 4096)")
    parser.add_argument("--repeats", type=_positive, default=None, help="ratios per cell (default 5)")
    parser.add_argument("--threads", type=_positive, default=None, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    quick = args.quick
    decode = args.decode_lengths if args.decode_lengths is not None else (
        [16, 32] if quick else [64, 128, 256, 512])
    memory = args.memory_lengths if args.memory_lengths is not None else (
        [128, 256] if quick else [512, 1024, 2048, 4096])
    repeats = args.repeats or (3 if quick else 5)
    min_time = 0.01 if quick else 0.1
    dec = dict(B=1, D=32, H=4) if quick else dict(B=1, D=256, H=8)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"median [min-max] of {repeats} paired time ratios", flush=True)
    if decode:
        rows = decoding_table(decode, repeats=repeats, min_time=min_time, **dec)
        print()
        print(format_decoding_table(rows, **dec), flush=True)
        slopes = {
            name: loglog_slope(decode, [r["seconds"][name] for r in rows]) for name in ("cached", "recompute")
        } if len(decode) >= 2 else {}
        if slopes:
            print(f"log-log slope of total time against L: cached {slopes['cached']:.2f}, "
                  f"recompute {slopes['recompute']:.2f}")
        cache_lengths = [L * 8 for L in decode]
        kv = dict(B=1, D=dec["D"], H=dec["H"])
        heads = sorted({dec["H"], max(dec["H"] // 4, 1), 1}, reverse=True)
        crows = cache_memory_table(cache_lengths, kv_heads=heads, **kv)
        print()
        print(format_cache_memory_table(crows, **kv), flush=True)
    if memory:
        fl = dict(B=2, d=32, block_size=32) if quick else dict(B=4, d=64, block_size=64)
        mrows = flash_memory_table(memory, **fl)
        print()
        print(format_flash_memory_table(mrows, **fl), flush=True)
        srows = flash_speed_table(memory[:2] if quick else memory[:3], repeats=repeats,
                                  min_time=min_time, **fl)
        print()
        print(format_flash_speed_table(srows, **fl), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
