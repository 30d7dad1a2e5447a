"""The bug zoo: every specimen looks healthy to a shape test and fails a probe; the correct
layer passes every probe; the grading of Part A (labels) and Part B (mutation testing)."""

import pytest
import torch

from mha_lib import MultiHeadAttention
from mha_lib.decoding import LayerCache
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.exercises.bug_zoo import BUG_CLASSES, SPECIMENS, ZooAttention, _build, reference
from mha_lib.exercises.probes import PROBES, _left_padding, run_probes, symptom_heatmaps
from mha_lib.exercises.zoo_grading import ANSWERS, grade_labels, grade_test
from mha_lib.masks import causal
from mha_lib.positions import rotary

NAMES = list(SPECIMENS)


@pytest.fixture(scope="module")
def probed():
    """name -> the probes' results, for every specimen (run once)."""
    return {name: run_probes(specimen()) for name, specimen in SPECIMENS.items()}


def test_the_zoo_has_twelve_specimens_or_more_with_names_that_hide_the_bug():
    assert len(SPECIMENS) >= 12
    assert set(ANSWERS) == set(SPECIMENS)
    assert {a.bug_class for a in ANSWERS.values()} <= set(BUG_CLASSES)
    assert len({a.bug_class for a in ANSWERS.values()}) >= 10  # (nearly) every class
    for name in SPECIMENS:
        words = [word for key in BUG_CLASSES for word in key.split("_") if len(word) > 3]
        assert not any(word in name for word in words)


@pytest.mark.parametrize("name", NAMES)
def test_every_specimen_passes_a_plain_shape_and_dtype_test(name):
    layer = SPECIMENS[name]()
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(0))
    out = layer(x, x, x)
    assert out.shape == (2, 7, 16) and out.dtype == torch.float32
    out64 = layer.double()(x.double(), x.double(), x.double(), mask=causal())
    assert out64.shape == (2, 7, 16) and out64.dtype == torch.float64


@pytest.mark.parametrize("name", NAMES)
def test_every_specimen_fails_a_probe_and_its_answers_probe(name, probed):
    failed = [probe for probe, result in probed[name].items() if not result.passed]
    assert failed, name
    assert ANSWERS[name].probe in failed


def test_the_reference_passes_every_probe():
    results = run_probes(reference())
    assert set(results) == set(PROBES)
    assert all(r.passed for r in results.values()), [str(r) for r in results.values()]


@pytest.mark.parametrize("make", [
    lambda: MultiHeadAttention(16, 16, 16, 16, 4, dropout=0.1),
    lambda: GroupedQueryAttention(16, 4, 1, dropout=0.0),
], ids=["multi-head", "multi-query"])
def test_the_library_s_other_layers_pass_every_probe_too(make):
    torch.manual_seed(0)
    assert all(r.passed for r in run_probes(make()).values())


def test_the_written_out_layer_computes_what_the_library_computes():
    ref, plain = reference(3), _build(ZooAttention, 3)
    assert all(r.passed for r in run_probes(plain).values())
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1))
    for options in ({}, {"mask": causal()}, {"valid_lens": torch.tensor([6, 0])},
                    {"mask": causal() & _left_padding(torch.tensor([2, 0])),
                     "positions": torch.tensor([[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]])}):
        torch.testing.assert_close(plain(x, x, x, **options), ref(x, x, x, **options))
    caches = LayerCache(), LayerCache()
    for start, end in ((0, 3), (3, 4), (4, 6)):
        chunk = x[:, start:end]
        torch.testing.assert_close(plain(chunk, chunk, chunk, cache=caches[0]),
                                   ref(chunk, chunk, chunk, cache=caches[1]))


def test_a_probe_result_says_what_a_healthy_layer_shows(probed):
    text = str(probed["narwhal"]["cache"])
    assert "healthy layer:" in text and "NOT as a healthy layer" in text
    assert "as a healthy layer" in str(run_probes(reference(), ["cache"])["cache"])


def test_the_heatmaps_put_healthy_beside_buggy():
    fig = symptom_heatmaps(reference(), SPECIMENS["jackal"](), "padding_left")
    assert len([t for t in fig.data if t.type == "heatmap"]) == 2
    assert "NaN drawn as 0" in fig.layout.title.text
    with pytest.raises(ValueError, match="probe"):
        symptom_heatmaps(reference(), reference(), "nope")


def test_bad_arguments_raise_value_errors_naming_them():
    with pytest.raises(ValueError, match="seed"):
        SPECIMENS["aardvark"]("0")
    with pytest.raises(ValueError, match="names"):
        run_probes(reference(), ["nope"])
    with pytest.raises(ValueError, match="layer"):
        run_probes(torch.nn.Linear(16, 16))
    with pytest.raises(ValueError, match="labels"):
        grade_labels({"aardvark": "typo"})
    with pytest.raises(ValueError, match="bug"):
        grade_test(lambda make_layer: None, "unicorn")
    with pytest.raises(ValueError, match="num_pads"):
        _left_padding(torch.tensor([0.5]))


# --- Part A -------------------------------------------------------------------------------


def test_grade_labels_full_marks_when_every_label_is_right():
    report = grade_labels({name: a.bug_class for name, a in ANSWERS.items()})
    assert report.full and report.points == report.max_points == len(SPECIMENS)


def test_grade_labels_two_swapped_is_not_full_and_names_the_probe():
    labels = {name: a.bug_class for name, a in ANSWERS.items()}
    labels["aardvark"], labels["ferret"] = labels["ferret"], labels["aardvark"]
    report = grade_labels(labels)
    assert report.points == report.max_points - 2 and not report.full
    assert "score_scale probe" in str(report) and "permutation probe" in str(report)


# --- Part B -------------------------------------------------------------------------------


def _always_passes(make_layer):
    make_layer()


def _always_fails(make_layer):
    raise AssertionError("no layer is good enough")


def _float64_softmax_test(make_layer):
    """Causal attention recomputed in float64, softmax and all, from the layer's weights."""
    layer = make_layer().double()
    B, L, H, Hkv, d = 2, 7, 4, 2, 4
    x = torch.randn(B, L, H * d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = layer(x, x, x, mask=causal())
        q = layer.W_q(x).reshape(B, L, H, d).transpose(1, 2)  # (B, L, D) -> (B, H, L, d)
        k = layer.W_k(x).reshape(B, L, Hkv, d).transpose(1, 2)  # -> (B, Hkv, L, d)
        v = layer.W_v(x).reshape(B, L, Hkv, d).transpose(1, 2)
        q, k = rotary(q, torch.arange(L)), rotary(k, torch.arange(L))
        k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
        scores = q @ k.transpose(-2, -1) / d ** 0.5  # (B, H, L, L)
        future = ~torch.ones(L, L, dtype=torch.bool).tril()
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        want = layer.W_o((weights @ v).transpose(1, 2).reshape(B, L, H * d))
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("test", [_always_passes, _always_fails])
def test_grade_test_gives_nothing_to_a_test_that_always_passes_or_always_fails(test):
    report = grade_test(test, "aardvark")
    assert report.points == 0 and report.max_points > 0 and not report.full


def test_grade_test_gives_full_marks_and_a_bonus_to_a_float64_softmax_test():
    report = grade_test(_float64_softmax_test, "aardvark")
    assert report.full and report.points > report.max_points, str(report)
    assert "bonus" in str(report)


def test_grade_test_gives_nothing_to_a_test_that_misses_its_bug():
    report = grade_test(_float64_softmax_test, "narwhal")  # a cache bug: no cache in the test
    assert report.points == 0 and "cache probe" in str(report)
