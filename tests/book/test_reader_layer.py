"""The reader's layer of every chapter: checks hidden, Predict questions that do not answer
themselves, no test or build talk on the page.

A *check cell* holds the assertions behind a chapter's claims: the website removes it (tag
``remove-cell``) and JupyterLab shows it collapsed (``metadata.jupyter.source_hidden``).
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
ASSERTION = re.compile(r"\bassert\b|assert_close|testing\.")
MAX_VISIBLE_ASSERTIONS = 20  # in the whole book
# Words about the book's machinery, not about attention.
BUILD_TALK = re.compile(
    r"\bnbval\b|\basserted\b|\bassertions?\b|the machine that built|printed above|page fragment"
    r"|\bthe build\b|\bbrowser tests?\b|\bunit tests?\b|\bCI\b",
    re.IGNORECASE,
)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _hidden_from_site(cell: dict) -> bool:
    tags = cell.get("metadata", {}).get("tags", [])
    return any(t.startswith(("remove-", "hide-input")) for t in tags)


def _collapsed_in_lab(cell: dict) -> bool:
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def visible_assertion_lines(path: Path) -> int:
    """Assertion lines in code cells that the website shows."""
    return sum(
        1
        for cell in _cells(path)
        if cell["cell_type"] == "code" and not _hidden_from_site(cell) and not _collapsed_in_lab(cell)
        for line in _source(cell).splitlines()
        if ASSERTION.search(line)
    )


def test_the_book_shows_at_most_20_assertion_lines():
    counts = {p.name: visible_assertion_lines(p) for p in CHAPTERS}
    assert sum(counts.values()) <= MAX_VISIBLE_ASSERTIONS, counts


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_check_cells_are_removed_on_the_site_and_collapsed_in_jupyterlab(path):
    wrong = [
        i for i, cell in enumerate(_cells(path))
        if cell["cell_type"] == "code"
        and "remove-cell" in cell.get("metadata", {}).get("tags", [])
        and not _collapsed_in_lab(cell)
    ]
    assert wrong == [], f"check cells {wrong} are not collapsed in JupyterLab"


def predict_run_cells(path: Path) -> list[tuple[str, int, dict]]:
    """(exercise label, index, cell) of the code cells between a Predict exercise and its solution."""
    found, label = [], None
    for i, cell in enumerate(_cells(path)):
        text = _source(cell)
        if cell["cell_type"] == "markdown":
            if text.startswith("```{exercise}") and "predict" in text.splitlines()[0].lower():
                label = re.search(r":label:\s*(\S+)", text).group(1)
            elif "{solution-start}" in text or text.startswith("```{exercise}"):
                label = None
        elif label is not None:
            found.append((label, i, cell))
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_predict_run_cells_hold_no_answer_and_fold_their_output(path):
    for label, i, cell in predict_run_cells(path):
        assert not ASSERTION.search(_source(cell)), f"{label}: cell {i} asserts the answer"
        assert "hide-output" in cell.get("metadata", {}).get("tags", []), (
            f"{label}: cell {i} shows its output before the reader opens it"
        )


def test_there_are_predict_exercises():
    assert sum(len(predict_run_cells(p)) for p in CHAPTERS) >= 5


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_test_or_build_talk_on_the_page(path):
    talk = []
    for i, cell in enumerate(_cells(path)):
        if _hidden_from_site(cell):
            continue
        text = _source(cell)
        if cell["cell_type"] == "code":  # comments and printed strings reach the page too
            text = "\n".join(re.findall(r"#.*|\"[^\"]*\"|'[^']*'", text))
        talk += [f"cell {i}: {m.group(0)!r}" for m in BUILD_TALK.finditer(text)]
    assert talk == []


def test_the_detector_sees_a_visible_assertion(tmp_path):
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "assert x == 1\n"]},
                    {"cell_type": "code", "metadata": {"tags": ["remove-cell"],
                                                       "jupyter": {"source_hidden": True}},
                     "source": ["assert x == 1\n"]}]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    assert visible_assertion_lines(path) == 1
