"""The checkers of chapter 12d (mha_lib.exercises.linear): one token of the delta rule, one chunk.

The wrong answers below are written by hand, the way a student would write them (they do not
reuse the mistake models), so a test passes only if the checker recognises the mistake from its
numbers alone. Each test also runs the grading: the mistake's family loses its point.
"""

from __future__ import annotations

import pytest
import torch

from mha_lib import exercises
from mha_lib.exercises import MISTAKES, check_delta_chunk, check_delta_step, grading
from mha_lib.exercises import linear as linear_checkers
from mha_lib.exercises.catalogue import FAMILIES
from mha_lib.linear import delta_chunked, delta_recurrent

# ---------------------------------------------------------------- hand-written student code


def student_step(S, q, k, v, beta, *bugs):
    b = 1.0 if "no_beta" in bugs else beta[..., None]  # (B, H, 1)
    if "S_k" in bugs:
        old = torch.einsum("bhij,bhj->bhi", S, k)
    else:
        old = torch.einsum("bhi,bhij->bhj", k, S)  # k S
    if "no_correction" in bugs:
        old = 0 * old
    err = b * (v - old)
    write = torch.einsum("bhi,bhj->bhij", err, k) if "swapped" in bugs else torch.einsum("bhi,bhj->bhij", k, err)
    new = S + write
    out = torch.einsum("bhi,bhij->bhj", q, S if "old_state" in bugs else new)
    return new, out


def student_chunk(S, Q, K, V, beta, *bugs):
    C = Q.shape[2]
    b = beta.unsqueeze(-1)
    scores = K @ K.transpose(-1, -2)
    A = torch.tril(scores if "no_beta" in bugs else b * scores, diagonal=0 if "diagonal" in bugs else -1)
    rhs = b * (V - K @ S)
    U = torch.linalg.solve_triangular(torch.eye(C, dtype=Q.dtype) + A, rhs, upper=False)
    O = torch.tril(Q @ K.transpose(-1, -2), diagonal=-1 if "strict" in bugs else 0) @ U
    if "no_state" not in bugs:
        O = O + Q @ S
    new = K.transpose(-1, -2) @ U
    if "not_carried" not in bugs:
        new = new + S
    return O, new


def student_chunk_by_steps(S, Q, K, V, beta):
    """A chunk token by token, with the library's recurrent form: right, by another road."""
    out, new = delta_recurrent(Q, K, V, beta, torch.zeros_like(beta), S)
    return out, new


def with_bugs(student, *bugs):
    return lambda *args: student(*args, *bugs)




REFERENCES = [
    (check_delta_step, student_step),
    (check_delta_chunk, student_chunk),
    (check_delta_chunk, student_chunk_by_steps),
]

#: (checker, the bugs of the hand-written answer, the mistakes the checker must name)
WRONG = [
    (check_delta_step, ("no_beta",), [("delta_beta", "forgotten")]),
    (check_delta_step, ("S_k",), [("delta_read", "S_k")]),
    (check_delta_step, ("no_correction",), [("delta_read", "none")]),
    (check_delta_step, ("swapped",), [("delta_write", "swapped")]),
    (check_delta_step, ("old_state",), [("delta_output", "old_state")]),
    (check_delta_chunk, ("diagonal",), [("chunk_system", "with_diagonal")]),
    (check_delta_chunk, ("no_beta",), [("chunk_system", "no_beta")]),
    (check_delta_chunk, ("strict",), [("chunk_output", "strict")]),
    (check_delta_chunk, ("no_state",), [("chunk_output", "no_state")]),
    (check_delta_chunk, ("not_carried",), [("chunk_state", "not_carried")]),
]

_STUDENTS = {check_delta_step: student_step, check_delta_chunk: student_chunk}


@pytest.mark.parametrize("checker, candidate", REFERENCES)
def test_right_answers_pass_with_full_marks(checker, candidate, verdict):
    ok, out, report = verdict(checker, candidate)
    assert ok and "all 6 cases pass" in out
    assert report.score == grading.max_points(checker.__name__)


@pytest.mark.parametrize("checker, bugs, mistakes", WRONG,
                         ids=[f"{c.__name__}-{'+'.join(b)}" for c, b, _ in WRONG])
def test_each_mistake_is_named_with_its_hint_and_loses_its_family(checker, bugs, mistakes, named_mistakes):
    named_mistakes(checker, with_bugs(_STUDENTS[checker], *bugs), mistakes)


def test_a_step_in_float32_on_a_float64_chunk_is_refused(verdict):
    ok, out, _ = verdict(check_delta_chunk, lambda *x: tuple(t.float() for t in student_chunk(*x)))
    assert not ok


def test_unknown_mistake_gets_the_general_hint(verdict):
    ok, out, report = verdict(check_delta_step, lambda *x: (student_step(*x)[0], 2 * student_step(*x)[1]))
    assert not ok and "match none of the classic mistakes" in out and "delta_recurrent" in out


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("checker", list(_STUDENTS))
def test_stub_is_not_implemented_yet_and_gets_nothing(checker, verdict):
    ok, out, report = verdict(checker, _stub)
    assert not ok and "not implemented yet" in out and report.score == 0


@pytest.mark.parametrize("checker", list(_STUDENTS))
def test_a_single_tensor_instead_of_the_pair_is_named(checker, verdict):
    ok, out, report = verdict(checker, lambda *x: _STUDENTS[checker](*x)[0])
    assert not ok and "return the pair" in out and not report.runs


def test_updating_the_state_in_place_is_reported(verdict):
    def in_place(S, q, k, v, beta):
        new, out = student_step(S, q, k, v, beta)
        S.copy_(new)
        return new, out

    ok, out, _ = verdict(check_delta_step, in_place)
    assert not ok and "modified its input in place" in out


# ---------------------------------------------------------------- the mistake models


def test_every_setting_has_a_named_mistake_and_a_family_and_every_checker_is_registered():
    keys = [(setting, value) for table in (linear_checkers._STEP_SETTINGS, linear_checkers._CHUNK_SETTINGS)
            for setting, values in table.items() for value in values]
    assert [key for key in keys if key not in MISTAKES or key[0] not in FAMILIES] == []
    assert {c.__name__ for c in _STUDENTS} <= set(exercises.__all__) & set(grading.CHECKER_FAMILIES)
    assert len(keys) == len({(c, k) for c, _, ks in WRONG for k in ks if len(ks) == 1})  # each has a test


def test_the_chunk_models_without_mistakes_are_the_recurrent_form(generator):
    S = torch.randn(2, 2, 3, 3, generator=generator, dtype=torch.float64)
    Q, K, V = (torch.randn(2, 2, 5, 3, generator=generator, dtype=torch.float64) for _ in range(3))
    K = K / K.norm(dim=-1, keepdim=True)
    beta = torch.rand(2, 2, 5, generator=generator, dtype=torch.float64)
    steps = delta_recurrent(Q, K, V, beta, torch.zeros_like(beta), S)
    explicit = linear_checkers._chunk_variant(S, Q, K, V, beta, {"chunk_system": ""})  # no mistake
    for ours, theirs in zip(explicit, steps):
        assert torch.allclose(ours, theirs, atol=1e-12)
    assert all(torch.allclose(a, b, atol=1e-12) for a, b in
               zip(delta_chunked(Q, K, V, beta, torch.zeros_like(beta), S, chunk_size=5), steps))


def test_every_single_mistake_changes_the_results():
    S = torch.randn(1, 2, 3, 3, dtype=torch.float64)
    Q, K, V = (torch.randn(1, 2, 4, 3, dtype=torch.float64) for _ in range(3))
    beta = 0.5 * torch.ones(1, 2, 4, dtype=torch.float64)
    reference = linear_checkers._chunk_variant(S, Q, K, V, beta, {})
    for setting, values in linear_checkers._CHUNK_SETTINGS.items():
        for value in values:
            wrong = linear_checkers._chunk_variant(S, Q, K, V, beta, {setting: value})
            assert not all(torch.allclose(a, b) for a, b in zip(wrong, reference)), (setting, value)
    q, k, v, b = Q[:, :, 0], K[:, :, 0], V[:, :, 0], beta[:, :, 0]
    step = linear_checkers._step_variant(S, q, k, v, b, {})
    for setting, values in linear_checkers._STEP_SETTINGS.items():
        for value in values:
            wrong = linear_checkers._step_variant(S, q, k, v, b, {setting: value})
            assert not all(torch.allclose(x, y) for x, y in zip(wrong, step)), (setting, value)
