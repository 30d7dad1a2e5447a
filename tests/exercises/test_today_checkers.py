"""The checkers of chapter 12c's experiments (mha_lib.exercises.today): StreamingLLM's mask, the
absorbed scores of multi-head latent attention, gated attention's output.

The wrong answers below are written by hand, the way a student would write them (they do not
reuse the mistake models), so a test passes only if the checker recognises the mistake from its
numbers alone. Each test also runs the grading: the mistake's family loses its point.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from mha_lib import MultiHeadAttention, exercises
from mha_lib.decoding import KVCache
from mha_lib.exercises import (
    MISTAKES,
    check_absorbed_scores,
    check_gated_output,
    check_streaming_mask,
    grading,
    today,
)
from mha_lib.exercises.catalogue import FAMILIES
from mha_lib.heads import gate_heads, merge_heads, split_heads
from mha_lib.latent import LatentAttention
from mha_lib.masks import sinks, sliding_window

# ---------------------------------------------------------------- hand-written student code


def student_streaming(L, window, num_sinks, *bugs):
    ones = torch.ones(L, L, dtype=torch.bool)
    w = window + (1 if "long" in bugs else -1 if "short" in bugs else 0)
    if "in_window" in bugs:
        w = window - num_sinks
    recent = ~ones.tril(-w)  # j > i - w
    if "future" not in bugs:
        recent = recent & ones.tril()  # j <= i
    if "without_self" in bugs:
        recent = ones.tril(-1) & ~ones.tril(-window - 1)  # i - window <= j < i
    first = torch.zeros(L, L, dtype=torch.bool)
    first[:, :num_sinks] = True
    if "sinks_future" not in bugs:
        first = first & ones.tril()
    keep = recent if "no_sinks" in bugs else recent & first if "and" in bugs else recent | first
    return ~keep if "inverted" in bugs else keep


def student_absorbed(q, c, W_uk, *bugs):
    B, H, Lq, d = q.shape
    r = c.shape[-1]
    if "interleaved" in bugs:
        W = W_uk.view(d, H, r).permute(1, 0, 2)
    elif "in_out" in bugs:
        W = W_uk.view(r, H, d).permute(1, 2, 0)
    elif "transposed_view" in bugs:
        W = W_uk.t().reshape(H, d, r)
    else:
        W = W_uk.view(H, d, r)
    q_lat = torch.einsum("bhqd,hdr->bhqr", q, W)
    scores = torch.einsum("bhqr,bkr->bhqk", q_lat, c)
    if "sqrt_D" in bugs:
        return scores / math.sqrt(W_uk.shape[0])
    return scores / (1.0 if "no_scale" in bugs else math.sqrt(r) if "sqrt_r" in bugs else math.sqrt(d))


def student_gated(X, gate_logits, W_o, *bugs):
    B, H, Lq, d = X.shape
    per_head = gate_logits.shape[-1] == H
    if "no_sigmoid" in bugs:
        g = gate_logits
    elif "softmax" in bugs:
        g = (gate_logits.softmax(-1) if per_head
             else gate_logits.view(B, Lq, H, d).softmax(dim=2).view(B, Lq, H * d))
    else:
        g = torch.sigmoid(gate_logits)
    merged = X.transpose(1, 2).reshape(B, Lq, H * d)
    if "reshape" in bugs:
        merged = (X * g.reshape(B, H, Lq, -1)).transpose(1, 2).reshape(B, Lq, H * d)
        return W_o(merged)
    if per_head:
        full = (g.repeat(1, 1, d) if "tiled" in bugs
                else g[..., :1].expand(B, Lq, H * d) if "first_head" in bugs
                else g.repeat_interleave(d, dim=-1))
    else:
        full = g[..., :d].repeat(1, 1, H) if "first_head" in bugs else g
    return W_o(merged) * full if "after" in bugs else W_o(merged * full)


def with_bugs(student, *bugs):
    return lambda *args: student(*args, *bugs)




# ---------------------------------------------------------------- right answers, named mistakes

REFERENCES = [
    (check_streaming_mask, student_streaming),
    (check_streaming_mask, lambda L, w, n: (sliding_window(w) | sinks(n)).dense(1, L, L)[0]),
    (check_absorbed_scores, student_absorbed),
    (check_gated_output, student_gated),
    (check_gated_output, lambda X, z, W_o: W_o(merge_heads(gate_heads(X, z)))),
]

#: (checker, the bugs of the hand-written answer, the mistakes the checker must name)
WRONG = [
    (check_streaming_mask, ("long",), [("window", "one_more")]),
    (check_streaming_mask, ("short",), [("window", "one_less")]),
    (check_streaming_mask, ("without_self",), [("window", "without_self")]),
    (check_streaming_mask, ("sinks_future",), [("sink_keys", "not_causal")]),
    (check_streaming_mask, ("in_window",), [("sink_keys", "in_window")]),
    (check_streaming_mask, ("and",), [("sink_keys", "and")]),
    (check_streaming_mask, ("no_sinks",), [("sink_keys", "forgotten")]),
    (check_streaming_mask, ("future",), [("window_causal", "forgotten")]),
    (check_streaming_mask, ("inverted",), [("mask_convention", "inverted")]),
    (check_streaming_mask, ("long", "sinks_future"), [("window", "one_more"), ("sink_keys", "not_causal")]),
    (check_absorbed_scores, ("no_scale",), [("scale", "none")]),
    (check_absorbed_scores, ("sqrt_r",), [("scale", "sqrt_r")]),
    (check_absorbed_scores, ("sqrt_D",), [("scale", "sqrt_D")]),
    (check_absorbed_scores, ("interleaved",), [("uk_heads", "interleaved")]),
    (check_absorbed_scores, ("in_out",), [("uk_layout", "in_out")]),
    (check_absorbed_scores, ("transposed_view",), [("uk_layout", "transposed_view")]),
    (check_absorbed_scores, ("interleaved", "no_scale"), [("uk_heads", "interleaved"), ("scale", "none")]),
    (check_gated_output, ("no_sigmoid",), [("gate_fn", "none")]),
    (check_gated_output, ("softmax",), [("gate_fn", "softmax_heads")]),
    (check_gated_output, ("after",), [("gate_place", "after_W_o")]),
    (check_gated_output, ("reshape",), [("gate_axes", "reshape")]),
    (check_gated_output, ("tiled",), [("gate_axes", "tiled")]),
    (check_gated_output, ("first_head",), [("gate_axes", "first_head")]),
    (check_gated_output, ("no_sigmoid", "after"), [("gate_fn", "none"), ("gate_place", "after_W_o")]),
]
_STUDENTS = {check_streaming_mask: student_streaming, check_absorbed_scores: student_absorbed,
             check_gated_output: student_gated}


@pytest.mark.parametrize("checker, candidate", REFERENCES)
def test_a_right_answer_passes_with_full_marks(checker, candidate, verdict):
    ok, out, report = verdict(checker, candidate)
    assert ok is True and "cases pass" in out
    assert report.score == grading.max_points(checker.__name__)


@pytest.mark.parametrize("checker, bugs, mistakes", WRONG,
                         ids=[f"{c.__name__}-{'+'.join(b)}" for c, b, _ in WRONG])
def test_each_mistake_is_named_with_its_hint_and_loses_its_family(checker, bugs, mistakes, named_mistakes):
    named_mistakes(checker, with_bugs(_STUDENTS[checker], *bugs), mistakes)


def test_unknown_mistake_gets_the_general_hint(verdict):
    ok, out, report = verdict(check_gated_output, lambda X, z, W_o: 1.5 * student_gated(X, z, W_o))
    assert not ok and "match none of the classic mistakes" in out and "gate_heads" in out
    assert report.runs and report.score == 1


# ---------------------------------------------------------------- crashes, stubs, wrong kinds


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("checker", list(_STUDENTS))
def test_stub_is_not_implemented_yet_and_gets_nothing(checker, verdict):
    ok, out, report = verdict(checker, _stub)
    assert not ok and "not implemented yet" in out and report.score == 0


@pytest.mark.parametrize("checker, candidate, phrase", [
    (check_streaming_mask, lambda L, w, n: student_streaming(L, w, n).float(), "dtype torch.float32"),
    (check_streaming_mask, lambda L, w, n: student_streaming(L, w, n)[:-1], "expected (L, L)"),
    (check_streaming_mask, lambda L, w, n: None, "not a tensor"),
    (check_absorbed_scores, lambda q, c, W: student_absorbed(q, c, W).mT, "not (B, H, Lk, Lq)"),
    (check_absorbed_scores, lambda q, c, W: (q @ W) @ c.mT, "W_uk is an nn.Linear weight"),
    (check_gated_output, lambda X, z, W_o: gate_heads(X, z), "the output has shape"),
])
def test_wrong_kinds_of_result_are_named_without_the_runs_point(checker, candidate, phrase, verdict):
    ok, out, report = verdict(checker, candidate)
    assert not ok and phrase in out and not report.runs


def test_gating_the_input_in_place_is_reported(verdict):
    def in_place(X, gate_logits, W_o):
        X.copy_(gate_heads(X, gate_logits))
        return W_o(merge_heads(X))

    ok, out, _ = verdict(check_gated_output, in_place)
    assert not ok and "modified its input in place" in out


def test_the_student_gets_a_copy_of_W_o(verdict):
    def destructive(X, gate_logits, W_o):
        out = W_o(merge_heads(gate_heads(X, gate_logits)))
        with torch.no_grad():
            W_o.weight.zero_()  # would corrupt the reference if it were shared
        return out

    assert verdict(check_gated_output, destructive)[0] is True


# ---------------------------------------------------------------- the mistake models


def test_every_setting_has_a_named_mistake_and_a_family_and_every_checker_is_registered():
    keys = [(setting, value) for table in (today._STREAMING_SETTINGS, today._ABSORBED_SETTINGS,
                                           today._GATED_SETTINGS)
            for setting, values in table.items() for value in values]
    assert [key for key in keys if key not in MISTAKES or key[0] not in FAMILIES] == []
    assert {c.__name__ for c in _STUDENTS} <= set(exercises.__all__) & set(grading.CHECKER_FAMILIES)
    assert len(keys) == len({(c, k) for c, _, ks in WRONG for k in ks if len(ks) == 1})  # each has a test


@pytest.mark.parametrize("L, window, num_sinks", today._STREAMING_CASES)
def test_the_reference_mask_is_what_the_rolling_cache_hands_each_query(L, window, num_sinks):
    cache = KVCache(window=window, num_sinks=num_sinks)[0]
    reference = today._streaming_variant(L, window, num_sinks, {})
    for i in range(L):  # decode one token at a time; the cache returns the keys query i needs
        token = torch.zeros(1, 1, 1, 2)  # (B, H, 1, d)
        cache.update(token, token)
        assert cache.key_positions()[0].tolist() == reference[i].nonzero()[:, 0].tolist()


def test_every_single_mistake_changes_the_streaming_mask_its_own_way():
    specs = [{}] + [{s: v} for s, values in today._STREAMING_SETTINGS.items() for v in values]
    masks = [torch.cat([today._streaming_variant(*case, spec).flatten()
                        for case in today._STREAMING_CASES]) for spec in specs]
    for (a, ma), (b, mb) in itertools.combinations(zip(specs, masks), 2):
        assert not torch.equal(ma, mb), (a, b)
    # the index model without mistakes is the library's mask
    ix = {"window": "", "sink_keys": ""}  # present but falsy: no mistake
    for case in today._STREAMING_CASES:
        assert torch.equal(today._streaming_variant(*case, ix), today._streaming_variant(*case, {}))


def test_the_absorbed_reference_gives_the_layers_weights_and_its_absorbed_form(generator):
    layer = LatentAttention(12, 12, 12, 12, 3, 0.0, rank=5).eval()
    x = torch.randn(2, 6, 12, generator=generator)
    with torch.no_grad():
        _, weights = layer(x, x, x, need_weights=True)  # (B, H, Lq, Lk)
        q, c = split_heads(layer.W_q(x), 3), layer.W_dkv(x)
    scores = today._absorbed_variant(layer, q, c, {})
    torch.testing.assert_close(scores.softmax(-1), weights)
    folded = today._absorbed_variant(layer, q, c, {"scale": ""})  # the absorbed path, no mistake
    torch.testing.assert_close(folded, scores)
    torch.testing.assert_close(student_absorbed(q, c, layer.W_uk.weight.detach()), scores)


def test_the_gated_models_without_mistakes_are_the_layer(generator):
    for gate in ("head", "element"):
        layer = MultiHeadAttention(8, 8, 8, 8, 2, 0.0, gate=gate).eval()
        x = torch.randn(2, 5, 8, generator=generator)
        with torch.no_grad():
            X = split_heads(layer.W_q(x), 2)  # any (B, H, Lq, d) heads' output
            z = layer.gate(x)
        reference = today._gated_variant(X, z, layer.W_o, {})
        explicit = today._gated_variant(X, z, layer.W_o, {"gate_fn": ""})  # own gates, no mistake
        torch.testing.assert_close(explicit, reference)
        torch.testing.assert_close(reference, layer.W_o(merge_heads(gate_heads(X, z))).detach())


def test_every_single_gate_mistake_changes_the_output():
    g = torch.Generator().manual_seed(0)
    X, W_o = torch.randn(2, 3, 4, 2, generator=g), nn.Linear(6, 6)
    for width in (3, 6):
        z = torch.randn(2, 4, width, generator=g)
        reference = today._gated_variant(X, z, W_o, {})
        for setting, values in today._GATED_SETTINGS.items():
            for value in values:
                if (setting, value, width) == ("gate_axes", "tiled", 6):
                    continue  # element-wise gates need no repeat: the same numbers
                changed = today._gated_variant(X, z, W_o, {setting: value})
                assert not torch.allclose(changed, reference), (setting, value, width)
