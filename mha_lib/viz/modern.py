"""Figures of the chapters on the KV cache, grouped-query attention and tiled attention.

Shape legend
    B    batch size
    H    number of query heads
    Hkv  number of key/value heads
    Lq   number of queries
    Lk   number of key-value pairs
    L    sequence length
    D    model width

Lines use the Okabe-Ito palette and heatmaps the viridis scale (both colour-blind safe); no
figure sets a width, so each fits a 390 px phone screen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_lib._checks import check_positive_int, check_positive_number, check_sequence, check_size
from mha_lib.bench._checks import check_instance, check_lengths, check_peak_rows
from mha_lib.bench.modern import step_flops
from mha_lib.flash import OnlineSoftmaxState
from mha_lib.gqa import kv_head_of
from mha_lib.viz.heatmaps import attention_heatmaps

__all__ = [
    "decoding_time_figure",
    "gqa_heatmaps",
    "kv_sharing_figure",
    "online_softmax_figure",
    "peak_memory_figure",
    "step_cost_figure",
]

_OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]
_MARGIN = dict(l=60, r=10, t=50, b=50)


def _loglog(title: str, x_title: str, y_title: str, xs: Sequence[int]) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=title, height=380, margin=_MARGIN, legend=dict(orientation="h", y=-0.25),
        # ticks at the measured lengths: plotly's log ticks (2, 3, ..., 1000) do not say which
        xaxis=dict(title=x_title, type="log", tickvals=list(xs)),
        yaxis=dict(title=y_title, type="log"),
    )
    return fig


def step_cost_figure(max_position: int, D: int) -> go.Figure:
    """FLOPs of decoding step t through one layer of width D, with and without a KV cache.

    With the cache, step t costs ``8 D^2 + 4 (t + 1) D`` (linear in t); recomputing the prefix
    costs ``8 (t + 1) D^2 + 4 (t + 1)^2 D`` (quadratic in t); see
    :func:`mha_lib.bench.modern.step_flops`.

    Args:
        max_position: the steps drawn, t = 0 .. max_position - 1.
        D: the model width.
    """
    if check_positive_int(max_position, "max_position") > 10**5:
        raise ValueError(f"max_position must be at most 100000 (the steps drawn), got {max_position}")
    ts = list(range(max_position))
    check_positive_int(D, "D")
    cached = [step_flops(t, D, cached=True) for t in ts]
    recompute = [step_flops(t, D, cached=False) for t in ts]
    fig = go.Figure()
    for name, y, color in (("with KV cache", cached, _OKABE_ITO[0]),
                           ("recompute the prefix", recompute, _OKABE_ITO[1])):
        fig.add_scatter(x=ts, y=y, name=name, mode="lines", line=dict(color=color, width=3))
    fig.update_layout(
        title=f"Cost of one decoding step (D = {D})", height=380, margin=_MARGIN,
        legend=dict(orientation="h", y=-0.25),
        xaxis=dict(title="position t of the new token"), yaxis=dict(title="FLOPs of step t"),
    )
    return fig


def decoding_time_figure(lengths: Sequence[int], seconds: Mapping[str, Sequence[float]]) -> go.Figure:
    """Measured seconds to decode L tokens, one line per method, on log-log axes.

    Args:
        lengths: the numbers of tokens decoded L.
        seconds: per method, one time per length (e.g. the ``seconds`` of the rows of
            :func:`mha_lib.bench.modern.decoding_table`).
    """
    lengths = check_lengths(lengths)
    if not isinstance(seconds, Mapping) or not seconds:
        raise ValueError(f"seconds must be a non-empty mapping of methods to times, got {seconds!r}")
    seconds = {
        name: check_sequence(ys, f"seconds[{name!r}]", "times in seconds", check_positive_number)
        for name, ys in seconds.items()
    }
    for name, ys in seconds.items():
        if len(ys) != len(lengths):
            raise ValueError(f"seconds[{name!r}] must hold one time per length ({len(lengths)}), "
                             f"got {len(ys)}")
    fig = _loglog("Time to decode L tokens (measured)", "tokens decoded L", "seconds", lengths)
    for i, (name, ys) in enumerate(seconds.items()):
        fig.add_scatter(x=list(lengths), y=list(ys), name=name, mode="lines+markers",
                        line=dict(color=_OKABE_ITO[i % len(_OKABE_ITO)], width=3))
    return fig


def kv_sharing_figure(num_heads: int, num_kv_heads: int) -> go.Figure:
    """Which key/value head each query head reads: query heads on y, K/V heads on x.

    Raises:
        ValueError: unless ``num_heads`` and ``num_kv_heads`` are integers >= 1 and
            ``num_kv_heads`` divides ``num_heads``.
    """
    if check_positive_int(num_heads, "num_heads") > 1024:
        raise ValueError(f"num_heads must be at most 1024 (a row per query head), got {num_heads}")
    owner = kv_head_of(num_heads, num_kv_heads)
    z = [[1.0 if owner[h] == j else 0.0 for j in range(num_kv_heads)] for h in range(num_heads)]
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"K/V {j}" for j in range(num_kv_heads)], y=[f"query head {h}" for h in range(num_heads)],
        colorscale="Viridis", zmin=0, zmax=1, showscale=False, xgap=2, ygap=2,
        hovertemplate="%{y} reads %{x}: %{z}<extra></extra>",
    ))
    fig.update_layout(
        title=f"H = {num_heads} query heads, H<sub>kv</sub> = {num_kv_heads} key/value heads",
        height=min(60 + 30 * num_heads, 420), margin=_MARGIN,
        xaxis=dict(title="key/value head", side="bottom"), yaxis=dict(title="", autorange="reversed"),
    )
    return fig


def gqa_heatmaps(weights, num_kv_heads: int, **kwargs) -> go.Figure:
    """:func:`~mha_lib.viz.heatmaps.attention_heatmaps` with each panel titled by its K/V head.

    Panels of query heads that share a key/value head say so ("head 2 · K/V 1"): they score
    the same keys, with different queries.

    Shapes:
        weights: (H, Lq, Lk) or (B, H, Lq, Lk), e.g. from
            ``GroupedQueryAttention(...)(q, k, v, need_weights=True)``.
    """
    kwargs.setdefault("max_cols", 2)  # two panels a row: the longer titles fit a phone
    fig = attention_heatmaps(weights, **kwargs)
    H = len({trace.meta["head"] for trace in fig.data if trace.meta})
    owner = kv_head_of(H, num_kv_heads)
    for annotation in fig.layout.annotations:
        words = (annotation.text or "").split()
        if len(words) >= 2 and words[-2] == "head" and words[-1].isdigit():
            annotation.text = f"{annotation.text} · K/V {owner[int(words[-1])]}"
    return fig


def online_softmax_figure(steps, *, query: int = 0, feature: int = 0) -> go.Figure:
    """Running max, running sum and output of one query as blocks of keys arrive.

    Args:
        steps: the states of :func:`mha_lib.flash.tiled_attention_steps` (example 0 is drawn).
        query: which query to follow.
        feature: which output feature to draw.
    """
    steps = check_sequence(steps, "steps", "OnlineSoftmaxState",
                           check_instance(OnlineSoftmaxState, "state of tiled_attention_steps"))
    _, Lq, dv = steps[0].accumulator.shape  # (B, Lq, dv)
    for value, name, size in ((query, "query", Lq), (feature, "feature", dv)):
        if check_size(value, name) >= size:
            raise ValueError(f"{name} must be below {size}, got {value}")
    seen = [s.keys_seen for s in steps]
    series = (
        ("running max m", [float(s.running_max[0, query]) for s in steps]),
        ("running sum ℓ", [float(s.running_sum[0, query]) for s in steps]),
        (f"output[{feature}] = acc / ℓ", [float(s.output[0, query, feature]) for s in steps]),
    )
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[name for name, _ in series])
    for row, ((name, ys), color) in enumerate(zip(series, _OKABE_ITO), start=1):
        fig.add_scatter(x=seen, y=ys, name=name, mode="lines+markers", row=row, col=1,
                        line=dict(color=color, width=3, shape="hv"), showlegend=False)
        fig.add_hline(y=ys[-1], line=dict(color="#666", dash="dot"), row=row, col=1)
    fig.update_xaxes(title_text="keys seen (blocks arrive left to right)", row=3, col=1)
    fig.update_layout(height=520, margin=dict(l=50, r=10, t=40, b=50),
                      title=None)
    return fig


def peak_memory_figure(rows: Sequence[Mapping]) -> go.Figure:
    """Peak bytes against L for each contender (rows of
    :func:`mha_lib.bench.modern.flash_memory_table`)."""
    rows = check_peak_rows(rows)
    Ls = [r["L"] for r in rows]
    fig = _loglog("Peak memory of attention (torch.profiler)", "sequence length L", "peak MiB", Ls)
    for i, name in enumerate(rows[0]["peak"]):
        fig.add_scatter(x=Ls, y=[r["peak"][name] / 2**20 for r in rows], name=name,
                        mode="lines+markers", line=dict(color=_OKABE_ITO[i % len(_OKABE_ITO)], width=3))
    return fig
