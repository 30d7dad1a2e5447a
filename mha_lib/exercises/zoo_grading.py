"""Grading the bug zoo (:mod:`mha_lib.exercises.bug_zoo`): the diagnoses and the tests.

* Part A, :func:`grade_labels`: one point per specimen labelled with its bug class; a wrong or
  missing label's feedback names the probe that would have told.
* Part B, :func:`grade_test`: a student's test (a function that takes a layer factory and
  raises on a buggy layer) graded by mutation testing: full marks only when it raises on the
  given specimen **and** passes on the correct layer, one bonus point for every other specimen
  it also catches. A test that always passes, or that fails on the correct layer, earns nothing.

:data:`ANSWERS` holds the key: each specimen's bug class, the probe that exposes it and the
issue-tracker threads its class comes from.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple

import torch

from mha_lib.exercises.bug_zoo import BUG_CLASSES, SPECIMENS, reference

__all__ = ["ANSWERS", "grade_labels", "grade_test"]


class _Answer(NamedTuple):
    """A specimen's bug class, the probe that exposes it, and where its class was reported."""

    bug_class: str
    probe: str
    threads: str


#: The key of the zoo: specimen name -> its answer.
ANSWERS: dict[str, _Answer] = {
    "aardvark": _Answer("scale", "score_scale", "mlc-llm PR #3426"),
    "bison": _Answer("kv_cache", "cache", "gpt-neox PR #363"),
    "capybara": _Answer("mask_polarity", "future_token",
                       "LLMs-from-scratch #1061, PyTorch PR #170415, x-transformers #164"),
    "dingo": _Answer("padding", "batch_independence", "transformers #25790, #22161"),
    "echidna": _Answer("dropout_in_eval", "eval_determinism", "PyTorch #124464"),
    "ferret": _Answer("head_layout", "permutation", "jsbaan/transformer-from-scratch PR #6"),
    "gecko": _Answer("mask_leak", "future_token", "minGPT #75, transformers #17121"),
    "heron": _Answer("causal_alignment", "cache", "flash-attention #951"),
    "ibis": _Answer("rotary", "long_context",
                   "transformers #25199, llama2.c PR #286, torchtitan PR #1441"),
    "jackal": _Answer("nan", "padding_left", "PyTorch #103749, transformers PR #17306"),
    "kiwi": _Answer("mask_leak", "future_token", "xformers #103"),
    "lemur": _Answer("gqa_expansion", "sdpa", "onnx PR #7274, prime-rl PR #2681"),
    "marmot": _Answer("padding", "padding_right", "transformers #25790, #22161"),
    "narwhal": _Answer("kv_cache", "cache", "executorch PR #2010"),
}

_FULL = 2  # points of a test that catches its bug and passes on the correct layer


@dataclass
class _ZooReport:
    """Points and feedback.

    Attributes:
        title: what was graded.
        points: the points earned (bonus included).
        max_points: full marks (a test's bonus may take ``points`` past them).
        lines: one line of feedback each.
    """

    title: str
    points: int
    max_points: int
    lines: list[str] = field(default_factory=list)

    @property
    def full(self) -> bool:
        """Full marks (or more)."""
        return self.points >= self.max_points

    def __str__(self) -> str:
        return "\n".join([f"{self.title}: {self.points}/{self.max_points}",
                          *(f"  {line}" for line in self.lines)])


def grade_labels(labels: Mapping[str, str]) -> _ZooReport:
    """Part A: one point per specimen whose label is its bug class.

    Args:
        labels: specimen name -> a key of :data:`~mha_lib.exercises.bug_zoo.BUG_CLASSES`
            (a specimen left out earns nothing).

    Raises:
        ValueError: not a mapping, an unknown specimen name or an unknown label.
    """
    if not isinstance(labels, Mapping):
        raise ValueError("labels must be a dict of specimen name -> bug class, got "
                         f"{type(labels).__name__}")
    for name, label in labels.items():
        if name not in SPECIMENS:
            raise ValueError(f"labels: expected specimen names among {list(SPECIMENS)}, "
                             f"got {name!r}")
        if label not in BUG_CLASSES:
            raise ValueError(f"labels[{name!r}]: expected one of {list(BUG_CLASSES)}, "
                             f"got {label!r}")
    lines, points = [], 0
    for name, answer in ANSWERS.items():
        given = labels.get(name)
        if given == answer.bug_class:
            points += 1
            lines.append(f"1/1  {name}: {given}")
        else:
            said = "no label" if given is None else f"not {given}"
            lines.append(f"0/1  {name}: {said}; the {answer.probe} probe would have told you")
    return _ZooReport("Part A, the diagnoses", points, len(ANSWERS), lines)


def _raises(test: Callable, factory: Callable) -> tuple[bool, str]:
    """Whether ``test(factory)`` raises (anything but KeyboardInterrupt), and what; its prints
    are kept quiet and torch's random state is put back."""
    with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(io.StringIO()):
        torch.manual_seed(0)
        try:
            test(factory)
        except Exception as err:  # noqa: BLE001  (any failure of the test is a failure)
            return True, f"{type(err).__name__}: {err}"[:200]
    return False, ""


def grade_test(test: Callable, bug: str) -> _ZooReport:
    """Part B: grade ``test`` on the specimen ``bug`` by mutation testing.

    ``test(make_layer)`` must raise when ``make_layer()`` builds the buggy layer and return
    when it builds the correct one (``make_layer(seed=0)``: a fresh layer, D = 16, H = 4,
    Hkv = 2, RoPE, dropout 0.1, evaluation mode). Full marks (2) when it does both; then one
    bonus point per other specimen it also catches. A test that fails on the correct layer, or
    does not fail on ``bug``, earns 0.

    Raises:
        ValueError: ``test`` not callable, ``bug`` not a specimen name.
    """
    if not callable(test):
        raise ValueError(f"test must be a function of a layer factory, got {type(test).__name__}")
    if bug not in SPECIMENS:
        raise ValueError(f"bug: expected a specimen name among {list(SPECIMENS)}, got {bug!r}")
    title = f"Part B, a test for {bug}"
    failed, why = _raises(test, reference)
    if failed:
        return _ZooReport(title, 0, _FULL, [f"fails on the correct layer ({why}): it tests "
                                           "something a healthy layer does not do"])
    caught, _ = _raises(test, SPECIMENS[bug])
    if not caught:
        return _ZooReport(title, 0, _FULL, [f"passes on {bug}: it does not catch the bug "
                                           f"(try the {ANSWERS[bug].probe} probe's idea)"])
    others = [name for name, specimen in SPECIMENS.items()
              if name != bug and _raises(test, specimen)[0]]
    also = ", ".join(others) if others else "no other specimen"
    lines = [f"{_FULL}/{_FULL}  fails on {bug}, passes on the correct layer",
             f"+{len(others)} bonus: also catches {also}"]
    return _ZooReport(title, _FULL + len(others), _FULL, lines)
