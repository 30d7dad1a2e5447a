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


def test_the_shipped_runs_of_today_support_their_claims_on_every_seed():
    from mha_lib.why import TODAY
    from mha_lib.why.results import shipped_metrics

    assert TODAY == ("sinks", "gated", "mla", "rope_length")
    for runs in shipped_metrics("sinks").values():
        loss = {name: m["loss"] for name, m in runs.items()}
        gap = loss["window 8"] - loss["full cache"]
        assert gap > 0.7
        assert 0.2 < (loss["window 8"] - loss["window 8 + first 4"]) / gap < 0.45
        assert (loss["window 8"] - loss["window 8 + first 1"]) / gap < 0.1
        no_sink = runs["full cache"]
        assert no_sink["first_token_weight_max"] < 1.25 * no_sink["first_token_weight_even"]
    for runs in shipped_metrics("gated").values():
        for gated in ("head gate", "element gate"):
            assert runs[gated]["loss"] > runs["no gate"]["loss"] + 0.05
            assert runs[gated]["possession"] < runs["no gate"]["possession"]
        assert max(m["first_token_weight_max"] for m in runs.values()) < 0.1
    for runs in shipped_metrics("mla").values():
        mha, gqa, mqa, mla = (runs[v]["loss"] for v in ("MHA (Hkv=4)", "GQA (Hkv=2)", "MQA (Hkv=1)", "MLA (r=32)"))
        assert abs(gqa - mha) < 0.02
        assert mqa > mha + 0.04 and mla > mha + 0.04 and mla > mqa - 0.02
