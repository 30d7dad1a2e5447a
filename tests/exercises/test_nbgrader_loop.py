"""The whole nbgrader loop on a temporary course, as a teacher runs it.

Release chapters 1-3, 10 and 11 (the checkers of chapters 1-3, ``check_gqa_from_mha`` and
``check_tiled_attention``) with ``nbgrader generate_assignment``; submit, for student ``right``,
every solution put back and, for student ``wrong``, one classic mistake per checked exercise (the
fixture ``wrong_answers`` of tests/exercises/conftest.py); ``nbgrader autograde``; ``nbgrader
generate_feedback``. Then: ``right`` has full marks on every autograded cell; ``wrong`` loses the
checker cell's points and exactly one family point of the partial-credit cell per checked
exercise, and the feedback names each mistake.
Everything runs in tmp_path with the course's own config and gradebook (never ~/.jupyter).
"""

from __future__ import annotations

import html
import re

import nbformat
import pytest

from mha_lib import exercises
from mha_lib.book import assignments
from mha_lib.exercises.catalogue import FAMILIES

NAMES = ["01_model", "02_transposition", "03_implementation", "03b_positions_and_block",
         "10_grouped_query_attention",
         "11_flash_attention"]
ASSIGNMENT = "session"  # one assignment with these chapters: one nbgrader run per step
SOLUTION_MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.MULTILINE)


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def checked_exercises(source_nb, wrong_answers) -> dict[str, tuple[str, str]]:
    """{label: (checker, answer name)} of the exercises with a partial-credit cell and a wrong
    answer in ``wrong_answers``."""
    found = {}
    for cell in source_nb.cells:
        grade_id = _grade_id(cell) or ""
        if grade_id.endswith("-mistakes"):
            checker, name = re.search(r'partial_credit\("(\w+)", (\w+)\)', cell.source).groups()
            if checker in wrong_answers:  # a checker without a wrong answer here: submitted right
                found[grade_id.removesuffix("-mistakes")] = (checker, name)
    return found


def submission(release_nb, source_nb, mistakes: dict[str, tuple[str, str]], wrong_answers):
    """The release with every code answer put back; with ``mistakes``, the cell defining each
    checked answer holds the wrong answer instead."""
    answers = {_grade_id(c): SOLUTION_MARKERS.sub("", c.source) for c in source_nb.cells
               if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}
    for cell in release_nb.cells:
        grade_id = _grade_id(cell)
        if cell.cell_type != "code" or grade_id not in answers:
            continue
        cell.source = answers[grade_id]
        for label, (checker, name) in mistakes.items():
            defines = re.search(rf"^(def|class) {name}\b", cell.source, re.MULTILINE)
            if grade_id.startswith(label + "-answer") and defines:
                cell.source = wrong_answers[checker].source.format(name=name)
    return release_nb


@pytest.mark.plumbing  # (the first unit pass only: see the Makefile's unit-portable)
def test_generate_submit_autograde_feedback(tmp_path, root, wrong_answers):
    from nbgrader.api import Gradebook

    course = tmp_path / "course"
    released = assignments.build(root / "chapters", course, NAMES, assignment=ASSIGNMENT)
    assert [p.stem for p in released] == NAMES
    checked: dict[str, dict[str, tuple[str, str]]] = {}
    for name in NAMES:
        source = nbformat.read(course / "source" / ASSIGNMENT / f"{name}.ipynb", as_version=4)
        release = nbformat.read(course / "release" / ASSIGNMENT / f"{name}.ipynb", as_version=4)
        release_text = "\n".join(c.source for c in release.cells)
        assert "BEGIN SOLUTION" not in release_text and "partial_credit" not in release_text
        assert "# YOUR CODE HERE" in release_text
        assert all("checksum" in c.metadata["nbgrader"] for c in release.cells
                   if c.metadata.get("nbgrader", {}).get("grade"))
        checked[name] = checked_exercises(source, wrong_answers)
        for student, mistakes in (("right", {}), ("wrong", checked[name])):
            folder = course / "submitted" / student / ASSIGNMENT
            folder.mkdir(parents=True, exist_ok=True)
            fresh = nbformat.read(course / "release" / ASSIGNMENT / f"{name}.ipynb", as_version=4)
            nbformat.write(submission(fresh, source, mistakes, wrong_answers), folder / f"{name}.ipynb")
    assert sum(len(checked[name]) for name in NAMES[:3]) >= 6, checked  # chapters 1-3
    assert {checker for c in checked.values() for checker, _ in c.values()} >= {
        "check_rotary", "check_gqa_from_mha", "check_tiled_attention"}, checked  # 3b, 10, 11
    assignments.nbgrader(course, "autograde", ASSIGNMENT, "--force")
    assignments.nbgrader(course, "generate_feedback", ASSIGNMENT, "--force")

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for name in NAMES:
            for student in ("right", "wrong"):
                notebook = gradebook.find_submission_notebook(name, ASSIGNMENT, student)
                scores = {g.name: (g.auto_score, g.max_score) for g in notebook.grades
                          if not g.name.endswith("-written")}  # written: graded by hand
                for grade_id, (score, max_score) in scores.items():
                    label = grade_id.rsplit("-", 1)[0]
                    if student == "right" or label not in checked[name]:
                        assert score == max_score, (student, name, grade_id, score)
                    elif grade_id.endswith("-test"):
                        assert score == 0, (name, grade_id)
                    else:
                        assert score == max_score - 1, (name, grade_id, score)
    for name in NAMES:
        feedback = html.unescape((course / "feedback" / "wrong" / ASSIGNMENT / f"{name}.html").read_text())
        for label, (checker, _) in checked[name].items():
            mistake = wrong_answers[checker].mistake
            title, family = exercises.MISTAKES[mistake].title, FAMILIES[mistake[0]]
            assert title in feedback, (name, label, title)
            assert f"0/1  {family}: {title}" in feedback, (name, label)
