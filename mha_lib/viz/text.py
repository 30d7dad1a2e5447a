"""Figures of the language model's chapter: the stories' true links, a head against them, ablations.

Every figure puts keys on x and queries on y (first query at the top), labels the axes with
the story's words, and uses colour-blind-safe colours (viridis for weights, Okabe-Ito for
categories). No figure sets a width, so each fits a phone screen.

Shape legend
    L   the story's length in tokens
"""

from __future__ import annotations

import math
import numbers
from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from mha_lib._checks import check_tensor
from mha_lib.stories import RELATIONS, Story
from mha_lib.viz.heatmaps import check_title

__all__ = ["ablation_figure", "head_on_links_figure", "links_figure"]

_OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
_SYMBOLS = ("square-open", "diamond-open", "circle-open")
_MARGIN = dict(l=90, r=20, t=60, b=90)
_FUTURE = "#c8c8c8"


def _check_story(story: object) -> Story:
    if not isinstance(story, Story):
        raise ValueError(f"story must be a mha_lib.stories.Story, got {type(story).__name__}")
    return story


# The plot's width on a desktop page and on a phone (mha-figures.js's general narrow layout:
# 56 + 12 px margins in a ~358 px figure), and the room a vertical tick label needs.
_WIDE_PLOT_PX = 560
_NARROW_PLOT_PX = 240
_TICK_PX = 13


def _thin(ticks: Sequence[int], plot_px: float, span: int) -> list[int]:
    """The ticks kept so that neighbours are at least ``_TICK_PX`` apart on ``plot_px`` pixels
    spanning ``span`` positions (greedy from the first)."""
    kept: list[int] = []
    for t in ticks:
        if not kept or (t - kept[-1]) * plot_px / span >= _TICK_PX:
            kept.append(t)
    return kept


def _token_axes(fig: go.Figure, tokens: Sequence[str], rows: Sequence[int], cols: Sequence[int],
                height: int, colorbar_px: float = 0) -> None:
    """Keys on x, queries on y (first at the top), each tick the word and its position; as
    many labels as fit side by side, on a desktop page and on a phone. Sets the figure's
    ``height`` and margins, from which the room for the query labels follows."""
    label = [f"{t} {k}" for k, t in enumerate(tokens)]
    rows, cols = list(rows), list(cols)
    x_span, y_span = max(cols) - min(cols) + 1, max(rows) - min(rows) + 1
    wide_cols = _thin(cols, _WIDE_PLOT_PX - colorbar_px, x_span)
    phone_cols = _thin(cols, _NARROW_PLOT_PX - colorbar_px, x_span)
    shown_rows = _thin(rows, height - _MARGIN["t"] - _MARGIN["b"], y_span)
    fig.update_xaxes(title="key (the word looked at)", tickvals=wide_cols, ticktext=[label[k] for k in wide_cols],
                     tickangle=-90, range=[min(cols) - 0.5, max(cols) + 0.5], showgrid=False, zeroline=False)
    fig.update_yaxes(title="query (predicting the next word)", tickvals=shown_rows,
                     ticktext=[label[k] for k in shown_rows], autorange="reversed", showgrid=False, zeroline=False)
    fig.update_layout(height=height, margin=_MARGIN, meta={"narrow_axes": {
        "xaxis": {"tickvals": phone_cols, "ticktext": [label[k] for k in phone_cols]},
    }})


def links_figure(story: Story, relations: Sequence[str] = RELATIONS) -> go.Figure:
    """The answer key of a story: for each link (i, j), a marker at query ``i - 1``, key ``j``.

    The query ``i - 1`` is where the model predicts token ``i``; a head that does the
    relation's work puts its weight on the marked key. One colour and symbol per relation;
    the hover text says which word each link fixes.
    """
    story = _check_story(story)
    unknown = [r for r in relations if r not in RELATIONS]
    if isinstance(relations, str) or unknown:
        raise ValueError(f"relations must be a list of names from {RELATIONS}, got {relations!r}")
    fig = go.Figure()
    tokens = story.tokens
    for k, relation in enumerate(relations):
        pairs = story.links.get(relation, [])
        fig.add_scatter(
            x=[j for _, j in pairs], y=[i - 1 for i, _ in pairs], mode="markers", name=relation,
            marker=dict(size=11, color=_OKABE_ITO[k % 6], symbol=_SYMBOLS[k % 3], line=dict(width=2)),
            hovertext=[f"{relation}: '{tokens[i]}' (token {i}) is fixed by '{tokens[j]}' (token {j})"
                       for i, j in pairs], hoverinfo="text",
        )
    rows = sorted({i - 1 for r in relations for i, _ in story.links.get(r, [])})
    cols = sorted({j for r in relations for _, j in story.links.get(r, [])})
    fig.update_layout(title="Where the model must look: the story's links", height=420, margin=_MARGIN,
                      legend=dict(orientation="h", y=1.08, x=0))
    if rows:
        _token_axes(fig, tokens, rows, cols, height=fig.layout.height)
    return fig


def head_on_links_figure(weights: torch.Tensor, story: Story, relation: str, *, offset: int = 0,
                         title: str | None = None) -> go.Figure:
    """One head's attention weights over a story, with the relation's true keys outlined.

    Shapes:
        weights: (L, L), the head's weights for the story (query rows, key columns).

    Args:
        weights: e.g. ``model(ids, need_weights=True)[1][0, layer, head]``.
        story: the story the weights were computed on.
        relation: whose links to outline: a square at query ``i - 1``, key ``j + offset``.
        offset: 0 (the head reads key j) or 1 (key j + 1).
        title: the figure's title.
    """
    story = _check_story(story)
    L = len(story.tokens)
    if not isinstance(weights, torch.Tensor) or weights.shape != (L, L):
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must be a (L, L) = ({L}, {L}) tensor for this story, got {got}")
    check_tensor(weights, "weights", 2)
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    if type(offset) is not int or offset not in (0, 1):
        raise ValueError(f"offset must be 0 or 1, got {offset!r}")
    check_title(title)
    z = weights.detach().double().cpu().numpy().copy()
    z[np.triu_indices(L, 1)] = np.nan  # future keys: grey gaps, never a small weight
    fig = go.Figure(go.Heatmap(z=z, x=list(range(L)), y=list(range(L)), zmin=0, zmax=1, colorscale="Viridis",
                               colorbar=dict(title=dict(text="weight", side="right")), hoverongaps=False,
                               hovertemplate="query %{y}, key %{x}: %{z:.2f}<extra></extra>"))
    pairs = [(i - 1, j + offset) for i, j in story.links.get(relation, []) if j + offset <= i - 1]
    fig.add_scatter(x=[k for _, k in pairs], y=[q for q, _ in pairs], mode="markers", name=f"{relation} links",
                    marker=dict(symbol="square-open", size=12, color=_OKABE_ITO[1], line=dict(width=3)),
                    hoverinfo="skip")
    _token_axes(fig, story.tokens, range(L), range(L), height=620, colorbar_px=70)
    fig.update_layout(title=title or f"A head and the {relation} links",
                      plot_bgcolor=_FUTURE, legend=dict(orientation="h", y=1.05, x=0))
    return fig


def ablation_figure(results: Mapping[str, Mapping[str, Sequence[float]]]) -> go.Figure:
    """Loss with and without each relation's head, at its linked words and at all other words.

    Args:
        results: from :func:`mha_lib.lm_heads.ablate`: ``{relation: {"linked": (with, without),
            "rest": (with, without)}}``.
    """
    ok = isinstance(results, Mapping) and results and all(
        isinstance(v, Mapping) and set(v) == {"linked", "rest"} and all(
            len(v[k]) == 2 and all(isinstance(x, numbers.Real) and math.isfinite(x) for x in v[k]) for k in v)
        for v in results.values())
    if not ok:
        raise ValueError(f"results must map relations to {{'linked': (with, without), 'rest': (with, without)}}, got {results!r:.80}")
    names = list(results)
    fig = go.Figure()
    for k, (part, state) in enumerate([("linked", 0), ("linked", 1), ("rest", 0), ("rest", 1)]):
        where = "its linked words" if part == "linked" else "all other words"
        fig.add_bar(x=names, y=[results[r][part][state] for r in names],
                    name=f"{where}, head {'on' if state == 0 else 'off'}",
                    marker=dict(color=_OKABE_ITO[0 if part == "linked" else 2],
                                pattern_shape="" if state == 0 else "/"))
    fig.update_layout(title="Gating off each relation's head", barmode="group", height=420, margin=_MARGIN,
                      yaxis_title="loss (nats per word)", xaxis_title="relation (its head gated off)",
                      legend=dict(orientation="h", y=-0.3))
    return fig
