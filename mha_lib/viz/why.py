"""Figures of the "why" experiments (:mod:`mha_lib.why`), drawn from the shipped results.

Every figure works without a kernel: where the reader picks a seed, the figure holds the
traces of every seed and a plotly slider (``layout.sliders``) shows one seed's; clicking a
legend entry hides or shows a variant. Nothing is retrained: the numbers come from
:func:`mha_lib.why.load_results` (or a results dict of the same form).

* :func:`metric_figure`        one metric by variant: a dot per seed and the mean
* :func:`split_weights_figure` the single head's weights beside a head pair's (heads experiment)
* :func:`curves_figure`        training curves of every variant, a slider over seeds
* :func:`scale_figure`         the softmax at initialisation with and without 1/sqrt(d)
* :func:`positions_figure`     accuracy at the training length and at twice it
* :func:`kv_figure`            loss against the KV cache's bytes per token
* :func:`length_figure`        RoPE past its training length: accuracy by copy offset (rope_length)

Attention maps put keys on x and queries on y (query 0 on top), in viridis; lines use the
Okabe-Ito palette with a dash per line; no figure sets a width (each fits a 390 px phone).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha_lib.why import EXPERIMENTS, load_results

__all__ = ["curves_figure", "kv_figure", "length_figure", "metric_figure", "positions_figure",
           "scale_figure", "split_weights_figure"]

_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
_MARGIN = dict(l=60, r=20, t=60, b=60)
_LABELS = {"accuracy": "held-out accuracy", "final_loss": "loss, last 10% of steps (nats)",
           "learned_at": "step at which it is learned", "accuracy_1x": "accuracy at L = 16",
           "accuracy_2x": "accuracy at L = 32", "mean_loss": "mean loss over the run (nats)"}


def _experiment_runs(name: object, results: dict | None) -> tuple[dict, list[str]]:
    """(``{seed: {variant: {"metrics", "curve", "extra"}}}``, the seeds) of experiment ``name``."""
    if not isinstance(name, str) or name not in EXPERIMENTS:
        raise ValueError(f"name must be one of {sorted(EXPERIMENTS)}, got {name!r}")
    results = load_results() if results is None else results
    if not isinstance(results, dict) or name not in results.get("experiments", {}):
        raise ValueError(f"results must hold the runs of {name!r} (like mha_lib.why.load_results())")
    runs = results["experiments"][name]["seeds"]
    return runs, sorted(runs, key=int)


def _metric(runs: dict, seeds: list[str], variant: str, metric: str) -> list[float]:
    try:
        return [runs[s][variant]["metrics"][metric] for s in seeds]
    except KeyError:
        raise ValueError(f"metric must be measured for every variant, got {metric!r}") from None


def _describe(fig: go.Figure, text: str) -> go.Figure:
    fig.update_layout(meta={"description": text})
    return fig


def metric_figure(name: str, metric: str | None = None, results: dict | None = None) -> go.Figure:
    """One metric (default: the experiment's own) by variant: a dot per seed, a bar at the mean."""
    runs, seeds = _experiment_runs(name, results)
    experiment = EXPERIMENTS[name]
    metric = experiment.metric if metric is None else metric
    variants = list(experiment.variants)
    means = [sum(v) / len(v) for v in (_metric(runs, seeds, variant, metric) for variant in variants)]
    fig = go.Figure(go.Bar(x=variants, y=means, name="mean over seeds", marker_color="#BBBBBB",
                           hovertemplate="%{x}: mean %{y:.3f}<extra></extra>"))
    for i, seed in enumerate(seeds):
        fig.add_scatter(x=variants, y=[runs[seed][v]["metrics"][metric] for v in variants], mode="markers",
                        name=f"seed {seed}", marker=dict(color=_COLOURS[i % 7], size=10,
                                                         symbol=("circle", "diamond", "square", "x")[i % 4]),
                        hovertemplate=f"seed {seed}, " + "%{x}: %{y:.3f}<extra></extra>")
    label = _LABELS.get(metric, metric)
    fig.update_layout(title=experiment.question, height=360, margin=_MARGIN, xaxis_title="variant",
                      yaxis_title=label, legend=dict(orientation="h", y=-0.3))
    if "accuracy" in metric:
        fig.update_yaxes(range=[0, 1.05])
    return _describe(fig, f"{label} of each variant of the {name} experiment: one marker per seed "
                          f"({len(seeds)} seeds), a grey bar at the mean.")


def _seed_slider(fig: go.Figure, seeds: list[str], traces_per_seed: int) -> None:
    """Show one seed's traces at a time; a slider (no kernel needed) picks the seed."""
    total = len(seeds) * traces_per_seed
    for i, trace in enumerate(fig.data):
        trace.visible = i < traces_per_seed
    steps = [dict(method="update", label=seed,
                  args=[{"visible": [j // traces_per_seed == k for j in range(total)]}])
             for k, seed in enumerate(seeds)]
    fig.update_layout(sliders=[dict(active=0, currentvalue=dict(prefix="seed "), pad=dict(t=50),
                                    steps=steps)])


def split_weights_figure(seed: int | str = 0, results: dict | None = None) -> go.Figure:
    """The single head's weights on one example beside the two heads of H = 2 (heads experiment).

    Keys on x, queries on y; a slider switches the seed. The task needs key i-1 and the last
    key for every query i: one head blends them; of a pair of heads, each leans to one.
    """
    runs, seeds = _experiment_runs("heads", results)
    if str(seed) not in seeds:
        raise ValueError(f"seed must be one of the shipped seeds {seeds}, got {seed!r}")
    order = [str(seed)] + [s for s in seeds if s != str(seed)]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("H = 1", "H = 2: h = 0", "H = 2: h = 1"),
                        horizontal_spacing=0.06, shared_yaxes=True)
    for s in order:
        one, two = runs[s]["H=1"]["extra"], runs[s]["H=2"]["extra"]
        labels = [f"{i}:{t}" for i, t in enumerate(one["tokens"])]
        for col, z in enumerate((one["weights"][0], *two["weights"][:2]), start=1):
            fig.add_heatmap(z=z, x=labels, y=labels, zmin=0, zmax=1, colorscale="Viridis", row=1, col=col,
                            showscale=col == 3, colorbar=dict(title=dict(text="weight", side="right"), thickness=10),
                            hovertemplate="query %{y}, key %{x}: %{z:.2f}<extra></extra>")
    fig.update_yaxes(autorange="reversed", title_text="query (position:digit)", col=1)
    fig.update_xaxes(title_text="key", tickangle=-90, tickfont=dict(size=9))
    fig.update_yaxes(tickfont=dict(size=9))
    fig.update_annotations(font_size=12)  # the panel titles: side by side on a 390 px phone
    _seed_slider(fig, order, 3)
    fig.update_layout(height=400, margin=dict(l=70, r=10, t=50, b=60))
    return _describe(fig, "Attention weights on one held-out example, keys on x and queries on y: "
                          "the single head spreads its weight over the previous and the last digit; "
                          "of two heads, each leans to one of them.")


def curves_figure(name: str, results: dict | None = None, *, log_y: bool = False) -> go.Figure:
    """The training loss of every variant (a slider picks the seed; the legend hides variants)."""
    runs, seeds = _experiment_runs(name, results)
    experiment = EXPERIMENTS[name]
    steps = experiment.steps
    fig = go.Figure()
    for seed in seeds:
        for i, variant in enumerate(experiment.variants):
            curve = runs[seed][variant]["curve"]
            x = [round((k + 0.5) * steps / len(curve)) for k in range(len(curve))]
            fig.add_scatter(x=x, y=curve, name=variant, mode="lines", legendgroup=variant,
                            line=dict(color=_COLOURS[i % 7], dash=_DASHES[i % 5]),
                            hovertemplate=f"{variant}, " + "step %{x}: %{y:.3f}<extra></extra>")
    _seed_slider(fig, seeds, len(experiment.variants))
    fig.update_layout(title="Training loss", height=440, margin=_MARGIN, xaxis_title="training step",
                      yaxis=dict(title="training loss (nats)", type="log" if log_y else "linear"),
                      legend=dict(orientation="h", y=-0.25, yanchor="top"))
    return _describe(fig, f"Training loss of every variant of the {name} experiment against the step, "
                          "one seed at a time (a slider picks it).")


def scale_figure(results: dict | None = None) -> go.Figure:
    """The softmax at initialisation with and without 1/sqrt(d), a dot per seed: its entropy
    (nats), its largest weight, and the norm of its Jacobian (the gradient it passes on)."""
    runs, seeds = _experiment_runs("scale", results)
    panels = (("entropy_init", "entropy<br>(nats)"), ("max_weight_init", "largest<br>weight"),
              ("softmax_gradient_init", "softmax<br>gradient"))  # two lines: side by side on a phone
    fig = make_subplots(rows=1, cols=3, subplot_titles=[t for _, t in panels], horizontal_spacing=0.12)
    variants = EXPERIMENTS["scale"].variants
    for col, (metric, _) in enumerate(panels, start=1):
        for k, seed in enumerate(seeds):
            fig.add_scatter(x=list(variants), y=[runs[seed][v]["metrics"][metric] for v in variants],
                            mode="markers", marker=dict(color=_COLOURS[k % 7], size=9), name=f"seed {seed}",
                            legendgroup=seed, showlegend=col == 1, row=1, col=col,
                            hovertemplate=f"seed {seed}, " + "%{x}: %{y:.3f}<extra></extra>")
        fig.update_yaxes(rangemode="tozero", row=1, col=col)
        fig.update_xaxes(range=[-0.7, 1.7], tickvals=list(variants), ticktext=["1/√d", "none"],
                         row=1, col=col)  # short labels, clear of the y ticks, on a phone too
    fig.update_annotations(font_size=12)
    fig.update_layout(title="At initialisation, d = 128", height=400, margin={**_MARGIN, "t": 100},
                      legend=dict(orientation="h", y=-0.25))
    return _describe(fig, "The softmax of a freshly initialised head with d = 128, with and without "
                          "dividing the scores by sqrt(d): its entropy, its largest weight and its "
                          "gradient, one marker per seed.")


def positions_figure(results: dict | None = None) -> go.Figure:
    """Accuracy of each position scheme at the training length and at twice it (mean over seeds,
    the range over seeds as an error bar)."""
    runs, seeds = _experiment_runs("positions", results)
    variants = list(EXPERIMENTS["positions"].variants)
    fig = go.Figure()
    for i, (metric, label) in enumerate((("accuracy_1x", "L = 16 (training)"), ("accuracy_2x", "L = 32"))):
        values = [_metric(runs, seeds, v, metric) for v in variants]
        means = [sum(v) / len(v) for v in values]
        fig.add_bar(x=variants, y=means, name=label, marker_color=_COLOURS[i],
                    error_y=dict(type="data", symmetric=False, array=[max(v) - m for v, m in zip(values, means)],
                                 arrayminus=[m - min(v) for v, m in zip(values, means)]),
                    hovertemplate=f"{label}, " + "%{x}: %{y:.3f}<extra></extra>")
    fig.update_layout(title="Predict the token two places back", barmode="group", height=380,
                      margin=_MARGIN, xaxis_title="positions", yaxis=dict(title="held-out accuracy",
                                                                          range=[0, 1.05]),
                      legend=dict(orientation="h", y=-0.3))
    return _describe(fig, "Accuracy of a two-layer decoder on the two-back task with each kind of "
                          "positions, at the training length 16 and at length 32; error bars span the seeds.")


def kv_figure(results: dict | None = None) -> go.Figure:
    """The step at which each variant learns the task against the KV cache's bytes per token:
    a marker per seed."""
    runs, seeds = _experiment_runs("kv_heads", results)
    variants = EXPERIMENTS["kv_heads"].variants
    fig = go.Figure()
    for i, variant in enumerate(variants):
        steps = _metric(runs, seeds, variant, "learned_at")
        size = runs[seeds[0]][variant]["metrics"]["cache_bytes"]
        fig.add_scatter(x=[size] * len(seeds), y=steps, mode="markers", name=variant,
                        marker=dict(color=_COLOURS[i], size=10, symbol=("circle", "diamond", "square")[i % 3]),
                        text=[f"seed {s}" for s in seeds],
                        hovertemplate=f"{variant}, " + "%{text}: %{x} bytes, learned at step %{y}<extra></extra>")
    fig.update_layout(title="What sharing keys and values costs", height=380, margin=_MARGIN,
                      xaxis=dict(title="KV cache per token and layer (bytes, float32)", type="log",
                                 tickvals=[64, 128, 256]),
                      yaxis=dict(title=_LABELS["learned_at"], rangemode="tozero"),
                      legend=dict(orientation="h", y=-0.3))
    return _describe(fig, "The training step at which the model learns the task (loss below 0.1) "
                          "against the bytes the KV cache holds per token, for 4, 2 and 1 "
                          "key/value heads; a marker per seed.")


def length_figure(results: dict | None = None) -> go.Figure:
    """Accuracy by copy offset n at L' = 32 and 64 for every variant of ``rope_length`` (a slider
    picks the seed; the legend hides variants); the shaded band is the trained offsets 4-7."""
    runs, seeds = _experiment_runs("rope_length", results)
    variants = EXPERIMENTS["rope_length"].variants
    lengths = list(runs[seeds[0]][variants[0]]["extra"]["by_offset"])
    fig = make_subplots(rows=len(lengths), cols=1, vertical_spacing=0.12,
                        subplot_titles=[f"run at L' = {L} (trained at 16)" for L in lengths])
    for seed in seeds:
        for row, L in enumerate(lengths, start=1):
            for i, variant in enumerate(variants):
                y = runs[seed][variant]["extra"]["by_offset"][L]
                fig.add_scatter(x=list(range(4, 4 + len(y))), y=y, mode="lines+markers", name=variant,
                                legendgroup=variant, showlegend=row == 1, row=row, col=1,
                                line=dict(color=(*_COLOURS, "#882255")[i % 8], dash=_DASHES[i % 5]),
                                marker=dict(size=4),
                                hovertemplate=f"{variant}, L' = {L}, " + "n = %{x}: %{y:.2f}<extra></extra>")
    _seed_slider(fig, seeds, len(lengths) * len(variants))
    for row in range(1, len(lengths) + 1):
        fig.add_vrect(x0=3.5, x1=7.5, fillcolor="#BBBBBB", opacity=0.3, line_width=0, row=row, col=1)
        fig.update_yaxes(title_text="accuracy", range=[0, 1.05], row=row, col=1)
    fig.update_xaxes(title_text="copy offset n (tokens back)", row=len(lengths), col=1)
    fig.update_annotations(font_size=12)
    # the legend above the plots: below them it ran into the seed slider
    fig.update_layout(title=dict(text="Copying past the training length", y=0.97, yanchor="top"),
                      height=740, margin={**_MARGIN, "t": 140},
                      legend=dict(orientation="h", x=0, y=1.06, yanchor="bottom"))
    return _describe(fig, "Accuracy of copying n tokens back at lengths 32 and 64 for a two-layer "
                          "model trained at length 16 on n = 4 to 7 (the shaded band), for each "
                          "variant: RoPE as trained, with position interpolation, NTK-aware "
                          "scaling or YaRN (no training), with a short fine-tune with and without "
                          "interpolation, the causal mask alone, and ALiBi; one seed at a time (a "
                          "slider picks it).")
