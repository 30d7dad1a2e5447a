"""Partial credit from the book's checkers: points per mistake family, the mistake named.

A checker of :mod:`mha_lib.exercises` passes or fails as a whole and prints, in words, which
classic mistake it sees. For an autograder that is too coarse: a student whose multi-head
attention only repeats the valid lengths the wrong way deserves more than one whose code does
not run. This module turns a checker's verdict into points:

* one point when the code runs on every case and returns the right shapes;
* one point per *mistake family* the checker covers (masking, scores, heads, output
  projection, counting, ...), kept unless the checker names a mistake of that family.

A wrong answer whose outputs match none of the classic mistakes keeps only the first point:
nothing says which family it belongs to. The checker itself is run unchanged; this module reads
its printed diagnosis through the catalogue :data:`mha_lib.exercises.MISTAKES` and the family
of each mistake setting, :data:`mha_lib.exercises.catalogue.FAMILIES`.

In the nbgrader assignments (:mod:`mha_lib.book.assignments`) every checked exercise has two
graded cells: the book's checker cell (its points when every case passes) and a hidden cell
``partial_credit("check_...", answer)`` whose printed table names the mistake and whose value
is its score.

Example::

    >>> from mha_lib.exercises.grading import partial_credit
    >>> partial_credit("check_masked_softmax", my_masked_softmax)  # doctest: +SKIP
    Partial credit from check_masked_softmax:
      1/1  runs on every case and returns the right shapes
      0/1  masking: softmax over the wrong axis (over the queries)
    1.0
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass, field

from mha_lib import exercises
from mha_lib.exercises.catalogue import FAMILIES, MISTAKES

__all__ = ["CHECKER_FAMILIES", "max_points", "partial_credit"]

#: The mistake families each checker can name, in the order the table prints them: register a
#: new checker here. A checker missing here gets no partial-credit cell: its test cell gives all
#: or nothing.
CHECKER_FAMILIES: dict[str, tuple[str, ...]] = {
    "check_masked_softmax": ("masking",),
    "check_dot_product_attention": ("masking", "scores"),
    "check_transpose_qkv": ("heads",),
    "check_transpose_output": ("heads",),
    "check_multihead_attention": ("masking", "scores", "heads", "output projection"),
    "check_num_parameters": ("counting",),
    "check_mean_entropy": ("entropy",),
    "check_stiefel_dimension": ("counting",),
    "check_crossover_length": ("formula",),
    "check_longest_sequence": ("formula",),
    "check_prune_heads": ("pruning",),
    "check_rotary": ("rotation pairs", "angles", "positions"),
    "check_interpolation": ("interpolation", "rotation pairs", "angles", "positions"),
    "check_tiled_attention": ("online softmax", "scores"),
    "check_gqa_from_mha": ("grouping", "pooling"),
    "check_gpt2_c_attn": ("weight layout", "fused projections"),
    "check_llama_qk": ("rotation pairs", "grouping"),
    "check_left_padding_mask": ("padding", "causality", "mask convention"),
    "check_threat_design": ("controls", "seeds", "learning rate", "conclusion"),
    "check_streaming_mask": ("window", "sinks", "causality", "mask convention"),
    "check_absorbed_scores": ("scores", "heads", "weight layout"),
    "check_gated_output": ("gate function", "heads", "output projection"),
    "check_delta_step": ("delta rule", "state layout", "update order"),
    "check_delta_chunk": ("triangular system", "chunk output", "update order"),
}

_RUNS = "runs on every case and returns the right shapes"

# Phrases of a checker's report that mean the code did not run or returned the wrong kind of
# result (as opposed to wrong numbers): no point for "runs".
_CRASH_MARKERS = (
    "not implemented yet",
    " raised ",
    "output has shape",
    "not a tensor",
    "not an nn.Module",
    "has no attribute",
    "weight shape",
    "bias although",
    "on the meta device",
    "on the device",
    "tensor of dtype",
    "cannot read",
    "can be called",
    "could not finish",
)
_UNEXPLAINED_MARKERS = ("match none of the classic mistakes", "may hide one more mistake")


@dataclass
class _Report:
    """What one checker said about one answer, and the points it is worth.

    Attributes:
        checker: the checker's name, e.g. ``"check_masked_softmax"``.
        passed: whether every case passed.
        message: everything the checker printed.
        runs: whether the code ran on every case and returned results of the right shape.
        named: the titles of the classic mistakes the checker named.
        failed_families: the families that lose their point.
    """

    checker: str
    passed: bool
    message: str
    runs: bool
    named: list[str] = field(default_factory=list)
    failed_families: dict[str, str] = field(default_factory=dict)

    @property
    def score(self) -> float:
        families = CHECKER_FAMILIES[self.checker]
        return float(self.runs) + sum(f not in self.failed_families for f in families)

    def table(self) -> str:
        """The points, one line each, naming the mistake behind every lost point."""
        lines = [f"Partial credit from {self.checker}:", f"  {int(self.runs)}/1  {_RUNS}"]
        for family in CHECKER_FAMILIES[self.checker]:
            reason = self.failed_families.get(family)
            lines.append(f"  {int(reason is None)}/1  {family}" + (f": {reason}" if reason else ""))
        return "\n".join(lines)


def _check_checker(checker: object) -> str:
    """``checker`` if it names a checker with partial credit, else a ValueError."""
    if not isinstance(checker, str) or checker not in CHECKER_FAMILIES \
            or not hasattr(exercises, checker):
        known = sorted(c for c in CHECKER_FAMILIES if hasattr(exercises, c))
        raise ValueError(f"checker: expected one of {known}, got {checker!r}")
    return checker


def max_points(checker: str) -> int:
    """Points of the partial-credit cell of an exercise checked by ``checker``."""
    return 1 + len(CHECKER_FAMILIES[_check_checker(checker)])


def _families_of(title: str, checker: str) -> set[str]:
    """The families (among the checker's) of the catalogue entries with this title."""
    settings = {key[0] for key, mistake in MISTAKES.items() if mistake.title == title}
    return {FAMILIES.get(s) for s in settings} & set(CHECKER_FAMILIES[checker])


def _run_checker(checker: str, answer) -> _Report:
    """Run the book's ``checker`` (a name in :mod:`mha_lib.exercises`) on ``answer``, quietly.

    Warnings and anything written to stderr are kept in the report's message, so that nbgrader
    (which gives 0 points to a cell that writes to stderr) sees only stdout.
    """
    _check_checker(checker)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        passed = bool(getattr(exercises, checker)(answer))
    message = out.getvalue() + err.getvalue() + "".join(f"warning: {w.message}\n" for w in caught)
    if passed:
        return _Report(checker, True, message, runs=True)
    runs = not any(marker in message for marker in _CRASH_MARKERS)
    named = [m.title for m in MISTAKES.values() if m.title in message]
    named = list(dict.fromkeys(named))  # one title may stand for several settings
    failed: dict[str, str] = {}
    explained = bool(named) and not any(marker in message for marker in _UNEXPLAINED_MARKERS)
    for title in named:
        families = _families_of(title, checker)
        if not families:
            explained = False
        for family in families:
            failed[family] = f"{failed[family]}; {title}" if family in failed else title
    if not explained:
        reason = ("does not run" if not runs else
                  "wrong output that matches no classic mistake (see the checker's report above)")
        for family in CHECKER_FAMILIES[checker]:
            failed.setdefault(family, reason)
    return _Report(checker, False, message, runs, named, failed)


def partial_credit(checker: str, answer) -> float:
    """Print the partial-credit table of ``answer`` under ``checker`` and return its score.

    The value (out of :func:`max_points`) is what nbgrader reads as the partial credit of the
    cell whose last expression this call is.
    """
    report = _run_checker(checker, answer)
    print(report.table())
    return report.score
