"""A diagram of multi-head attention whose shape labels come from running the library.

:func:`mha_diagram` draws the data flow of :class:`mha_lib.MultiHeadAttention` top to bottom:
queries, keys and values -> ``W_q``, ``W_k``, ``W_v`` -> split into H heads -> scaled
dot-product attention in every head -> concatenate the heads -> ``W_o`` -> output. The tensor
shape written on each arrow is not typed by hand: :func:`_traced_shapes` runs the library's own
pieces on sizes that are all different numbers (B=2, H=3, d=5, ...) and turns every size back
into its symbol, so the picture cannot disagree with the code.

The figure is made of plotly shapes and annotations only (no image), in one column of
three lanes, so it reads on a 390 px phone as well as on a laptop.

Shapes in the book's notation (:mod:`mha_lib`): B batch, H heads, Lq queries, Lk key-value
pairs, d head size, D = H*d = ``d_model``.
"""

from __future__ import annotations

from collections.abc import Iterable

import plotly.graph_objects as go
import torch

from mha_lib._checks import check_bool
from mha_lib.heads import transpose_output, transpose_qkv
from mha_lib.multihead import MultiHeadAttention

__all__ = ["mha_diagram"]

#: The stages a caller may highlight, in the order the data flows through them.
_STAGES = ("inputs", "project", "split", "attend", "concat", "output")

# Every size a distinct number, so each number in a traced shape names exactly one symbol.
_SIZES = {"B": 2, "H": 3, "d": 5, "Lq": 7, "Lk": 11, "query_size": 13, "key_size": 17,
          "value_size": 19}
_SYMBOLS = {2: "B", 3: "H", 5: "d", 15: "D", 6: "B*H", 7: "Lq", 11: "Lk", 13: "query_size",
            17: "key_size", 19: "value_size"}

# Okabe-Ito: orange for highlighted stages, sky blue for the rest, grey for data.
_HIGHLIGHT = "#E69F00"
_PLAIN = "#CDE6F5"
_DATA = "#EEEEEE"
_LINE = "#333333"


def _symbolic(shape: torch.Size) -> str:
    return "(" + ", ".join(_SYMBOLS[n] for n in shape) + ")"


def _traced_shapes() -> dict[str, str]:
    """Run multi-head attention step by step and return every intermediate shape in symbols.

    The steps are those of ``MultiHeadAttention``'s clear path, built from the public pieces
    (the projections, :func:`mha_lib.transpose_qkv`, the module's ``DotProductAttention``,
    :func:`mha_lib.transpose_output`, ``W_o``); the final shape is checked against the module
    itself.

    Returns:
        A dict from arrow name (``"queries"``, ``"q_projected"``, ``"q_heads"``, ...,
        ``"weights"``, ``"output"``) to a shape such as ``"(B*H, Lq, d)"``.
    """
    s = _SIZES
    with torch.random.fork_rng():  # drawing the diagram leaves the caller's random state alone
        # key_size, query_size, value_size, D = H*d, H, dropout: positional (d2l's order)
        mha = MultiHeadAttention(s["key_size"], s["query_size"], s["value_size"],
                                 s["H"] * s["d"], s["H"], 0.0).eval()
    g = torch.Generator().manual_seed(0)
    queries = torch.randn(s["B"], s["Lq"], s["query_size"], generator=g)
    keys = torch.randn(s["B"], s["Lk"], s["key_size"], generator=g)
    values = torch.randn(s["B"], s["Lk"], s["value_size"], generator=g)
    shapes = {"queries": queries.shape, "keys": keys.shape, "values": values.shape}
    with torch.no_grad():
        projected = {"q": mha.W_q(queries), "k": mha.W_k(keys), "v": mha.W_v(values)}  # (B, L, D)
        heads = {n: transpose_qkv(x, mha.num_heads) for n, x in projected.items()}  # (B*H, L, d)
        out, weights = mha.attention(heads["q"], heads["k"], heads["v"], need_weights=True)
        concat = transpose_output(out, mha.num_heads)  # (B*H, Lq, d) -> (B, Lq, D)
        output = mha.W_o(concat)  # (B, Lq, D)
        assert output.shape == mha(queries, keys, values).shape
    for n in "qkv":
        shapes[f"{n}_projected"] = projected[n].shape
        shapes[f"{n}_heads"] = heads[n].shape
    shapes.update(heads_out=out.shape, weights=weights.shape, concat=concat.shape,
                  output=output.shape)
    return {name: _symbolic(shape) for name, shape in shapes.items()}


def _check_highlight(highlight: Iterable[str] | str | None) -> frozenset[str]:
    if highlight is None:
        return frozenset()
    if isinstance(highlight, str):
        highlight = (highlight,)
    if not isinstance(highlight, Iterable) or not all(isinstance(s, str) for s in highlight):
        raise ValueError(f"highlight must name stages among {_STAGES}, got {highlight!r}")
    chosen = frozenset(highlight)
    unknown = sorted(chosen - set(_STAGES))
    if unknown:
        raise ValueError(f"highlight must name stages among {_STAGES}, got {unknown}")
    return chosen


def mha_diagram(highlight: Iterable[str] | str | None = None, show_code: bool = False) -> go.Figure:
    """Diagram of multi-head attention, with the tensor shape on every arrow.

    Args:
        highlight: stages to draw in orange (the others are light blue), any of
            ``"inputs"``, ``"project"``, ``"split"``, ``"attend"``,
            ``"concat"``, ``"output"``. Chapter 2 highlights ``("split", "concat")``, where
            the reshapes happen.
        show_code: also name the library function or layer of each stage (``transpose_qkv``,
            ``DotProductAttention``, ...).

    Returns:
        A plotly figure made of shapes and annotations (no traces), about 640 px tall; its
        width follows the page.

    Raises:
        ValueError: if ``highlight`` names an unknown stage (or is not strings), or
            ``show_code`` is not True or False.
    """
    chosen = _check_highlight(highlight)
    check_bool(show_code, "show_code")
    shape_of = _traced_shapes()
    fig = go.Figure()
    lanes = (0.5, 1.5, 2.5)  # x centres of the query, key and value lanes
    half_w, half_h = 0.45, 0.32

    def fill(stage: str) -> str:
        if stage in chosen:
            return _HIGHLIGHT
        return _DATA if stage in ("inputs", "result") else _PLAIN

    def box(x0: float, x1: float, y: float, text: str, stage: str, size: int = 13) -> None:
        fig.add_shape(type="rect", x0=x0, x1=x1, y0=y - half_h, y1=y + half_h,
                      line=dict(color=_LINE, width=1), fillcolor=fill(stage), layer="below")
        fig.add_annotation(x=(x0 + x1) / 2, y=y, text=text, showarrow=False,
                           font=dict(size=size, color="black"))

    def arrow(x0: float, y0: float, x1: float, y1: float, label: str, gap: float = 0.0) -> None:
        fig.add_annotation(x=x1, y=y1 + half_h + gap, ax=x0, ay=y0 - half_h, xref="x", yref="y",
                           axref="x", ayref="y", text="", showarrow=True, arrowhead=2,
                           arrowsize=1.2, arrowwidth=1.3, arrowcolor=_LINE)
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=label, showarrow=False,
                           bgcolor="white", font=dict(size=11, color="black"))

    def code(name: str) -> str:
        return f"<br><span style='font-size:10px'>{name}</span>" if show_code else ""

    # rows, top to bottom (y decreases)
    y_in, y_proj, y_split, y_att, y_cat, y_out, y_res = 7.0, 5.8, 4.6, 3.2, 2.0, 0.8, -0.4
    names = ("queries", "keys", "values")
    for x, name, W in zip(lanes, names, ("W_q", "W_k", "W_v")):
        n = name[0]
        box(x - half_w, x + half_w, y_in, name, "inputs")
        arrow(x, y_in, x, y_proj, shape_of[name])
        box(x - half_w, x + half_w, y_proj, W + code("nn.Linear"), "project")
        arrow(x, y_proj, x, y_split, shape_of[f"{n}_projected"])
        box(x - half_w, x + half_w, y_split, "split into<br>H heads" if not show_code else
            "split" + code("transpose_qkv"), "split", size=12)
        arrow(x, y_split, x, y_att, shape_of[f"{n}_heads"], gap=0.16)
    # H stacked copies suggest one attention per head
    for offset in (0.08, 0.04):
        fig.add_shape(type="rect", x0=0.05 + offset, x1=2.95 + offset, y0=y_att - half_h + 2 * offset,
                      y1=y_att + half_h + 2 * offset, line=dict(color=_LINE, width=1),
                      fillcolor=fill("attend"), layer="below")
    box(0.05, 2.95, y_att, "softmax(Q K<sup>T</sup> / √d) V  in each head"
        + (code("DotProductAttention") if show_code else
           f"<br><span style='font-size:11px'>weights {shape_of['weights']}</span>"), "attend")
    arrow(1.5, y_att, 1.5, y_cat, shape_of["heads_out"])
    box(0.55, 2.45, y_cat, "concatenate the heads" + code("transpose_output"), "concat", size=12)
    arrow(1.5, y_cat, 1.5, y_out, shape_of["concat"])
    box(0.55, 2.45, y_out, "W_o" + code("nn.Linear"), "output")
    arrow(1.5, y_out, 1.5, y_res, shape_of["output"])
    box(0.55, 2.45, y_res, "output", "result")
    axis = dict(visible=False, fixedrange=True)
    fig.update_layout(
        height=640, margin=dict(l=4, r=4, t=8, b=8), plot_bgcolor="white",
        paper_bgcolor="white", showlegend=False, dragmode=False,
        xaxis=dict(axis, range=[0, 3.1]), yaxis=dict(axis, range=[y_res - 0.45, y_in + 0.45]),
    )
    return fig
