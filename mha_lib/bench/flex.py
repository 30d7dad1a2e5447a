"""The FlexAttention route (:mod:`mha_lib.flex`) against SDPA with the dense mask and against
tiled attention, under today's masks and score modifications, in one run:
``python -m mha_lib.bench flex``.

Shape legend
    B   batch size
    H   heads
    L   sequence length (self-attention: Lq = Lk = L)
    d   head size

The numbers are printed, never asserted (timings depend on the machine and its load). The
compile is paid at each case's first call, timed apart (``compile_s``: the first call, with
the block mask and the kernel's compile, minus a steady call).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib._checks import check_positive_int
from mha_lib.bench._checks import check_lengths
from mha_lib.flash import tiled_attention
from mha_lib.flex import flex_attention_heads
from mha_lib.masking import keep_to_bias
from mha_lib.masks import Mask, causal, chunked, document, sinks, sliding_window
from mha_lib.scores import ScoreMod, alibi, softcap
from mha_lib.timing import paired_ratio, time_paired

__all__ = ["flex_table", "format_flex_table"]

#: The cases: name -> (the mask at length L, the score modification or None).
_CASES: dict[str, Callable[[int], tuple[Mask, ScoreMod | None]]] = {
    "sliding_window(256)": lambda L: (sliding_window(256), None),
    "causal & documents": lambda L: (causal() & document(_documents(L)), None),
    "window(256) | sinks(4)": lambda L: (sliding_window(256) | sinks(4), None),
    "chunked(512)": lambda L: (chunked(512), None),
    "causal + alibi": lambda L: (causal(), alibi(1)),
    "causal + softcap(30)": lambda L: (causal(), softcap(30.0)),
}


def _documents(L: int, seed: int = 0) -> Tensor:
    """(1, L) document ids: documents of 64 .. L/4 positions, seeded."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.randint(64, max(65, L // 4), (L // 64,), generator=g).cumsum(0)
    return torch.bucketize(torch.arange(L), cuts[cuts < L], right=True)[None]


def _contenders(mask: Mask, score_mod: ScoreMod | None, L: int, *, d: int = 64,
                block_size: int = 128, seed: int = 0) -> dict[str, Callable[[], Tensor]]:
    """One head, B = 1, L positions: ``flex`` (the route), ``sdpa`` (the dense boolean mask, or
    for an additive modification the float mask; absent for other modifications) and ``tiled``
    (:func:`~mha_lib.flash.tiled_attention`, hidden tiles skipped); the dense masks are built
    before timing."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, L, d, generator=g) for _ in range(3))  # (B, H, L, d)
    fns = {"flex": lambda: flex_attention_heads(q, k, v, mask, score_mod=score_mod)}
    keep = mask.dense(1, L, L)[:, None]  # (1, 1, L, L)
    if score_mod is None or score_mod.additive:
        attn_mask = keep
        if score_mod is not None:
            pos = torch.arange(L)
            attn_mask = keep_to_bias(keep, q.dtype) + score_mod.bias(pos[None, None, :, None],
                                                                    pos[None, None, None, :])
        fns["sdpa"] = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    fns["tiled"] = lambda: tiled_attention(q[:, 0], k[:, 0], v[:, 0], mask=mask,
                                           block_size=block_size, score_mod=score_mod)
    return fns


def flex_table(lengths: Sequence[int] = (2048,), cases: Sequence[str] | None = None, *,
               d: int = 64, block_size: int = 128, repeats: int = 3, min_time: float = 0.05,
               baselines: bool = True, progress: Callable[[str], None] | None = None) -> list[dict]:
    """Paired time ratios of the route to SDPA and to tiled attention, per case and length.

    Args:
        cases: names of :data:`_CASES` (default: all).
        baselines: False times the route alone (lengths where the dense baselines are too slow).

    Returns:
        One dict per (case, L): ``case``, ``L``, ``seconds`` (median per contender),
        ``ratios`` (``"flex/sdpa"``, ``"flex/tiled"``: :class:`~mha_lib.timing.Ratio`),
        ``compile_s`` (the first call's extra seconds), ``max_diff`` (flex against tiled).
    """
    names = list(_CASES) if cases is None else list(cases)
    for name in names:
        if name not in _CASES:
            raise ValueError(f"cases must be names of _CASES ({', '.join(_CASES)}), got {name!r}")
    check_positive_int(d, "d")
    rows = []
    for L in check_lengths(lengths):
        for name in names:
            if progress:
                progress(f"{name}, L = {L} ...")
            mask, score_mod = _CASES[name](L)
            fns = _contenders(mask, score_mod, L, d=d, block_size=block_size)
            if not baselines:
                fns = {"flex": fns["flex"]}
            with torch.no_grad():
                start = time.perf_counter()
                out = fns["flex"]()  # the block mask and the compile
                first = time.perf_counter() - start
                start = time.perf_counter()
                fns["flex"]()
                steady = time.perf_counter() - start
                diff = float((out - fns["tiled"]()[:, None]).abs().max()) if baselines else None
                times = time_paired(fns, repeats=repeats, min_time=min_time)
            rows.append({
                "case": name, "L": L, "seconds": {n: sorted(t)[len(t) // 2] for n, t in times.items()},
                "ratios": {f"flex/{n}": paired_ratio(times, "flex", n) for n in fns if n != "flex"},
                "compile_s": first - steady, "max_diff": diff,
            })
    return rows


def format_flex_table(rows: Sequence[Mapping], *, d: int) -> str:
    """The table as text: seconds per contender, the paired ratios, the compile cost."""
    lines = [f"FlexAttention route, B = 1, H = 1, d = {d}, float32 (time ratio: median [min-max])",
             f"{'case':<24}{'L':>6}{'flex':>11}{'sdpa':>11}{'tiled':>11}   ratios; compile (first call)"]
    for r in rows:
        secs = "".join(f"{r['seconds'][n]:>9.4f} s" if n in r["seconds"] else f"{'-':>11}"
                       for n in ("flex", "sdpa", "tiled"))
        ratios = ", ".join(f"{n} {ratio}" for n, ratio in r["ratios"].items()) or "(route alone)"
        diff = "" if r["max_diff"] is None else f"; max |flex - tiled| {r['max_diff']:.1e}"
        lines.append(f"{r['case']:<24}{r['L']:>6}{secs}   {ratios}; compile {r['compile_s']:.1f} s{diff}")
    return "\n".join(lines)
