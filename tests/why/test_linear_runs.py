"""What softmax buys (issue 48): the story model with linear attention, DeltaNet, Gated DeltaNet
and a hybrid keeps the contract of ``why.run``, its parameters differ only by the new layers'
own, the state's bytes do not grow with the story, and the accuracy by distance adds up."""

import math

import pytest

from mha_lib.linear import GatedDeltaNet
from mha_lib.lm import PRETRAINED_PATH, StoryLM
from mha_lib.lm_eval import evaluate, held_out_stories
from mha_lib.stories import RELATIONS
from mha_lib.why import EXPERIMENTS, STATE, THREATS, load_results, run
from mha_lib.why.linear_runs import HYBRID_PATH, LINEAR_VARIANTS, _accuracy_by_distance, _measured, load_hybrid
from mha_lib.why.modern_runs import story_config, story_run
from mha_lib.why.results import LEARNED


def test_the_experiment_keeps_the_contract_and_names_its_parameters():
    assert STATE == ("linear",) and THREATS["linear"] == ("linear_deep",)
    runs = run("linear", 0, steps=2)
    assert list(runs) == list(EXPERIMENTS["linear"].variants) == list(LINEAR_VARIANTS)
    for metrics in runs.values():
        assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
        assert {"loss", "cpu_seconds", "decode_bytes_per_story", *RELATIONS} <= set(metrics)
        assert {"recall 16-31", "recall 32-79", "possession 1-15", "antecedent 1-15"} <= set(metrics)
    params = {name: m["params"] for name, m in runs.items()}
    D, H = 64, 4
    assert params["linear"] == params["softmax"]  # the same four projections a layer
    assert params["DeltaNet"] == params["softmax"] + 2 * (D * H + H)  # W_beta in both layers
    assert params["Gated DeltaNet"] == params["softmax"] + 4 * (D * H + H)  # and W_alpha
    assert params["hybrid 1:1 (GDN, softmax)"] == params["softmax"] + 2 * (D * H + H)
    # decoding: the KV cache grows with the story, a state does not (float32 bytes)
    kv_per_token = 2 * 2 * D * 4  # K and V, two layers
    assert runs["softmax"]["decode_bytes_at_1000"] == 1000 * kv_per_token
    for name in ("linear", "DeltaNet", "Gated DeltaNet"):
        assert runs[name]["decode_bytes_at_1000"] == runs[name]["decode_bytes_per_story"] < 10_000
    assert runs["hybrid 1:1 (GDN, softmax)"]["decode_bytes_at_1000"] == 1000 * kv_per_token / 2 + H * 16 * 16 * 4


def test_the_accuracy_by_distance_adds_up_to_the_accuracy_at_the_links():
    model = story_run(story_config(0, 2))[0].model
    stories = held_out_stories(64)
    overall = evaluate(model, stories)
    for relation, counts in _accuracy_by_distance(model, stories).items():
        right, links = (sum(c[k] for c in counts.values()) for k in (0, 1))
        assert links == sum(len(s.links.get(relation, ())) for s in stories)
        assert math.isclose(right / links, overall[relation])


def test_every_declared_experiment_ships_and_the_linear_runs_hold_eight_seeds_from_one_machine():
    results = load_results()["experiments"]
    assert set(EXPERIMENTS) <= set(results)
    for name in ("linear", "linear_deep"):
        assert sorted(results[name]["seeds"], key=int) == [str(s) for s in range(8)]
        assert sorted(results[name]["cpu_seconds"], key=int) == [str(s) for s in range(8)]


def test_at_600_steps_linear_attention_misses_the_recall_links_that_softmax_and_the_delta_rule_learn():
    # seed 1 at 600 steps (this machine: recall 1.0 softmax, 0.25 linear attention, 1.0 DeltaNet;
    # loss 1.163, 1.266, 1.166): the direction, with margins. Linear attention is slower, not
    # unable: at 1500 steps seed 0 learned recall at step 700. (The hybrid's recall is checked on
    # the shipped seeds: a fourth training here would cost both test passes another minute.)
    config = story_config(1, 600)
    runs = {name: _measured(config, LINEAR_VARIANTS[name]).metrics
            for name in ("softmax", "linear", "DeltaNet")}
    for name in ("softmax", "DeltaNet"):
        assert runs[name]["recall"] > 0.9 and runs[name]["recall 32-79"] > 0.9
    assert runs["linear"]["recall"] < LEARNED
    assert runs["linear"]["loss"] > max(runs[name]["loss"] for name in ("softmax", "DeltaNet")) + 0.05
    assert runs["DeltaNet"]["decode_bytes_per_story"] < runs["softmax"]["decode_bytes_per_story"] / 5


def test_the_shipped_hybrid_is_its_seeds_run_of_the_experiment(tmp_path):
    # chapter 12d's explorer runs it (issue 48): Gated DeltaNet below softmax, the run of one seed
    model, tokenizer = load_hybrid()
    assert isinstance(model, StoryLM) and not model.training and tokenizer.vocab_size == model.config.vocab_size
    assert isinstance(model.blocks[0].attention, GatedDeltaNet)
    assert not isinstance(model.blocks[1].attention, GatedDeltaNet)
    shipped = load_results()["experiments"]["linear"]["seeds"][str(model.config.seed)]["hybrid 1:1 (GDN, softmax)"]
    scores = evaluate(model, held_out_stories(256))
    assert all(abs(scores[r] - shipped["metrics"][r]) < 1e-3 for r in ("loss", *RELATIONS)), (scores, shipped)
    assert HYBRID_PATH.stat().st_size < 600_000
    with pytest.raises(ValueError, match="path"):
        load_hybrid(PRETRAINED_PATH)  # the softmax model's checkpoint: another kind
    with pytest.raises(FileNotFoundError):
        load_hybrid(tmp_path / "none.pt")
