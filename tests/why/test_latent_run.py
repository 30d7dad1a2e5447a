"""The mla experiment of chapter 12c rerun at a fifth of its steps (a file of its own, so that
the two workers of the unit tests train it and the gated experiment side by side)."""

from mha_lib.why.modern_runs import mla_trial


def test_the_latent_variants_differ_only_in_their_keys_and_values_and_point_the_shipped_way_at_300_steps():
    latent = {name: o.metrics for name, o in mla_trial(1, 300).items()}
    cache = {name: m["cache_numbers_per_token"] for name, m in latent.items()}
    assert cache == {"MHA (Hkv=4)": 128, "GQA (Hkv=2)": 64, "MQA (Hkv=1)": 32, "MLA (r=32)": 32}
    assert latent["MQA (Hkv=1)"]["params"] < latent["MLA (r=32)"]["params"] < latent["MHA (Hkv=4)"]["params"]
    # the shipped direction: one shared key/value head and the latent of its size cost loss
    # (two key/value heads catch up only later)
    for variant in ("MQA (Hkv=1)", "MLA (r=32)"):
        assert latent[variant]["loss"] > latent["MHA (Hkv=4)"]["loss"] + 0.05
