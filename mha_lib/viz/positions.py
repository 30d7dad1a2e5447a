"""Figures of the positions chapter: a position table, scores by position pair, norms by depth.

Plotly only; the numbers come from :mod:`mha_lib.positions` and :mod:`mha_lib.block`.
Conventions of the book: keys on x, queries on y (first at the top), viridis or cividis scales,
Okabe-Ito line colours, no fixed width (the figures fit a 390 px phone).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from mha_lib._checks import check_bool
from mha_lib.viz.heatmaps import as_array, check_title

__all__ = ["depth_lines_figure", "position_scores_figure", "position_table_figure"]

_OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
_MARGIN = {"t": 50, "b": 50, "l": 60, "r": 20}


def _matrix(values: object, name: str) -> np.ndarray:
    array = as_array(values, name)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"{name} must be a 2-D table, not empty, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite, got NaN or infinity")
    return array


def _heatmap(z: np.ndarray, x_title: str, y_title: str, colorscale: str, colorbar: str,
             title: str | None, hover: str) -> go.Figure:
    fig = go.Figure(go.Heatmap(
        z=z.tolist(), colorscale=colorscale, hovertemplate=hover + "<extra></extra>",
        colorbar={"title": {"text": colorbar, "side": "right"}, "thickness": 12, "len": 0.8},
    ))
    fig.update_layout(
        title={"text": title} if title else None, height=380, margin=_MARGIN,
        xaxis={"title": {"text": x_title}}, yaxis={"title": {"text": y_title}, "autorange": "reversed"},
    )
    return fig


def position_table_figure(table: object, title: str | None = None) -> go.Figure:
    """Heatmap of a position table: position on y (0 at the top), dimension on x.

    Shapes:
        table: (L, D), e.g. :func:`mha_lib.positions.sinusoidal`.
    """
    z = _matrix(table, "table")
    check_title(title)
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
    check_title(title)
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
    if not isinstance(lines, Mapping) or not lines:
        raise ValueError(f"lines must map at least one name to its values, got {lines!r}")
    check_title(y_title, "y_title")
    check_title(title)
    check_bool(log_y, "log_y")
    fig = go.Figure()
    for i, (name, values) in enumerate(lines.items()):
        values = as_array(values, f"lines[{name!r}]")
        if values.ndim != 1 or not np.isfinite(values).all() or (log_y and (values <= 0).any()):
            raise ValueError(f"lines[{name!r}] must be finite numbers, one per depth"
                             f"{' (> 0: log_y)' if log_y else ''}, got {values.tolist()!r}")
        values = values.tolist()
        fig.add_trace(go.Scatter(
            x=list(range(len(values))), y=values, name=name, mode="lines+markers",
            line={"color": _OKABE_ITO[i % len(_OKABE_ITO)], "dash": ("solid", "dash", "dot")[i % 3]},
        ))
    fig.update_layout(
        title={"text": title} if title else None, height=360, margin=_MARGIN,
        xaxis={"title": {"text": "depth (blocks applied)"}},
        yaxis={"title": {"text": y_title}, "type": "log" if log_y else "linear"},
        legend={"x": 0.02, "y": 0.98, "xanchor": "left", "yanchor": "top",
                "bgcolor": "rgba(255,255,255,0.8)"},
    )
    return fig
