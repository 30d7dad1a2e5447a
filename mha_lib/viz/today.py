"""Figures of chapter 12c (today's attention on the story model), explorable without a kernel.

Every control is plotly's own (``layout.updatemenus`` buttons and dropdowns, ``layout.sliders``,
the legend), so the figures work on the static website: a control rewrites the traces' data
(``restyle``) instead of showing other traces, so the legend lists only what is drawn, and a
click on a legend entry hides or shows it.

* :func:`sink_figure`      where the weight goes: each head's weight on the first token or on
  punctuation (buttons), beside an even spread (from :func:`mha_lib.lm_sinks.sink_mass`)
* :func:`streaming_runs`   the loss at each position for every cache and window (the data of:)
* :func:`streaming_figure` decoding past the window: a slider over the window, a line per cache
* :func:`learning_figure`  when each seed learned a kind of link: its accuracy during training,
  a line per seed; a dropdown picks the variant
* :func:`cost_figure`      what each variant of the ``mla`` or ``gated`` experiment costs: a
  dropdown picks the metric; a dot per seed and the mean

Lines and markers use the Okabe-Ito palette with a dash or a symbol each; the heatmap is in
cividis; no figure sets a width (each fits a 390 px phone; ``_static/mha-figures.js`` moves the
legend above the plot there, so the controls sit below it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch
from torch import Tensor

from mha_lib._checks import check_positive_int, check_sequence, check_size
from mha_lib.lm import StoryLM
from mha_lib.lm_sinks import streaming_losses
from mha_lib.stories import RELATIONS, Story
from mha_lib.why.results import load_results, shipped_metrics

__all__ = ["cost_figure", "learning_figure", "sink_figure", "streaming_figure", "streaming_runs"]

_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "x")
_FULL = "full cache"
_CONTROL = dict(bgcolor="#f2f2f2", bordercolor="#888888", font=dict(size=12))  # dark mode inverts these


def _describe(fig: go.Figure, text: str) -> go.Figure:
    """The figure's text alternative (the page's ``aria-label``)."""
    fig.update_layout(meta={"description": text})
    return fig


def _legend_above(title: str, names: list[str], width: int = 560) -> dict:
    """Layout: ``title`` at the top, a horizontal legend below it and above the plot, and the top
    margin that holds both: ``names`` packed into rows of ``width`` px (a desktop plot's narrowest;
    about 40 px for the symbol plus 7 px a character per entry), 22 px a row below the title."""
    rows, used = 1, 0
    for name in names:
        entry = 40 + 7 * len(name)
        if used and used + entry > width:
            rows, used = rows + 1, 0
        used += entry
    return dict(title=dict(text=title, y=1, yref="container", yanchor="top", pad=dict(t=14)),
                legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"), top=56 + 22 * rows)


def _below(menu: dict, y: float) -> dict:
    """A control below the plot, clear of the x axis's title (the phone layout puts the
    legend above the plot, so below is free on every screen)."""
    return dict(menu, x=0, xanchor="left", y=y, yanchor="top", pad=dict(t=0, r=0), **_CONTROL)


# --- where the weight goes -----------------------------------------------------------------


def _mass_grid(mass: object) -> dict[str, tuple[list[list[float]], float]]:
    """``{"first" | "punctuation": ((N, H) weights as lists, the even spread)}`` of ``mass``."""
    keys = ("first", "punctuation", "first_even", "punctuation_even")
    if not isinstance(mass, Mapping) or any(k not in mass for k in keys):
        raise ValueError(f"mass must be the dict of mha_lib.lm_sinks.sink_mass (keys {keys}), got "
                         f"{type(mass).__name__} {sorted(mass) if isinstance(mass, Mapping) else ''}")
    out = {}
    for kind in ("first", "punctuation"):
        try:
            weights = torch.as_tensor(mass[kind], dtype=torch.float64)
            even = float(mass[f"{kind}_even"])
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"mass[{kind!r}] must be weights of shape (N, H), "
                             f"got {mass[kind]!r:.60}") from None
        if weights.dim() != 2 or not bool(torch.isfinite(weights).all()) or not even > 0:
            raise ValueError(f"mass[{kind!r}] must be finite weights of shape (N, H) beside an even "
                             f"spread > 0, got shape {tuple(weights.shape)} and {even}")
        rounded = [[round(w, 5) for w in row] for row in weights.tolist()]  # short JSON
        out[kind] = (rounded, round(even, 5))
    return out


def sink_figure(mass: Mapping[str, Tensor]) -> go.Figure:
    """Each head's mean weight on the first token, or on punctuation, by layer and head, beside
    what an even spread over the visible keys would put there (its own column).

    Args:
        mass: what :func:`mha_lib.lm_sinks.sink_mass` returns (weights of shape (N, H)).

    Two buttons switch between the first token and punctuation. The colour scale (cividis)
    runs from 0 to twice the even spread, so its middle is the even spread in both views.
    """
    grids = _mass_grid(mass)
    N, H = len(grids["first"][0]), len(grids["first"][0][0])
    x = [str(h) for h in range(H)] + ["even"]
    y = [str(n) for n in range(N)]
    names = {"first": "the first token", "punctuation": "punctuation"}

    def view(kind: str) -> tuple[dict, dict]:
        weights, even = grids[kind]
        z = [row + [even] for row in weights]  # (N, H + 1): the even spread beside the heads
        top = max(2 * even, max(max(row) for row in weights))
        trace = {"z": [z], "zmax": [top],
                 "colorbar.tickvals": [[0, even, top]],
                 "colorbar.ticktext": [["0", f"even {even:.3f}", f"{top:.3f}"]],
                 "hovertext": [[[f"layer {n}, head {h}: {w:.3f} on {names[kind]}, {w / even:.2f} × an "
                                 "even spread" for h, w in enumerate(row)] + [f"an even spread: {even:.3f}"]
                                for n, row in enumerate(weights)]]}
        layout = {"title.text": f"Mean weight on {names[kind]}"}
        return trace, layout

    trace, layout = view("first")
    fig = go.Figure(go.Heatmap(
        z=trace["z"][0], x=x, y=y, zmin=0, zmax=trace["zmax"][0], colorscale="Cividis",
        hovertext=trace["hovertext"][0], texttemplate="%{z:.3f}", textfont=dict(size=10),
        colorbar=dict(thickness=12,
                      tickvals=trace["colorbar.tickvals"][0], ticktext=trace["colorbar.ticktext"][0]),
        hovertemplate="%{hovertext}<extra></extra>"))
    buttons = [dict(label=label, method="update", args=[*view(kind)])
               for kind, label in (("first", "first token"), ("punctuation", "punctuation"))]
    fig.update_layout(
        title=dict(text=layout["title.text"]), height=380, margin=dict(l=60, r=20, t=60, b=110),
        shapes=[dict(type="line", x0=H - 0.5, x1=H - 0.5, y0=0, y1=1, yref="paper",
                     line=dict(color="#ffffff", width=6))],  # sets the even spread apart
        xaxis=dict(title="head h (and an even spread)", type="category"),
        yaxis=dict(title="layer", autorange="reversed", type="category"),
        updatemenus=[_below(dict(type="dropdown", direction="up", active=0, buttons=buttons,
                                 showactive=True), -0.38)])
    return _describe(fig, "The mean attention weight each head of the story model puts on the first "
                          "token (buttons: or on punctuation), layers as rows and heads as columns, "
                          "beside what an even spread over the visible keys would put there.")


# --- decoding past the window --------------------------------------------------------------


def _label(window: int | None, num_sinks: int) -> str:
    if window is None:
        return _FULL
    return f"window {window}" + (f" + first {num_sinks}" if num_sinks else "")


def streaming_runs(model: StoryLM, stories: Sequence[Story], *, length: int = 56,
                   windows: Sequence[int] = (4, 8, 16), num_sinks: Sequence[int] = (0, 1, 4)) -> dict:
    """The mean loss at each position when the model decodes ``stories`` with the full cache
    and with each window of ``windows`` alone or with the first ``num_sinks`` keys.

    Returns:
        ``{"stories": B, "positions": [1 .. length - 1], "caches": {label: {"window",
        "num_sinks", "loss": (length - 1) means over the stories, "bytes_per_story"}}}``; the
        labels: ``"full cache"``, ``"window 8"``, ``"window 8 + first 4"``...
        (:func:`mha_lib.lm_sinks.streaming_losses` checks the model, stories and length.)
    """
    windows = sorted(set(check_sequence(windows, "windows", "integers >= 1", check_positive_int)))
    num_sinks = sorted(set(check_sequence(num_sinks, "num_sinks", "integers >= 0", check_size)))
    caches = {}
    for window, sinks in [(None, 0)] + [(w, k) for w in windows for k in num_sinks]:
        losses, nbytes = streaming_losses(model, stories, length=length, window=window,
                                          num_sinks=sinks)  # (B, length - 1)
        caches[_label(window, sinks)] = {"window": window, "num_sinks": sinks,
                                         "loss": [round(v, 5) for v in losses.mean(0).tolist()],
                                         "bytes_per_story": nbytes / losses.shape[0]}
    return {"stories": len(stories), "positions": list(range(1, length)), "caches": caches}


def _check_runs(runs: object) -> tuple[list[int], list[int], dict]:
    """(windows, num_sinks, caches) of a :func:`streaming_runs` result."""
    if not isinstance(runs, Mapping) or not isinstance(runs.get("caches"), Mapping) \
            or _FULL not in runs["caches"] or "positions" not in runs:
        raise ValueError(f"runs must be what streaming_runs returns, got {type(runs).__name__}")
    caches = runs["caches"]
    windows = sorted({c["window"] for c in caches.values() if c["window"] is not None})
    sinks = sorted({c["num_sinks"] for c in caches.values() if c["window"] is not None})
    missing = [_label(w, k) for w in windows for k in sinks if _label(w, k) not in caches]
    if not windows or missing:
        raise ValueError(f"runs must hold every window with every number of first keys, missing {missing}")
    return windows, sinks, caches


def _kib(nbytes: float) -> str:
    return f"{nbytes / 1024:.3g} KiB"


def streaming_figure(runs: Mapping, window: int = 8) -> go.Figure:
    """The loss at each position with the full cache and with the window alone or with the
    first keys; a slider picks the window (``window``: the one shown first).

    Args:
        runs: what :func:`streaming_runs` returns.

    The legend names each cache with the bytes it holds per story at the end; a dotted line
    marks the last position at which the window still shows every key.
    """
    windows, sinks, caches = _check_runs(runs)
    if window not in windows:
        raise ValueError(f"window must be one of the windows of runs {windows}, got {window!r}")
    x = list(runs["positions"])

    def lines(w: int | None, k: int) -> dict:
        cache = caches[_label(w, k)]
        name = f"{_label(w, k)} · {_kib(cache['bytes_per_story'])}"
        return {"y": cache["loss"], "name": name,
                "hovertemplate": f"{name}<br>" + "position %{x}: %{y:.2f} nats<extra></extra>"}

    def step(w: int) -> tuple[dict, dict]:
        per = [lines(w, k) for k in sinks]
        marker = dict(type="line", x0=w + 0.5, x1=w + 0.5, y0=0, y1=1, yref="paper",
                      line=dict(color="#666666", dash="dot", width=1))
        note = dict(x=w + 0.5, y=1, yref="paper", yanchor="top", xanchor="left", showarrow=False,
                    text="window full", font=dict(size=11, color="#444444"))
        return ({key: [p[key] for p in per] for key in per[0]},
                {"shapes": [marker], "annotations": [note]})

    fig = go.Figure()
    full = lines(None, 0)
    fig.add_scatter(x=x, y=full["y"], name=full["name"], mode="lines", hovertemplate=full["hovertemplate"],
                    line=dict(color=_COLOURS[6], dash="solid", width=2))
    first, layout = step(window)
    for i, k in enumerate(sinks):
        fig.add_scatter(x=x, y=first["y"][i], name=first["name"][i], mode="lines",
                        hovertemplate=first["hovertemplate"][i],
                        line=dict(color=_COLOURS[i], dash=_DASHES[(i + 1) % len(_DASHES)], width=2))
    traces = list(range(1, 1 + len(sinks)))  # the slider rewrites these; the full cache stays
    steps = [dict(method="update", label=str(w), args=[*step(w), traces]) for w in windows]
    fig.update_layout(
        title=dict(text="Loss at each position, decoding past the window", y=1, yref="container",
                   yanchor="top", pad=dict(t=14)),  # the legend's rows below it
        height=480, margin=dict(l=60, r=20, t=110, b=130), **layout,
        xaxis=dict(title="position i of the predicted token"),
        yaxis=dict(title="loss of token i (nats)", rangemode="tozero"),
        legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"),
        sliders=[dict(active=windows.index(window), currentvalue=dict(prefix="window w = "),
                      steps=steps, pad=dict(t=60), len=1.0)])
    return _describe(fig, f"The mean loss of the next token at each position of {runs.get('stories')} "
                          "held-out stories, decoding with the full cache, with a sliding window "
                          "alone and with the window and the first keys; a slider picks the window "
                          f"({', '.join(map(str, windows))}); the legend gives each cache's bytes per story.")


# --- what each cache costs -----------------------------------------------------------------

_METRICS = {"loss": "held-out loss (nats)",
            **{r: f"accuracy at the {r} links" for r in RELATIONS},
            "first_token_weight_max": "largest weight on token 0<br>(a head's mean)"}
_COST = {"mla": ("What each cache costs", ("loss", *RELATIONS)),
         "mla_long": ("Twice the steps, twice the latent", ("loss", *RELATIONS)),
         "gated": ("What a gate costs", ("loss", "first_token_weight_max", *RELATIONS)),
         "gated_lr": ("A gate at other learning rates", ("loss", *RELATIONS)),
         "output_story": ("What W_o is worth", ("loss", *RELATIONS))}
_CACHED = ("mla", "mla_long")  # the experiments drawn against their cache's size


def _positions(runs: dict, name: str, variants: list[str]) -> tuple[list, list]:
    """(x of each variant, x to show in the hover): the cache's numbers per token (mla;
    variants with equal caches drawn side by side) or the variant's name (gated)."""
    if name not in _CACHED:
        return variants, variants
    first = runs[next(iter(runs))]
    sizes = [first[v]["cache_numbers_per_token"] for v in variants]
    shown = []
    for i, size in enumerate(sizes):
        same = [j for j, s in enumerate(sizes) if s == size]
        shown.append(round(size * 1.08 ** (same.index(i) - (len(same) - 1) / 2), 3))
    return shown, sizes


def _shipped(name: str, results: object) -> tuple[dict, list[str], list[str]]:
    """The runs of experiment ``name`` in ``results`` (None: the shipped file), ``{seed: {variant:
    metrics}}``, with the seeds in order and the variants in the experiment's order."""
    results = load_results() if results is None else results
    if not isinstance(results, Mapping) or name not in results.get("experiments", {}):
        raise ValueError(f"results must hold the runs of {name!r} (like mha_lib.why.load_results())")
    runs = shipped_metrics(name, results)
    seeds = sorted(runs, key=int)
    return runs, seeds, list(runs[seeds[0]])


def cost_figure(name: str, results: dict | None = None) -> go.Figure:
    """The shipped runs of experiment ``name`` (a key of ``_COST``: ``"mla"``, ``"gated"`` and
    their threats ``"mla_long"``, ``"gated_lr"``, and ``"output_story"``): a metric of each
    variant, a dot per seed and a bar at the mean; a dropdown picks the metric.

    ``mla`` and ``mla_long`` put each variant at the numbers its cache keeps per token and layer (2 H_kv d, or the
    latent's r; MQA and MLA keep 32 each and stand side by side); ``gated`` at its name.
    ``results``: like :func:`mha_lib.why.load_results` (default: the shipped file).
    """
    if name not in _COST:
        raise ValueError(f"name must be one of {sorted(_COST)}, got {name!r}")
    runs, seeds, variants = _shipped(name, results)
    title, metrics = _COST[name]
    x, sizes = _positions(runs, name, variants)

    def values(metric: str) -> dict:
        ys = []
        for v in variants:
            per_seed = [runs[s][v][metric] for s in seeds]
            ys += [per_seed, [sum(per_seed) / len(per_seed)]]
        return {"y": ys}

    def view(metric: str) -> tuple[dict, dict]:
        accuracy = metric in RELATIONS
        axis = {"yaxis.title.text": _METRICS[metric], "yaxis.range": [0, 1.05] if accuracy else None,
                "yaxis.autorange": not accuracy,
                "yaxis.rangemode": "normal" if metric == "loss" else "tozero"}  # weights from 0
        return values(metric), axis

    fig = go.Figure()
    shown = values(metrics[0])["y"]
    for i, variant in enumerate(variants):
        colour, where = _COLOURS[i % 7], f"{variant}, {sizes[i]:g} numbers" if name in _CACHED else variant
        fig.add_scatter(x=[x[i]] * len(seeds), y=shown[2 * i], mode="markers", name=variant,
                        legendgroup=variant, showlegend=False, text=[f"seed {s}" for s in seeds], opacity=0.75,
                        marker=dict(color=colour, size=9, symbol=_SYMBOLS[i % 5]),
                        hovertemplate=f"{where}, " + "%{text}: %{y:.3f}<extra></extra>")
        fig.add_scatter(x=[x[i]], y=shown[2 * i + 1], mode="markers", name=variant, legendgroup=variant,
                        marker=dict(color=colour, size=30, symbol="line-ew-open",
                                    line=dict(width=3, color=colour)),  # a bar at the mean
                        hovertemplate=f"{where}, mean over {len(seeds)} seeds: " + "%{y:.3f}<extra></extra>")
    buttons = [dict(label=_METRICS[m].split("<br>")[0].replace("held-out ", ""), method="update",
                    args=[*view(m)]) for m in metrics]
    xaxis = dict(title="variant") if name not in _CACHED else dict(
        title="numbers cached per token and layer", type="log", tickvals=sorted(set(sizes)),
        range=[math.log10(min(sizes)) - 0.15, math.log10(max(sizes)) + 0.15])  # room for side by side
    top = _legend_above(title, variants)
    fig.update_layout(
        title=top["title"], legend=top["legend"], height=370 + top["top"],
        margin=dict(l=70, r=20, t=top["top"], b=130), xaxis=xaxis, yaxis=dict(title=_METRICS[metrics[0]]),
        updatemenus=[_below(dict(type="dropdown", direction="up", active=0, buttons=buttons,
                                 showactive=True), -0.3)])
    return _describe(fig, f"The {name} experiment's variants ({', '.join(variants)}): a metric "
                          f"(a dropdown picks it: {', '.join(m.replace('_', ' ') for m in metrics)}), "
                          f"one dot per seed ({len(seeds)} seeds) and a bar at the mean.")


# --- when each seed learned a link -----------------------------------------------------------


def learning_figure(name: str, relation: str = "possession", results: dict | None = None) -> go.Figure:
    """The held-out accuracy at ``relation``'s links during training, a line per seed, for one
    variant of story-model experiment ``name`` at a time (a dropdown picks it); a dotted line at
    the accuracy that counts as learned (:data:`mha_lib.why.results.LEARNED`).

    Each line is one seed's run, read every 100 steps on 64 held-out stories; a seed that jumps
    from about 0.1 to above the line learned the links there, one that stays below never did.
    """
    from mha_lib.why.results import LEARNED, learned_counts

    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    results = load_results() if results is None else results
    entry = results.get("experiments", {}).get(name) if isinstance(results, Mapping) else None
    if entry is None or "links" not in next(iter(next(iter(entry["seeds"].values())).values()))["extra"]:
        raise ValueError(f"name must be a story-model experiment of the results (with its link curves), got {name!r}")
    seeds = sorted(entry["seeds"], key=int)
    variants = list(entry["seeds"][seeds[0]])
    counts = learned_counts(name, relation, results)
    fig = go.Figure()
    for v, variant in enumerate(variants):
        for i, seed in enumerate(seeds):
            links = entry["seeds"][seed][variant]["extra"]["links"]
            fig.add_scatter(x=links["steps"], y=links[relation], mode="lines", visible=v == 0,
                            name=f"seed {seed}", line=dict(color=_COLOURS[i % 7], dash=_DASHES[i // 7 % 5], width=2),
                            hovertemplate=f"{variant}, seed {seed}, " + "step %{x}: %{y:.2f}<extra></extra>")
    steps = entry["steps"]
    fig.add_scatter(x=[0, steps], y=[LEARNED, LEARNED], mode="lines", name="learned", showlegend=False,
                    line=dict(color="#888888", dash="dot", width=1), hoverinfo="skip")
    n = len(seeds)

    def label(variant: str) -> str:
        return f"{variant}: {counts[variant]['learned']} of {n}"

    buttons = [dict(label=label(variant), method="update",
                    args=[{"visible": [k // n == v for k in range(n * len(variants))] + [True]}])
               for v, variant in enumerate(variants)]
    top = _legend_above(f"When each seed learned the {relation} links", [f"seed {seed}" for seed in seeds])
    fig.update_layout(
        title=top["title"], legend=top["legend"], height=390 + top["top"],
        margin=dict(l=70, r=20, t=top["top"], b=140), xaxis=dict(title="training step", range=[0, steps]),
        yaxis=dict(title=f"accuracy at the {relation} links", range=[-0.04, 1.04]),  # clear of x's 0
        updatemenus=[_below(dict(type="dropdown", direction="up", active=0, buttons=buttons,
                                 showactive=True), -0.25)])
    return _describe(fig, f"The {name} experiment: the accuracy at the {relation} links during "
                          f"training, a line per seed ({n} seeds), for one variant at a time "
                          f"(a dropdown: {', '.join(label(v) for v in variants)} seeds learned them).")
