"""Partial credit from the checkers: full marks when right, the mistake's family lost and named."""

from __future__ import annotations

import pytest
import torch

from mha_lib import exercises
from mha_lib.exercises import grading
from mha_lib.exercises.catalogue import FAMILIES
from mha_lib.masking import masked_softmax


def test_every_checker_has_families_and_every_setting_a_family():
    checkers = {name for name in exercises.__all__ if name.startswith("check_")}
    assert checkers <= set(grading.CHECKER_FAMILIES)
    assert all(set(grading.CHECKER_FAMILIES[c]) <= set(FAMILIES.values()) for c in checkers)
    unmapped = {key[0] for key in exercises.MISTAKES} - set(FAMILIES)
    assert not unmapped, f"map these mistake settings to a family in catalogue.FAMILIES: {unmapped}"


def test_right_answer_gets_full_marks(capsys):
    score = grading.partial_credit("check_masked_softmax", masked_softmax)
    assert score == grading.max_points("check_masked_softmax") == 2
    assert "1/1  masking" in capsys.readouterr().out


def test_one_classic_mistake_loses_its_family_and_is_named(wrong_answer, capsys):
    checker = wrong_answer.checker
    report = grading._run_checker(checker, wrong_answer.define("answer"))
    title = exercises.MISTAKES[wrong_answer.mistake].title
    family = FAMILIES[wrong_answer.mistake[0]]
    assert not report.passed and report.runs
    assert title in report.named
    assert set(report.failed_families) == {family}
    assert report.score == grading.max_points(checker) - 1
    grading.partial_credit(checker, wrong_answer.define("answer"))
    assert f"0/1  {family}: {title}" in capsys.readouterr().out


def test_stub_and_crash_get_nothing():
    def stub(X, valid_lens=None):
        raise NotImplementedError

    def crash(X, valid_lens=None):
        return X @ torch.ones(7)

    for answer in (stub, crash):
        report = grading._run_checker("check_masked_softmax", answer)
        assert not report.runs and report.score == 0


def test_unexplained_wrong_answer_keeps_only_the_runs_point():
    report = grading._run_checker("check_masked_softmax", lambda X, valid_lens=None: X * 0 + 0.25)
    assert report.runs and not report.passed
    assert report.score == 1


def test_stderr_and_warnings_stay_out_of_stderr(capfd):
    import warnings

    def noisy(X, valid_lens=None):
        warnings.warn("student warning")
        return masked_softmax(X, valid_lens)

    assert grading.partial_credit("check_masked_softmax", noisy) == 2
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("checker", ["check_nothing", None, 3])
def test_unknown_checker_is_a_value_error(checker):
    with pytest.raises(ValueError, match="checker: expected one of"):
        grading.partial_credit(checker, print)
    with pytest.raises(ValueError, match="checker: expected one of"):
        grading.max_points(checker)
