"""Where ``transpose_qkv`` sends each feature of each token, drawn from the real function.

Shape legend
    B   batch size
    L   sequence length
    H   number of heads
    d   head size
    D   H*d
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from mha_lib._checks import check_positive_int
from mha_lib.heads import transpose_qkv

__all__ = ["transposition_figure"]

# Okabe-Ito, a colour-blind-safe qualitative palette; light colours first (black text on them).
_HEAD_COLORS = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#CC79A7", "#D55E00", "#0072B2",
               "#999999")
_MAX_CELLS = 400


def _index_tensor(batch_size: int, seq_len: int, num_features: int) -> torch.Tensor:
    """(B, L, D) float tensor whose entry ``[b, t, f]`` is ``(b*L + t)*D + f``: its own address."""
    n = batch_size * seq_len * num_features
    # (B*L*D,) -> (B, L, D)
    return torch.arange(n, dtype=torch.float64).reshape(batch_size, seq_len, num_features)


def _decode_index(value: float, seq_len: int, num_features: int) -> tuple[int, int, int]:
    """Invert :func:`_index_tensor`: the ``(b, t, f)`` an entry came from."""
    v = int(value)
    return v // (seq_len * num_features), (v // num_features) % seq_len, v % num_features


def _discrete_colorscale(num_heads: int) -> list[list]:
    """A stepwise colour scale mapping the integers 0..H-1 to the palette's colours."""
    scale = []
    for h in range(num_heads):
        scale += [[h / num_heads, _HEAD_COLORS[h]], [(h + 1) / num_heads, _HEAD_COLORS[h]]]
    return scale


def transposition_figure(
    batch_size: int = 2, seq_len: int = 3, num_heads: int = 2, head_size: int = 2
) -> go.Figure:
    """Picture of ``transpose_qkv``: the input (B, L, D) on the left, the result (B*H, L, d) right.

    The figure is computed by running :func:`mha_lib.transpose_qkv` on a tensor whose entries
    are their own addresses (:func:`_index_tensor`), then decoding every output entry: each cell
    is labelled with the example, token and feature it came from ("b0 t1 f3") and coloured by
    the head that feature belongs to. Blocks of rows are separated by a blank row.

    Args:
        batch_size: B.
        seq_len: L.
        num_heads: H, at most 8 (one palette colour per head).
        head_size: d; the input has D = H*d features.

    Returns:
        A ``plotly.graph_objects.Figure`` with two panels.

    Raises:
        ValueError: an argument that is not a positive integer, more than 8 heads, or more
            than 400 cells (too many to read).
    """
    B = check_positive_int(batch_size, "batch_size")
    L = check_positive_int(seq_len, "seq_len")
    H = check_positive_int(num_heads, "num_heads")
    d = check_positive_int(head_size, "head_size")
    if H > len(_HEAD_COLORS):
        raise ValueError(f"num_heads must be at most {len(_HEAD_COLORS)} (one colour each), got {H}")
    D = H * d
    if B * L * D > _MAX_CELLS:
        raise ValueError(
            f"B*L*D = {B}*{L}*{D} = {B * L * D} cells is too many to read; keep it <= {_MAX_CELLS}"
        )
    X = _index_tensor(B, L, D)  # (B, L, D)
    Y = transpose_qkv(X, H)  # (B, L, D) -> (B*H, L, d)

    def panel(blocks: np.ndarray, row_name) -> dict:
        """Heatmap arrays for stacked (L, width) blocks, one blank row between blocks."""
        n_blocks, _, width = blocks.shape
        rows = n_blocks * (L + 1) - 1
        z = np.full((rows, width), np.nan)
        text = [[""] * width for _ in range(rows)]
        hover = [[""] * width for _ in range(rows)]
        ticks, tick_text = [], []
        for k in range(n_blocks):
            for t in range(L):
                y = k * (L + 1) + t
                ticks.append(y)
                tick_text.append(row_name(k, t))
                for j in range(width):
                    b, t_src, f = _decode_index(blocks[k, t, j].item(), L, D)
                    z[y, j] = f // d  # the head this feature belongs to
                    text[y][j] = f"b{b} t{t_src} f{f}"
                    hover[y][j] = (
                        f"example {b}, token {t_src}, feature {f}<br>"
                        f"head {f // d}, feature {f % d} of that head"
                    )
        return {"z": z.tolist(), "text": text, "customdata": hover, "ticks": ticks,
                "tick_text": tick_text, "rows": rows}

    left = panel(X.numpy(), lambda b, t: f"X[{b}, {t}]")
    right = panel(Y.numpy(), lambda r, t: f"row {r} (b{r // H} h{r % H}), t{t}")
    fig = make_subplots(
        rows=1, cols=2, column_widths=[D / (D + d), d / (D + d)], horizontal_spacing=0.22,
        subplot_titles=(
            f"input X: (B, L, D) = ({B}, {L}, {D})",
            f"transpose_qkv(X, {H}): (B*H, L, d) = ({B * H}, {L}, {d})",
        ),
    )
    colorbar = {
        "title": {"text": "head"}, "tickvals": list(range(H)),
        "ticktext": [f"head {h}" for h in range(H)], "len": 0.5,
    }
    coloraxis = {"colorscale": _discrete_colorscale(H), "cmin": -0.5, "cmax": H - 0.5,
                 "colorbar": colorbar}
    for col, (part, x_title) in enumerate(((left, "feature f of D"), (right, "feature of the head (d)")),
                                          start=1):
        fig.add_trace(
            go.Heatmap(
                z=part["z"], text=part["text"], customdata=part["customdata"],
                texttemplate="%{text}", textfont={"size": 11, "color": "black"},
                hovertemplate="%{customdata}<extra></extra>", hoverongaps=False,
                coloraxis="coloraxis", xgap=2, ygap=2,
            ),
            row=1, col=col,
        )
        fig.update_xaxes(title_text=x_title, side="top", tickmode="linear", dtick=1,
                         showgrid=False, zeroline=False, row=1, col=col)
        fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=part["ticks"],
                         ticktext=part["tick_text"], showgrid=False, zeroline=False,
                         row=1, col=col)
    # Same row height in both panels: the left panel, with fewer rows, takes the top part only.
    fig.update_yaxes(domain=[1 - left["rows"] / right["rows"], 1], row=1, col=1)
    fig.update_layout(
        height=max(300, 26 * right["rows"] + 170), margin={"t": 150, "b": 20},
        plot_bgcolor="white", coloraxis=coloraxis,
        title={"text": "transpose_qkv: where each feature goes", "y": 0.98, "yanchor": "top"},
    )
    # Subplot titles sit above the top-side x axes.
    fig.update_annotations(yshift=45)
    wide = fig.to_plotly_json()["layout"]
    fig.update_layout(meta={
        "description": (
            f"transpose_qkv on an input of shape (B, L, D) = ({B}, {L}, {D}) with {H} heads: "
            f"left, the input's cells, each labelled with its example b, token t and feature f; "
            f"right, the result of shape (B*H, L, d) = ({B * H}, {L}, {d}), where each row block "
            "holds one head of one example. Colours mark the head each feature belongs to."),
        "narrow": _narrow_layout(wide, left["rows"], right["rows"], D, d, H, L,
                                 right["tick_text"]),
    })
    return fig


def _narrow_layout(wide: dict, rows_left: int, rows_right: int, D: int, d: int, H: int, L: int,
                   right_ticks: list[str]) -> dict:
    """Layout overrides for a phone: the two panels stacked, the result under the input."""
    row_px, top_px, gap_px, bottom_px = 24, 120, 110, 70
    area = rows_left * row_px + gap_px + rows_right * row_px
    top_domain = [(gap_px + rows_right * row_px) / area, 1.0]
    bottom_domain = [0.0, rows_right * row_px / area]
    short = [t.replace("row ", "r").replace(", t", " t") for t in right_ticks]
    annotations = []
    for annotation, domain in zip(wide.get("annotations", []), (top_domain, bottom_domain)):
        annotations.append({**annotation, "x": 0, "xanchor": "left", "y": domain[1],
                            "font": {"size": 12}})
    return {
        "height": top_px + area + bottom_px,
        "margin": {"t": top_px, "b": bottom_px, "l": 10, "r": 10},
        "title": {"text": "transpose_qkv: where<br>each feature goes", "x": 0.02, "xanchor": "left",
                  "y": 1 - 16 / (top_px + area + bottom_px), "yanchor": "top",
                  "font": {"size": 14}},
        "xaxis": {**wide["xaxis"], "domain": [0.0, 1.0], "automargin": True},
        "xaxis2": {**wide["xaxis2"], "domain": [0.0, max(d / D, 0.35)], "automargin": True},
        "yaxis": {**wide["yaxis"], "domain": top_domain, "automargin": True},
        "yaxis2": {**wide["yaxis2"], "domain": bottom_domain, "automargin": True,
                   "ticktext": short},
        "annotations": annotations,
        "coloraxis": {**wide["coloraxis"], "colorbar": {
            **wide["coloraxis"]["colorbar"], "orientation": "h", "x": 0, "xanchor": "left",
            "y": -0.02, "yanchor": "top", "len": 1.0, "thickness": 12,
            "title": {"text": "head", "side": "left"}}},
    }
