"""The judgement exercise of chapter 13: design the three-seed run that would overturn a claim.

The student's answer is a function that returns a *spec*, a plain dict:

* ``claim``       the claim to test, a name of :data:`mha_lib.why.CLAIMS` (``"norm"``)
* ``experiment``  the library's run that implements the test (a claim's or a threat's name)
* ``variants``    the variants to compare (names of that experiment's variants, at least two)
* ``steps``       one number of steps for every variant (a dict of steps per variant is a
  mistake: the variants would not be trained alike)
* ``lr``          the learning rates the run covers (a list)
* ``seeds``       the seeds (a list of integers >= 0)
* ``params``      ``"equal"``, or a sentence naming how the variants' parameters differ
* ``metric``      the metric the conclusion reads
* ``conclusion``  ``(a, ">", b)``: a is better than b; or ``(a, "=", b)``: no difference
  beyond the spread of the seeds

:func:`run_spec` runs it (the shipped runs when the spec asks for one of them, else a fresh
run within a CPU budget); :func:`check_threat_design` grades the controls and whether the
conclusion follows from the spread over the seeds, naming each mistake of
:data:`mha_lib.exercises.MISTAKES` it finds.
"""

from __future__ import annotations

from mha_lib.why import CLAIMS, EXPERIMENTS, THREATS, load_results, run
from mha_lib.why.results import shipped_metrics

from mha_lib.exercises.catalogue import MISTAKES
from mha_lib.exercises.runner import NotImplementedYet, StudentError, call_student, checker

__all__ = ["CPU_BUDGET", "check_threat_design", "conclusion_follows", "run_spec"]

CPU_BUDGET = 180.0
"""The most CPU seconds :func:`run_spec` may spend (estimated from the shipped runs' times)."""

_LR_MATTERS = ("norm",)
"""The claims whose result the runs showed to depend on the learning rate."""


def _check_spec(spec: object) -> dict:
    """The spec, checked: a ValueError naming the first field that is missing or malformed."""
    if not isinstance(spec, dict):
        raise ValueError(f"spec must be a dict, got {type(spec).__name__}")
    for key in ("claim", "experiment", "variants", "steps", "lr", "seeds", "params", "metric", "conclusion"):
        if key not in spec:
            raise ValueError(f"spec['{key}'] is missing: expected it, got the keys {sorted(spec)}")
    if spec["claim"] not in CLAIMS:
        raise ValueError(f"spec['claim'] must be one of {list(CLAIMS)}, got {spec['claim']!r}")
    runs_of_claim = (spec["claim"], *THREATS[spec["claim"]])
    if spec["experiment"] not in runs_of_claim:
        raise ValueError(f"spec['experiment'] must be a run of the claim {spec['claim']!r}, one of "
                         f"{list(runs_of_claim)}, got {spec['experiment']!r}")
    known = EXPERIMENTS[spec["experiment"]].variants
    variants = spec["variants"]
    if not isinstance(variants, (list, tuple)) or len(variants) < 2 or not set(variants) <= set(known):
        raise ValueError(f"spec['variants'] must be two or more of {list(known)}, got {variants!r}")
    seeds = spec["seeds"]
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError(f"spec['seeds'] must be a list of integers >= 0, got {seeds!r}")
    conclusion = spec["conclusion"]
    if not (isinstance(conclusion, (list, tuple)) and len(conclusion) == 3 and conclusion[1] in (">", "=")
            and conclusion[0] in variants and conclusion[2] in variants):
        raise ValueError(f"spec['conclusion'] must be (a, '>' or '=', b) with a, b in spec['variants'], got {conclusion!r}")
    return spec


def _one_steps(spec: dict) -> int:
    steps = spec["steps"]
    if isinstance(steps, dict):  # one number per variant: train the longest, the mistake is graded
        steps = max(steps.values())
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"spec['steps'] must be an integer >= 1, got {steps!r}")
    return steps


def run_spec(spec: dict, budget: float = CPU_BUDGET, results: dict | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """``{seed: {variant: metrics}}`` of the spec's run: the shipped runs when the spec asks for
    their steps and seeds, else a fresh run (every seed) if its estimated CPU time fits ``budget``.

    Raises:
        ValueError: a malformed spec, or a run estimated above ``budget`` CPU seconds.
    """
    spec = _check_spec(spec)
    name, steps = spec["experiment"], _one_steps(spec)
    results = load_results() if results is None else results
    shipped = results["experiments"].get(name, {})
    seeds = [str(s) for s in spec["seeds"]]
    if shipped.get("steps") == steps and set(seeds) <= set(shipped.get("seeds", {})):
        runs = shipped_metrics(name, results)
    else:
        per_step = max(shipped.get("cpu_seconds", {"0": 60.0}).values()) / shipped.get("steps", EXPERIMENTS[name].steps)
        estimate = per_step * steps * len(seeds)
        if estimate > budget:
            raise ValueError(f"budget: the run is estimated at {estimate:.0f} CPU seconds, expected at most "
                             f"{budget:.0f}: fewer steps, seeds or a smaller experiment")
        runs = {str(s): run(name, s, steps=steps) for s in spec["seeds"]}
    return {s: {v: runs[s][v] for v in spec["variants"]} for s in seeds}


def _better(metric: str, name: str) -> int:
    """+1 if a higher ``metric`` is better, -1 if lower is."""
    experiment = EXPERIMENTS[name]
    if metric == experiment.metric:
        return 1 if experiment.higher_is_better else -1
    return -1 if "loss" in metric or metric.endswith("_at") else 1


def conclusion_follows(conclusion: tuple, runs: dict, metric: str, sign: int = 1) -> bool:
    """Whether ``(a, '>' or '=', b)`` follows from ``{seed: {variant: metrics}}``.

    ``a > b`` follows when a beats b on every seed by more than the spread of either (their
    ranges over the seeds do not overlap); ``a = b`` when the ranges overlap. ``sign`` is -1
    for a metric where lower is better.
    """
    a, relation, b = conclusion
    values_a = [sign * per[a][metric] for per in runs.values()]
    values_b = [sign * per[b][metric] for per in runs.values()]
    apart = min(values_a) > max(values_b)
    overlap = not apart and not min(values_b) > max(values_a)
    return apart if relation == ">" else overlap


def _say(mistake: tuple[str, str], detail: str) -> str:
    entry = MISTAKES[mistake]
    return f"- {entry.title}: {detail}\n  {entry.hint}"


@checker
def check_threat_design(design) -> bool:
    """Run ``design()``'s spec and grade it: controls, seeds, learning rates, conclusion."""
    name = "check_threat_design"
    try:
        spec = _check_spec(call_student(design))
        runs = run_spec(spec)
    except NotImplementedYet:
        print(f"{name}: not implemented yet (your code raises NotImplementedError). Replace the "
              "`raise NotImplementedError` line with your spec.")
        return False
    except (StudentError, ValueError) as err:
        print(f"{name}: not yet right.\n- your design cannot run: it raised {err}")
        return False
    problems = []
    if len(set(spec["seeds"])) < 3:
        problems.append(_say(("design_seeds", "too_few"), f"{len(set(spec['seeds']))} distinct seed(s)"))
    if isinstance(spec["steps"], dict) and len(set(spec["steps"].values())) > 1:
        problems.append(_say(("design_steps", "unequal"), f"steps {spec['steps']}"))
    params = {v: next(iter(runs.values()))[v]["params"] for v in spec["variants"]}
    stated = isinstance(spec["params"], str) and spec["params"].strip().lower() not in ("", "equal")
    if len(set(params.values())) > 1 and not stated:
        problems.append(_say(("design_params", "unstated"), f"parameters {params}"))
    if spec["claim"] in _LR_MATTERS and len(set(spec["lr"])) < 2:
        problems.append(_say(("design_lr", "single"), f"learning rates {list(spec['lr'])} for the claim {spec['claim']!r}"))
    metric = spec["metric"]
    sign = _better(metric, spec["experiment"])
    if not conclusion_follows(tuple(spec["conclusion"]), runs, metric, sign):
        values = {v: [round(per[v][metric], 4) for per in runs.values()] for v in spec["variants"]}
        problems.append(_say(("design_conclusion", "beyond_spread"), f"{' '.join(spec['conclusion'])} against {values}"))
    if problems:
        print(f"{name}: not yet right.\n" + "\n".join(problems))
        return False
    print(f"{name}: all right: a controlled run over {len(set(spec['seeds']))} seeds, and the conclusion "
          "follows from its spread.")
    return True
