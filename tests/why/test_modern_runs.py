"""The experiments of today's attention (chapter 12c): their variants are controlled, and the
sinks experiment's direction holds on every seed."""

from mha_lib.why.modern_runs import CACHES, _decode_with_caches, gated_trial, sinks_trial


def test_the_shipped_model_forgets_with_a_window_and_the_first_four_keys_bring_back_more_than_the_first_one():
    from mha_lib.lm import load_pretrained

    runs = {name: outcome.metrics for name, outcome in _decode_with_caches(load_pretrained()[0]).items()}
    assert list(runs) == list(CACHES)
    loss = {name: m["loss"] for name, m in runs.items()}
    assert loss["full cache"] < loss["window 8 + first 4"] < loss["window 8 + first 1"] <= loss["window 8"]
    nbytes = {name: m["cache_bytes_per_story"] for name, m in runs.items()}
    assert nbytes["window 8"] < nbytes["window 8 + first 1"] < nbytes["window 8 + first 4"] < nbytes["full cache"]
    assert runs["full cache"]["first_token_weight_max"] < 1.25 * runs["full cache"]["first_token_weight_even"]


def test_a_model_trained_300_steps_already_forgets_with_a_window():
    loss = {name: outcome.metrics["loss"] for name, outcome in sinks_trial(1, 300).items()}
    assert loss["full cache"] < loss["window 8 + first 4"] < loss["window 8"]


def test_the_gated_variants_differ_only_in_their_gate_and_point_the_shipped_way_at_300_steps():
    gated = {name: o.metrics for name, o in gated_trial(1, 300).items()}
    assert gated["no gate"]["params"] < gated["head gate"]["params"] < gated["element gate"]["params"]
    # the shipped direction, a fifth of the steps in: a gate costs loss
    for variant in ("head gate", "element gate"):
        assert gated[variant]["loss"] > gated["no gate"]["loss"] + 0.03


def test_the_shipped_runs_of_today_support_their_claims_as_counts_of_seeds():
    from mha_lib.why import TODAY
    from mha_lib.why.results import learned_counts, shipped_metrics

    assert TODAY == ("sinks", "gated", "mla", "rope_length")
    sinks = shipped_metrics("sinks")
    assert len(sinks) >= 8
    for runs in sinks.values():
        loss = {name: m["loss"] for name, m in runs.items()}
        gap = loss["window 8"] - loss["full cache"]
        assert gap > 0.7
        assert 0.05 < (loss["window 8"] - loss["window 8 + first 4"]) / gap < 0.45
        assert abs(loss["window 8"] - loss["window 8 + first 1"]) / gap < 0.1
        no_sink = runs["full cache"]
        assert no_sink["first_token_weight_max"] < 1.25 * no_sink["first_token_weight_even"]
    gated = learned_counts("gated", "possession")
    assert gated["no gate"]["seeds"] >= 8 and gated["no gate"]["learned"] >= 6
    assert gated["head gate"]["learned"] <= 2 and gated["element gate"]["learned"] <= 4
    for runs in shipped_metrics("gated").values():
        assert max(m["first_token_weight_max"] for m in runs.values()) < 0.15
    mla = learned_counts("mla", "possession")
    assert mla["MHA (Hkv=4)"]["seeds"] >= 8
    assert min(mla["MHA (Hkv=4)"]["learned"], mla["GQA (Hkv=2)"]["learned"]) >= 5
    assert mla["MQA (Hkv=1)"]["learned"] <= 2 and 2 <= mla["MLA (r=32)"]["learned"] <= 6
    for variant in mla:  # the loss follows the links: a seed that learned them ends lower
        for seed, accuracy in mla[variant]["values"].items():
            loss = shipped_metrics("mla")[seed][variant]["loss"]
            assert (loss < 1.04) if accuracy >= 0.5 else (loss > 1.06)
