"""Speed on a GPU: ``python -m mha_lib.bench gpu``.

Two tables, with the device named and every contender timed in turns in one run (paired
ratios, :mod:`mha_lib.timing`; the clock waits for the device before it reads the time):

* the fast path of ``MultiHeadAttention`` against the least any layer must do (three
  projections, a bare ``F.scaled_dot_product_attention``, the output projection: chapter 6's
  ``limit``) and against ``nn.MultiheadAttention``, in bfloat16, without a mask and causal, with
  the CUDA kernels each launches per forward;
* sliding-window attention (L = 8192, w = 256) through the heads' attention of the layers
  (:func:`mha_lib.attend.attend_heads`), against SDPA with the dense mask and against
  FlexAttention with a block mask (compiled; where it runs).

Shape legend
    B   batch size
    L   sequence length (Lq = Lk: self-attention)
    D   model width
    H   heads; d = D / H the head size
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from mha_lib._checks import check_device, check_positive_int, check_positive_number
from mha_lib.attention import DotProductAttention
from mha_lib.bench.cost import Sizes, make_case, make_contenders
from mha_lib.masks import sliding_window
from mha_lib.attend import attend_heads
from mha_lib.timing import paired_ratio, time_paired

__all__ = ["SIZES", "check_device", "device_line", "format_layer_table", "format_window_table", "layer_table", "window_table"]

#: The issue's sizes, (B, L, D, H).
SIZES = ((8, 1024, 1024, 16), (4, 4096, 1024, 16), (32, 256, 512, 8))
_LAYER_CONTENDERS = ("fast", "limit", "torch")


def device_line(device: torch.device | str) -> str:
    """The device, PyTorch and the date, for the head of a table."""
    device = check_device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    cuda = f", CUDA {torch.version.cuda}" if device.type == "cuda" else ""
    return f"{name} ({device}), torch {torch.__version__}{cuda}, {datetime.date.today().isoformat()}"


def _timer(device: torch.device) -> Callable[[], float]:
    """A clock that first waits for the device's queued work (a GPU runs asynchronously)."""
    if device.type != "cuda":
        return time.perf_counter

    def now() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return now


def kernels_per_call(fn: Callable[[], object], device: torch.device) -> int | None:
    """The CUDA kernels (and copies) one call of ``fn`` launches; None off CUDA."""
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize(device)
    return sum(1 for event in prof.events() if event.device_type == DeviceType.CUDA)


def layer_table(
    device: torch.device | str = "cuda",
    sizes: Sequence[tuple[int, int, int, int]] = SIZES,
    *,
    dtype: torch.dtype = torch.bfloat16,
    repeats: int = 30,
    min_time: float = 0.05,
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """The fast path against ``limit`` and ``nn.MultiheadAttention`` at each (B, L, D, H),
    without a mask and causal: medians in ms, paired ratios, kernels per forward."""
    device = check_device(device)
    check_positive_int(repeats, "repeats")
    check_positive_number(min_time, "min_time")
    rows = []
    for B, L, D, H in sizes:
        for causal in (False, True):
            if progress is not None:
                progress(f"({B}, {L}, {D}, {H}) {'causal' if causal else 'no mask'}")
            case = make_case(Sizes(B, L, L, D, H), masked=False, dtype=dtype, device=device)
            fns = {name: fn for name, fn in make_contenders(case, causal=causal).items()
                   if name in _LAYER_CONTENDERS}
            times = time_paired(fns, repeats=repeats, min_time=min_time, timer=_timer(device))
            rows.append(dict(
                sizes=(B, L, D, H), causal=causal,
                ms={name: 1e3 * statistics.median(t) for name, t in times.items()},
                ratios={den: paired_ratio(times, "fast", den) for den in ("limit", "torch")},
                kernels={name: kernels_per_call(fn, device) for name, fn in fns.items()},
            ))
    return rows


def format_layer_table(rows: Sequence[dict]) -> str:
    """:func:`layer_table` as text."""
    head = (f"{'(B, L, D, H)':<22} {'mask':<8} {'fast ms':>8} {'limit ms':>9} {'torch ms':>9}  "
            f"{'fast/limit':<18} {'fast/torch':<18} kernels fast/limit/torch")
    lines = [head, "-" * len(head)]
    for r in rows:
        k = r["kernels"]
        kernels = "-" if k["fast"] is None else f"{k['fast']}/{k['limit']}/{k['torch']}"
        lines.append(f"{str(r['sizes']):<22} {'causal' if r['causal'] else 'none':<8} "
                     f"{r['ms']['fast']:>8.3f} {r['ms']['limit']:>9.3f} {r['ms']['torch']:>9.3f}  "
                     f"{str(r['ratios']['limit']):<18} {str(r['ratios']['torch']):<18} {kernels}")
    return "\n".join(lines)


def _flex_contender(q, k, v, window: int, device: torch.device) -> tuple[Callable | None, str]:
    """FlexAttention with the window's block mask, compiled; or None and why not."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        L = q.shape[2]
        block = create_block_mask(lambda b, h, i, j: (j <= i) & (j > i - window), None, None, L, L,
                                  device=str(device))
        compiled = torch.compile(flex_attention, dynamic=False)
        compiled(q, k, v, block_mask=block)
        return (lambda: compiled(q, k, v, block_mask=block)), "compiled"
    except Exception as err:  # the compiler toolchain may be missing: report it, do not stop
        return None, f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"


def window_table(
    device: torch.device | str = "cuda",
    *,
    L: int = 8192,
    window: int = 256,
    B: int = 1,
    H: int = 8,
    d: int = 64,
    dtype: torch.dtype = torch.bfloat16,
    repeats: int = 30,
    min_time: float = 0.05,
    flex: bool = True,
) -> dict:
    """Sliding-window attention of the heads (B, H, L, d) three ways; medians in ms and the
    ratios of ours to the others."""
    device = check_device(device)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, L, d, generator=g).to(device, dtype) for _ in range(3))
    mask = sliding_window(window)
    keep = mask.dense(1, L, L, device=device)[0]  # (L, L), built once, outside the timing
    attention = DotProductAttention(0.0).eval()
    fns = {
        "ours": lambda: attend_heads(q, k, v, mask, attention)[0],
        "sdpa_dense": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
    }
    status = "left out"
    if flex:
        fn, status = _flex_contender(q, k, v, window, device)
        if fn is not None:
            fns["flex"] = fn
    times = time_paired(fns, repeats=repeats, min_time=min_time, timer=_timer(device))
    return dict(sizes=dict(B=B, H=H, L=L, d=d, window=window), flex=status,
                ms={name: 1e3 * statistics.median(t) for name, t in times.items()},
                ratios={name: paired_ratio(times, "ours", name) for name in fns if name != "ours"})


def format_window_table(result: dict) -> str:
    """:func:`window_table` as text."""
    s = result["sizes"]
    lines = [f"sliding window {s['window']}, (B, H, L, d) = ({s['B']}, {s['H']}, {s['L']}, {s['d']}); "
             f"FlexAttention: {result['flex']}"]
    for name, ms in result["ms"].items():
        ratio = result["ratios"].get(name)
        lines.append(f"  {name:<12} {ms:>9.3f} ms" + ("" if ratio is None else f"   ours/{name} {ratio}"))
    return "\n".join(lines)
