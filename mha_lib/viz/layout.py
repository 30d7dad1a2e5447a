"""Where each heatmap goes: a grid of (example, head) panels with explicit axis domains.

The figure does not use ``make_subplots``. Every panel ("slot") owns a numbered x/y axis pair
whose domain is computed here, so the same figure can show a different number of heads later
(the live explorer hides the unused slots and moves the others, in place, instead of building
a new figure).

Shape legend
    B   number of examples
    H   number of heads shown
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mha_lib._checks import check_positive_int, check_size

__all__ = [
    "MARGIN_BOTTOM_PX",
    "MARGIN_TOP_PX",
    "NARROW_PANEL_PX",
    "PANEL_PX",
    "axis_names",
    "figure_height",
    "panels",
]

PANEL_PX = 170  # height of one panel's plotting area, in pixels
NARROW_PANEL_PX = 120  # the same on a phone (see mha_lib.viz.heatmaps.heatmap_parts(narrow=True))
_TITLE_PX = 24  # room above each panel for its "head h" title
_AXIS_PX = 52  # room below each panel for its tick labels and "key" axis title
MARGIN_TOP_PX = 60
MARGIN_BOTTOM_PX = 10


@dataclass(frozen=True)
class _Panel:
    """One heatmap's place: which example and head it shows, and its axis domains."""

    example: int
    head: int
    x_domain: tuple[float, float]
    y_domain: tuple[float, float]


def axis_names(slot: int) -> tuple[str, str]:
    """Trace-side axis ids of a slot: ``("x", "y")`` for slot 0, ``("x2", "y2")`` for slot 1..."""
    suffix = "" if check_size(slot, "slot") == 0 else str(slot + 1)
    return "x" + suffix, "y" + suffix


def _grid_shape(num_heads: int, max_cols: int) -> tuple[int, int]:
    """(rows per example, columns): the heads of one example wrap after ``max_cols`` panels."""
    cols = min(check_positive_int(num_heads, "num_heads"), check_positive_int(max_cols, "max_cols"))
    return math.ceil(num_heads / cols), cols


_MAX_PANELS = 1024
"""The most panels a figure lays out (B x H); more would not be readable, nor fast to draw."""


def _check_sizes(num_examples: object, num_heads: int, panel_px: object) -> int:
    """``num_examples`` after checking it and ``panel_px`` (integers >= 1) and the panel count."""
    check_positive_int(num_examples, "num_examples")
    check_positive_int(panel_px, "panel_px")
    if num_examples * num_heads > _MAX_PANELS:
        raise ValueError(f"num_examples * num_heads must be at most {_MAX_PANELS} panels, got "
                         f"{num_examples} * {num_heads}")
    return num_examples


def panels(num_examples: int, num_heads: int, max_cols: int,
           panel_px: int = PANEL_PX) -> list[_Panel]:
    """The panels of a B x H grid, example-major (panel ``b*H + h`` is head ``h`` of example ``b``).

    Examples are stacked top to bottom; the heads of one example run left to right and wrap
    onto further rows after ``max_cols`` columns.
    """
    rows_per_example, cols = _grid_shape(num_heads, max_cols)
    rows = _check_sizes(num_examples, num_heads, panel_px) * rows_per_example
    row_px = _TITLE_PX + panel_px + _AXIS_PX
    total_px = rows * row_px
    x_gap = 0.08 if cols > 1 else 0.0
    width = (1 - x_gap * (cols - 1)) / cols
    out = []
    for b in range(num_examples):
        for h in range(num_heads):
            row = b * rows_per_example + h // cols
            col = h % cols
            x0 = col * (width + x_gap)
            top = 1 - (row * row_px + _TITLE_PX) / total_px
            bottom = 1 - ((row + 1) * row_px - _AXIS_PX) / total_px
            out.append(_Panel(b, h, (round(x0, 6), round(x0 + width, 6)),
                             (round(max(bottom, 0.0), 6), round(top, 6))))
    return out


def figure_height(num_examples: int, num_heads: int, max_cols: int,
                  panel_px: int = PANEL_PX) -> int:
    """Pixel height of the figure that holds the B x H panels."""
    rows_per_example, _ = _grid_shape(num_heads, max_cols)
    rows = _check_sizes(num_examples, num_heads, panel_px) * rows_per_example
    return rows * (_TITLE_PX + panel_px + _AXIS_PX) + MARGIN_TOP_PX + MARGIN_BOTTOM_PX
