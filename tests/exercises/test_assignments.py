"""nbgrader marks derived from the chapters' conventions; the course source; nothing overwrites
the chapters; the teacher's session plan adds up. (The full nbgrader loop: test_nbgrader_loop.)"""

from __future__ import annotations

import copy
import re

import nbformat
import pytest

from mha_lib.book import assignments, student


def _nbgrader(nb) -> dict[str, dict]:
    return {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]
            for c in nb.cells if "nbgrader" in c.metadata}


# ------------------------------------------------------------------------- marking


def test_mark_derives_answers_tests_and_written_answers(demo_chapter):
    nb = demo_chapter
    assert assignments.mark_notebook(nb) == 3
    meta = _nbgrader(nb)
    assert set(meta) == {"ex-softmax-answer", "ex-softmax-test", "ex-why-written",
                         "ex-assert-answer", "ex-assert-test"}
    assert meta["ex-softmax-answer"]["solution"] and not meta["ex-softmax-answer"]["grade"]
    assert meta["ex-softmax-test"] == {**meta["ex-softmax-test"], "grade": True, "solution": False,
                                       "locked": True, "points": 1}
    assert meta["ex-why-written"]["solution"] and meta["ex-why-written"]["grade"]
    from nbgrader.nbgraderformat import MetadataValidator

    MetadataValidator().validate_nb(nb)


def test_mark_is_idempotent_and_keeps_an_authors_points(demo_chapter):
    nb = demo_chapter
    assignments.mark_notebook(nb)
    test_cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex-assert-test")
    test_cell.metadata["nbgrader"]["points"] = 5
    written = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex-why-written")
    written.metadata["nbgrader"]["points"] = 0  # an ungraded prediction
    once = copy.deepcopy(nb)
    assignments.mark_notebook(nb)
    assert nb == once


def test_marking_the_chapters_changes_nothing_but_nbgrader_metadata(chapter_path):
    original = nbformat.read(chapter_path, as_version=4)
    nb = copy.deepcopy(original)
    assignments.mark_notebook(nb)
    again = copy.deepcopy(nb)
    assignments.mark_notebook(again)
    assert again == nb
    for before, after in zip(original.cells, nb.cells, strict=True):
        after = copy.deepcopy(after)
        after.metadata.pop("nbgrader", None)
        before = copy.deepcopy(before)
        before.metadata.pop("nbgrader", None)
        assert before == after
    assert "BEGIN SOLUTION" not in "".join(c.source for c in nb.cells)


def test_the_chapters_carry_their_nbgrader_marks(chapter_path):
    nb = nbformat.read(chapter_path, as_version=4)
    marked = copy.deepcopy(nb)
    assignments.mark_notebook(marked)
    assert marked == nb, (f"{chapter_path.name}: the nbgrader marks are stale; run "
                          "`.venv/bin/python -m mha_lib.book.assignments mark chapters/*.ipynb`")


# ------------------------------------------------------------------------- solution regions


def test_solution_regions_keep_the_scaffold():
    source = (
        "import torch\n\n\n"
        "def f(X: torch.Tensor,\n      n: int = 2) -> torch.Tensor:\n"
        '    """Doc."""\n'
        "    # the trick\n"
        "    secret = X * n\n"
        "    return secret\n\n\n"
        "print(f(torch.ones(1)))\n"
    )
    marked = assignments.solution_regions(source)
    assert marked.splitlines() == [
        "import torch", "", "",
        "def f(X: torch.Tensor,", "      n: int = 2) -> torch.Tensor:",
        "    ### BEGIN SOLUTION", '    """Doc."""', "    # the trick", "    secret = X * n", "    return secret",
        "    ### END SOLUTION", "", "",
        "### BEGIN SOLUTION", "print(f(torch.ones(1)))", "### END SOLUTION"]


def test_solution_regions_in_a_class_keep_every_method_header():
    source = (
        "class M:\n"
        '    """Doc."""\n\n'
        "    def __init__(self, a):\n"
        "        self.secret = a\n\n"
        "    def g(self):\n"
        "        return self.secret\n"
    )
    marked = assignments.solution_regions(source)
    assert "    def __init__(self, a):\n        ### BEGIN SOLUTION\n" in marked
    assert "    def g(self):\n        ### BEGIN SOLUTION\n        return self.secret\n" in marked
    assert marked.count("### END SOLUTION") == 2
    compile(marked, "<marked>", "exec")


def test_a_cell_without_definitions_is_one_region():
    assert assignments.solution_regions("answer = 42\nprint(answer)") == (
        "### BEGIN SOLUTION\nanswer = 42\nprint(answer)\n### END SOLUTION")


# ------------------------------------------------------------------------- course source


def test_source_notebook_drops_the_answer_key_prose_and_adds_partial_credit(demo_chapter):
    nb = demo_chapter
    original = copy.deepcopy(nb)
    source = assignments.source_notebook(nb)
    assert nb == original  # the input is left alone
    text = "\n".join(c.source for c in source.cells)
    assert "SECRET PROSE" not in text and "{solution" not in text and "{exercise}" not in text
    assert "**Exercise: Ex-Softmax**\n\nWrite `my_masked_softmax`." in text
    meta = _nbgrader(source)
    assert meta["ex-softmax-mistakes"]["points"] == 2  # runs + masking
    assert meta["ex-why-written"]["grade"]  # the model answer, hidden by nbgrader in the release
    hidden = next(c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                  == "ex-softmax-mistakes")
    assert 'partial_credit("check_masked_softmax", my_masked_softmax)' in hidden.source
    assert "### BEGIN HIDDEN TESTS" in hidden.source
    answer = next(c for c in source.cells if assignments.is_solution_cell(c))
    assert '### BEGIN SOLUTION\n    """Softmax over' in answer.source
    assert all(c.outputs == [] for c in source.cells if c.cell_type == "code")


# ------------------------------------------------------------------------- nothing overwrites chapters


@pytest.mark.parametrize("where", ["equal", "inside", "containing"])
def test_build_refuses_to_touch_the_chapters(tmp_path, where, capsys, demo_chapter):
    chapters = tmp_path / "book" / "chapters"
    chapters.mkdir(parents=True)
    path = chapters / "01_demo.ipynb"
    nbformat.write(demo_chapter, path)
    before = path.read_bytes()
    out = {"equal": chapters, "inside": chapters / "course", "containing": tmp_path / "book"}[where]
    with pytest.raises(assignments.OverlapError, match="apart from the chapters"):
        assignments.build(chapters, out)
    assert assignments.main(["build", str(chapters), str(out)]) == 2
    assert student.main([str(chapters), str(out)]) == 2
    assert "nothing was written" in capsys.readouterr().err
    assert path.read_bytes() == before
    assert sorted(p.name for p in chapters.iterdir()) == ["01_demo.ipynb"]
    assert not (tmp_path / "book" / "source").exists()


# ------------------------------------------------------------------------- teaching.md


def test_teaching_session_plan_adds_up_to_90_minutes(root):
    text = (root / "teaching.md").read_text()
    plan = text.split("## A 90-minute session", 1)[1].split("\n## ", 1)[0]
    minutes = [int(m) for m in re.findall(r"^\|\s*(\d+)\s*min\s*\|", plan, re.MULTILINE)]
    assert len(minutes) >= 4 and sum(minutes) == 90, minutes


# ------------------------------------------------------------------------- no answer reaches students


def _released(nb):
    """What nbgrader's ClearSolutions and ClearHiddenTests leave of a source notebook."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    nb, _ = ClearSolutions().preprocess(nb, {})
    nb, _ = ClearHiddenTests().preprocess(nb, {})
    return nb


def test_no_line_of_a_solution_reaches_the_release(chapter_path):
    nb = nbformat.read(chapter_path, as_version=4)
    release = _released(assignments.source_notebook(nb))
    released = "\n".join(c.source for c in release.cells)
    outside = "\n".join(c.source for i, c in enumerate(nb.cells) if not any(
        ex.start <= i <= ex.end for ex in assignments.find_exercises(nb)))
    for ex in assignments.find_exercises(nb):
        for i in ex.code + ex.prose + ex.untagged:
            for line in nb.cells[i].source.splitlines():
                body = line.strip()
                if len(body) > 20 and not body.startswith(("def ", "class ", "from ", "import ", '"""')) \
                        and body not in outside:
                    assert body not in released, (chapter_path.name, ex.label, body)
    assert "partial_credit" not in released and "BEGIN SOLUTION" not in released
