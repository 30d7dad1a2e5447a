"""The story-model experiments' seeds, reported as counts: how many seeds learned each kind of
link and when (learned_counts, seed_table, learning_figure), the runs the experiments share
(story_run), and a results file grown a seed at a time (record(add=True))."""

import json

import pytest

import mha_lib.why as why
from mha_lib.stories import RELATIONS
from mha_lib.viz.today import learning_figure
from mha_lib.why import EXPERIMENTS, TODAY, load_results
from mha_lib.why._common import Outcome
from mha_lib.why.modern_runs import reused_seconds, story_config, story_run
from mha_lib.why.results import LEARNED, learned_counts, record, seed_table

STORY = ("kv_story", "sinks", "gated", "mla", "output_story", "gated_lr", "mla_long", "linear", "linear_deep")
JUMPY = ("heads", "kv_heads", "output", "scale_t5", "norm_lr")  # digit-task runs whose outcomes jumped between seeds


@pytest.fixture(scope="module")
def results():
    return load_results()


def test_every_story_model_experiment_ships_at_least_eight_seeds_but_the_longer_run(results):
    for name in STORY:
        seeds = results["experiments"][name]["seeds"]
        assert len(seeds) >= (2 if name == "mla_long" else 8), name
        assert results["experiments"][name]["machine"]["torch_version"].startswith("2.13")


@pytest.mark.parametrize("name", JUMPY)
def test_runs_whose_outcome_jumped_between_seeds_ship_eight_from_one_machine(results, name):
    entry = results["experiments"][name]
    assert sorted(entry["seeds"], key=int) == [str(s) for s in range(8)] == sorted(entry["cpu_seconds"], key=int)
    assert entry["machine"]["torch_version"].startswith("2.13")


@pytest.mark.parametrize("name", [n for n in STORY if n != "sinks"])
def test_learned_counts_agree_with_the_accuracies_and_the_curves(results, name):
    steps = results["experiments"][name]["steps"]
    for relation in RELATIONS:
        for variant, count in learned_counts(name, relation, results).items():
            assert count["seeds"] == len(results["experiments"][name]["seeds"])
            assert count["learned"] == sum(v >= LEARNED for v in count["values"].values())
            for seed, at in count["at"].items():
                assert at is None or (0 <= at <= steps and at % 100 == 0)
                curve = results["experiments"][name]["seeds"][seed][variant]["extra"]["links"]
                assert curve["steps"][-1] == steps and len(curve[relation]) == len(curve["steps"])
                if at is not None:
                    assert curve[relation][curve["steps"].index(at)] >= LEARNED


def test_seed_table_has_a_line_per_variant_with_its_count(results):
    lines = seed_table("mla", ("loss",), ("possession",), results).splitlines()
    n = len(results["experiments"]["mla"]["seeds"])
    assert len(lines) == 1 + len(EXPERIMENTS["mla"].variants)
    for line, variant in zip(lines[1:], EXPERIMENTS["mla"].variants):
        assert line.startswith(variant) and f" of {n} seeds" in line


def test_learning_figure_draws_every_seed_of_one_variant_at_a_time(results):
    fig = learning_figure("mla", "possession", results)
    n, variants = len(results["experiments"]["mla"]["seeds"]), EXPERIMENTS["mla"].variants
    assert len(fig.data) == n * len(variants) + 1  # + the line at LEARNED
    assert [t.visible for t in fig.data[:n]] == [True] * n and not any(t.visible for t in fig.data[n:-1])
    buttons = fig.layout.updatemenus[0].buttons
    assert len(buttons) == len(variants)
    for b, (variant, count) in enumerate(learned_counts("mla", "possession", results).items()):
        assert buttons[b].label == f"{variant}: {count['learned']} of {n}"
        assert buttons[b].args[0]["visible"][b * n:(b + 1) * n] == [True] * n
    assert fig.layout.xaxis.title.text == "training step" and "description" in fig.layout.meta


def test_learning_figure_refuses_a_relation_or_an_experiment_without_curves(results):
    with pytest.raises(ValueError, match="relation"):
        learning_figure("mla", "colour", results)
    with pytest.raises(ValueError, match="name"):
        learning_figure("heads", "possession", results)


def test_the_story_experiments_share_a_run_trained_once():
    config = story_config(3, 2)
    first, cpu = story_run(config)
    before = reused_seconds()
    again, cpu_again = story_run(config)
    assert again is first and cpu_again == cpu and reused_seconds() == pytest.approx(before + cpu)
    other, _ = story_run(config, "identity W_o", lambda model: None)
    assert other is not first


def test_record_adds_a_seed_and_keeps_the_others(tmp_path, monkeypatch):
    def fake(name, seed, steps=None):
        return {v: Outcome({"params": 1.0, "loss": float(seed), "cpu_seconds": 0.5}) for v in EXPERIMENTS[name].variants}

    monkeypatch.setattr(why, "run_outcomes", fake)
    path = tmp_path / "runs.json"
    record(["output_story"], [3], path)
    record(["output_story"], [1], path, add=True)
    entry = json.loads(path.read_text())["experiments"]["output_story"]
    assert list(entry["seeds"]) == ["1", "3"] and set(entry["cpu_seconds"]) == {"1", "3"}
    record(["output_story"], [2], path)  # without add: the seeds given, alone
    assert list(json.loads(path.read_text())["experiments"]["output_story"]["seeds"]) == ["2"]


def test_today_has_its_threats():
    assert set(TODAY) <= set(EXPERIMENTS)
    assert EXPERIMENTS["gated_lr"].threatens == "gated" and EXPERIMENTS["mla_long"].threatens == "mla"
    assert EXPERIMENTS["mla_long"].steps == 2 * EXPERIMENTS["mla"].steps
