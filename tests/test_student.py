"""The student edition: stubs replace the solutions, checkers report them, solutions restore.

The kernel tests build the edition into tmp_path and run one notebook per chapter in which,
after each checker cell that follows stubs, the original solution cells and the checker are
inserted again. One run thus checks (a) that every stub is reported "not implemented yet" by
its checker and (b) that with the solutions put back (by cell id) every checker passes.
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from mha_lib import exercises
from mha_lib.book import student

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
CHECKER_CALL = re.compile(r"\b(check_\w+)\s*\(")


# ------------------------------------------------------------------------- a small chapter


def solution_cell(source: str):
    return new_code_cell(source, metadata={"tags": ["solution"]})


def exercise_block(label: str, question: str, solution: list, checker: str) -> list:
    return [
        new_markdown_cell(f"```{{exercise}} {label.title()}\n:label: {label}\n\n{question}\n```"),
        new_markdown_cell(f"```{{solution-start}} {label}\n:class: dropdown\n```"),
        *solution,
        new_markdown_cell("```{solution-end}\n```"),
        new_code_cell(checker),
    ]


def demo_chapter():
    cells = [
        new_markdown_cell("# A demo chapter\n\nSome prose."),
        new_code_cell("import torch\nfrom torch import nn\n"
                      "from mha_lib.exercises import check_masked_softmax, "
                      "check_multihead_attention, check_num_parameters"),
        *exercise_block(
            "ex-softmax", "Write `my_masked_softmax`.",
            [solution_cell(
                "def my_masked_softmax(X, valid_lens=None):\n"
                '    """Softmax over the last axis that skips the keys past the valid length."""\n'
                "    if valid_lens is None:\n"
                "        return torch.softmax(X, dim=-1)\n"
                "    from mha_lib.masking import keep_mask_from_valid_lens\n"
                "    keep = keep_mask_from_valid_lens(valid_lens, X.shape[1], X.shape[2])\n"
                "    weights = torch.softmax(X.masked_fill(~keep, -1e9), dim=-1)\n"
                "    return weights * keep"),
             new_markdown_cell("SECRET PROSE: multiplying by the mask zeroes empty rows.")],
            "assert check_masked_softmax(my_masked_softmax)"),
        *exercise_block(
            "ex-mha", "Write `MyMHA`.",
            [solution_cell(
                "import mha_lib\n\n"
                "class MyMHA(mha_lib.MultiHeadAttention):\n"
                '    """Multi-head attention."""\n\n'
                "    def forward(self, queries, keys, values, valid_lens):\n"
                "        return super().forward(queries, keys, values, valid_lens)")],
            "assert check_multihead_attention(MyMHA)"),
        *exercise_block(
            "ex-count", "Count the parameters.",
            [solution_cell("def count(q, k, v, D, H, bias):\n    return (q + k + v + D) * D + 4 * D * bias")],
            "assert check_num_parameters(count)"),
        new_code_cell("print('after the exercises')"),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3",
                                                              "display_name": "Python 3",
                                                              "language": "python"}})


# ------------------------------------------------------------------------- stubs


def test_stub_keeps_imports_header_and_docstring_and_drops_the_body():
    source = (
        "import torch\n\n"
        "def f(X: torch.Tensor,\n      n: int = 2) -> torch.Tensor:  # note: shapes\n"
        '    """Doc."""\n'
        "    secret = X * n\n"
        "    return secret\n\n"
        "print(f(torch.ones(1)))\n"
    )
    stub = student.stub_source(source)
    assert stub.startswith("import torch\n")
    assert "def f(X: torch.Tensor,\n      n: int = 2) -> torch.Tensor:  # note: shapes" in stub
    assert '"""Doc."""' in stub
    assert "    # YOUR CODE HERE\n    raise NotImplementedError" in stub
    assert "secret" not in stub and "print" not in stub
    compile(stub, "<stub>", "exec")


def test_stub_of_a_class_keeps_every_method_header():
    source = (
        "class M(nn.Module):\n"
        '    """Doc."""\n'
        "    size = 3\n"
        "    def __init__(self, a, b=False):\n"
        "        super().__init__()\n"
        "        self.secret = a\n\n"
        "    @staticmethod\n"
        "    def g(x): return x\n"
    )
    stub = student.stub_source(source)
    assert "class M(nn.Module):" in stub and '"""Doc."""' in stub
    assert "    def __init__(self, a, b=False):\n        # YOUR CODE HERE" in stub
    assert "    @staticmethod\n    def g(x):\n        # YOUR CODE HERE" in stub
    assert "secret" not in stub and "size = 3" not in stub
    compile(stub, "<stub>", "exec")


@pytest.mark.parametrize("source", ["answer = 42\nprint(answer)", "%timeit 1 + 1"])
def test_stub_of_a_cell_without_definitions(source):
    assert student.stub_source(source) == "# YOUR CODE HERE\nraise NotImplementedError"


def test_student_notebook_removes_solutions_and_keeps_the_rest():
    nb = demo_chapter()
    nb.cells[-1].outputs = [nbformat.v4.new_output("stream", text="old output\n")]
    original = copy.deepcopy(nb)
    edition = student.student_notebook(nb)
    assert nb == original  # the input is left alone
    text = "\n".join(c.source for c in edition.cells)
    assert "SECRET PROSE" not in text and "solution-start" not in text and "solution-end" not in text
    assert "{exercise}" not in text and "**Exercise: Ex-Softmax**\n\nWrite `my_masked_softmax`." in text
    assert "assert check_masked_softmax(my_masked_softmax)" in text
    assert "keep_mask_from_valid_lens" not in text  # the solution's body is gone
    assert student.stub_count(edition) == 3
    stubs = [c for c in edition.cells if "student-stub" in c.metadata.get("tags", [])]
    assert {c.id for c in stubs} <= {c.id for c in original.cells if student.is_solution_cell(c)}
    assert all("solution" not in c.metadata["tags"] for c in stubs)
    assert all(c.outputs == [] for c in edition.cells if c.cell_type == "code")
    assert edition.metadata[student.EDITION_KEY] is True
    assert "Student edition" in edition.cells[0].source


def test_solution_prose_sharing_a_cell_with_a_directive_is_dropped():
    nb = new_notebook(cells=[
        new_markdown_cell("Intro kept.\n\n```{solution-start} ex-y\n:class: dropdown\n```\nHidden A."),
        solution_cell("x = 1"),
        new_markdown_cell("Hidden B.\n\n```{solution-end}\n```\n\nAfter, kept."),
        new_markdown_cell(":::{solution} ex-z\nHidden C.\n:::\nAlso kept."),
        new_code_cell("print('checker')"),
    ])
    text = "\n".join(c.source for c in student.student_notebook(nb).cells)
    assert "Intro kept." in text and "After, kept." in text and "Also kept." in text
    assert "Hidden" not in text and "{solution" not in text
    assert "print('checker')" in text


def test_untagged_code_inside_a_solution_is_dropped():
    nb = new_notebook(cells=exercise_block(
        "ex-x", "Q?", [new_code_cell("secret_helper = 1")], "print(1)"))
    edition = student.student_notebook(nb)
    assert all("secret_helper" not in c.source for c in edition.cells)


def test_stub_and_checker_say_not_implemented_yet_without_a_kernel():
    edition = student.student_notebook(demo_chapter())
    namespace: dict = {}
    reports = []
    for cell in edition.cells:
        if cell.cell_type != "code":
            continue
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.suppress(AssertionError):
            exec(cell.source, namespace)
        if CHECKER_CALL.search(cell.source):
            reports.append(buffer.getvalue())
    assert len(reports) == 3
    assert all("not implemented yet" in report for report in reports)


def test_cli_writes_the_edition(tmp_path, capsys):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    nbformat.write(demo_chapter(), chapters / "01_demo.ipynb")
    assert student.main([str(chapters), str(tmp_path / "student")]) == 0
    written = nbformat.read(tmp_path / "student" / "01_demo.ipynb", as_version=4)
    assert student.stub_count(written) == 3
    assert "1 notebooks written" in capsys.readouterr().out


# ------------------------------------------------------------------------- in a kernel


def _is_checker(cell) -> bool:
    return cell.cell_type == "code" and any(
        name in exercises.__all__ for name in CHECKER_CALL.findall(cell.source))


def restored_run(edition, original):
    """The edition's code cells, with the solutions put back (by id) after each checker."""
    solutions = {c.id: c for c in original.cells if student.is_solution_cell(c)}
    cells, pending = [], []

    def add(cell, role):
        cell = copy.deepcopy(cell)
        cell.id = f"run-{len(cells)}"
        cell.metadata["role"] = role
        cells.append(cell)

    def restore():
        for cell_id in pending:
            add(solutions[cell_id], "solution")
        pending.clear()

    for cell in edition.cells:
        if cell.cell_type != "code":
            continue
        if "student-stub" in cell.metadata.get("tags", []):
            pending.append(cell.id)
            add(cell, "stub")
        elif _is_checker(cell) and pending:
            add(cell, "stub-check")
            restore()
            add(cell, "solution-check")
        else:
            restore()
            add(cell, "other")
    restore()
    return new_notebook(cells=cells, metadata=edition.metadata)


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _errors(cell) -> list[str]:
    return [o.ename for o in cell.outputs if o.output_type == "error"]


def check_edition_in_kernel(source_dir: Path, name: str, tmp_path: Path) -> int:
    """Build the edition of ``source_dir``, run ``name`` with solutions restored; return the
    number of stubs that their checkers reported."""
    from nbclient import NotebookClient

    student.build(source_dir, tmp_path / "student")
    edition = nbformat.read(tmp_path / "student" / name, as_version=4)
    original = nbformat.read(source_dir / name, as_version=4)
    nb = restored_run(edition, original)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(source_dir)}}).execute()
    reported = 0
    for cell in nb.cells:
        role = cell.metadata["role"]
        if role == "stub":
            assert set(_errors(cell)) <= {"NotImplementedError"}, cell.source
        elif role == "stub-check":
            assert "not implemented yet" in _text(cell), (cell.source, _text(cell))
            assert set(_errors(cell)) <= {"AssertionError"}
            reported += 1
        else:
            assert not _errors(cell), (role, cell.source, cell.outputs)
            if role == "solution-check":
                assert "pass" in _text(cell), (cell.source, _text(cell))
    return reported


def test_demo_chapter_in_a_kernel(tmp_path):
    source = tmp_path / "chapters"
    source.mkdir()
    nbformat.write(demo_chapter(), source / "01_demo.ipynb")
    assert checkers_after_solutions(demo_chapter()) == 3
    assert check_edition_in_kernel(source, "01_demo.ipynb", tmp_path) == 3


def _chapters_with_exercises() -> list:
    names = []
    for path in sorted(CHAPTERS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if any(student.is_solution_cell(c) for c in nb.cells):
            names.append(path.name)
    return names or [pytest.param(None, marks=pytest.mark.skip(reason="no chapter has exercises yet"))]


def checkers_after_solutions(nb) -> int:
    """How many checker cells of the original notebook follow solution cells."""
    count, pending = 0, False
    for cell in nb.cells:
        if student.is_solution_cell(cell):
            pending = True
        elif _is_checker(cell) and pending:
            count, pending = count + 1, False
        elif cell.cell_type == "code":
            pending = False
    return count


@pytest.mark.parametrize("name", _chapters_with_exercises())
def test_chapter_student_edition_in_a_kernel(name, tmp_path):
    expected = checkers_after_solutions(nbformat.read(CHAPTERS / name, as_version=4))
    assert check_edition_in_kernel(CHAPTERS, name, tmp_path) == expected
