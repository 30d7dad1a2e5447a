"""The checkers of RoPE, tiled attention and GQA-from-MHA (mha_lib.exercises.modern).

The wrong answers below are written by hand, the way a student would write them (they do not
reuse the mistake models), so a test passes only if the checker recognises the mistake from
its numbers alone. Each test also runs the grading: the mistake's family loses its point.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mha_lib import exercises
from mha_lib.exercises import (
    MISTAKES,
    check_gqa_from_mha,
    check_rotary,
    check_tiled_attention,
    grading,
    modern,
)
from mha_lib.exercises.catalogue import FAMILIES
from mha_lib.flash import tiled_attention
from mha_lib.gqa import GroupedQueryAttention, gqa_from_mha
from mha_lib.positions import rotary

# ---------------------------------------------------------------- hand-written student code


def student_rotary(x, positions, *bugs):
    d, L = x.shape[-1], x.shape[-2]
    i = torch.arange(d // 2, dtype=torch.float32)
    theta = 10000.0 ** (-(i / d if "i_over_d" in bugs else 2 * i / d))  # (d/2,)
    pos = torch.arange(L) if "ignored" in bugs else positions
    angle = pos[:, None].float() * theta  # (L, d/2)
    cos, sin = angle.cos(), angle.sin()
    if "opposite" in bugs:
        sin = -sin
    if "halves" in bugs:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def student_tiled(q, k, v, block_size, *bugs):
    B, Lq, d = q.shape
    m = torch.full((B, Lq), -math.inf)
    s = torch.zeros(B, Lq)
    acc = torch.zeros(B, Lq, v.shape[-1])
    outs = []
    for start in range(0, k.shape[1], block_size):
        kb, vb = k[:, start:start + block_size], v[:, start:start + block_size]
        scores = q @ kb.transpose(1, 2)
        if "no_scale" not in bugs:
            scores = scores / math.sqrt(d)
        if "averaged" in bugs:
            outs.append(torch.softmax(scores, dim=-1) @ vb)
            continue
        if "no_max" in bugs:
            m_new = torch.zeros(B, Lq)
        else:
            m_new = torch.maximum(m, scores.amax(dim=-1))
        p = torch.exp(scores - m_new[..., None])
        c = torch.exp(m - m_new) if "no_max" not in bugs else torch.ones(B, Lq)
        s = (s if "sum" in bugs else s * c) + p.sum(dim=-1)
        acc = (acc if "acc" in bugs else acc * c[..., None]) + p @ vb
        m = m_new
    return torch.stack(outs).mean(0) if "averaged" in bugs else acc / s[..., None]


def student_gqa(mha, num_kv_heads, *bugs):
    H, D = mha.num_heads, mha.W_q.out_features
    Hkv, d = num_kv_heads, D // H
    g = H // Hkv
    gqa = GroupedQueryAttention(D, H, Hkv, 0.0)
    with torch.no_grad():
        gqa.W_q.weight.copy_(mha.W_q.weight)
        gqa.W_o.weight.copy_(mha.W_o.weight)
        for name in ("W_k", "W_v"):
            W = getattr(mha, name).weight.reshape(H, d, D)  # one (d, D) block per head
            pooled = []
            for j in range(Hkv):
                group = ([h for h in range(H) if h % Hkv == j] if "tiled" in bugs
                         else list(range(j * g, (j + 1) * g)))
                if "sum" in bugs:
                    pooled.append(W[group].sum(0))
                elif "first" in bugs:
                    pooled.append(W[group[0]])
                else:
                    pooled.append(W[group].mean(0))
            getattr(gqa, name).weight.copy_(torch.cat(pooled))
    return gqa


def with_bugs(student, *bugs):
    return lambda *args: student(*args, *bugs)


def run(checker, candidate, capsys):
    ok = checker(candidate)
    return ok, capsys.readouterr().out


# ---------------------------------------------------------------- the references pass

REFERENCES = [
    (check_rotary, rotary),
    (check_rotary, student_rotary),
    (check_tiled_attention, lambda q, k, v, b: tiled_attention(q, k, v, block_size=b)),
    (check_tiled_attention, student_tiled),
    (check_gqa_from_mha, gqa_from_mha),
    (check_gqa_from_mha, student_gqa),
]


@pytest.mark.parametrize("checker, candidate", REFERENCES)
def test_reference_passes_with_full_marks(checker, candidate, capsys):
    ok, out = run(checker, candidate, capsys)
    assert ok is True and "cases pass" in out
    name = checker.__name__
    assert grading.partial_credit(name, candidate) == grading.max_points(name)


# ---------------------------------------------------------------- each mistake is named

WRONG = [
    (check_rotary, with_bugs(student_rotary, "halves"), ("pairs", "halves")),
    (check_rotary, with_bugs(student_rotary, "opposite"), ("angle", "opposite")),
    (check_rotary, with_bugs(student_rotary, "i_over_d"), ("exponent", "i_over_d")),
    (check_rotary, with_bugs(student_rotary, "ignored"), ("offset", "ignored")),
    (check_tiled_attention, with_bugs(student_tiled, "acc"), ("accumulator", "not_rescaled")),
    (check_tiled_attention, with_bugs(student_tiled, "sum"), ("running_sum", "not_rescaled")),
    (check_tiled_attention, with_bugs(student_tiled, "no_scale"), ("scale", "none")),
    (check_tiled_attention, with_bugs(student_tiled, "averaged"), ("blocks", "averaged")),
    (check_gqa_from_mha, with_bugs(student_gqa, "tiled"), ("kv_groups", "tiled")),
    (check_gqa_from_mha, with_bugs(student_gqa, "sum"), ("pool", "sum")),
    (check_gqa_from_mha, with_bugs(student_gqa, "first"), ("pool", "first")),
]


@pytest.mark.parametrize("checker, candidate, mistake", WRONG,
                         ids=[f"{c.__name__}-{m[0]}-{m[1]}" for c, _, m in WRONG])
def test_mistake_is_named_and_loses_its_family(checker, candidate, mistake, named_mistakes):
    named_mistakes(checker, candidate, [mistake])


def test_the_halves_convention_is_called_a_convention(capsys):
    ok, out = run(check_rotary, with_bugs(student_rotary, "halves"), capsys)
    assert ok is False and "not a bug, another convention" in out and "rope_permutation" in out


@pytest.mark.parametrize("checker, candidate, mistakes", [
    (check_rotary, with_bugs(student_rotary, "halves", "ignored"),
     [("pairs", "halves"), ("offset", "ignored")]),
    (check_rotary, with_bugs(student_rotary, "opposite", "i_over_d"),
     [("angle", "opposite"), ("exponent", "i_over_d")]),
    (check_tiled_attention, with_bugs(student_tiled, "acc", "sum"),
     [("accumulator", "not_rescaled"), ("running_sum", "not_rescaled")]),
    (check_tiled_attention, with_bugs(student_tiled, "averaged", "no_scale"),
     [("blocks", "averaged"), ("scale", "none")]),
    (check_gqa_from_mha, with_bugs(student_gqa, "tiled", "sum"),
     [("kv_groups", "tiled"), ("pool", "sum")]),
])
def test_two_mistakes_at_once_are_both_named(checker, candidate, mistakes, capsys):
    ok, out = run(checker, candidate, capsys)
    assert ok is False and all(MISTAKES[m].title in out for m in mistakes)
    assert "not a bug" not in out  # one of them is a real mistake


def test_partial_credit_table_names_the_families(capsys):
    score = grading.partial_credit("check_rotary", with_bugs(student_rotary, "ignored"))
    table = capsys.readouterr().out
    assert score == 3 == grading.max_points("check_rotary") - 1
    assert "1/1  rotation pairs" in table and "1/1  angles" in table
    assert f"0/1  positions: {MISTAKES['offset', 'ignored'].title}" in table
    assert grading.max_points("check_tiled_attention") == 3
    assert grading.max_points("check_gqa_from_mha") == 3


def test_exp_without_the_maximum_overflows_to_nan(capsys):
    ok, out = run(check_tiled_attention, with_bugs(student_tiled, "no_max"), capsys)
    assert ok is False and "NaN" in out and "large scores" in out


def test_unknown_mistake_gets_the_general_hint(capsys):
    ok, out = run(check_rotary, lambda x, p: rotary(x, p) * 1.5, capsys)
    assert ok is False and "match none of the classic mistakes" in out
    assert grading._run_checker("check_rotary", lambda x, p: rotary(x, p) * 1.5).score == 1


# ---------------------------------------------------------------- crashes, stubs, shapes


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("checker", [check_rotary, check_tiled_attention, check_gqa_from_mha])
def test_stub_is_not_implemented_yet_and_gets_nothing(checker, capsys):
    ok, out = run(checker, _stub, capsys)
    assert ok is False and "not implemented yet" in out
    assert grading._run_checker(checker.__name__, _stub).score == 0


@pytest.mark.parametrize("checker, candidate, phrase, score", [
    (check_rotary, lambda x, p: x[..., 0::2], "the output has shape", 0),
    (check_rotary, lambda x, p: None, "not a tensor", 0),
    (check_rotary, lambda x, p: x @ torch.ones(3), "raised RuntimeError", 0),
    # a crash the checker explains loses the runs point and that family's only
    (check_tiled_attention, lambda q, k, v, b: q @ k, "Q @ K without the transpose", 1),
    (check_tiled_attention, lambda q, k, v, b: tiled_attention(q, k, v, block_size=b)[0],
     "the output has shape", 0),
    (check_gqa_from_mha, lambda mha, Hkv: mha.W_k.weight, "not an nn.Module", 0),
    (check_gqa_from_mha, lambda mha, Hkv: GroupedQueryAttention(12, mha.num_heads, 1, 0.0),
     "num_kv_heads = 1", 0),
    (check_gqa_from_mha, lambda mha, Hkv: nn.Linear(12, 12), "raised TypeError", 0),
])
def test_crashes_and_wrong_results_are_reported_without_the_runs_point(checker, candidate,
                                                                         phrase, score, capsys):
    ok, out = run(checker, candidate, capsys)
    assert ok is False and phrase in out
    report = grading._run_checker(checker.__name__, candidate)
    assert not report.runs and report.score == score


def test_rotating_x_in_place_is_reported(capsys):
    def in_place(x, positions):
        x.copy_(rotary(x, positions))
        return x

    ok, out = run(check_rotary, in_place, capsys)
    assert ok is False and "modified its input in place" in out


def test_the_student_gets_a_copy_of_mha(capsys):
    def destructive(mha, Hkv):
        gqa = gqa_from_mha(mha, Hkv)
        with torch.no_grad():
            mha.W_k.weight.zero_()  # would corrupt the reference if it were shared
        return gqa

    ok, _ = run(check_gqa_from_mha, destructive, capsys)
    assert ok is True


# ---------------------------------------------------------------- the mistake models


def test_every_setting_has_a_named_mistake_and_a_family():
    for table in (modern._ROTARY_SETTINGS, modern._TILED_SETTINGS, modern._GQA_SETTINGS):
        for setting, values in table.items():
            assert setting in FAMILIES
            assert all((setting, value) in MISTAKES for value in values)
    names = {"check_rotary", "check_tiled_attention", "check_gqa_from_mha"}
    assert names <= set(exercises.__all__) and names <= set(grading.CHECKER_FAMILIES)


def test_models_without_mistakes_are_the_library(generator):
    x, p = torch.randn(2, 2, 3, 6, generator=generator), torch.tensor([4, 5, 6])
    torch.testing.assert_close(modern._rotary_variant(x, p, {}), rotary(x, p))
    q, k, v = (torch.randn(2, 3, 4, generator=generator, dtype=torch.float64),
               torch.randn(2, 7, 4, generator=generator, dtype=torch.float64),
               torch.randn(2, 7, 5, generator=generator, dtype=torch.float64))
    reference = tiled_attention(q, k, v, block_size=3)
    torch.testing.assert_close(modern._tiled_variant(q, k, v, 3, {}), reference)
    # the online-softmax model with "right" values read off the states is the reference too
    explicit = {"accumulator": "", "running_sum": ""}  # present but falsy: rescaled
    torch.testing.assert_close(modern._tiled_variant(q, k, v, 3, explicit), reference)
    W = torch.arange(24.0).reshape(6, 4)  # H = 3 heads of d = 2 rows
    torch.testing.assert_close(modern._pooled_rows(W, 3, 1, {}), W.reshape(3, 2, 4).mean(0))
    torch.testing.assert_close(modern._pooled_rows(W, 3, 3, {"kv_groups": "tiled"}), W)
