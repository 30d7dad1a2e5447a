"""The exercise checkers: the reference passes, and each classic mistake is caught and named.

The wrong implementations below are written by hand, the way a student would write them
(they do not reuse the mistake models of mha_lib.exercises.core and .later), so a test passes only if the
checker recognises a mistake from its numbers alone.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mha_lib
from mha_lib import exercises, importance
from mha_lib.exercises import core, later
from mha_lib.exercises import (
    MISTAKES,
    check_dot_product_attention,
    check_masked_softmax,
    check_multihead_attention,
    check_num_parameters,
    check_transpose_output,
    check_transpose_qkv,
)


# ---------------------------------------------------------------- hand-written student code


def student_masked_softmax(X, valid_lens, bugs=()):
    """A from-scratch masked softmax (d2l style, on a copy), with optional bugs."""
    dim = 1 if "wrong_axis" in bugs else -1
    if valid_lens is None or "no_mask" in bugs:
        return torch.softmax(X, dim=dim)
    B, Lq, Lk = X.shape
    if valid_lens.dim() == 1:
        valid_lens = valid_lens.repeat_interleave(Lq)  # (B,) -> (B*Lq,)
    else:
        valid_lens = valid_lens.reshape(-1)  # (B, Lq) -> (B*Lq,)
    positions = torch.arange(Lk)[None, :]  # (1, Lk)
    if "off_by_one" in bugs:
        keep = positions <= valid_lens[:, None]  # (B*Lq, Lk)
    else:
        keep = positions < valid_lens[:, None]  # (B*Lq, Lk)
    keep = keep.reshape(B, Lq, Lk)  # (B*Lq, Lk) -> (B, Lq, Lk)
    if "after_softmax" in bugs:  # zero the padding's weights afterwards, no renormalising
        return torch.softmax(X, dim=dim) * keep
    fill = -math.inf if "nan" in bugs else -1e9
    weights = torch.softmax(X.masked_fill(~keep, fill), dim=dim)
    return weights if "nan" in bugs else weights * keep


def student_transpose_qkv(X, num_heads, bugs=()):
    B, L, D = X.shape
    if "no_permute" in bugs:
        return X.reshape(B * num_heads, L, D // num_heads)
    X = X.reshape(B, L, num_heads, D // num_heads)  # (B, L, D) -> (B, L, H, d)
    if "permute_0231" in bugs:
        X = X.permute(0, 2, 3, 1)  # (B, L, H, d) -> (B, H, d, L), reshaped below all the same
    elif "head_major" in bugs:
        X = X.permute(2, 0, 1, 3)  # (B, L, H, d) -> (H, B, L, d)
    else:
        X = X.permute(0, 2, 1, 3)  # (B, L, H, d) -> (B, H, L, d)
    return X.reshape(-1, L, D // num_heads)  # -> (B*H, L, d)


def student_transpose_output(X, num_heads, bugs=()):
    BH, L, d = X.shape
    if "no_permute" in bugs or "plain_reshape" in bugs:
        return X.reshape(BH // num_heads, L, num_heads * d)
    if "head_major" in bugs:
        X = X.reshape(num_heads, BH // num_heads, L, d).permute(1, 2, 0, 3)  # -> (B, L, H, d)
    else:
        X = X.reshape(BH // num_heads, num_heads, L, d).permute(0, 2, 1, 3)  # -> (B, L, H, d)
    return X.reshape(BH // num_heads, L, num_heads * d)  # (B, L, H, d) -> (B, L, D)


def student_attention(q, k, v, valid_lens, bugs=()):
    if "no_transpose" in bugs:
        scores = q @ k  # fails unless Lk == d
    else:
        scores = torch.bmm(q, k.transpose(1, 2))  # (B, Lq, Lk)
    if "sqrt_Lk" in bugs:
        scores = scores / math.sqrt(k.shape[1])
    elif "no_scaling" not in bugs:
        scores = scores / math.sqrt(q.shape[-1])
    return torch.bmm(student_masked_softmax(scores, valid_lens, bugs), v)


def student_mha(*bugs):
    """A student's MultiHeadAttention class with the given bugs."""

    class StudentMHA(nn.Module):
        def __init__(self, key_size, query_size, value_size, d_model, num_heads, dropout,
                     bias=False):
            super().__init__()
            self.num_heads = num_heads
            self.W_q = nn.Linear(query_size, d_model, bias=bias)
            self.W_k = nn.Linear(key_size, d_model, bias=bias)
            self.W_v = nn.Linear(value_size, d_model, bias=bias)
            self.W_o = nn.Linear(d_model, d_model, bias=bias)

        def forward(self, queries, keys, values, valid_lens):
            H = self.num_heads
            q = student_transpose_qkv(self.W_q(queries), H, bugs)
            k = student_transpose_qkv(self.W_k(keys), H, bugs)
            v = student_transpose_qkv(self.W_v(values), H, bugs)
            if valid_lens is not None:
                if "repeat" in bugs:
                    valid_lens = valid_lens.repeat(H, *[1] * (valid_lens.dim() - 1))
                else:
                    valid_lens = valid_lens.repeat_interleave(H, dim=0)
            out = student_transpose_output(student_attention(q, k, v, valid_lens, bugs), H, bugs)
            return out if "no_W_o" in bugs else self.W_o(out)

    return StudentMHA


def run(checker, candidate, capsys):
    ok = checker(candidate)
    return ok, capsys.readouterr().out


# ---------------------------------------------------------------- the reference passes

REFERENCES = [
    (check_masked_softmax, mha_lib.masked_softmax),
    (check_masked_softmax, student_masked_softmax),
    (check_dot_product_attention, lambda q, k, v, lens: mha_lib.DotProductAttention(0.0)(q, k, v, lens)),
    (check_dot_product_attention, student_attention),
    (check_transpose_qkv, mha_lib.transpose_qkv),
    (check_transpose_qkv, student_transpose_qkv),
    (check_transpose_output, mha_lib.transpose_output),
    (check_transpose_output, student_transpose_output),
    (check_multihead_attention, mha_lib.MultiHeadAttention),
    (check_multihead_attention, student_mha()),
    (check_num_parameters, lambda q, k, v, D, H, bias: (q + k + v + D) * D + 4 * D * bias),
]


@pytest.mark.parametrize("checker, candidate", REFERENCES)
def test_reference_passes(checker, candidate, capsys):
    ok, out = run(checker, candidate, capsys)
    assert ok is True
    assert "cases pass" in out and "not yet right" not in out


# ---------------------------------------------------------------- each mistake is named

SOFTMAX_MISTAKES = [
    ("no_mask", "no masking"),
    ("after_softmax", "masked after the softmax, without renormalising"),
    ("off_by_one", "mask off by one"),
    ("wrong_axis", "softmax over the wrong axis"),
    ("nan", "NaN on a row with valid length 0"),
]


TRANSPOSE_MISTAKES = [
    ("no_permute", "reshape without the permute"),
    ("head_major", "head-major"),
]
QKV_MISTAKES = TRANSPOSE_MISTAKES + [("permute_0231", "permute(0, 2, 3, 1) instead of permute(0, 2, 1, 3)")]
OUTPUT_MISTAKES = TRANSPOSE_MISTAKES + [("plain_reshape", "reshape without the permute")]
ATTENTION_MISTAKES = [
    ("no_scaling", "missing 1/sqrt(d) scaling"),
    ("sqrt_Lk", "scaling by 1/sqrt(Lk), the number of keys"),
    ("no_transpose", "Q @ K without the transpose"),
]
MHA_MISTAKES = SOFTMAX_MISTAKES + ATTENTION_MISTAKES + [
    ("repeat", "repeat instead of repeat_interleave"),
    ("no_permute", "reshape without the permute"),
    ("permute_0231", "permute(0, 2, 3, 1) instead of permute(0, 2, 1, 3)"),
    ("plain_reshape", "transpose_output as a plain reshape"),
    ("no_W_o", "forgot the output projection W_o"),
]


def _with_bug(function, bug):
    return lambda *args: function(*args, (bug,))


WRONG = (
    [(check_masked_softmax, _with_bug(student_masked_softmax, bug), phrase)
     for bug, phrase in SOFTMAX_MISTAKES]
    + [(check_dot_product_attention, _with_bug(student_attention, bug), phrase)
       for bug, phrase in SOFTMAX_MISTAKES + ATTENTION_MISTAKES]
    + [(check_transpose_qkv, _with_bug(student_transpose_qkv, bug), phrase)
       for bug, phrase in QKV_MISTAKES]
    + [(check_transpose_output, _with_bug(student_transpose_output, bug), phrase)
       for bug, phrase in OUTPUT_MISTAKES]
    + [(check_multihead_attention, student_mha(bug), phrase) for bug, phrase in MHA_MISTAKES]
)


@pytest.mark.parametrize("checker, candidate, phrase", WRONG,
                         ids=[f"{c.__name__}-{p}" for c, _, p in WRONG])
def test_mistake_is_named(checker, candidate, phrase, capsys):
    ok, out = run(checker, candidate, capsys)
    assert ok is False
    assert phrase in out


def test_head_major_with_repeat_interleave_is_named(capsys):
    """Head-major transposes with repeat_interleave: the lengths land on the wrong heads."""
    ok, out = run(check_multihead_attention, student_mha("head_major"), capsys)
    assert ok is False
    assert "head-major" in out


def test_head_major_with_repeat_is_consistent(capsys):
    """Head-major folding with tiled lengths is a consistent (if unusual) choice: it passes."""
    ok, _ = run(check_multihead_attention, student_mha("head_major", "repeat"), capsys)
    assert ok is True


def test_two_mistakes_at_once_are_both_named(capsys):
    ok, out = run(check_multihead_attention, student_mha("no_scaling", "no_W_o"), capsys)
    assert ok is False
    assert "missing 1/sqrt(d) scaling" in out and "forgot the output projection W_o" in out


def test_uniform_rows_of_d2l_fill_value_are_named(capsys):
    def d2l_style(X, valid_lens):
        keep = (mha_lib.keep_mask_from_valid_lens(valid_lens, *X.shape[1:])
                if valid_lens is not None else torch.ones_like(X, dtype=torch.bool))
        return torch.softmax(X.masked_fill(~keep, -1e6), dim=-1)

    ok, out = run(check_masked_softmax, d2l_style, capsys)
    assert ok is False
    assert "not a bug, another convention" in out and "d2l.ai" in out
    assert "not yet right" not in out


def test_naive_exp_overflow_is_reported_as_nan(capsys):
    def naive(X, valid_lens):
        keep = (mha_lib.keep_mask_from_valid_lens(valid_lens, *X.shape[1:])
                if valid_lens is not None else torch.ones_like(X, dtype=torch.bool))
        e = X.exp() * keep
        return e / e.sum(-1, keepdim=True).clamp_min(1e-30)

    ok, out = run(check_masked_softmax, naive, capsys)
    assert ok is False
    assert "NaN" in out and "large scores" in out


def test_scaling_by_d_model_is_named(capsys):
    class ScaledByD(student_mha()):
        def forward(self, queries, keys, values, valid_lens):
            H = self.num_heads
            q, k, v = (mha_lib.transpose_qkv(W(x), H) for W, x in
                       ((self.W_q, queries), (self.W_k, keys), (self.W_v, values)))
            if valid_lens is not None:
                valid_lens = valid_lens.repeat_interleave(H, dim=0)
            scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.W_q.out_features)
            out = torch.bmm(mha_lib.masked_softmax(scores, valid_lens), v)
            return self.W_o(mha_lib.transpose_output(out, H))

    ok, out = run(check_multihead_attention, ScaledByD, capsys)
    assert ok is False
    assert "scaling by 1/sqrt(D), the model width d_model, instead of 1/sqrt(d)" in out


@pytest.mark.parametrize("wrong, phrase", [
    (lambda q, k, v, D, H, bias: (q + k + v) * D + 3 * D * bias, "forgot the output projection W_o"),
    (lambda q, k, v, D, H, bias: H * (q + k + v) * D + D * D + 4 * D * bias, "full-size projection for every head"),
    (lambda q, k, v, D, H, bias: (q + k + v + D) * D, "biases are not counted"),
])
def test_num_parameters_mistakes(wrong, phrase, capsys):
    ok, out = run(check_num_parameters, wrong, capsys)
    assert ok is False
    assert phrase in out


# ---------------------------------------------------------------- robustness of the checkers


def _stub(*args, **kwargs):
    raise NotImplementedError


class StubMHA(nn.Module):
    def __init__(self, key_size, query_size, value_size, d_model, num_heads, dropout, bias=False):
        super().__init__()
        raise NotImplementedError


ALL_CHECKERS = [check_masked_softmax, check_dot_product_attention, check_transpose_qkv,
                check_transpose_output, check_num_parameters]


@pytest.mark.parametrize("checker", ALL_CHECKERS)
def test_stub_is_not_implemented_yet(checker, capsys):
    ok, out = run(checker, _stub, capsys)
    assert ok is False
    assert "not implemented yet" in out


def test_class_stub_is_not_implemented_yet(capsys):
    ok, out = run(check_multihead_attention, StubMHA, capsys)
    assert ok is False
    assert "not implemented yet" in out


def test_forward_stub_is_not_implemented_yet(capsys):
    class HalfDone(student_mha()):
        def forward(self, queries, keys, values, valid_lens):
            raise NotImplementedError

    ok, out = run(check_multihead_attention, HalfDone, capsys)
    assert ok is False
    assert "not implemented yet" in out


def test_student_exception_is_reported_not_raised(capsys):
    def broken(X, valid_lens):
        return X.softmax(dim=7)  # IndexError inside torch

    ok, out = run(check_masked_softmax, broken, capsys)
    assert ok is False
    assert "raised IndexError" in out


def test_missing_return_is_reported(capsys):
    ok, out = run(check_transpose_qkv, lambda X, H: None, capsys)
    assert ok is False
    assert "not a tensor" in out


def test_wrong_shape_is_reported_with_a_hint(capsys):
    ok, out = run(check_transpose_qkv,
                  lambda X, H: X.reshape(X.shape[0], X.shape[1], H, -1).permute(0, 2, 1, 3), capsys)
    assert ok is False
    assert "has shape" in out and "one reshape is missing" in out


def test_in_place_modification_is_reported(capsys):
    def in_place(X, valid_lens):
        if valid_lens is not None:
            X.masked_fill_(~mha_lib.keep_mask_from_valid_lens(valid_lens, *X.shape[1:]), -1e9)
        return mha_lib.masked_softmax(X, valid_lens)

    ok, out = run(check_masked_softmax, in_place, capsys)
    assert ok is False
    assert "modified its input in place" in out


def test_missing_W_o_attribute_is_reported(capsys):
    class NoWo(student_mha()):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            del self.W_o

    ok, out = run(check_multihead_attention, NoWo, capsys)
    assert ok is False
    assert "has no attribute W_o" in out and "forget the output projection" in out


def test_swapped_constructor_sizes_are_reported(capsys):
    class Swapped(student_mha()):
        def __init__(self, key_size, query_size, value_size, d_model, num_heads, dropout,
                     bias=False):
            super().__init__(query_size, key_size, value_size, d_model, num_heads, dropout, bias)

    ok, out = run(check_multihead_attention, Swapped, capsys)
    assert ok is False
    assert "order of key_size, query_size, value_size" in out


def test_ignored_bias_is_reported(capsys):
    class NoBias(student_mha()):
        def __init__(self, *args, bias=False):
            super().__init__(*args, bias=False)

    ok, out = run(check_multihead_attention, NoBias, capsys)
    assert ok is False
    assert "bias=True" in out


def test_unknown_mistake_gets_the_general_hint(capsys):
    ok, out = run(check_masked_softmax, lambda X, lens: mha_lib.masked_softmax(X, lens) * 0.5, capsys)
    assert ok is False
    assert "match none of the classic mistakes" in out


# ---------------------------------------------------------------- the mistake models


def test_every_setting_of_every_checker_has_a_named_mistake():
    tables = [core._SOFTMAX_SETTINGS, core._TRANSPOSE_SETTINGS, core._MHA_SETTINGS]
    for table in tables:
        for setting, values in table.items():
            for value in values:
                assert (setting, value) in MISTAKES


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), L=st.integers(1, 4), H=st.integers(1, 4), d=st.integers(1, 3),
       fold=st.sampled_from(["right", "no_permute", "head_major"]),
       split=st.sampled_from(["right", "interleaved"]))
def test_split_and_merge_variants_are_inverse(B, L, H, d, fold, split):
    """Each transposition mistake model is a permutation that its merge model undoes."""
    X = torch.arange(B * L * H * d, dtype=torch.float32).reshape(B, L, H * d)
    spec = {"fold": fold, "split": split}
    folded = core._split_variant(X, H, spec)
    assert folded.shape == (B * H, L, d)
    torch.testing.assert_close(core._merge_variant(folded, H, spec), X)


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), Lq=st.integers(1, 4), Lk=st.integers(1, 5), data=st.data())
def test_softmax_model_without_mistakes_matches_masked_softmax(B, Lq, Lk, data):
    lens = torch.tensor(data.draw(st.lists(st.integers(0, Lk), min_size=B, max_size=B)))
    X = torch.randn(B, Lq, Lk, generator=torch.Generator().manual_seed(0))
    spec = {"mask": "right", "axis": "right", "empty": "zeros"}  # explicit, not the {} shortcut
    torch.testing.assert_close(core._softmax_variant(X, lens, spec), mha_lib.masked_softmax(X, lens))


def test_multihead_model_without_mistakes_matches_the_module(mha_factory, generator):
    ref = mha_factory(8, 2, sizes=(5, 6, 7))  # key_size 5, query_size 6, value_size 7
    q, k, v = (torch.randn(3, 2, 6, generator=generator), torch.randn(3, 4, 5, generator=generator),
               torch.randn(3, 4, 7, generator=generator))
    lens = torch.tensor([0, 2, 4])
    spec = {"lens": "interleave", "W_o": "keep", "scale": "right"}  # explicit, not {}
    with torch.no_grad():
        torch.testing.assert_close(core._multihead_variant(ref, q, k, v, lens, spec),
                                   ref(q, k, v, lens))


# ---------------------------------------------------------------- checkers of chapters 4-7


def entropy_student(w, bug=None):
    log = torch.log2 if bug == "log2" else torch.log
    terms = w * log(w) if bug in ("nan", "log2") else torch.xlogy(w, w)  # (H, Lq, Lk)
    rows = terms.sum(-2) if bug == "queries" else terms.sum(-1)
    return rows.mean(-1) if bug == "sign" else -rows.mean(-1)


def prune_student(mha, heads, bug=None):
    H, d = mha.num_heads, mha.head_size
    kept = [h for h in range(H) if (h in heads) == (bug == "kept_listed")]
    if bug == "interleaved":
        rows = [i * H + h for h in kept for i in range(d)]
    else:
        rows = [h * d + i for h in kept for i in range(d)]
    new = mha_lib.MultiHeadAttention(mha.W_k.in_features, mha.W_q.in_features,
                                     mha.W_v.in_features, len(rows), len(kept), 0.0)
    new.W_o = nn.Linear(len(rows), mha.W_o.out_features, bias=False)
    with torch.no_grad():
        for name in ("W_q", "W_k", "W_v"):
            getattr(new, name).weight.copy_(getattr(mha, name).weight[rows])
        W_o = mha.W_o.weight[rows] if bug == "W_o_rows" else mha.W_o.weight[:, rows]
        new.W_o.weight.copy_(W_o)
    return new


LATER_REFERENCES = [
    (exercises.check_mean_entropy, entropy_student),
    (exercises.check_stiefel_dimension, lambda N, d: N * d - d * (d + 1) // 2),
    (exercises.check_crossover_length, lambda D: 2 * D),
    (exercises.check_longest_sequence, lambda budget, B, H: math.isqrt(budget // (4 * B * H))),
    (exercises.check_prune_heads, prune_student),
    (exercises.check_prune_heads, lambda mha, heads: importance.prune_heads(mha, heads)),
]


@pytest.mark.parametrize("checker, candidate", LATER_REFERENCES)
def test_later_reference_passes(checker, candidate, capsys):
    ok, out = run(checker, candidate, capsys)
    assert ok is True and "cases pass" in out


LATER_WRONG = [
    (exercises.check_mean_entropy, lambda w: entropy_student(w, "nan"), "NaN from 0 * log(0)"),
    (exercises.check_mean_entropy, lambda w: entropy_student(w, "log2"), "bits (log2)"),
    (exercises.check_mean_entropy, lambda w: entropy_student(w, "sign"), "minus sign is missing"),
    (exercises.check_mean_entropy, lambda w: entropy_student(w, "queries"), "over the queries"),
    (exercises.check_stiefel_dimension, lambda N, d: N * d - d * d, "d*d constraints"),
    (exercises.check_stiefel_dimension, lambda N, d: N * d - d * (d - 1) // 2, "d(d-1)/2"),
    (exercises.check_stiefel_dimension, lambda N, d: N * d, "no constraint counted"),
    (exercises.check_crossover_length, lambda D: D, "only two of the four projections"),
    (exercises.check_crossover_length, lambda D: 4 * D, "not the weighted sum"),
    (exercises.check_crossover_length, lambda D: 2 * D + 1, "must *reach*"),
    (exercises.check_longest_sequence, lambda b, B, H: math.isqrt(b // (B * H)), "not bytes"),
    (exercises.check_longest_sequence, lambda b, B, H: math.isqrt(b // (8 * B * H)), "float64"),
    (exercises.check_longest_sequence, lambda b, B, H: int(math.sqrt(b / (4 * B * H))), "math.isqrt"),
    (exercises.check_prune_heads, lambda m, h: prune_student(m, h, "kept_listed"), "kept the listed heads"),
    (exercises.check_prune_heads, lambda m, h: prune_student(m, h, "interleaved"), "h + H, h + 2H"),
    (exercises.check_prune_heads, lambda m, h: prune_student(m, h, "W_o_rows"), "keep its columns"),
]


@pytest.mark.parametrize("checker, candidate, phrase", LATER_WRONG,
                         ids=[f"{c.__name__}-{p}" for c, _, p in LATER_WRONG])
def test_later_mistake_is_named(checker, candidate, phrase, capsys):
    ok, out = run(checker, candidate, capsys)
    assert ok is False
    assert phrase in out


def test_prune_checker_reports_a_wrong_number_of_heads(capsys):
    def keeps_all(mha, heads):
        return prune_student(mha, [])

    ok, out = run(exercises.check_prune_heads, keeps_all, capsys)
    assert ok is False and "num_heads = 4" in out


def test_chapter_6_references_agree_with_the_bench_module():
    from mha_lib.bench.cost import Sizes, flop_count, weights_bytes

    for D in (1, 8, 64, 100):
        L = later._crossover_length_variant(D, {})
        f, g = flop_count(Sizes(1, L, L, D, 1)), flop_count(Sizes(1, L - 1, L - 1, D, 1))
        assert f["scores"] + f["weighted sum"] >= f["projections"]
        assert L == 1 or g["scores"] + g["weighted sum"] < g["projections"]
    for budget, B, H in ((2**30, 16, 8), (10**9, 3, 5)):
        L = later._longest_sequence_variant(budget, B, H, {})
        assert weights_bytes(Sizes(B, L, L, H, H)) <= budget < weights_bytes(Sizes(B, L + 1, L + 1, H, H))
