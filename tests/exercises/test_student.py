"""The student edition: nbgrader's release versions gathered in one folder (make student)."""

from __future__ import annotations

import nbformat

from mha_lib.book import student


def test_student_edition_is_the_nbgrader_release(tmp_path, capsys, demo_chapter):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    nbformat.write(demo_chapter, chapters / "01_demo.ipynb")
    assert student.main([str(chapters), str(tmp_path / "student")]) == 0
    assert "1 notebooks written" in capsys.readouterr().out
    nb = nbformat.read(tmp_path / "student" / "01_demo.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "SECRET" not in text and "BEGIN SOLUTION" not in text and "partial_credit" not in text
    assert "def my_masked_softmax(X, valid_lens=None):\n" in text  # the scaffold stays
    assert "    # YOUR CODE HERE\n    raise NotImplementedError()" in text
    assert "assert check_masked_softmax(my_masked_softmax)" in text  # the checker stays
    assert "YOUR ANSWER HERE" in text  # the written answer
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")
    assert sorted(p.name for p in chapters.iterdir()) == ["01_demo.ipynb"]
