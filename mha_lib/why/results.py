"""The shipped runs of every experiment (the book never retrains), and the table of them.

``mha_lib/data/why_results.json`` holds, per experiment, per seed and per variant, the metrics
and the training curve (:data:`~mha_lib.why._common.CURVE_POINTS` means), and the figure data
of some variants; :func:`record` writes it (``python -m mha_lib.why --record``).
"""

from __future__ import annotations

import json
import os
import platform
import time
from importlib import resources
from pathlib import Path
from typing import Sequence

import torch

from mha_lib.why._common import spread

__all__ = ["LEARNED", "RESULTS_PATH", "learned_counts", "load_results", "record", "seed_table", "shipped_metrics",
           "summary_rows", "summary_table", "threats_table"]

RESULTS_PATH = Path(str(resources.files("mha_lib") / "data" / "why_results.json"))
"""The shipped results."""


def load_results(path: str | os.PathLike | None = None) -> dict:
    """The shipped results: ``{"experiments": {name: {"seeds": {seed: {variant: {"metrics",
    "curve", "extra"}}}, "steps": ...}}, "machine": ...}`` (seeds as strings, JSON keys)."""
    path = RESULTS_PATH if path is None else path
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a file name, got {path!r}")
    with open(path, encoding="utf-8") as f:
        results = json.load(f)
    if not isinstance(results, dict) or "experiments" not in results:
        raise ValueError(f"path {str(path)!r} holds no mha_lib.why results")
    return results


def record(names: Sequence[str], seeds: Sequence[int], path: str | os.PathLike = RESULTS_PATH, *,
           progress=None, add: bool = False) -> Path:
    """Run experiments ``names`` for every seed and write (or update) the results file.

    Each experiment's entry keeps the CPU time of each seed's run (all its variants, one thread)
    and the machine that ran it. ``add``: keep the entry's other seeds (same steps), so that a
    long series can be recorded a seed at a time; otherwise the entry holds ``seeds`` alone.

    ``progress(name, seed)`` is called before each run.
    """
    from mha_lib.why import EXPERIMENTS, run_outcomes
    from mha_lib.why.modern_runs import reused_seconds

    path = Path(path)
    results = load_results(path) if path.exists() else {"experiments": {}}
    for name in names:
        experiment = EXPERIMENTS[name]
        entry = {"steps": experiment.steps, "seeds": {}, "cpu_seconds": {}}
        kept = results["experiments"].get(name)
        if add and kept is not None and kept["steps"] == experiment.steps:
            entry = kept
        for seed in seeds:
            if progress is not None:
                progress(name, seed)
            start, reused = time.process_time(), reused_seconds()
            outcomes = run_outcomes(name, seed)
            spent = time.process_time() - start + reused_seconds() - reused  # (a shared run counts)
            entry["cpu_seconds"][str(seed)] = round(spent, 1)
            entry["seeds"][str(seed)] = {
                variant: {"metrics": {k: round(v, 6) for k, v in o.metrics.items()}, "curve": o.curve,
                          "extra": o.extra}
                for variant, o in outcomes.items()
            }
        entry["seeds"] = dict(sorted(entry["seeds"].items(), key=lambda item: int(item[0])))
        entry["cpu_seconds"] = dict(sorted(entry["cpu_seconds"].items(), key=lambda item: int(item[0])))
        entry["machine"] = _machine()
        results["experiments"][name] = entry
    results["machine"] = {"torch_version": torch.__version__, "platform": platform.machine(),
                          "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    path.write_text(json.dumps(results, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def _machine() -> dict[str, str]:
    return {"torch_version": torch.__version__, "platform": platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def summary_rows(per_seed: dict[str, dict[str, dict[str, float]]], metric: str) -> list[tuple[str, float, float, float]]:
    """``(variant, params, mean, spread)`` of ``metric`` over seeds, from ``{seed: {variant: metrics}}``."""
    seeds = list(per_seed)
    rows = []
    for variant in per_seed[seeds[0]]:
        values = [per_seed[s][variant][metric] for s in seeds]
        rows.append((variant, per_seed[seeds[0]][variant]["params"], sum(values) / len(values), spread(values)))
    return rows


def shipped_metrics(name: str, results: dict | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """``{seed: {variant: metrics}}`` of experiment ``name`` in the shipped results."""
    results = load_results() if results is None else results
    runs = results["experiments"][name]["seeds"]
    return {seed: {v: r["metrics"] for v, r in per.items()} for seed, per in runs.items()}


LEARNED = 0.5
"""A run *learned* a relation's links when its held-out accuracy at them is at least this: on the
story model the runs fall into two groups, near 0.1-0.2 and near 0.6-0.75, with next to nothing
between (a phase change during training, not a slope)."""


def learned_counts(name: str, relation: str, results: dict | None = None) -> dict[str, dict]:
    """Per variant of story-model experiment ``name``: how many seeds learned ``relation``'s links.

    Returns:
        ``{variant: {"learned": k, "seeds": n, "at": {seed: step or None}, "values": {seed: acc}}}``:
        ``k`` of the ``n`` seeds ended at an accuracy of at least :data:`LEARNED`; ``at`` is the
        first step at which each seed's accuracy (on 64 held-out stories, every 100 steps)
        reached it (None: never in the run).
    """
    results = load_results() if results is None else results
    runs = results["experiments"][name]["seeds"]
    seeds = sorted(runs, key=int)
    out = {}
    for variant in runs[seeds[0]]:
        values = {s: runs[s][variant]["metrics"][relation] for s in seeds}
        at = {s: runs[s][variant]["extra"]["learned_at"][relation] for s in seeds}
        out[variant] = {"learned": sum(v >= LEARNED for v in values.values()), "seeds": len(seeds),
                        "at": at, "values": values}
    return out


def _steps(at: dict) -> str:
    steps = sorted(step for step in at.values() if step is not None)
    if not steps:
        return ""
    return f"at step {steps[0]}" if len(set(steps)) == 1 else f"at steps {steps[0]}-{steps[-1]}"


def seed_table(name: str, metrics: Sequence[str] = ("loss",), relations: Sequence[str] = ("possession",),
               results: dict | None = None) -> str:
    """Story-model experiment ``name`` over its seeds, a line per variant: its parameters, each
    of ``metrics`` as the mean and [lowest-highest seed], and for each of ``relations`` how many
    seeds learned its links (:func:`learned_counts`) and between which steps."""
    results = load_results() if results is None else results
    runs = shipped_metrics(name, results)
    n = len(runs)
    counts = {relation: learned_counts(name, relation, results) for relation in relations}
    head = f"{'variant':<26}{'parameters':>11}" + "".join(f"{m + ': mean [range]':>27}" for m in metrics)
    head += "".join(f"  {r + ' learned':<30}" for r in relations)
    lines = [head]
    for variant in runs[next(iter(runs))]:
        values = {m: [per[variant][m] for per in runs.values()] for m in metrics}
        cells = "".join(f"{f'{sum(v) / n:.3f} [{min(v):.3f}-{max(v):.3f}]':>27}" for v in values.values())
        learned = "".join(f"  {c[variant]['learned']} of {n} seeds {_steps(c[variant]['at'])}".ljust(32)
                          for c in counts.values())
        params = int(next(iter(runs.values()))[variant]["params"])
        lines.append(f"{variant:<26}{params:>11,}{cells}{learned}".rstrip())
    return "\n".join(lines)


def summary_table(results: dict | None = None) -> str:
    """Every claim's variants, parameters and main metric (mean ± half the range over the
    seeds) as a Markdown table (the threats: :func:`threats_table`)."""
    from mha_lib.why import CLAIMS, EXPERIMENTS

    results = load_results() if results is None else results
    lines = ["| experiment | variant | parameters | metric | mean ± spread | seeds |",
             "| --- | --- | ---: | --- | ---: | ---: |"]
    for name in CLAIMS:
        experiment = EXPERIMENTS[name]
        if name not in results["experiments"]:
            continue
        runs = shipped_metrics(name, results)
        for i, (variant, params, mean, half) in enumerate(summary_rows(runs, experiment.metric)):
            first = f"`{name}`" if i == 0 else ""
            metric = experiment.metric.replace("_", " ")
            lines.append(f"| {first} | {variant} | {int(params):,} | {metric} | {mean:.3f} ± {half:.3f} | {len(runs)} |")
    return "\n".join(lines)


def threats_table(results: dict | None = None) -> str:
    """Every threat run: the claim it tests, what it changes, its steps and the CPU seconds of
    one run (all variants, one thread; the lowest and highest seed) as a Markdown table."""
    from mha_lib.why import CLAIMS, EXPERIMENTS, THREATS

    results = load_results() if results is None else results
    lines = ["| claim | threat run | what it changes | steps | CPU per run | seeds |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for claim in CLAIMS:
        for name in THREATS[claim]:
            entry = results["experiments"][name]
            cpu = list(entry["cpu_seconds"].values())
            changes = EXPERIMENTS[name].claim.removeprefix(f"(threat to {claim}) ")
            lines.append(f"| `{claim}` | `{name}` | {changes} | {entry['steps']} | "
                         f"{min(cpu):.0f}-{max(cpu):.0f} s | {len(entry['seeds'])} |")
    return "\n".join(lines)
