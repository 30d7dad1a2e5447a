"""Figures of the experiments of chapters 7 and 8: training curves and pruning curves.

Lines use the Okabe-Ito palette and a different dash per line (colour-blind safe, and
readable in grey); no figure sets a width, so each fits a 390 px phone screen.
"""

from __future__ import annotations

import math
import numbers
from typing import Mapping, Sequence

import plotly.graph_objects as go
from torch import Tensor

from mha_lib._checks import check_bool

__all__ = ["pruning_figure", "training_curves"]

_OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_DASHES = ("solid", "dash", "dot", "dashdot")
_MARGIN = dict(l=60, r=20, t=50, b=50)


def _values(values: object, name: str, length: int | None = None) -> list[float]:
    """``values`` (a list or 1-D tensor of finite numbers) as a list of floats."""
    if isinstance(values, Tensor):
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in values
    ):
        raise ValueError(f"{name} must be a sequence or 1-D tensor of finite numbers, got {values!r:.80}")
    if not values or (length is not None and len(values) != length):
        want = "non-empty" if length is None else f"{length} values (one per x)"
        raise ValueError(f"{name} must hold {want}, got {len(values)}")
    return [float(v) for v in values]


def _curves(curves: object, x: list[float]) -> dict[str, list[float]]:
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError(f"curves must be a non-empty mapping of names to values, got {type(curves).__name__}")
    return {str(name): _values(ys, f"curves[{name!r}]", len(x)) for name, ys in curves.items()}


def _add_lines(fig: go.Figure, x: list[float], curves: Mapping[str, list[float]], mode: str) -> None:
    for i, (name, ys) in enumerate(curves.items()):
        fig.add_scatter(x=x, y=ys, name=name, mode=mode,
                        line=dict(color=_OKABE_ITO[i % len(_OKABE_ITO)], dash=_DASHES[i % len(_DASHES)]))


def training_curves(
    steps: Sequence[int] | Tensor,
    curves: Mapping[str, Sequence[float] | Tensor],
    *,
    title: str,
    yaxis_title: str = "cross-entropy (nats)",
    log_y: bool = False,
    xaxis_title: str = "training step",
) -> go.Figure:
    """Losses (or any metric) against the training step (or another x), one line per entry of ``curves``.

    Args:
        steps: the x values (training steps).
        curves: name -> one value per step (lists or 1-D tensors, e.g. a checkpoint's history).
        title: the figure's title.
        yaxis_title: the y axis label.
        log_y: a logarithmic y axis (for losses that fall by orders of magnitude).
        xaxis_title: the x axis label.

    Raises:
        ValueError: steps or a curve that is not finite numbers, or a curve whose length
            differs from steps.
    """
    x = _values(steps, "steps")
    lines = _curves(curves, x)
    if check_bool(log_y, "log_y") and any(v <= 0 for ys in lines.values() for v in ys):
        raise ValueError("curves must be positive on a log axis (log_y=True)")
    fig = go.Figure()
    _add_lines(fig, x, lines, "lines")
    fig.update_layout(
        title=title, height=380, margin=_MARGIN, legend=dict(orientation="h", y=-0.25),
        xaxis_title=xaxis_title, yaxis=dict(title=yaxis_title, type="log" if log_y else "linear"),
        showlegend=len(lines) > 1,
    )
    return fig


def pruning_figure(
    remaining: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    *,
    chance: float | None = None,
    title: str = "Accuracy while pruning heads",
) -> go.Figure:
    """Accuracy against the number of heads left, one line per pruning order.

    The x axis runs from all heads down to one (reversed), the y axis from 0 to 1.05.

    Args:
        remaining: heads left at each point, e.g. ``[4, 3, 2, 1]``.
        curves: name -> one accuracy per entry of ``remaining``.
        chance: draw a dotted line at this accuracy (guessing), or None.
        title: the figure's title.

    Raises:
        ValueError: remaining or a curve that is not finite numbers, a curve whose length
            differs, or chance not a number in [0, 1].
    """
    x = _values(remaining, "remaining")
    lines = _curves(curves, x)
    fig = go.Figure()
    _add_lines(fig, x, lines, "lines+markers")
    if chance is not None:
        if isinstance(chance, bool) or not isinstance(chance, numbers.Real) or not 0 <= chance <= 1:
            raise ValueError(f"chance must be an accuracy in [0, 1] or None, got {chance!r}")
        fig.add_hline(y=float(chance), line_dash="dot", line_color="grey", annotation_text="chance")
    fig.update_layout(
        title=title, height=380, margin=_MARGIN, legend=dict(orientation="h", y=-0.25),
        xaxis=dict(title="heads remaining", autorange="reversed", dtick=1),
        yaxis=dict(title="held-out accuracy", range=[0, 1.05]),
    )
    return fig
