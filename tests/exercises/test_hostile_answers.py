"""A checker never raises because of the code it checks (mha_lib.exercises.runner).

Whatever an answer does (raise any ``BaseException`` but ``KeyboardInterrupt``, return a meta
tensor, another dtype, no tensor, an object whose ``__eq__`` or ``__bool__`` raises, change
torch's settings or its inputs), every checker returns False, names what happened, and the
partial credit gives no point for "runs". Hypothesis draws the behaviour and the checker.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import mha_lib
from mha_lib import exercises, importance
from mha_lib.exercises import grading
from mha_lib.exercises.grading import CHECKER_FAMILIES

CHECKERS = sorted(CHECKER_FAMILIES)
MODULE_CHECKERS = {"check_multihead_attention", "check_prune_heads", "check_gqa_from_mha"}


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message")


class _Custom(BaseException):
    """A BaseException that is no Exception (like SystemExit)."""


class _Hostile:
    """An object whose comparisons, truth value and length raise."""

    def __eq__(self, other):
        raise RuntimeError("__eq__")

    __ne__ = __lt__ = __gt__ = __eq__

    def __bool__(self):
        raise SystemExit("__bool__")

    def __len__(self):
        raise GeneratorExit

    __hash__ = None


class _RaisingTuple(tuple):
    def __getitem__(self, i):
        raise SystemExit("__getitem__")

    def __len__(self):
        raise SystemExit("__len__")


class _Spiteful(torch.Tensor):
    """A tensor whose every torch function raises SystemExit."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise SystemExit("__torch_function__")


def _raise(exc):
    def behave(x):
        raise exc

    return behave


def _like(x):
    return x if isinstance(x, torch.Tensor) else torch.zeros(3)


#: What an answer does with its first tensor argument ``x`` (the result it returns).
BEHAVIOURS = {
    "SystemExit": _raise(SystemExit(3)),
    "GeneratorExit": _raise(GeneratorExit()),
    "StopIteration": _raise(StopIteration()),
    "a custom BaseException": _raise(_Custom("custom")),
    "RecursionError": _raise(RecursionError("deep")),
    "MemoryError": _raise(MemoryError()),
    "an unprintable exception": _raise(_Unprintable()),
    "a huge message": _raise(ValueError("x" * 10**6)),
    "meta like x": lambda x: torch.empty_like(_like(x), device="meta"),
    "meta scalar": lambda x: torch.empty((), device="meta"),
    "complex": lambda x: _like(x).to(torch.complex64),
    "bool": lambda x: _like(x) > 0,
    "long": lambda x: _like(x).long(),
    "float16": lambda x: _like(x).half(),
    "NaN": lambda x: torch.full_like(_like(x).float(), float("nan")),
    "inf": lambda x: torch.full_like(_like(x).float(), float("inf")),
    "huge values": lambda x: torch.full_like(_like(x).float(), 3e38),
    "None": lambda x: None,
    "an object whose __eq__ and __bool__ raise": lambda x: _Hostile(),
    "a tuple whose items raise": lambda x: _RaisingTuple((1, 2)),
    "a spiteful tensor subclass": lambda x: _like(x).clone().as_subclass(_Spiteful),
    "an int too large for a float": lambda x: 10**400,
    "a numpy array": lambda x: np.zeros(3),
    "a string": lambda x: "attention",
    "a huge expanded tensor": lambda x: torch.zeros(1).expand(10**6, 10**6),
    "a sparse tensor": lambda x: _like(x).float().to_sparse(),
    "x modified in place": lambda x: _like(x).mul_(2),
}


#: Results the checkers read as tensors (wrong numbers, but the code "runs"); integer and
#: half-precision tensors are fine for an integer answer (the counting exercises).
READABLE = {"a spiteful tensor subclass", "a sparse tensor", "an int too large for a float",
            "long", "float16"}


class _HostileModule(nn.Module):
    """A module whose forward pass does ``behave``."""

    def __init__(self, behave):
        super().__init__()
        self.behave = behave

    def forward(self, x, *args):
        return self.behave(x)


def answer_for(checker: str, behave):
    """An answer to ``checker`` whose own computation does ``behave``."""
    if checker == "check_multihead_attention":
        class HostileMHA(mha_lib.MultiHeadAttention):
            def forward(self, queries, *args):
                return behave(queries)

        return HostileMHA
    if checker in ("check_prune_heads", "check_gqa_from_mha"):
        return lambda mha, heads: _HostileModule(behave)
    if checker == "check_threat_design":  # a design takes no input: it returns a spec
        return lambda: behave(torch.zeros(2))
    return lambda x, *args: behave(x)


def _verdict(checker: str, answer, capsys) -> str:
    ok = getattr(exercises, checker)(answer)
    out = capsys.readouterr().out
    assert ok is False
    assert out.startswith(f"{checker}: not yet right.") or "not implemented yet" in out
    return out


@pytest.mark.parametrize("checker", CHECKERS)
@pytest.mark.parametrize("behaviour", sorted(set(BEHAVIOURS) - {"NaN", "inf", "huge values",
                                                                 "x modified in place"}))
def test_hostile_answer_is_reported_not_raised(checker, behaviour, capsys):
    out = _verdict(checker, answer_for(checker, BEHAVIOURS[behaviour]), capsys)
    assert "could not finish" not in out  # named by the runner, not caught by the last resort
    report = grading._run_checker(checker, answer_for(checker, BEHAVIOURS[behaviour]))
    assert not report.passed
    if behaviour not in READABLE:
        assert not report.runs, report.message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(checker=st.sampled_from(CHECKERS), behaviour=st.sampled_from(sorted(BEHAVIOURS)),
       at_construction=st.booleans())
def test_any_behaviour_of_any_answer_gives_a_verdict(checker, behaviour, at_construction, capsys):
    behave = BEHAVIOURS[behaviour]
    answer = answer_for(checker, behave)
    if at_construction and checker in MODULE_CHECKERS:
        answer = lambda *args, **kwargs: behave(None)  # noqa: E731  (the class call itself)
    _verdict(checker, answer, capsys)
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("behaviour, phrase", [
    ("SystemExit", "raised SystemExit: 3"),
    ("GeneratorExit", "raised GeneratorExit"),
    ("a custom BaseException", "raised _Custom: custom"),
    ("an unprintable exception", "a message that cannot be printed"),
    ("meta like x", "on the meta device"),
    ("complex", "dtype torch.complex64"),
    ("float16", "less precise than the inputs' torch.float32"),
    ("an object whose __eq__ and __bool__ raise", "returned _Hostile, not a tensor"),
    ("a tuple whose items raise", "cannot read"),
])
def test_the_verdict_names_what_happened(behaviour, phrase, capsys):
    out = _verdict("check_masked_softmax", answer_for("check_masked_softmax", BEHAVIOURS[behaviour]),
                   capsys)
    assert phrase in out


def test_a_huge_message_is_cut(capsys):
    out = _verdict("check_rotary", answer_for("check_rotary", BEHAVIOURS["a huge message"]), capsys)
    assert len(out) < 3000


def test_float64_for_float32_inputs_is_accepted(capsys):
    assert exercises.check_masked_softmax(lambda X, lens: mha_lib.masked_softmax(X.double(), lens))
    assert exercises.check_longest_sequence(lambda budget, B, H: np.int64(
        np.floor(np.sqrt(budget // (4 * B * H)))) if budget < 10**12 else 10**8)


@pytest.mark.parametrize("checker", CHECKERS)
@pytest.mark.parametrize("answer", [None, 3, torch.zeros(2), "masked_softmax"])
def test_an_answer_that_cannot_be_called_is_named(checker, answer, capsys):
    out = _verdict(checker, answer, capsys)
    assert "not a function or class that can be called" in out
    assert grading._run_checker(checker, answer).score == 0


@pytest.mark.parametrize("checker", CHECKERS)
def test_keyboard_interrupt_goes_through(checker):
    with pytest.raises(KeyboardInterrupt):
        getattr(exercises, checker)(answer_for(checker, _raise(KeyboardInterrupt())))


def test_torch_settings_changed_by_an_answer_are_put_back(capsys):
    def meddling(X, valid_lens):
        torch.set_default_dtype(torch.float64)
        torch.set_default_device("meta")
        torch.set_grad_enabled(False)
        return mha_lib.masked_softmax(X, valid_lens)

    assert exercises.check_masked_softmax(meddling)
    assert torch.get_default_dtype() == torch.float32
    assert torch.get_default_device() == torch.device("cpu")
    assert torch.is_grad_enabled()
    # and no device mode left behind, which every later torch call would go through
    assert torch.overrides._get_current_function_mode_stack() == []


def test_an_answer_that_breaks_torch_is_reported_by_the_last_resort(capsys, monkeypatch):
    def vandal(mha, heads):
        monkeypatch.setattr(torch, "ones", None)  # the reference needs torch.ones
        return _HostileModule(lambda x: x)

    out = _verdict("check_prune_heads", vandal, capsys)
    assert "could not finish" in out


def test_prune_heads_gets_a_copy_of_mha(capsys):
    def destructive(mha, heads):
        pruned = importance.prune_heads(copy.deepcopy(mha), heads)
        with torch.no_grad():
            mha.W_q.weight.zero_()  # would corrupt the reference if it were shared
        mha.num_heads = 99
        return pruned

    assert exercises.check_prune_heads(destructive), capsys.readouterr().out


def test_every_public_checker_is_guarded():
    for name in exercises.__all__:
        if name.startswith("check_"):
            assert getattr(getattr(exercises, name), "is_checker", False), name
