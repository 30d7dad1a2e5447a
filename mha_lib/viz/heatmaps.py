"""Attention weights as plotly heatmaps, one panel per (example, head).

Shape legend
    B   number of examples
    H   number of heads
    Lq  number of queries (rows of a panel, top to bottom)
    Lk  number of key-value pairs (columns of a panel, left to right)

Conventions shared by every figure of the book: keys on x, queries on y with the first query
at the top, one 0..1 colour scale (viridis, colour-blind safe) with one colour bar, and masked
keys drawn as grey gaps (NaN in ``z``) whose hover text says "masked", so a masked key never
looks like a merely small weight.
"""

from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from mha_lib.masking import check_valid_lens, keep_mask_from_valid_lens, keep_to_padding
from mha_lib.viz.layout import (
    MARGIN_BOTTOM_PX,
    MARGIN_TOP_PX,
    axis_names,
    figure_height,
    panels,
)

COLORSCALE = "Viridis"
MASKED_COLOR = "#c8c8c8"  # grey: not on the viridis scale, so never confused with a weight
WEIGHT_TOLERANCE = 1e-5
DEFAULT_MAX_COLS = 4


def as_weights(weights: object) -> np.ndarray:
    """Check attention weights and return them as a float64 array of shape (B, H, Lq, Lk).

    Args:
        weights: (H, Lq, Lk) or (B, H, Lq, Lk) tensor or array with entries in [0, 1].

    Raises:
        ValueError: not numeric, wrong number of dimensions, an empty axis, or an entry that is
            not finite or outside [0, 1].
    """
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().double().numpy()
    try:
        array = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"weights must be a tensor or array of numbers: {err}") from None
    if array.ndim not in (3, 4):
        raise ValueError(
            "weights must have shape (H, Lq, Lk) or (B, H, Lq, Lk), "
            f"got {array.ndim} dimensions (shape {array.shape})"
        )
    if array.ndim == 3:
        array = array[None]  # (H, Lq, Lk) -> (1, H, Lq, Lk)
    if 0 in array.shape:
        raise ValueError(f"weights must not have an empty axis, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError("weights must be finite, got NaN or infinity")
    if array.min() < -WEIGHT_TOLERANCE or array.max() > 1 + WEIGHT_TOLERANCE:
        raise ValueError(
            f"weights must lie in [0, 1], got values from {array.min():.4g} to {array.max():.4g}"
        )
    return array


def masked_keys(valid_lens: object, batch_size: int, num_queries: int, num_keys: int):
    """Which cells are masked: (B, Lq, Lk) bool, ``True`` = key masked out; None without lengths.

    Args:
        valid_lens: None, an int (one example), or (B,) / (B, Lq) valid lengths.
    """
    if valid_lens is None:
        return None
    if isinstance(valid_lens, numbers.Integral) and not isinstance(valid_lens, bool):
        valid_lens = [valid_lens]  # one example: int -> (1,)
    lens = check_valid_lens(valid_lens, batch_size, num_queries, num_keys)
    keep = keep_mask_from_valid_lens(lens, num_queries, num_keys)  # (B, Lq, Lk)
    return keep_to_padding(keep).numpy()


def weight_text(weight: float) -> str:
    """Hover text of one cell: its weight, or "masked" for NaN (a masked key)."""
    return "masked" if np.isnan(weight) else f"weight {weight:.3f}"


def _labels(labels: Sequence[object] | None, length: int, name: str) -> tuple[list[str], list[str]]:
    """(categories, tick texts) of an axis: categories are unique ("2: cat"), ticks short."""
    if labels is None:
        ticks = [str(i) for i in range(length)]
        return ticks, ticks
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise ValueError(f"{name} must be a sequence of {length} labels, got {type(labels).__name__}")
    if len(labels) != length:
        raise ValueError(f"{name} must hold {length} labels, got {len(labels)}")
    ticks = [str(label) for label in labels]
    return [f"{i}: {tick}" for i, tick in enumerate(ticks)], ticks


def _check_max_cols(max_cols: object) -> int:
    if isinstance(max_cols, bool) or not isinstance(max_cols, numbers.Integral) or max_cols < 1:
        raise ValueError(f"max_cols must be an integer >= 1, got {max_cols!r}")
    return int(max_cols)


def heatmap_parts(
    weights: np.ndarray,
    masked: np.ndarray | None,
    *,
    query_labels: Sequence[object] | None = None,
    key_labels: Sequence[object] | None = None,
    max_cols: int = DEFAULT_MAX_COLS,
    num_slots: int | None = None,
    title: str | None = None,
) -> tuple[list[dict], dict]:
    """Traces and layout (plain dicts) drawing checked weights; shared by every figure here.

    There are ``B * num_slots`` heatmap traces, trace ``b*num_slots + h`` for head ``h`` of
    example ``b``; the slots ``h >= H`` are hidden. A figure built with room for the largest
    head count can then show any smaller one by updating its traces and layout in place.

    Shapes:
        weights: (B, H, Lq, Lk), as returned by :func:`as_weights`.
        masked: None or (B, Lq, Lk) bool, as returned by :func:`masked_keys`.

    Args:
        num_slots: heads the figure has room for (default H).

    Returns:
        ``(traces, layout)`` to pass to ``go.Figure(data=..., layout=...)`` or to update with.
    """
    B, H, Lq, Lk = weights.shape
    num_slots = H if num_slots is None else num_slots
    if num_slots < H:
        raise ValueError(f"num_slots must be >= the number of heads {H}, got {num_slots}")
    queries, query_ticks = _labels(query_labels, Lq, "query_labels")
    keys, key_ticks = _labels(key_labels, Lk, "key_labels")
    shown = {(p.example, p.head): p for p in panels(B, H, max_cols)}
    traces: list[dict] = []
    layout: dict = {}
    annotations = []
    for b in range(B):
        z = weights[b].copy()  # (H, Lq, Lk)
        if masked is not None:
            z[:, masked[b]] = np.nan  # (Lq, Lk) mask broadcast over the heads
        for h in range(num_slots):
            slot = b * num_slots + h
            x, y = axis_names(slot)
            panel = shown.get((b, h))
            trace = {
                "type": "heatmap",
                "xaxis": x,
                "yaxis": y,
                "coloraxis": "coloraxis",
                "meta": {"example": b, "head": h},
                "name": f"example {b}, head {h}",
                "hoverongaps": True,
                "hovertemplate": (
                    f"example {b}, head {h}<br>query %{{y}}<br>key %{{x}}<br>%{{text}}<extra></extra>"
                ),
                "visible": panel is not None,
                "x": keys,
                "y": queries,
            }
            if panel is not None:
                trace["z"] = z[h].tolist()
                trace["text"] = [[weight_text(w) for w in row] for row in z[h]]
            else:
                trace["z"] = None
                trace["text"] = None
            traces.append(trace)
            layout["xaxis" + x[1:]] = {
                "domain": list(panel.x_domain) if panel else [0, 1],
                "anchor": y,
                "visible": panel is not None,
                "title": {"text": "key", "standoff": 2},
                "type": "category",
                "tickmode": "array",
                "tickvals": keys,
                "ticktext": key_ticks,
                "showgrid": False,
                "zeroline": False,
                "fixedrange": True,
            }
            layout["yaxis" + y[1:]] = {
                "domain": list(panel.y_domain) if panel else [0, 1],
                "anchor": x,
                "visible": panel is not None,
                "title": {"text": "query", "standoff": 2},
                "type": "category",
                "autorange": "reversed",
                "tickmode": "array",
                "tickvals": queries,
                "ticktext": query_ticks,
                "showgrid": False,
                "zeroline": False,
                "fixedrange": True,
            }
            if panel is not None:
                label = f"example {b}, head {h}" if B > 1 else f"head {h}"
                annotations.append({
                    "text": label,
                    "xref": "paper",
                    "yref": "paper",
                    "x": (panel.x_domain[0] + panel.x_domain[1]) / 2,
                    "y": panel.y_domain[1],
                    "xanchor": "center",
                    "yanchor": "bottom",
                    "showarrow": False,
                    "font": {"size": 13},
                })
    if masked is not None and masked.any():
        annotations.append({
            "text": "grey cells: masked keys (weight exactly 0)",
            "xref": "paper", "yref": "paper", "x": 1, "y": 1,
            "xanchor": "right", "yanchor": "bottom", "yshift": 22,
            "showarrow": False, "font": {"size": 12, "color": "#555"},
        })
    layout.update(
        annotations=annotations,
        coloraxis={
            "colorscale": COLORSCALE,
            "cmin": 0.0,
            "cmax": 1.0,
            "colorbar": {"title": {"text": "weight"}, "len": 0.6, "thickness": 14},
        },
        plot_bgcolor=MASKED_COLOR,
        height=figure_height(B, H, max_cols) + (0 if title is None else 30),
        margin={"t": MARGIN_TOP_PX if title is None else MARGIN_TOP_PX + 30,
                "b": MARGIN_BOTTOM_PX, "l": 60, "r": 20},
        title={"text": title} if title else None,
        showlegend=False,
    )
    return traces, layout


def attention_heatmaps(
    weights: object,
    *,
    query_labels: Sequence[object] | None = None,
    key_labels: Sequence[object] | None = None,
    valid_lens: object = None,
    title: str | None = None,
    max_cols: int = DEFAULT_MAX_COLS,
) -> go.Figure:
    """One heatmap per head (and per example) of multi-head attention weights.

    Rows of panels are examples, columns are heads (wrapping after ``max_cols``). Inside a
    panel, x is the key position (or token), y the query position (or token), first query at
    the top. All panels share one 0..1 viridis scale and one colour bar. Keys masked out by
    ``valid_lens`` are grey gaps with hover text "masked". Every heatmap trace carries
    ``meta={"example": b, "head": h}``.

    Shapes:
        weights: (H, Lq, Lk) for one example or (B, H, Lq, Lk), e.g. the ``weights`` returned
            by ``MultiHeadAttention(...)(q, k, v, valid_lens, need_weights=True)``.
        valid_lens: None, an int (one example), (B,) or (B, Lq).

    Args:
        weights: attention weights, entries in [0, 1].
        query_labels: Lq labels (tokens) for the y axis, default the positions.
        key_labels: Lk labels for the x axis, default the positions.
        valid_lens: the valid lengths the weights were computed with; marks masked keys.
        title: figure title.
        max_cols: at most this many panels side by side.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        ValueError: bad weights, labels of the wrong length, bad valid lengths, weights that
            are not 0 where ``valid_lens`` masks, or ``max_cols`` < 1.
    """
    array = as_weights(weights)
    B, H, Lq, Lk = array.shape
    masked = masked_keys(valid_lens, B, Lq, Lk)
    if masked is not None and np.abs(array[np.broadcast_to(masked[:, None], array.shape)]).max(
        initial=0.0
    ) > WEIGHT_TOLERANCE:
        raise ValueError("weights must be 0 on the keys that valid_lens masks out; they are not")
    traces, layout = heatmap_parts(
        array, masked, query_labels=query_labels, key_labels=key_labels,
        max_cols=_check_max_cols(max_cols), title=title,
    )
    return go.Figure(data=traces, layout=layout)
