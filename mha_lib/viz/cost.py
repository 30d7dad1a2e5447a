"""Figures of the chapter "What attention costs" (chapter 6), drawn from its measurements.

Shape legend
    B   batch size
    H   number of heads
    Lq  number of queries
    Lk  number of key-value pairs
    L   sequence length, Lq = Lk = L
    D   model width, H * d

The numbers come from :mod:`mha_lib.bench.cost` (FLOP counts, paired timings, peak memory);
colours are sampled from the viridis scale (colour-blind safe), and no figure sets a width.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from mha_lib._checks import check_positive_number, check_sequence
from mha_lib.bench._checks import check_BDH, check_instance, check_lengths, check_memory_rows
from mha_lib.bench.cost import CONTENDER_LABELS, Row, Sizes, flop_count
from mha_lib.timing import paired_ratio

__all__ = ["flop_figure", "memory_figure", "ratio_figure", "scaling_figure"]


def _colors(n: int) -> list[str]:
    """n colour-blind-safe colours from the viridis scale (its yellow end left out)."""
    return sample_colorscale("Viridis", [i / max(n, 1) * 0.85 for i in range(n)])


def flop_figure(lengths: Sequence[int], *, B: int = 1, D: int = 512, H: int = 8) -> go.Figure:
    """Stacked bars: FLOPs of the projections, the scores and the weighted sum against L.

    Args:
        lengths: the sequence lengths L (self-attention, Lq = Lk = L).
        B, D, H: batch size, width and heads (H must divide D; the count does not depend on H).
    """
    lengths = check_lengths(lengths)
    check_BDH(B, D, H)
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


def scaling_figure(lengths: Sequence[int], seconds: Sequence[float], *, slope: float) -> go.Figure:
    """Log-log plot of time against length, with reference lines of slope 1 and 2.

    Args:
        lengths: the sequence lengths L.
        seconds: one measured time per length (e.g. from
            :func:`mha_lib.bench.cost.scaling_times`).
        slope: the fitted slope, for the legend (:func:`mha_lib.timing.loglog_slope`).
    """
    lengths = check_lengths(lengths)
    seconds = check_sequence(seconds, "seconds", "times in seconds", check_positive_number)
    if len(seconds) != len(lengths):
        raise ValueError(
            f"seconds must hold one time per length ({len(lengths)}), got {len(seconds)}"
        )
    if isinstance(slope, bool) or not isinstance(slope, numbers.Real) or not math.isfinite(slope):
        raise ValueError(f"slope must be a finite number, got {slope!r}")

    c = _colors(3)
    fig = go.Figure()
    fig.add_scatter(x=lengths, y=[t * 1e3 for t in seconds], mode="lines+markers",
                    name=f"fast path (fitted slope {slope:.2f})", line_color=c[0])
    for p, color, dash in ((1, c[1], "dot"), (2, c[2], "dash")):
        ref = [seconds[-1] * 1e3 * (L / lengths[-1]) ** p for L in lengths]
        fig.add_scatter(x=lengths, y=ref, mode="lines", name=f"slope {p}",
                        line=dict(color=color, dash=dash))
    fig.update_layout(
        title="Time against sequence length (log-log)", xaxis_title="sequence length L",
        yaxis_title="milliseconds per forward pass", xaxis_type="log", yaxis_type="log",
        height=380,
    )
    return fig


def memory_figure(rows: Sequence[Mapping[str, int]]) -> go.Figure:
    """Peak memory of both paths and the size of the weights against L (log-log).

    Args:
        rows: what :func:`mha_lib.bench.cost.memory_table` returns.
    """
    rows = check_memory_rows(rows)
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


def ratio_figure(rows: Sequence[Row], *, baseline: str = "limit") -> go.Figure:
    """Grouped bars: median time of each contender relative to ``baseline``, per case.

    Error bars show the smallest and largest paired ratio of each bar.

    Args:
        rows: what :func:`mha_lib.bench.cost.benchmark` returns.
        baseline: the contender to divide by; it must have run in every row.
    """
    rows = check_sequence(rows, "rows", "Row", check_instance(Row, "Row of benchmark"))
    ran_everywhere = [n for n in CONTENDER_LABELS if all(n in r.times for r in rows)]
    if baseline not in ran_everywhere:
        raise ValueError(
            f"baseline must be a contender that ran in every row, one of {ran_everywhere}, "
            f"got {baseline!r}"
        )

    names = [n for n in ran_everywhere if n != baseline]
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
