"""Figures of the positions chapter: a position table, scores by position pair, norms by depth.

Plotly only; the numbers come from :mod:`mha_lib.positions` and :mod:`mha_lib.block`.
Conventions of the book: keys on x, queries on y (first at the top), viridis or cividis scales,
Okabe-Ito line colours, no fixed width (the figures fit a 390 px phone).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import torch

OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
MARGIN = {"t": 50, "b": 50, "l": 60, "r": 20}


def _matrix(values: object, name: str) -> np.ndarray:
    array = values.detach().cpu().double().numpy() if isinstance(values, torch.Tensor) else np.asarray(values, dtype=float)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D table, got shape {array.shape}")
    return array


def _heatmap(z: np.ndarray, x_title: str, y_title: str, colorscale: str, colorbar: str,
             title: str | None, hover: str) -> go.Figure:
    fig = go.Figure(go.Heatmap(
        z=z.tolist(), colorscale=colorscale, hovertemplate=hover + "<extra></extra>",
        colorbar={"title": {"text": colorbar, "side": "right"}, "thickness": 12, "len": 0.8},
    ))
    fig.update_layout(
        title={"text": title} if title else None, height=380, margin=MARGIN,
        xaxis={"title": {"text": x_title}}, yaxis={"title": {"text": y_title}, "autorange": "reversed"},
    )
    return fig


def position_table_figure(table: object, title: str | None = None) -> go.Figure:
    """Heatmap of a position table: position on y (0 at the top), dimension on x.

    Shapes:
        table: (L, D), e.g. :func:`mha_lib.positions.sinusoidal`.
    """
    z = _matrix(table, "table")
    fig = _heatmap(z, "dimension", "position", "Cividis", "value", title,
                   "position %{y}<br>dimension %{x}<br>%{z:.3f}")
    fig.data[0].update(zmin=-1.0, zmax=1.0)
    return fig


def position_scores_figure(scores: object, title: str | None = None) -> go.Figure:
    """Heatmap of attention scores by position pair: key position n on x, query position m on y.

    Shapes:
        scores: (Lq, Lk), ``scores[m, n]`` the score of a query at m and a key at n.
    """
    z = _matrix(scores, "scores")
    return _heatmap(z, "key position n", "query position m", "Viridis", "score", title,
                    "query at m = %{y}<br>key at n = %{x}<br>score %{z:.3f}")


def depth_lines_figure(lines: Mapping[str, Sequence[float]], y_title: str,
                       title: str | None = None, log_y: bool = False) -> go.Figure:
    """One line per named series over the blocks of a stack (block 0 = the input).

    Args:
        lines: name -> values, one per depth.
        y_title: what the values are.
        log_y: logarithmic y axis.
    """
    if not lines:
        raise ValueError("lines must name at least one series, got none")
    fig = go.Figure()
    for i, (name, values) in enumerate(lines.items()):
        values = [float(v) for v in values]
        fig.add_trace(go.Scatter(
            x=list(range(len(values))), y=values, name=name, mode="lines+markers",
            line={"color": OKABE_ITO[i % len(OKABE_ITO)], "dash": ("solid", "dash", "dot")[i % 3]},
        ))
    fig.update_layout(
        title={"text": title} if title else None, height=360, margin=MARGIN,
        xaxis={"title": {"text": "depth (blocks applied)"}},
        yaxis={"title": {"text": y_title}, "type": "log" if log_y else "linear"},
        legend={"x": 0.02, "y": 0.98, "xanchor": "left", "yanchor": "top",
                "bgcolor": "rgba(255,255,255,0.8)"},
    )
    return fig
