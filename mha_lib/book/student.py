"""Build the student edition of the chapters: the same notebooks without the solutions.

Usage::

    python -m mha_lib.book.student chapters student     # or: make student

For every ``chapters/*.ipynb`` it writes ``student/<same name>.ipynb`` in which

* every code cell tagged ``solution`` becomes a stub: imports and the ``def`` / ``class`` headers
  (with their docstrings) are kept, so the checker cell below can still call the name, and each
  body becomes ``# YOUR CODE HERE`` followed by ``raise NotImplementedError``; a solution cell
  that defines nothing becomes those two lines;
* the solution directives (``{solution-start}`` ... ``{solution-end}``, ``{solution}``) and every
  cell between them that is not a tagged code cell (the solution's prose) are removed;
* the ``{exercise}`` directives become plain markdown, which reads well in Jupyter;
* the checker cells are kept, and every output is cleared.

A stub keeps the cell id of its solution, so the solutions can be put back by id.
This module is build tooling: it imports no model code.
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
from pathlib import Path

SOLUTION_TAG = "solution"
STUB_BODY = ("# YOUR CODE HERE", "raise NotImplementedError")
EDITION_KEY = "student_edition"

_FENCE = r"(?:`{3,}|:{3,})"
_SOLUTION_DIRECTIVE = re.compile(rf"^\s*(?P<fence>{_FENCE})\{{(?P<kind>solution(?:-start|-end)?)\}}")
_EXERCISE = re.compile(
    rf"^(?P<fence>{_FENCE})\{{exercise(?:-start)?\}}[ \t]*(?P<title>[^\n]*)\n"
    r"(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)"
    r"(?P<body>.*?)"
    r"(?:^(?P=fence)[ \t]*$|\Z)",
    re.MULTILINE | re.DOTALL,
)
_EXERCISE_END = re.compile(rf"^\s*{_FENCE}\{{exercise-end\}}\s*{_FENCE}\s*$", re.MULTILINE)

INTRO = (
    "**Student edition.** The solutions of this chapter's exercises are removed. Write your "
    "code where a cell says `# YOUR CODE HERE` (delete the `raise NotImplementedError` line), "
    "then run the checker cell that follows: it tells you which mistake it sees, or that all "
    "its cases pass."
)


# ------------------------------------------------------------------------------- stubs


def _stub_lines(indent: int) -> list[str]:
    return [" " * indent + line for line in STUB_BODY]


def _signature_end(node, lines: list[str]) -> int:
    """0-based index of the line holding the ':' that ends a def/class header."""
    if isinstance(node, ast.ClassDef):
        parts = [*node.bases, *node.keywords]
    else:
        parts = [*ast.walk(node.args), node.returns]
    last = max([node.lineno] + [p.end_lineno for p in parts if getattr(p, "end_lineno", None)])
    i = last - 1
    while i < len(lines) - 1 and not lines[i].split("#", 1)[0].rstrip().endswith(":"):
        i += 1
    return i


def _docstring_node(node) -> ast.Expr | None:
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        return first
    return None


def _header(node, lines: list[str]) -> list[str] | None:
    """Source lines of the decorators, the header and the docstring; None for a one-liner."""
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    end = _signature_end(node, lines)
    if node.body[0].lineno - 1 <= end:  # body on the header line: `def f(x): return x`
        return None
    doc = _docstring_node(node)
    if doc is not None:
        end = doc.end_lineno - 1
    return lines[start:end + 1]


def _stub_def(node, lines: list[str]) -> list[str]:
    """A function or class with every body replaced by the stub (methods keep their headers)."""
    header = _header(node, lines)
    if header is None:  # one-liner: rebuild the header from the syntax tree
        bare = copy.deepcopy(node)
        bare.body = [ast.Pass()]
        text = ast.unparse(bare).splitlines()[:-1]
        header = [" " * node.col_offset + line for line in text]
    body_indent = node.body[0].col_offset if node.body[0].lineno > node.lineno else node.col_offset + 4
    if isinstance(node, ast.ClassDef):
        methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        if not methods:
            return header + [" " * body_indent + STUB_BODY[0], " " * body_indent + "pass"]
        out = list(header)
        for method in methods:
            out += [""] + _stub_def(method, lines)
        return out
    return header + _stub_lines(body_indent)


def stub_source(source: str) -> str:
    """The student's version of a solution cell.

    Imports and ``def`` / ``class`` headers (with docstrings) stay; every body becomes
    ``# YOUR CODE HERE`` / ``raise NotImplementedError``. Other statements are dropped. A cell
    that defines nothing (or does not parse) becomes the two stub lines.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "\n".join(STUB_BODY)
    lines = source.splitlines()
    imports: list[str] = []
    defs: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports += lines[node.lineno - 1:node.end_lineno]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defs.append("\n".join(_stub_def(node, lines)))
    if not defs:
        defs.append("\n".join(STUB_BODY))
    return "\n\n\n".join((["\n".join(imports)] if imports else []) + defs)


# ------------------------------------------------------------------------------- notebooks


def is_solution_cell(cell) -> bool:
    return cell.cell_type == "code" and SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])


def plain_exercise(markdown: str) -> str:
    """Turn ``{exercise}`` directives into plain markdown (a bold heading and the text)."""

    def replace(match: re.Match) -> str:
        title = match.group("title").strip()
        heading = f"**Exercise: {title}**" if title else "**Exercise.**"
        return f"{heading}\n\n{match.group('body').strip()}\n"

    return _EXERCISE_END.sub("", _EXERCISE.sub(replace, markdown)).strip()


def strip_solutions(markdown: str, in_solution: bool) -> tuple[str, bool]:
    """Remove the solution directives and the prose of solutions from one markdown cell.

    Args:
        markdown: the cell's text.
        in_solution: whether the cell starts inside a ``{solution-start}`` ... ``{solution-end}``.

    Returns:
        The text that students see, and whether the cell ends inside a solution.
    """
    lines = markdown.split("\n")
    kept = []
    i = 0
    while i < len(lines):
        match = _SOLUTION_DIRECTIVE.match(lines[i])
        if match:
            fence = match.group("fence")
            i += 1
            while i < len(lines) and lines[i].strip() != fence:  # skip to the closing fence
                i += 1
            i += 1
            if match.group("kind") != "solution":
                in_solution = match.group("kind") == "solution-start"
            continue
        if not in_solution:
            kept.append(lines[i])
        i += 1
    return "\n".join(kept).strip(), in_solution


def student_notebook(nb):
    """Return the student edition of a notebook (``nb`` is left unchanged)."""
    import nbformat

    out = copy.deepcopy(nb)
    cells = []
    in_solution = False
    for cell in out.cells:
        if cell.cell_type == "code":
            if is_solution_cell(cell):
                cell.source = stub_source(cell.source)
                tags = [t for t in cell.metadata.get("tags", []) if t != SOLUTION_TAG]
                cell.metadata["tags"] = tags + ["student-stub"]
            elif in_solution:
                continue  # untagged code inside a solution: not for students
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        else:
            text, in_solution_after = strip_solutions(cell.source, in_solution)
            in_solution = in_solution_after
            if not text:
                continue  # a directive or the solution's prose
            cell.source = plain_exercise(text) if cell.cell_type == "markdown" else text
        cells.append(cell)
    out.cells = [nbformat.v4.new_markdown_cell(INTRO)] + cells
    out.metadata[EDITION_KEY] = True
    out.metadata.pop("widgets", None)
    return out


def stub_count(nb) -> int:
    return sum("student-stub" in c.get("metadata", {}).get("tags", []) for c in nb.cells)


def build(source_dir: Path, out_dir: Path) -> dict[Path, int]:
    """Write the student edition of every notebook of ``source_dir`` into ``out_dir``.

    Returns:
        ``{written notebook: number of stubs}``.
    """
    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for path in sorted(Path(source_dir).glob("*.ipynb")):
        nb = student_notebook(nbformat.read(path, as_version=4))
        target = out_dir / path.name
        nbformat.write(nb, target)
        written[target] = stub_count(nb)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder of the chapters (chapters)")
    parser.add_argument("out", type=Path, help="folder to write the student edition to (student)")
    args = parser.parse_args(argv)
    written = build(args.source, args.out)
    for target, stubs in written.items():
        print(f"{target}: {stubs} exercise stub{'s' if stubs != 1 else ''}")
    print(f"{len(written)} notebooks written to {args.out}/, {sum(written.values())} stubs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
