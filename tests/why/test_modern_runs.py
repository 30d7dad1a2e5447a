"""The experiments of today's attention (chapter 12c): their variants are controlled, and the
sinks experiment's direction holds on every seed."""

import pytest

from mha_lib.why.modern_runs import CACHES, gated_trial, mla_trial, sinks_trial


@pytest.mark.parametrize("seed", [0, 1])
def test_a_window_forgets_and_the_first_four_keys_bring_back_more_than_the_first_one(seed):
    runs = {name: outcome.metrics for name, outcome in sinks_trial(seed, 0).items()}
    assert list(runs) == list(CACHES)
    loss = {name: m["loss"] for name, m in runs.items()}
    assert loss["full cache"] < loss["window 8 + first 4"] < loss["window 8 + first 1"] <= loss["window 8"]
    nbytes = {name: m["cache_bytes_per_story"] for name, m in runs.items()}
    assert nbytes["window 8"] < nbytes["window 8 + first 1"] < nbytes["window 8 + first 4"] < nbytes["full cache"]
    assert runs["full cache"]["first_token_weight_max"] < 0.1  # no sink


def test_the_gated_and_latent_variants_differ_only_in_their_attention():
    gated = {name: o.metrics for name, o in gated_trial(0, 2).items()}
    assert gated["no gate"]["params"] < gated["head gate"]["params"] < gated["element gate"]["params"]
    latent = {name: o.metrics for name, o in mla_trial(0, 2).items()}
    cache = {name: m["cache_numbers_per_token"] for name, m in latent.items()}
    assert cache == {"MHA (Hkv=4)": 128, "GQA (Hkv=2)": 64, "MQA (Hkv=1)": 32, "MLA (r=32)": 32}
    assert latent["MQA (Hkv=1)"]["params"] < latent["MLA (r=32)"]["params"] < latent["MHA (Hkv=4)"]["params"]
    # the same initial weights and batches: the two plain models (no gate, MHA) are one model
    assert gated["no gate"]["loss"] == pytest.approx(latent["MHA (Hkv=4)"]["loss"], abs=1e-6)
