"""Each experiment of mha_lib.why rerun at reduced steps: the direction of its claim holds here.

Short runs, so that the whole of tests/why stays within about a minute and a half of CPU; the margins are
those of a short run, the shipped results (test_why_contract.py) check the full claims.
"""

from mha_lib.why import run


def test_heads_one_head_blends_where_two_look_up():
    runs = run("heads", 0, steps=600)  # (at 300 steps no H has learned it yet)
    one, two = runs["H=1"], runs["H=2"]
    assert two["accuracy"] > one["accuracy"] + 0.05
    assert max(one["previous_weight"], one["last_weight"]) < min(two["previous_weight"], two["last_weight"])


def test_scale_without_it_the_softmax_starts_saturated():
    runs = run("scale", 0, steps=40)
    scaled, raw = runs["1/sqrt(d)"], runs["no scale"]
    assert raw["entropy_init"] < scaled["entropy_init"] / 2
    assert raw["max_weight_init"] > scaled["max_weight_init"] + 0.3
    assert raw["softmax_gradient_init"] < scaled["softmax_gradient_init"]


def test_positions_rotary_carries_over_to_twice_the_length():
    runs = run("positions", 0, steps=250)
    assert runs["causal"]["accuracy_1x"] > runs["none"]["accuracy_1x"]
    assert runs["rotary"]["accuracy_2x"] > runs["learned"]["accuracy_2x"]
    assert runs["rotary"]["accuracy_1x"] > runs["none"]["accuracy_1x"] + 0.3


def test_norm_post_ln_trains_worse_at_a_high_learning_rate():
    runs = run("norm", 0, steps=80)
    pre = min(runs["pre-LN, warm-up"]["mean_loss"], runs["pre-LN, no warm-up"]["mean_loss"])
    post = min(runs["post-LN, warm-up"]["mean_loss"], runs["post-LN, no warm-up"]["mean_loss"])
    assert post > pre


def test_kv_heads_fewer_key_value_heads_learn_the_task_too():
    runs = run("kv_heads", 0, steps=800)  # (each run decays its learning rate over its steps)
    variants = ("MHA (Hkv=4)", "GQA (Hkv=2)", "MQA (Hkv=1)")
    assert [runs[v]["cache_bytes"] for v in variants] == [256.0, 128.0, 64.0]
    params = [runs[v]["params"] for v in variants]
    assert params[0] > params[1] > params[2]
    assert min(runs[v]["accuracy"] for v in variants) > 0.95
