"""Where masks save work: tiled attention that skips the tiles a mask hides, measured beside
``F.scaled_dot_product_attention`` with the same dense mask (and FlexAttention, where
``torch.compile`` works), in one run: ``python -m mha_lib.bench masks``.

Shape legend
    B   batch size (heads folded in)
    L   sequence length (self-attention: Lq = Lk = L)
    d   head size
    b   block size: tiles of b queries by b keys

The numbers are printed, never asserted (timings depend on the machine and its load).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib._checks import check_positive_int, check_size
from mha_lib.bench._checks import check_lengths
from mha_lib.flash import tiled_attention
from mha_lib.masks import Mask, causal, sliding_window
from mha_lib.timing import paired_ratio, peak_memory, time_paired

__all__ = ["flex_status", "format_mask_table", "mask_table"]

#: What FlexAttention did when this process first tried it: None (not yet), or a sentence.
_FLEX: dict[str, object] = {}


def flex_status() -> str:
    """Whether FlexAttention (``torch.compile(flex_attention)``) runs here, in a sentence."""
    _flex()
    return str(_FLEX["status"])


def _flex() -> Callable | None:
    """``torch.compile(flex_attention)`` if it compiles and runs on this machine, else None."""
    if "fn" not in _FLEX:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            fn = torch.compile(flex_attention, dynamic=False)
            q = torch.randn(1, 1, 256, 16)
            block = create_block_mask(lambda b, h, i, j: j <= i, 1, 1, 256, 256, device="cpu")
            fn(q, q, q, block_mask=block)
            _FLEX.update(fn=(fn, create_block_mask), status="FlexAttention compiles and runs here")
        except Exception as err:  # any failure of the compiler toolchain: report, do not stop
            _FLEX.update(fn=None, status=f"FlexAttention does not run here: {type(err).__name__}: "
                                         f"{str(err).splitlines()[0][:200] if str(err) else ''}")
    return _FLEX["fn"]


def _flex_mask_mod(mask: Mask, L: int) -> Callable:
    """The mask as FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)``: a lookup in its dense
    (L, L) form for masks without a closed form; the closed forms of causal and window."""
    text = repr(mask)
    if text == "causal()":
        return lambda b, h, i, j: j <= i
    if text.startswith("sliding_window("):
        w = mask.window
        return lambda b, h, i, j: (j <= i) & (j > i - w)
    dense = mask.dense(1, L, L)[0]
    return lambda b, h, i, j: dense[i, j]


def _mask_contenders(
    mask: Mask, L: int, *, B: int = 1, d: int = 64, block_size: int = 128, seed: int = 0,
    flex: bool = True,
) -> dict[str, Callable[[], Tensor]]:
    """Self-attention of L positions under ``mask``, on the same inputs:

    * ``tiled``: :func:`~mha_lib.flash.tiled_attention` with the mask (hidden tiles skipped);
    * ``sdpa``: ``F.scaled_dot_product_attention`` with the dense (L, L) boolean mask (built
      once, before timing);
    * ``flex``: ``torch.compile(flex_attention)`` with the mask's ``BlockMask`` (where it runs).
    """
    L = check_positive_int(L, "L")
    for value, name in ((B, "B"), (d, "d"), (block_size, "block_size")):
        check_positive_int(value, name)
    g = torch.Generator().manual_seed(check_size(seed, "seed"))
    q, k, v = (torch.randn(B, L, d, generator=g) for _ in range(3))
    keep = mask.dense(1, L, L)[0]  # (L, L), broadcasts over the batch
    fns = {
        "tiled": lambda: tiled_attention(q, k, v, mask=mask, block_size=block_size),
        # (B, L, d) -> (B, 1, L, d): the fused CPU kernel wants a heads axis
        "sdpa": lambda: F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None],
                                                       attn_mask=keep)[:, 0],
    }
    compiled = _flex() if flex else None
    if compiled is not None:
        fn, create_block_mask = compiled
        block = create_block_mask(_flex_mask_mod(mask, L), None, None, L, L, device="cpu")
        fns["flex"] = lambda: fn(q[:, None], k[:, None], v[:, None], block_mask=block)[:, 0]
    return fns


def mask_table(
    cases: Sequence[tuple[str, Mask]] | None = None, lengths: Sequence[int] = (8192,), *,
    B: int = 1, d: int = 64, block_size: int = 128, repeats: int = 3, min_time: float = 0.05,
    flex: bool = True, progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Time ratios, peak memory and tiles computed, per mask and length.

    Args:
        cases: (name, mask) pairs; default: sliding window 256 and causal.

    Returns:
        One dict per (mask, L): ``mask``, ``L``, ``ratios`` (name to
        :class:`~mha_lib.timing.Ratio`, against ``tiled``), ``seconds`` (median per contender),
        ``peak`` (bytes per contender), ``mask_bytes`` (the dense mask SDPA needs),
        ``tiles`` (computed, total).
    """
    cases = list(cases or [("sliding_window(256)", sliding_window(256)), ("causal()", causal())])
    rows = []
    for L in check_lengths(lengths):
        for name, mask in cases:
            if progress:
                progress(f"{name}, L = {L} ...")
            fns = _mask_contenders(mask, L, B=B, d=d, block_size=block_size, flex=flex)
            for fn in fns.values():  # compile, warm up, before any timing
                fn()
            times = time_paired(fns, repeats=repeats, min_time=min_time)
            g = torch.Generator().manual_seed(1)
            q = torch.randn(B, L, d, generator=g)
            _, tiles = tiled_attention(q, q, q, mask=mask, block_size=block_size, return_tiles=True)
            rows.append({
                "mask": name, "L": L,
                "ratios": {other: paired_ratio(times, other, "tiled") for other in fns if other != "tiled"},
                "seconds": {n: sorted(t)[len(t) // 2] for n, t in times.items()},
                "peak": {n: peak_memory(fn) for n, fn in fns.items()},
                "mask_bytes": L * L,
                "tiles": (tiles.computed, tiles.total),
            })
    return rows


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def format_mask_table(rows: Sequence[Mapping], *, B: int, d: int, block_size: int) -> str:
    """The table as text: seconds, time ratios to tiled attention, peak memory, tiles."""
    names = sorted({n for r in rows for n in r["seconds"]}, key=["tiled", "sdpa", "flex"].index)
    head = (f"masked attention, B = {B}, d = {d}, tiles of {block_size} x {block_size} "
            "(time / tiled's time, median [min-max])")
    lines = [head, "mask                    L      " + "  ".join(f"{n:>14}" for n in names)
             + "    tiles computed"]
    for r in rows:
        secs = "  ".join(f"{r['seconds'][n]:>12.4f} s" for n in names)
        ratios = ", ".join(f"{n}/tiled {r['ratios'][n]}" for n in names if n != "tiled")
        computed, total = r["tiles"]
        lines.append(f"{r['mask']:<22} {r['L']:>6}  {secs}    {computed} / {total} "
                     f"({computed / total:.1%})")
        peak = ", ".join(f"{n} {_mib(r['peak'][n])}" for n in names)
        lines.append(f"{'':<30}{ratios}; peak memory: {peak} (+ the dense mask of SDPA, "
                     f"{_mib(r['mask_bytes'])})")
    return "\n".join(lines)
