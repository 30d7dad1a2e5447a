"""Chapter 13's judgement exercise: a design of the run that would overturn a claim, run on the
shipped results (no training) and graded: each mistake named, its family's point lost."""

from __future__ import annotations

import pytest

from mha_lib.exercises import MISTAKES, check_threat_design, grading
from mha_lib.exercises.catalogue import FAMILIES
from mha_lib.exercises.judgement import conclusion_follows, run_spec

SMALL, LARGE = "lr=0.003", "lr=0.03"
GOOD = {
    "claim": "norm", "experiment": "norm_lr",
    "variants": [f"pre-LN, no warm-up, {SMALL}", f"post-LN, no warm-up, {SMALL}",
                 f"pre-LN, no warm-up, {LARGE}", f"post-LN, no warm-up, {LARGE}"],
    "steps": 300, "lr": [0.003, 0.01, 0.03], "seeds": [0, 1, 2], "params": "equal",
    "metric": "final_loss",
    "conclusion": (f"post-LN, no warm-up, {SMALL}", "=", f"pre-LN, no warm-up, {SMALL}"),
}
KV = {  # MQA has fewer parameters than MHA: the spec must say so
    "claim": "kv_heads", "experiment": "kv_heads", "variants": ["MHA (Hkv=4)", "MQA (Hkv=1)"],
    "steps": 1000, "lr": [0.003], "seeds": [0, 1, 2], "params": "W_k and W_v shrink to D x d in MQA",
    "metric": "accuracy", "conclusion": ("MHA (Hkv=4)", "=", "MQA (Hkv=1)"),
}

WRONG = {
    ("design_seeds", "too_few"): dict(GOOD, seeds=[0, 0, 1]),
    ("design_steps", "unequal"): dict(GOOD, steps={v: 300 if "pre" in v else 200 for v in GOOD["variants"]}),
    ("design_params", "unstated"): dict(KV, params="equal"),
    ("design_lr", "single"): dict(GOOD, lr=[0.03]),
    ("design_conclusion", "beyond_spread"): dict(
        GOOD, conclusion=(f"pre-LN, no warm-up, {LARGE}", "=", f"post-LN, no warm-up, {LARGE}")),
}


def test_a_controlled_design_with_a_conclusion_that_follows_passes(capsys):
    assert check_threat_design(lambda: GOOD) and check_threat_design(lambda: KV)
    assert "all right" in capsys.readouterr().out
    assert grading.partial_credit("check_threat_design", lambda: GOOD) == grading.max_points("check_threat_design") == 5


@pytest.mark.parametrize("mistake", list(WRONG), ids=[m[0] for m in WRONG])
def test_each_mistake_is_named_and_loses_its_family(mistake, capsys):
    spec = WRONG[mistake]
    report = grading._run_checker("check_threat_design", lambda: spec)
    assert not report.passed and report.runs
    assert report.named == [MISTAKES[mistake].title]
    assert set(report.failed_families) == {FAMILIES[mistake[0]]}
    assert report.score == grading.max_points("check_threat_design") - 1


def test_a_design_that_cannot_run_gets_nothing_but_a_reason(capsys):
    missing = {k: v for k, v in GOOD.items() if k != "seeds"}
    assert not check_threat_design(lambda: missing)
    assert "spec['seeds'] is missing" in capsys.readouterr().out
    assert grading.partial_credit("check_threat_design", lambda: dict(GOOD, variants=["nope", "H=1"])) == 0

    def stub():
        raise NotImplementedError

    assert not check_threat_design(stub)
    assert "not implemented yet" in capsys.readouterr().out
    assert not check_threat_design(GOOD)  # the dict itself, not a function that returns it


def test_run_spec_reads_the_shipped_runs_and_refuses_a_run_over_budget():
    runs = run_spec(GOOD)
    assert set(runs) == {"0", "1", "2"} and all(list(per) == GOOD["variants"] for per in runs.values())
    with pytest.raises(ValueError, match="budget"):
        run_spec(dict(GOOD, steps=30000))
    with pytest.raises(ValueError, match="claim"):
        run_spec(dict(GOOD, claim="nope"))


def test_run_spec_trains_a_small_spec_that_is_not_shipped():
    spec = dict(KV, experiment="output", claim="output", variants=["learned W_o", "no W_o (identity)"],
                steps=3, seeds=[0, 1], conclusion=("learned W_o", "=", "no W_o (identity)"))
    runs = run_spec(spec)
    assert set(runs) == {"0", "1"} and runs["0"]["learned W_o"]["params"] == 10410


def test_conclusion_follows_reads_the_ranges():
    runs = {"0": {"a": {"m": 1.0}, "b": {"m": 0.5}}, "1": {"a": {"m": 0.9}, "b": {"m": 0.6}}}
    assert conclusion_follows(("a", ">", "b"), runs, "m") and not conclusion_follows(("a", "=", "b"), runs, "m")
    assert conclusion_follows(("b", ">", "a"), runs, "m", sign=-1)  # lower is better
    runs["1"]["b"]["m"] = 1.2  # the ranges overlap now
    assert conclusion_follows(("a", "=", "b"), runs, "m") and not conclusion_follows(("a", ">", "b"), runs, "m")
