"""The mask lab's pictures: a mask's matrix, a head's weights under it, the tiles tiled attention
computes; live with ipywidgets here, kernel-free on the website in
:mod:`mha_lib.viz.mask_lab_site`.

Shape legend
    L   sequence length (self-attention: Lq = Lk = L)
    b   block size of tiled attention

Keys on x, queries on y, colour-blind-safe scale (cividis).
"""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio
import torch
from plotly.subplots import make_subplots

from mha_lib._checks import check_positive_int
from mha_lib.flash import tiled_attention
from mha_lib.masks import Mask, causal, chunked, document, padding, prefix_lm, sinks, sliding_window
from mha_lib.multihead import MultiHeadAttention
from mha_lib.scores import ScoreMod, alibi, softcap

__all__ = ["compose", "lab_frame", "mask_lab", "mask_lab_figure"]

_TITLES = ("mask", "weights", "tiles")
#: Masked cells of the weights panel (no weight): a light grey under the heatmap, apart from the
#: lowest weight (cividis's dark blue) in the light and the dark theme (>= 3:1 in both).
MASKED_COLOUR = "#d9d9d9"
_TILE_TEXT = {0: "skipped", 1: "with the mask", 2: "no mask needed"}


def compose(*, causal_: bool = True, window: int = 0, num_sinks: int = 0, prefix: int = 0,
            chunk: int = 0, documents: int = 1, valid_len: int = 0, left: bool = False,
            L: int = 12) -> Mask:
    """The mask the lab's controls describe (0 switches a kind off), for one example of L positions.

    ``valid_len`` > 0 pads the sequence to L: on the right (``padding``), or on the left
    (``left``: the padding is a document of its own, so real tokens never see it).
    """
    L = check_positive_int(L, "L")
    rule = causal() if causal_ else None
    local = None
    if window:
        local = sliding_window(window)
    if chunk:
        local = chunked(chunk) if local is None else local & chunked(chunk)
    if local is not None and num_sinks:
        local = local | sinks(num_sinks)
    if local is not None:
        rule = local if rule is None else rule & local
    if prefix:  # the prefix sees itself both ways, the rest is causal (and local, if chosen)
        rule = prefix_lm(prefix) if local is None else prefix_lm(prefix) & local
    ids = torch.arange(L) * documents // L  # (L,): documents of equal length, packed
    if 0 < valid_len < L and left:
        ids = torch.where(torch.arange(L) < L - valid_len, -1, ids)  # the padding: document -1
    if documents > 1 or (0 < valid_len < L and left):
        rule = document(ids[None]) if rule is None else rule & document(ids[None])
    if 0 < valid_len < L and not left:
        rule = padding([valid_len]) if rule is None else rule & padding([valid_len])
    return rule if rule is not None else padding([L])  # nothing hidden


def _panels(mask: Mask, L: int, block_size: int, seed: int = 0, score_mod: ScoreMod | None = None):
    """The three matrices of the lab: keep (L, L), weights of head 0 (L, L) (of a layer of 2
    heads with ``score_mod``), tile states."""
    keep = mask.dense(1, L, L)[0]  # (L, L)
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0, score_mod=score_mod).eval()
    x = torch.randn(1, L, 8)
    with torch.no_grad():
        _, weights = mha(x, x, x, mask=mask, need_weights=True)  # (1, H, L, L)
        _, tiles = tiled_attention(x, x, x, mask=mask, block_size=block_size, return_tiles=True)
    return keep.float(), weights[0, 0], tiles


def _traces(mask: Mask, L: int, block_size: int, score_mod: ScoreMod | None = None) -> list[go.Heatmap]:
    keep, weights, tiles = _panels(mask, L, block_size, score_mod=score_mod)
    states = tiles.states.float()  # (nQ, nK)
    text = [[_TILE_TEXT[int(s)] for s in row] for row in tiles.states.tolist()]
    ticks = list(range(L))
    return [
        go.Heatmap(z=keep.tolist(), x=ticks, y=ticks, colorscale="cividis", zmin=0, zmax=1,
                   showscale=False, hovertemplate="query %{y}, key %{x}: %{z}<extra></extra>"),
        go.Heatmap(z=[[w if k else None for w, k in zip(row, kept)]  # masked: no weight, None
                      for row, kept in zip(weights.tolist(), keep.bool().tolist())], x=ticks, y=ticks,
                   colorscale="cividis", zmin=0, zmax=1, showscale=False, hoverongaps=False,
                   hovertemplate="query %{y}, key %{x}: %{z:.2f}<extra></extra>"),
        go.Heatmap(z=states.tolist(), text=text, colorscale="cividis", zmin=0, zmax=2,
                   showscale=False, hovertemplate="tile (%{y}, %{x}): %{text}<extra></extra>"),
    ]


def lab_frame(*, narrow: bool = False) -> go.Figure:
    """The lab's empty figure: three panels side by side (``narrow``: one above the other, for a
    phone), keys on x, queries on y from the top."""
    rows, cols = (3, 1) if narrow else (1, 3)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=_TITLES, horizontal_spacing=0.1,
                        vertical_spacing=0.1)
    for n in (1, 2, 3):
        where = dict(row=n, col=1) if narrow else dict(row=1, col=n)
        fig.update_xaxes(title_text="keys" if n < 3 else "key blocks", constrain="domain", **where)
        fig.update_yaxes(title_text="queries" if n < 3 else "query blocks", autorange="reversed",
                         scaleanchor=f"x{n if n > 1 else ''}", constrain="domain", **where)
    fig.update_layout(height=1000 if narrow else 330, autosize=True,
                      margin=dict(l=40, r=10, t=40 if narrow else 60, b=40),
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)")
    return fig


def mask_lab_figure(mask: Mask, L: int = 12, *, block_size: int = 4,
                    score_mod: ScoreMod | None = None) -> go.Figure:
    """One mask seen three ways: its matrix, head 0's weights under it (of a layer of 2 heads
    with ``score_mod``, e.g. ``alibi(2)``), and the tiles of ``block_size`` x ``block_size``
    that tiled attention skips, masks or computes without a mask."""
    check_positive_int(L, "L")
    fig = lab_frame()
    traces = _traces(mask, L, check_positive_int(block_size, "block_size"), score_mod)
    for col, trace in enumerate(traces, 1):
        fig.add_trace(trace, row=1, col=col)
    title = repr(mask) if score_mod is None else f"{mask!r}, score_mod={score_mod!r}"
    title = title if len(title) < 80 else None
    n = len(traces[2].z)  # tiles per side
    fig.update_layout(title_text=title, shapes=[dict(  # under the masked (empty) cells
        type="rect", xref="x2", yref="y2", x0=-0.5, x1=L - 0.5, y0=-0.5, y1=L - 0.5, layer="below",
        fillcolor=MASKED_COLOUR, line=dict(width=0))])
    for a, cells in (("", L), ("2", L), ("3", n)):  # the data's range, integer ticks
        for axis, ends in (("xaxis", [-0.5, cells - 0.5]), ("yaxis", [cells - 0.5, -0.5])):
            fig.layout[axis + a].update(range=ends, autorange=False, tickmode="linear", tick0=0,
                                        dtick=1 if cells <= 8 else 2 if cells <= 16 else 4)
    # a phone (mha-figures.js): the three panels one above the other, each across the screen
    narrow = lab_frame(narrow=True).to_plotly_json()["layout"]
    phone = {key: value for key, value in narrow.items()
             if key.startswith(("xaxis", "yaxis")) or key in ("annotations", "height", "margin")}
    for key in [k for k in phone if k.startswith(("xaxis", "yaxis"))]:
        phone[key] = {**fig.layout[key].to_plotly_json(), "domain": phone[key]["domain"]}
    phone["margin"] = {**phone["margin"], "t": 80 if title else 40}
    phone["title"] = {"text": title, "font": {"size": 14}, "x": 0, "xanchor": "left"} if title else None
    fig.update_layout(meta={"narrow": phone})
    return fig


def mask_lab(L: int = 12, block_size: int = 4):
    """The live lab (ipywidgets): compose a mask with the controls, add a score modification
    (ALiBi, soft-capping at 2, both), see the three panels (head 0 of 2)."""
    import ipywidgets as widgets

    L = check_positive_int(L, "L")
    controls = dict(
        causal_=widgets.Checkbox(value=True, description="causal"),
        window=widgets.IntSlider(value=0, min=0, max=L, description="window"),
        num_sinks=widgets.IntSlider(value=0, min=0, max=4, description="sinks"),
        chunk=widgets.IntSlider(value=0, min=0, max=L, description="chunk"),
        prefix=widgets.IntSlider(value=0, min=0, max=L, description="prefix"),
        documents=widgets.IntSlider(value=1, min=1, max=4, description="documents"),
        valid_len=widgets.IntSlider(value=0, min=0, max=L, description="real tokens"),
        left=widgets.Checkbox(value=False, description="left padding"),
    )
    mods = {"no score modification": None, "ALiBi": alibi(2), "soft-capping 2": softcap(2.0),
            "ALiBi >> soft-capping 2": alibi(2) >> softcap(2.0)}
    modification = widgets.Dropdown(options=list(mods), description="scores")
    out = widgets.Output()

    def redraw(change=None):
        # The figure goes into the widget's state, not through a captured display: captured
        # output (``with out:``) can leave a notebook runner waiting for its cell to end.
        values = {name: control.value for name, control in controls.items()}
        figure = mask_lab_figure(compose(L=L, **values), L, block_size=block_size,
                                 score_mod=mods[modification.value])
        bundle = pio.renderers["plotly_mimetype"].to_mimebundle(figure.to_dict())
        out.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)

    for control in [*controls.values(), modification]:
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox(list(controls.values())[:4]),
                         widgets.HBox([*list(controls.values())[4:], modification]), out])
