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

import math
import numbers
from typing import Sequence

import numpy as np
import plotly.colors as pc
import plotly.graph_objects as go
import torch

from mha_lib._checks import check_positive_int
from mha_lib.mask_conventions import keep_mask_from_valid_lens, keep_to_padding
from mha_lib.masking import check_valid_lens
from mha_lib.viz.layout import (
    MARGIN_BOTTOM_PX,
    MARGIN_TOP_PX,
    NARROW_PANEL_PX,
    PANEL_PX,
    axis_names,
    figure_height,
    panels,
)

__all__ = [
    "DEFAULT_MAX_COLS",
    "MASKED_COLOR",
    "WEIGHT_TOLERANCE",
    "as_array",
    "as_list",
    "as_weights",
    "attention_heatmaps",
    "check_title",
    "colour_stops",
    "example_labels",
    "heatmap_parts",
    "masked_keys",
]

_COLORSCALE = "Viridis"
MASKED_COLOR = "#c8c8c8"  # grey: not on the viridis scale, so never confused with a weight
WEIGHT_TOLERANCE = 1e-5
DEFAULT_MAX_COLS = 4
_NARROW_MAX_COLS = 2  # panels side by side on a phone
# Plotting width the panels share, in pixels: the book's text column on a laptop (about 730 px
# minus the margins) and on a phone (390 px minus the page's and the figure's margins).
_WIDE_PLOT_PX = 580
_NARROW_PLOT_PX = 250
_CHAR_PX = 7  # width of one tick-label character (12 px font)
_LINE_PX = 15  # height of one tick label
# A hidden slot (room for more heads) keeps plotly's default domain; it draws nothing because
# the plot background is transparent and each shown panel gets its own grey rectangle.
_HIDDEN_DOMAIN = (0.0, 1.0)


def as_array(values: object, name: str) -> np.ndarray:
    """``values`` (a tensor, an array or nested lists of numbers) as a float64 numpy array.

    Raises:
        ValueError: naming ``name``: a tensor on the meta device (it holds no numbers), or
            values that are not numbers.
    """
    if isinstance(values, torch.Tensor):
        if values.device.type == "meta":
            raise ValueError(f"{name} must hold numbers, got a tensor on the meta device")
        if values.is_complex():
            raise ValueError(f"{name} must hold real numbers, got dtype {values.dtype}")
        values = values.detach().cpu().double().numpy()
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a tensor or array of numbers: {err}") from None


def as_list(values: object, name: str) -> object:
    """A tensor's ``tolist()`` (a ValueError naming ``name`` on the meta device); else ``values``."""
    if isinstance(values, torch.Tensor):
        if values.device.type == "meta":
            raise ValueError(f"{name} must hold numbers, got a tensor on the meta device")
        return values.tolist()
    return values


def check_title(title: object, name: str = "title") -> str | None:
    """Return ``title`` if it is a string or None, else raise a ValueError naming ``name``."""
    if title is not None and not isinstance(title, str):
        raise ValueError(f"{name} must be a string or None, got {type(title).__name__}")
    return title


def as_weights(weights: object) -> np.ndarray:
    """Check attention weights and return them as a float64 array of shape (B, H, Lq, Lk).

    Args:
        weights: (H, Lq, Lk) or (B, H, Lq, Lk) tensor or array with entries in [0, 1].

    Raises:
        ValueError: not numeric, wrong number of dimensions, an empty axis, or an entry that is
            not finite or outside [0, 1].
    """
    array = as_array(weights, "weights")
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
    valid_lens = as_list(valid_lens, "valid_lens")
    if isinstance(valid_lens, numbers.Integral) and not isinstance(valid_lens, bool):
        valid_lens = [valid_lens]  # one example: int -> (1,)
    lens = check_valid_lens(valid_lens, batch_size, num_queries, num_keys)
    keep = keep_mask_from_valid_lens(lens, num_queries, num_keys)  # (B, Lq, Lk)
    return keep_to_padding(keep).numpy()


def _masked_cells(keep: object, shape: tuple[int, ...]) -> np.ndarray:
    """Which cells a boolean keep mask hides: bool array of ``shape``, ``True`` = masked.

    Args:
        keep: bool tensor or array broadcastable to ``shape`` (the weights' shape, (H, Lq, Lk)
            or (B, H, Lq, Lk)); ``True`` = the query may attend to the key.

    Raises:
        ValueError: keep not boolean or not broadcastable to ``shape``.
    """
    if isinstance(keep, torch.Tensor):
        if keep.device.type == "meta":
            raise ValueError("keep must hold booleans, got a tensor on the meta device")
        if keep.dtype != torch.bool:
            raise ValueError(f"keep must be a boolean tensor (True = may attend), got {keep.dtype}")
        keep = keep.detach().cpu().numpy()
    elif not isinstance(keep, np.ndarray) or keep.dtype != np.bool_:
        got = keep.dtype if isinstance(keep, np.ndarray) else type(keep).__name__
        raise ValueError(f"keep must be a boolean tensor or array (True = may attend), got {got}")
    if not _broadcasts(keep.shape, shape):
        raise ValueError(
            f"keep must be broadcastable to the weights' shape {tuple(shape)}, got {keep.shape}"
        )
    return ~np.broadcast_to(keep, shape)  # keep -> masked (True = hidden)


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def _weight_text(weight: float) -> str:
    """Hover text of one cell: its weight, or "masked" for NaN (a masked key)."""
    return "masked" if np.isnan(weight) else f"weight {weight:.3f}"


def example_labels(labels: object, batch_size: int, length: int, name: str):
    """Labels per example: None (positions), one list for every example, or B lists.

    Returns:
        B tuples of ``length`` strings.
    """
    if labels is None:
        return tuple(tuple(str(i) for i in range(length)) for _ in range(batch_size))
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise ValueError(
            f"{name} must be a sequence of {length} labels (or B such sequences), "
            f"got {type(labels).__name__}"
        )
    nested = [isinstance(x, Sequence) and not isinstance(x, str) for x in labels]
    if not any(nested):
        labels = [labels] * batch_size  # one list shared by every example
    elif len(labels) != batch_size:
        raise ValueError(
            f"{name} must hold one sequence of labels per example ({batch_size}), got {len(labels)}"
        )
    out = []
    for b, row in enumerate(labels):
        if isinstance(row, str) or not isinstance(row, Sequence) or len(row) != length:
            got = len(row) if isinstance(row, Sequence) and not isinstance(row, str) else repr(row)
            where = f"{name}[{b}]" if any(nested) else name
            raise ValueError(f"{where} must hold {length} labels, got {got}")
        out.append(tuple(str(label) for label in row))
    return tuple(out)


def _example_titles_or_default(titles: object, batch_size: int) -> tuple[str, ...]:
    """B panel-title prefixes: ``titles`` checked, or "example b" (None)."""
    if titles is None:
        return tuple(f"example {b}" for b in range(batch_size))
    if (isinstance(titles, str) or not isinstance(titles, Sequence) or len(titles) != batch_size
            or not all(isinstance(t, str) for t in titles)):
        raise ValueError(
            f"example_titles must be {batch_size} strings (one per example), got {titles!r}"
        )
    return tuple(titles)


def _tick_step(num_ticks: int, room_px: float, tick_px: float) -> int:
    """Label every ``step``-th tick so that ``num_ticks`` labels of ``tick_px`` fit ``room_px``."""
    return max(1, math.ceil(num_ticks * tick_px / max(room_px, 1.0)))


def _axis(title: str, domain, anchor: str, visible: bool, categories, ticks,
          step: int = 1) -> dict:
    """One panel axis: categorical (unique "i: token" categories), ticks show the tokens.

    Only every ``step``-th tick is labelled (never rotated), so labels neither collide nor run
    into the next row of panels; hover texts still name every cell.
    """
    categories, ticks = list(categories), list(ticks)
    return {
        "domain": list(domain), "anchor": anchor, "visible": visible,
        "title": {"text": title, "standoff": 2}, "type": "category",
        "tickmode": "array", "tickvals": categories[::step], "ticktext": ticks[::step],
        "tickangle": 0, "tickfont": {"size": 11},
        "showgrid": False, "zeroline": False, "fixedrange": True,
    }


def _categories(ticks: Sequence[str], labelled: bool) -> list[str]:
    return [f"{i}: {t}" for i, t in enumerate(ticks)] if labelled else list(ticks)


def _panel_text(z: np.ndarray) -> list[list[str]]:
    """Hover texts of one panel, (Lq, Lk) weights with NaN for masked keys."""
    return [[_weight_text(w) for w in row] for row in z]


def colour_stops(colorscale: object = _COLORSCALE) -> list:
    """A plotly colour scale (a name such as "Viridis", or [[t, colour], ...]) as
    [[t, [r, g, b]], ...], for the pages that colour weights themselves (the explorers on the
    website draw their weights as pictures, linear in RGB between these stops, as plotly does)."""
    stops = pc.get_colorscale(colorscale) if isinstance(colorscale, str) else colorscale
    return [[float(t), [round(c) for c in pc.unlabel_rgb(pc.convert_colors_to_same_type(colour, "rgb")[0][0])]]
            for t, colour in stops]


def heatmap_parts(
    weights: np.ndarray,
    masked: np.ndarray | None,
    *,
    query_labels: object = None,
    key_labels: object = None,
    max_cols: int = DEFAULT_MAX_COLS,
    num_slots: int | None = None,
    title: str | None = None,
    masked_note: bool | None = None,
    example_titles: object = None,
    narrow: bool = False,
) -> tuple[list[dict], dict]:
    """Traces and layout (plain dicts) drawing checked weights; shared by every figure here.

    There are ``B * num_slots`` heatmap traces, trace ``b*num_slots + h`` for head ``h`` of
    example ``b``; the slots ``h >= H`` are hidden. A figure built with room for the largest
    head count can then show any smaller one by updating its traces and layout in place.

    Shapes:
        weights: (B, H, Lq, Lk), as returned by :func:`as_weights`.
        masked: None, (B, Lq, Lk) bool (the same for every head), as returned by
            :func:`masked_keys`, or (B, H, Lq, Lk) bool, as from :func:`_masked_cells`.

    Args:
        query_labels, key_labels: see :func:`example_labels`.
        example_titles: B names for the examples in panel titles and hover text (default
            "example b"; with one example and no names the titles say only "head h").
        num_slots: heads the figure has room for (default H).
        masked_note: show the "grey = masked" note (default: when something is masked).
        narrow: the layout for a phone (at most :data:`_NARROW_MAX_COLS` smaller panels side by
            side, smaller margins and fonts); the traces are the same either way.

    Returns:
        ``(traces, layout)`` to pass to ``go.Figure(data=..., layout=...)`` or to update with.
    """
    B, H, Lq, Lk = weights.shape
    check_title(title)
    num_slots = H if num_slots is None else num_slots
    if num_slots < H:
        raise ValueError(f"num_slots must be >= the number of heads {H}, got {num_slots}")
    names = _example_titles_or_default(example_titles, B)
    query_ticks = example_labels(query_labels, B, Lq, "query_labels")
    key_ticks = example_labels(key_labels, B, Lk, "key_labels")
    if narrow:
        max_cols = min(max_cols, _NARROW_MAX_COLS)
    panel_px = NARROW_PANEL_PX if narrow else PANEL_PX
    plot_px = _NARROW_PLOT_PX if narrow else _WIDE_PLOT_PX
    cols = min(H, max_cols)
    panel_width_px = plot_px * (1 - 0.08 * (cols - 1)) / cols
    shown = {(p.example, p.head): p for p in panels(B, H, max_cols, panel_px)}
    traces: list[dict] = []
    layout: dict = {}
    annotations = []
    shapes = []
    for b in range(B):
        queries = _categories(query_ticks[b], query_labels is not None)
        keys = _categories(key_ticks[b], key_labels is not None)
        widest = max(len(t) for t in key_ticks[b]) * _CHAR_PX + 6
        x_step = _tick_step(Lk, panel_width_px, widest)
        y_step = _tick_step(Lq, panel_px, _LINE_PX)
        z = weights[b].copy()  # (H, Lq, Lk)
        if masked is not None:
            # (Lq, Lk) -> (H, Lq, Lk): a per-example mask is the same for every head
            z[np.broadcast_to(masked[b], z.shape)] = np.nan
        for h in range(num_slots):
            slot = b * num_slots + h
            x, y = axis_names(slot)
            panel = shown.get((b, h))
            traces.append({
                "type": "heatmap",
                "xaxis": x,
                "yaxis": y,
                "coloraxis": "coloraxis",
                "meta": {"example": b, "head": h},
                "name": f"{names[b]}, head {h}",
                "hoverongaps": True,
                "hovertemplate": (
                    f"{names[b]}, head {h}<br>query %{{y}}<br>key %{{x}}<br>%{{text}}<extra></extra>"
                ),
                "visible": panel is not None,
                "x": keys,
                "y": queries,
                "z": z[h].tolist() if panel else None,
                "text": _panel_text(z[h]) if panel else None,
            })
            layout["xaxis" + x[1:]] = _axis("key", panel.x_domain if panel else _HIDDEN_DOMAIN, y,
                                            panel is not None, keys, key_ticks[b], x_step)
            first_column = panel is None or panel.x_domain[0] == 0  # "query" once per row
            yaxis = _axis("query" if first_column else "", panel.y_domain if panel else _HIDDEN_DOMAIN,
                          x, panel is not None, queries, query_ticks[b], y_step)
            if narrow and not first_column:  # on a phone the gap between panels has no room
                yaxis["showticklabels"] = False  # for labels: the row's first panel names them
            layout["yaxis" + y[1:]] = {**yaxis, "autorange": "reversed"}
            if panel is not None:
                shapes.append({  # the panel's background, seen through the masked (NaN) cells
                    "type": "rect", "xref": f"{x} domain", "yref": f"{y} domain",
                    "x0": 0, "x1": 1, "y0": 0, "y1": 1, "layer": "below",
                    "fillcolor": MASKED_COLOR, "line": {"width": 0},
                })
                annotations.append({
                    "text": (f"{names[b]}, head {h}" if B > 1 or example_titles is not None
                             else f"head {h}"),
                    "xref": "paper", "yref": "paper",
                    "x": (panel.x_domain[0] + panel.x_domain[1]) / 2, "y": panel.y_domain[1],
                    "xanchor": "center", "yanchor": "bottom", "showarrow": False,
                    "font": {"size": 11 if narrow else 13},
                })
    title_px = 0 if title is None else 30 * len(_wrap(title, 34 if narrow else 90).split("<br>"))
    note = masked_note or (masked_note is None and masked is not None and masked.any())
    if note:
        annotations.append({  # under the colour bar, which ends at 0.2 of the height
            "text": "grey:<br>masked<br>key", "xref": "paper", "yref": "paper",
            "x": 1.02, "y": 0.18, "xanchor": "left", "yanchor": "top", "align": "left",
            "showarrow": False, "font": {"size": 11 if narrow else 12, "color": "#444"},
        })
    height = figure_height(B, H, max_cols, panel_px) + title_px
    layout.update(
        annotations=annotations,
        shapes=shapes,
        coloraxis={
            "colorscale": _COLORSCALE, "cmin": 0.0, "cmax": 1.0,
            "colorbar": {"title": {"text": "weight", "side": "right"}, "len": 0.6, "y": 0.5,
                         "yanchor": "middle", "x": 1.02, "thickness": 10 if narrow else 14,
                         "lenmode": "fraction"},
        },
        plot_bgcolor="rgba(0,0,0,0)",
        height=height,
        margin={"t": MARGIN_TOP_PX + title_px, "b": MARGIN_BOTTOM_PX,
                "l": 44 if narrow else 60, "r": 64 if narrow else 90},
        title=({"text": _wrap(title, 34 if narrow else 90), "x": 0, "xanchor": "left",
                "font": {"size": 14 if narrow else 17}} if title else None),
        showlegend=False,
    )
    if note and height < 420:  # keep the colour bar clear of the note in short figures
        layout["coloraxis"]["colorbar"].update(len=0.5, y=0.62)
    return traces, layout


def _wrap(text: str, width: int) -> str:
    """Break a title into lines of at most ``width`` characters (plotly does not wrap)."""
    if "<br>" in text or len(text) <= width:
        return text
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "<br>".join([*lines, line])


def _layout_overrides(wide: dict, narrow: dict) -> dict:
    """The top-level layout entries of ``narrow`` that differ from ``wide`` (for ``meta.narrow``)."""
    return {k: v for k, v in narrow.items() if wide.get(k) != v}


def _describe_heatmaps(B: int, H: int, Lq: int, Lk: int, masked: bool, title: str | None,
                       example_titles: Sequence[str] | None = None) -> str:
    """A text alternative for a grid of attention heatmaps (rows named by ``example_titles``
    when given: "layer 0, layer 1", not "2 examples")."""
    what = f"{title}: " if title else ""
    heads = f"{H} head{'s' if H > 1 else ''}"
    if example_titles:
        grid = f"rows {', '.join(map(str, example_titles))}, by {heads}"
        each = "row"
    else:
        grid = f"{B} example{'s' if B > 1 else ''} by {heads}"
        each = "example"
    text = (f"{what}heatmaps of attention weights, one panel per {each} and head ({grid}). "
            f"In each panel the {Lk} keys run left to right and the {Lq} queries top to bottom; "
            "colour shows the weight from 0 (dark purple) to 1 (yellow); each query's weights sum to 1.")
    return text + (" Grey cells are masked keys, with weight 0." if masked else "")


def attention_heatmaps(
    weights: object,
    *,
    query_labels: object = None,
    key_labels: object = None,
    valid_lens: object = None,
    keep: object = None,
    example_titles: Sequence[str] | None = None,
    title: str | None = None,
    max_cols: int = DEFAULT_MAX_COLS,
) -> go.Figure:
    """One heatmap per head (and per example) of multi-head attention weights.

    Rows of panels are examples, columns are heads (wrapping after ``max_cols``). Inside a
    panel, x is the key position (or token), y the query position (or token), first query at
    the top. All panels share one 0..1 viridis scale and one colour bar. Keys masked out by
    ``valid_lens`` or by ``keep`` are grey gaps with hover text "masked". Every heatmap trace
    carries ``meta={"example": b, "head": h}``.

    Shapes:
        weights: (H, Lq, Lk) for one example or (B, H, Lq, Lk), e.g. the ``weights`` returned
            by ``MultiHeadAttention(...)(q, k, v, valid_lens, need_weights=True)``.
        valid_lens: None, an int (one example), (B,) or (B, Lq).
        keep: None, or bool broadcastable to the weights' shape, e.g. (B, 1, 1, Lk).

    Args:
        weights: attention weights, entries in [0, 1].
        query_labels: Lq labels (tokens) for the y axis, or B such lists (one per example);
            default the positions.
        key_labels: Lk labels for the x axis, or B such lists; default the positions.
        valid_lens: the valid lengths the weights were computed with; marks masked keys.
        keep: a boolean mask the weights were computed with, ``True`` = may attend (the
            convention of ``F.scaled_dot_product_attention``), for masks that valid lengths
            cannot express (holes, different masks per head). Use it or ``valid_lens``.
        example_titles: B names of the examples for the panel titles (default "example b").
        title: figure title.
        max_cols: at most this many panels side by side.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        ValueError: bad weights, labels of the wrong length, bad valid lengths or keep mask,
            both ``valid_lens`` and ``keep``, weights that are not 0 where the mask hides a
            key, bad ``example_titles``, or ``max_cols`` < 1.
    """
    raw = as_array(weights, "weights")
    shape = raw.shape  # (H, Lq, Lk) or (B, H, Lq, Lk): what a keep mask broadcasts to
    array = as_weights(raw)
    B, H, Lq, Lk = array.shape
    max_cols = check_positive_int(max_cols, "max_cols")
    if valid_lens is not None and keep is not None:
        raise ValueError("pass the mask once: valid_lens or keep, not both")
    if keep is not None:
        masked = _masked_cells(keep, shape).reshape(array.shape)  # (H, Lq, Lk) -> (B, H, Lq, Lk)
        source = "keep"
    else:
        masked = masked_keys(valid_lens, B, Lq, Lk)  # (B, Lq, Lk)
        masked = None if masked is None else masked[:, None]  # (B, Lq, Lk) -> (B, 1, Lq, Lk)
        source = "valid_lens"
    if masked is not None and np.abs(array[np.broadcast_to(masked, array.shape)]).max(
        initial=0.0
    ) > WEIGHT_TOLERANCE:
        raise ValueError(f"weights must be 0 on the keys that {source} masks out; they are not")
    options = dict(query_labels=query_labels, key_labels=key_labels, max_cols=max_cols,
                   title=title, example_titles=example_titles)
    traces, layout = heatmap_parts(array, masked, **options)
    _, narrow = heatmap_parts(array, masked, narrow=True, **options)
    layout["meta"] = {
        "description": _describe_heatmaps(B, H, Lq, Lk, masked is not None and bool(masked.any()),
                                         title, example_titles),
        "narrow": _layout_overrides(layout, narrow),
    }
    return go.Figure(data=traces, layout=layout)
