"""Circuits read token by token: V x V tables side by side, one panel per head.

The tables come from :mod:`mha_lib.circuits` (``token_k_composition``, ``token_ov_circuits``).
Conventions of the book: the key side (what is read) on x, the query side on y with token 0
at the top, one colour-blind-safe scale (cividis) shared by the panels, no fixed width (two
panels fit a 390 px phone).

Shape legend
    n   number of panels (heads)
    V   vocabulary size
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_lib.viz.heatmaps import as_array, check_title

__all__ = ["token_tables_figure"]

_MARGIN = {"t": 80, "b": 50, "l": 50, "r": 10}
_MAX_PANELS = 4


def token_tables_figure(tables: object, panel_titles: Sequence[str], *, x_title: str, y_title: str,
                        title: str | None = None, colorbar: str = "score") -> go.Figure:
    """V x V tables as heatmaps side by side, on one colour scale centred on 0.

    Shapes:
        tables: (n, V, V_x) with 1 <= n <= 4, row ``a`` the token on the y side, column ``b``
            the token on the x side.

    Args:
        panel_titles: one short title per panel.
        x_title, y_title: what the columns and the rows are (e.g. "token the key's previous
            token was", "query token").
        title: the figure's title.
        colorbar: what the colour means.

    Raises:
        ValueError: tables that are not a finite (n, V, V_x) array with 1 <= n <= 4, or a
            number of titles other than n.
    """
    z = as_array(tables, "tables")
    if z.ndim != 3 or not 1 <= z.shape[0] <= _MAX_PANELS or 0 in z.shape:
        raise ValueError(f"tables must have shape (n, V, V_x) with 1 <= n <= {_MAX_PANELS} panels, "
                         f"got {z.shape}")
    if not np.isfinite(z).all():
        raise ValueError("tables must be finite, got NaN or infinity")
    if isinstance(panel_titles, str) or len(panel_titles) != z.shape[0]:
        raise ValueError(f"panel_titles must hold one title per table ({z.shape[0]}), got {panel_titles!r}")
    check_title(title)
    n = z.shape[0]
    top = float(np.abs(z).max()) or 1.0  # one scale for every panel, 0 in its middle
    fig = make_subplots(rows=1, cols=n, subplot_titles=[str(t) for t in panel_titles],
                        shared_yaxes=True, horizontal_spacing=0.04)
    for i in range(n):
        fig.add_trace(go.Heatmap(
            z=z[i].tolist(), colorscale="Cividis", zmin=-top, zmax=top, showscale=i == 0,
            colorbar={"title": {"text": colorbar, "side": "right"}, "thickness": 10, "len": 0.8},
            hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>{colorbar} %{{z:.2f}}<extra></extra>",
        ), row=1, col=i + 1)
        fig.update_xaxes(title_text=x_title, dtick=8,
                         constrain="domain", row=1, col=i + 1)
    fig.update_yaxes(autorange="reversed", dtick=8)
    fig.update_yaxes(title_text=y_title, row=1, col=1)
    fig.update_layout(title={"text": title} if title else None, height=340, margin=_MARGIN)
    return fig
