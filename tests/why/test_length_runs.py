"""rope_length (chapter 12c): RoPE past its training length, position interpolation, NoPE and
ALiBi. A rerun at half the steps keeps the directions; the shipped runs keep the claim's."""

import pytest

from mha_lib.why import EXPERIMENTS, TODAY, run
from mha_lib.why.length_runs import LENGTH_VARIANTS
from mha_lib.why.results import shipped_metrics


@pytest.fixture(scope="module")
def short_run():
    return run("rope_length", 0, steps=300)


def test_rope_length_is_one_of_todays_experiments():
    assert "rope_length" in TODAY and EXPERIMENTS["rope_length"].variants == LENGTH_VARIANTS


def test_at_half_the_steps_rope_fails_at_new_offsets_and_interpolation_moves_them(short_run):
    m = short_run
    assert list(m) == list(LENGTH_VARIANTS)
    assert len({v["params"] for v in m.values()}) == 1  # no variant adds parameters
    rotary, pi = m["rotary"], m["rotary + PI"]
    assert rotary["accuracy_16"] > 0.9 and rotary["accuracy_64_trained"] > 0.9  # length alone is fine
    assert rotary["accuracy_32_new"] < 0.3 and rotary["accuracy_64_new"] < 0.3  # new offsets are not
    assert pi["accuracy_16"] == rotary["accuracy_16"]  # (scale 1 at the training length)
    assert pi["accuracy_32_new"] > rotary["accuracy_32_new"] + 0.2
    assert pi["accuracy_32_trained"] < rotary["accuracy_32_trained"] - 0.2
    assert m["rotary + YaRN"]["accuracy_32_new"] > pi["accuracy_32_new"]  # no training either
    for tuned in ("rotary + PI + fine-tune", "rotary + fine-tune"):
        assert m[tuned]["accuracy_64_new"] > rotary["accuracy_64_new"] + 0.3
    for other in ("causal", "alibi"):
        assert m[other]["accuracy_32_new"] > rotary["accuracy_32_new"] + 0.15
        assert m[other]["accuracy_32_new"] > m[other]["accuracy_64_new"]  # falls with the offset


def test_the_shipped_runs_support_the_claim_on_every_seed():
    runs = shipped_metrics("rope_length")
    assert sorted(runs, key=int) == [str(seed) for seed in range(8)]
    for m in runs.values():
        rotary, pi, ntk, yarn = (m[v] for v in ("rotary", "rotary + PI", "rotary + NTK", "rotary + YaRN"))
        tuned, control = m["rotary + PI + fine-tune"], m["rotary + fine-tune"]
        assert min(rotary[f"accuracy_{L}_trained"] for L in (32, 64)) > 0.95
        assert max(rotary[f"accuracy_{L}_new"] for L in (32, 64)) < 0.25
        assert pi["accuracy_32_new"] > 0.45 and pi["accuracy_32_trained"] < 0.7
        assert min(ntk[f"accuracy_{L}_trained"] for L in (32, 64)) > 0.85 and ntk["accuracy_32_new"] < 0.35
        for L in (32, 64):
            assert yarn[f"accuracy_{L}_new"] > pi[f"accuracy_{L}_new"] + 0.1
            assert tuned[f"accuracy_{L}_new"] > control[f"accuracy_{L}_new"] + 0.05
        assert yarn["accuracy_64_trained"] > pi["accuracy_64_trained"] + 0.1
        assert max(m[v]["accuracy_64_new"] for v in ("causal", "alibi")) < 0.45


def test_the_sequence_model_offers_alibi_and_a_rope_scale_without_changing_the_positions_kinds():
    import torch

    from mha_lib.positions import Rope
    from mha_lib.scores import alibi
    from mha_lib.why._common import POSITIONS, POSITIONS_MORE, SequenceModel

    assert POSITIONS == ("none", "causal", "learned", "sinusoidal", "rotary") and "alibi" in POSITIONS_MORE
    model = SequenceModel(17, 32, 2, 2, 64, "alibi")
    assert all(block.attention.score_mod == alibi(2) for block in model.blocks)
    scaled = SequenceModel(17, 32, 2, 2, 64, "rotary", rope_scale=0.25)
    assert {block.attention.settings.rope_scale for block in scaled.blocks} == {0.25}
    torch.manual_seed(0)
    plain = SequenceModel(17, 32, 2, 2, 64, "rotary")
    scaled.load_state_dict(plain.state_dict())
    tokens = torch.randint(0, 17, (2, 12))
    with torch.no_grad():
        assert not torch.allclose(scaled(tokens), plain(tokens))
    with pytest.raises(ValueError, match="rope_scale"):
        SequenceModel(17, 32, 2, 2, 64, "causal", rope_scale=0.5)
    yarn = Rope(yarn=4.0, original_length=16)
    assert {block.attention.qk.rope for block in SequenceModel(17, 32, 2, 2, 64, rope=yarn).blocks} == {yarn}
    for positions, kwargs in (("alibi", {"rope": yarn}), ("rotary", {"rope": yarn, "rope_scale": 0.5})):
        with pytest.raises(ValueError, match="rope"):
            SequenceModel(17, 32, 2, 2, 64, positions, **kwargs)
    with pytest.raises(ValueError, match="positions"):
        SequenceModel(17, 32, 2, 2, 64, "nope")
