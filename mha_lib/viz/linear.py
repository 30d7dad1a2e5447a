"""The figure of chapter 12d (linear attention and the hybrids), explorable without a kernel.

* :func:`distance_figure`  the accuracy at each relation's links by the distance between the two
  linked tokens, a dot per seed and a bar at the mean, for every variant of the ``linear`` (or
  ``linear_deep``) runs; buttons pick the relation

As in :mod:`mha_lib.viz.today`: the control is plotly's own (``layout.updatemenus`` buttons that
rewrite the traces' data, so ``_static/mha-figures.js`` can replace them by its own), the colours
are the Okabe-Ito palette with a symbol each, and no width is set (it fits a 390 px phone).
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from mha_lib.stories import RELATIONS
from mha_lib.viz.today import _COLOURS, _SYMBOLS, _below, _describe, _legend_above, _shipped

__all__ = ["distance_figure"]

_EXPERIMENTS = ("linear", "linear_deep")
_ALL = "all links"


def _bins(runs: Mapping, relation: str) -> list[str]:
    """The distance bins reported for ``relation`` by any seed and variant, nearest first
    (``"16-31"`` for the metric ``"recall 16-31"``), after ``"all links"``."""
    found = {key.split(" ", 1)[1] for per in runs.values() for metrics in per.values() for key in metrics
             if key.startswith(relation + " ") and key.split(" ", 1)[1][:1].isdigit()}
    return [_ALL] + sorted(found, key=lambda b: int(b.split("-")[0]))


def distance_figure(name: str = "linear", results: dict | None = None, *,
                    relation: str = "possession") -> go.Figure:
    """The held-out accuracy at each relation's links, over all its links and by the distance
    ``i - j`` between the linked token and its source (the bins of
    :data:`mha_lib.why.linear_runs._DISTANCES` that hold at least 20 links), for every variant of
    the experiment ``name`` ("linear" or "linear_deep"): a dot per seed and a bar at the mean.

    Buttons pick the relation (antecedent, recall, possession); it opens on ``relation``
    (possession, the links the fixed states lost). The distance bins are the categories on x,
    the variants side by side within each (a legend entry hides a variant).
    """
    if name not in _EXPERIMENTS:
        raise ValueError(f"name must be one of {_EXPERIMENTS}, got {name!r}")
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    runs, seeds, variants = _shipped(name, results)

    def view(shown: str) -> tuple[dict, dict]:
        xs, ys, texts = [], [], []
        for variant in variants:
            dots_x, dots_y, dots_text, mean_x, mean_y = [], [], [], [], []
            for b in _bins(runs, shown):
                metric = shown if b == _ALL else f"{shown} {b}"
                values = [(s, runs[s][variant][metric]) for s in seeds if metric in runs[s][variant]]
                dots_x += [b] * len(values)
                dots_y += [round(v, 5) for _, v in values]
                dots_text += [f"seed {s}" for s, _ in values]
                if values:
                    mean_x.append(b)
                    mean_y.append(round(sum(v for _, v in values) / len(values), 5))
            xs += [dots_x, mean_x]
            ys += [dots_y, mean_y]
            texts += [dots_text, [f"mean over {len(seeds)} seeds"] * len(mean_x)]
        return {"x": xs, "y": ys, "text": texts}, {"title.text": f"Accuracy at the {shown} links, by distance"}

    data, layout = view(relation)
    fig = go.Figure()
    for i, variant in enumerate(variants):
        colour = _COLOURS[i % len(_COLOURS)]
        fig.add_scatter(x=data["x"][2 * i], y=data["y"][2 * i], text=data["text"][2 * i], mode="markers",
                        name=variant, legendgroup=variant, showlegend=False, offsetgroup=variant, opacity=0.75,
                        marker=dict(color=colour, size=8, symbol=_SYMBOLS[i % len(_SYMBOLS)]),
                        hovertemplate=f"{variant}, " + "%{text}, %{x}: %{y:.3f}<extra></extra>")
        fig.add_scatter(x=data["x"][2 * i + 1], y=data["y"][2 * i + 1], text=data["text"][2 * i + 1],
                        mode="markers", name=variant, legendgroup=variant, offsetgroup=variant,
                        marker=dict(color=colour, size=18, symbol="line-ew-open", line=dict(width=3, color=colour)),
                        hovertemplate=f"{variant}, " + "%{text}, %{x}: %{y:.3f}<extra></extra>")
    buttons = [dict(label=r, method="update", args=[*view(r)]) for r in RELATIONS]
    top = _legend_above(layout["title.text"], variants)
    fig.update_layout(
        title=top["title"], legend=top["legend"], height=380 + top["top"], scattermode="group",
        margin=dict(l=70, r=20, t=top["top"], b=130),
        xaxis=dict(title="distance i - j between the linked tokens (all, then bins)", type="category"),
        yaxis=dict(title="accuracy at the links", range=[-0.04, 1.04]),
        updatemenus=[_below(dict(type="buttons", direction="right", active=RELATIONS.index(relation),
                                 buttons=buttons, showactive=True), -0.3)])
    return _describe(fig, f"The {name} experiment: the accuracy at one relation's links (buttons pick "
                          f"it: {', '.join(RELATIONS)}), over all its links and by the distance between "
                          f"the linked tokens, for each variant ({', '.join(variants)}), one dot per seed "
                          f"({len(seeds)} seeds) and a bar at the mean.")
