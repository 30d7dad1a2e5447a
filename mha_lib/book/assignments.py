"""The chapters as nbgrader assignments: mark them, derive the course source, release it.

Usage::

    python -m mha_lib.book.assignments mark chapters/*.ipynb     # nbgrader metadata, in place
    python -m mha_lib.book.assignments build chapters course     # or: make assignments

**mark** derives nbgrader cell metadata from the chapters' own conventions (CONTRIBUTING.md):
an ``{exercise}`` with a ``label``, a ``{solution-start}`` ... ``{solution-end}`` pair around the
solution, the solution's code cells tagged ``solution``, and, for an exercise with a test, the
code cell right after ``{solution-end}`` (a checker call or ``assert``\\ s). It writes:

* on each solution code cell: an nbgrader *answer* (``solution``), id ``<label>-answer``;
* on the test cell: an nbgrader *autograded test*, id ``<label>-test``, 1 point;
* for an exercise without a test: its first prose cell (or first code cell) becomes a
  *manually graded answer* worth 1 point, id ``<label>-written``;
* the capstone's hand-in, a test cell ``grade(model, roles, parts=parts)``, is the student's self-check
  (0 points, as every test cell of its chapter): the course source adds a hidden cell, id ``<label>-hidden``,
  worth the rubric's points (:data:`mha_lib.exercises.capstone.POINTS`), each part once, that grades the saved
  hand-in file (``capstone.HAND_IN``) on stories of an odd seed no student has (``build --capstone-seed``).

Whole cells are marked, so no ``### BEGIN SOLUTION`` appears in the chapters or on the website.
Running it again gives the same notebooks (points an author changed are kept).

**build** writes ``<course>/source/<chapter>/<chapter>.ipynb`` for every chapter with exercises
(the instructor version: the exercise boxes as plain markdown, the solutions' prose removed,
``### BEGIN SOLUTION`` regions around the bodies so that students keep each ``def`` line, and after every checker cell a hidden partial-credit cell from
:mod:`mha_lib.exercises.grading`), then runs ``nbgrader generate_assignment`` on each: the student
versions land in ``<course>/release/`` with the solutions replaced by stubs, hidden tests
removed and checksums set. It refuses a course folder that is, contains or lies inside the
chapters' folder. nbgrader runs with the course's own ``nbgrader_config.py`` and gradebook, and
with ``JUPYTER_CONFIG_DIR`` (and the runtime and IPython folders) pointing into the course, so a
personal ``~/.jupyter`` or ``~/.ipython`` is neither read nor written.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["OverlapError", "build", "main", "mark", "refuse_overlap"]

SOLUTION_TAG = "solution"
SCHEMA_VERSION = 3
CHECKER_CALL = re.compile(r"\b(check_\w+)\s*\(\s*([A-Za-z_]\w*)\s*\)")
CAPSTONE_CALL = re.compile(r"\bgrade\(\s*([A-Za-z_]\w*)\s*,\s*([A-Za-z_]\w*)\s*,\s*parts=([A-Za-z_]\w*)\s*\)")
"""The capstone's hand-in, ``grade(model, roles, parts=parts)`` (:mod:`mha_lib.exercises.capstone`):
a test worth the rubric's points, followed in the course source by the same grade on hidden stories."""
CAPSTONE_HIDDEN_SEED = 424_243
"""The default seed (odd) of the capstone's hidden stories; ``build --capstone-seed`` sets another."""

_FENCE = r"(?:`{3,}|:{3,})"
_DIRECTIVE = re.compile(rf"^\s*(?P<fence>{_FENCE})\{{(?P<kind>[\w-]+)\}}[ \t]*(?P<arg>[^\n]*)$")
_LABEL = re.compile(r"^\s*:label:\s*(\S+)", re.MULTILINE)
_EXERCISE = re.compile(
    rf"^(?P<fence>{_FENCE})\{{exercise(?:-start)?\}}[ \t]*(?P<title>[^\n]*)\n"
    r"(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)"
    r"(?P<body>.*?)"
    r"(?:^(?P=fence)[ \t]*$|\Z)",
    re.MULTILINE | re.DOTALL,
)
_EXERCISE_END = re.compile(rf"^\s*{_FENCE}\{{exercise-end\}}\s*{_FENCE}\s*$", re.MULTILINE)

INTRO = (
    "**Assignment.** The solutions of this chapter's exercises are removed. Write your code "
    "where a cell says `# YOUR CODE HERE` (delete the `raise NotImplementedError()` line) and "
    "your answers where a cell says `YOUR ANSWER HERE`. Then run the checker cell that follows "
    "an exercise: it tells you which mistake it sees, or that all its cases pass. The grader "
    "runs the same checkers (plus hidden cells that give partial credit per kind of mistake)."
)


# ------------------------------------------------------------------------------- exercises


@dataclass
class Exercise:
    """One exercise of a chapter: indices of its cells in ``nb.cells``."""

    label: str
    start: int  # the {solution-start} cell
    end: int  # the {solution-end} cell
    code: list[int] = field(default_factory=list)  # solution code cells tagged `solution`
    prose: list[int] = field(default_factory=list)  # markdown inside the solution
    untagged: list[int] = field(default_factory=list)  # untagged code inside the solution
    test: int | None = None  # the code cell right after {solution-end}, if it tests


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def is_solution_cell(cell) -> bool:
    return cell.cell_type == "code" and SOLUTION_TAG in _tags(cell)


def _directives(markdown: str) -> list[tuple[str, str]]:
    """The ``(kind, argument)`` of every directive that opens a line of ``markdown``."""
    found = []
    for line in markdown.split("\n"):
        match = _DIRECTIVE.match(line)
        if match:
            found.append((match.group("kind"), match.group("arg").strip()))
    return found


def _is_test(cell) -> bool:
    return cell.cell_type == "code" and bool(
        CHECKER_CALL.search(cell.source) or CAPSTONE_CALL.search(cell.source)
        or re.search(r"^\s*assert\b", cell.source, re.MULTILINE))


def _is_capstone(nb) -> bool:
    return any(c.cell_type == "code" and CAPSTONE_CALL.search(c.source) for c in nb.cells)


def _capstone_points() -> int:
    from mha_lib.exercises.capstone import POINTS

    return sum(POINTS.values())


def find_exercises(nb) -> list[Exercise]:
    """Every gated exercise (``{solution-start}`` ... ``{solution-end}``) of a notebook."""
    found: list[Exercise] = []
    current: Exercise | None = None
    for i, cell in enumerate(nb.cells):
        kinds = _directives(cell.source) if cell.cell_type == "markdown" else []
        if current is None:
            for kind, arg in kinds:
                if kind == "solution-start":
                    current = Exercise(label=arg.split()[0] if arg else f"exercise-{i}", start=i, end=i)
            if current is not None and any(k == "solution-end" for k, _ in kinds):
                current = None  # an empty solution
            continue
        if cell.cell_type == "code":
            (current.code if is_solution_cell(cell) else current.untagged).append(i)
        elif cell.cell_type == "markdown":
            if _prose(cell.source):
                current.prose.append(i)
            if any(kind == "solution-end" for kind, _ in kinds):
                current.end = i
                following = nb.cells[i + 1] if i + 1 < len(nb.cells) else None
                if following is not None and _is_test(following):
                    current.test = i + 1
                found.append(current)
                current = None
    return found


def _prose(markdown: str) -> str:
    """The text of a markdown cell without its solution directives."""
    text, _ = strip_solutions(markdown, in_solution=False, keep_solutions=True)
    return text


# ------------------------------------------------------------------------------- marking


def _meta(grade_id: str, *, solution: bool, grade: bool, points: int | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": not solution,
            "schema_version": SCHEMA_VERSION, "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def mark_notebook(nb) -> int:
    """Set the nbgrader metadata of ``nb`` (in place) from its exercise conventions.

    Any earlier nbgrader metadata is replaced, except the points an author set.

    Returns:
        The number of exercises marked.
    """
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("points") is not None}
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    exercises = find_exercises(nb)
    for ex in exercises:
        for n, i in enumerate(ex.code):
            nb.cells[i].metadata["nbgrader"] = _meta(
                f"{ex.label}-answer" + (f"-{n + 1}" if n else ""), solution=True, grade=False)
        if ex.test is not None:  # in the capstone, the hidden grade counts every part once: 0 points here
            grade_id = f"{ex.label}-test"
            nb.cells[ex.test].metadata["nbgrader"] = _meta(
                grade_id, solution=False, grade=True, points=0 if _is_capstone(nb) else points.get(grade_id, 1))
        elif ex.prose or ex.code:
            grade_id = f"{ex.label}-written"
            target = ex.prose[0] if ex.prose else ex.code[0]
            nb.cells[target].metadata["nbgrader"] = _meta(
                grade_id, solution=True, grade=True, points=points.get(grade_id, 1))
    return len(exercises)


def mark(paths: list[Path]) -> dict[Path, int]:
    """Mark every notebook of ``paths`` in place; rewrite a file only when it changes."""
    import nbformat

    marked = {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        before = copy.deepcopy(nb)
        marked[path] = mark_notebook(nb)
        if nb != before:
            nbformat.write(nb, path)
    return marked


# ------------------------------------------------------------------------------- markdown


def plain_exercise(markdown: str) -> str:
    """Turn ``{exercise}`` directives into plain markdown (a bold heading and the text)."""

    def replace(match: re.Match) -> str:
        title = match.group("title").strip()
        heading = f"**Exercise: {title}**" if title else "**Exercise.**"
        return f"{heading}\n\n{match.group('body').strip()}\n"

    return _EXERCISE_END.sub("", _EXERCISE.sub(replace, markdown)).strip()


def strip_solutions(markdown: str, in_solution: bool, keep_solutions: bool = False) -> tuple[str, bool]:
    """Remove the solution directives (and, unless ``keep_solutions``, the solutions' prose).

    Args:
        markdown: the cell's text.
        in_solution: whether the cell starts inside a ``{solution-start}`` ... ``{solution-end}``.
        keep_solutions: keep the prose inside solutions, drop only the directives.

    Returns:
        The text that is kept, and whether the cell ends inside a solution.
    """
    lines = markdown.split("\n")
    kept = []
    i = 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if match and match.group("kind") in ("solution", "solution-start", "solution-end"):
            fence = match.group("fence")
            i += 1
            while i < len(lines) and lines[i].strip() != fence:  # skip to the closing fence
                i += 1
            i += 1
            if match.group("kind") != "solution":
                in_solution = match.group("kind") == "solution-start"
            continue
        if keep_solutions or not in_solution:
            kept.append(lines[i])
        i += 1
    return "\n".join(kept).strip(), in_solution


# ------------------------------------------------------------------------------- solution regions

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def _docstring_end(node) -> int | None:
    """Last line (1-based) of the docstring of a def/class, or None."""
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        return first.end_lineno
    return None


def _regions(body: list, in_class: bool) -> list[tuple[int, int, int]]:
    """(first statement line, last line, previous scaffold line) of each solution run of a block.

    Lines are 1-based and inclusive; the third number bounds how far up comments may extend it.
    """
    regions: list[tuple[int, int, int]] = []
    run: list = []
    floor = body[0].lineno - 1 if body else 0

    def close():
        if run:
            regions.append((run[0].lineno, run[-1].end_lineno, floor))
            run.clear()

    for node in body:
        scaffold = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) or (
            not in_class and isinstance(node, ast.Import | ast.ImportFrom))
        if not scaffold:
            if not in_class:  # in a class body a stub's `raise` would break the class: keep
                run.append(node)
            continue
        close()
        floor = node.end_lineno
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        if node.body[0].lineno == node.lineno:  # a one-liner: the whole definition is the answer
            if not in_class:
                regions.append((first, node.end_lineno, first - 1))
            continue
        if isinstance(node, ast.ClassDef):  # the class docstring stays, the methods' bodies go
            regions += _regions(node.body[1:] if _docstring_end(node) else node.body, in_class=True)
        else:  # the whole body, docstring included: a docstring may give the answer away
            regions.append((node.body[0].lineno, node.end_lineno, node.lineno))
    close()
    return regions


def solution_regions(source: str) -> str:
    """``source`` with ``### BEGIN/END SOLUTION`` around everything but the scaffold.

    The scaffold (imports, ``def`` / ``class`` lines, class docstrings) stays for the students,
    so the checker below still finds the name; nbgrader replaces each region with ``# YOUR CODE HERE``
    and ``raise NotImplementedError()``. Comments right above a region belong to it. A cell
    that does not parse becomes one region.
    """
    lines = source.rstrip("\n").split("\n")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "\n".join([BEGIN, *lines, END])
    begins: dict[int, str] = {}
    ends: dict[int, str] = {}
    for first, last, floor in _regions(tree.body, in_class=False):
        indent = re.match(r"\s*", lines[first - 1]).group(0)
        while first - 1 > floor and lines[first - 2].strip().startswith("#"):
            first -= 1  # a comment right above the answer is part of it
        begins[first], ends[last] = indent, indent
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        if number in begins:
            out.append(begins[number] + BEGIN)
        out.append(line)
        if number in ends:
            out.append(ends[number] + END)
    return "\n".join(out)


# ------------------------------------------------------------------------------- course source


def _checker_call(cell) -> tuple[str, str] | None:
    """(checker, answer name) of a cell calling a checker of mha_lib.exercises, if any."""
    from mha_lib import exercises
    from mha_lib.exercises.grading import CHECKER_FAMILIES

    for checker, answer in CHECKER_CALL.findall(cell.source):
        if checker in CHECKER_FAMILIES and hasattr(exercises, checker):
            return checker, answer
    return None


def partial_credit_cell(checker: str, answer: str, grade_id: str):
    """The hidden test cell that gives partial credit through :mod:`mha_lib.exercises.grading`."""
    from nbformat.v4 import new_code_cell

    from mha_lib.exercises.grading import max_points

    source = "\n".join([
        "# Hidden tests, run by the grader: partial credit per kind of mistake.",
        "### BEGIN HIDDEN TESTS",
        "from mha_lib.exercises.grading import partial_credit",
        "",
        f'partial_credit("{checker}", {answer})',
        "### END HIDDEN TESTS",
    ])
    cell = new_code_cell(source)
    cell.id = re.sub(r"[^A-Za-z0-9-_]", "-", grade_id)[:64]
    cell.metadata["nbgrader"] = _meta(grade_id, solution=False, grade=True,
                                      points=max_points(checker))
    return cell


def capstone_hidden_cell(call: re.Match, grade_id: str, seed: int):
    """The hidden test cell that grades the capstone's hand-in again, on stories of ``seed``."""
    from nbformat.v4 import new_code_cell

    model, roles, parts = call.groups()
    source = "\n".join([
        "# Hidden tests, run by the grader: the same rubric on stories the release does not contain.",
        "### BEGIN HIDDEN TESTS",
        "from mha_lib.exercises.capstone import HAND_IN, grade as hidden_grade, load_hand_in as hidden_load",
        "",
        f"hidden_model, hidden_roles = hidden_load(HAND_IN, type({model}))  # the file handed in, not retrained",
        f"hidden_report = hidden_grade(hidden_model, hidden_roles, parts={parts}, seed={seed})",
        "print(hidden_report)",
        "hidden_report.points",
        "### END HIDDEN TESTS",
    ])
    cell = new_code_cell(source)
    cell.id = re.sub(r"[^A-Za-z0-9-_]", "-", grade_id)[:64]
    cell.metadata["nbgrader"] = _meta(grade_id, solution=False, grade=True, points=_capstone_points())
    return cell


def _check_capstone_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0 or seed % 2 == 0:
        raise ValueError(f"capstone_seed: expected an odd integer >= 0 (even seeds are training seeds), got {seed!r}")
    return seed


def source_notebook(nb, capstone_seed: int = CAPSTONE_HIDDEN_SEED):
    """The instructor version of a marked chapter for ``<course>/source`` (``nb`` unchanged).

    ``capstone_seed`` is the seed of the stories of the capstone's hidden grade (odd)."""
    capstone_seed = _check_capstone_seed(capstone_seed)
    import nbformat

    nb = copy.deepcopy(nb)
    mark_notebook(nb)
    exercises = find_exercises(nb)
    inside = {i for ex in exercises for i in range(ex.start, ex.end + 1)}
    kept_inside = {i for ex in exercises for i in ex.code}
    kept_inside |= {i for ex in exercises for i in range(ex.start, ex.end + 1)
                    if "nbgrader" in nb.cells[i].metadata}  # the written answers
    tests = {ex.test: ex for ex in exercises if ex.test is not None}
    cells, capstone_chapter = [nbformat.v4.new_markdown_cell(INTRO)], _is_capstone(nb)
    for i, cell in enumerate(nb.cells):
        if capstone_chapter and "remove-cell" in cell.metadata.get("tags", []):
            continue  # the book's own checks (asserts): the hidden grade checks the student's work
        if i in inside and i not in kept_inside and not (
                cell.cell_type == "markdown" and i in (ex.start for ex in exercises)):
            continue  # solution prose and untagged code: the answer key stays in the chapter
        if cell.cell_type == "markdown":
            text, _ = strip_solutions(cell.source, in_solution=False,
                                      keep_solutions=i in kept_inside)
            text = plain_exercise(text)
            if not text:
                continue
            cell.source = text
        else:
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
            if is_solution_cell(cell):
                cell.source = solution_regions(cell.source)
        cells.append(cell)
        if i in tests:
            call = _checker_call(cell)
            if call is not None and not capstone_chapter:  # (the capstone's grade holds the checkers)
                cells.append(partial_credit_cell(*call, grade_id=f"{tests[i].label}-mistakes"))
            capstone = CAPSTONE_CALL.search(cell.source)
            if capstone is not None:
                cells.append(capstone_hidden_cell(capstone, f"{tests[i].label}-hidden", capstone_seed))
    nb.cells = cells
    nb.metadata.pop("widgets", None)
    return nb


def has_exercises(nb) -> bool:
    return bool(find_exercises(nb))


# ------------------------------------------------------------------------------- the course


class OverlapError(ValueError):
    """The output folder would overwrite (or contain) the chapters."""


def refuse_overlap(out: Path, chapters: Path, what: str = "course") -> None:
    """Raise :class:`OverlapError` unless ``out`` and ``chapters`` are disjoint folders."""
    out, chapters = Path(out).resolve(), Path(chapters).resolve()
    if out == chapters or chapters in out.parents or out in chapters.parents:
        raise OverlapError(
            f"{what}: expected a folder apart from the chapters ({chapters}), got {out}, which "
            f"{'is' if out == chapters else 'lies inside' if chapters in out.parents else 'contains'} "
            "it; nothing was written")


NBGRADER_CONFIG = '''\
"""nbgrader configuration of the course built by `python -m mha_lib.book.assignments build`."""
from pathlib import Path

c = get_config()  # noqa: F821 (defined by nbgrader)
here = Path(__file__).resolve().parent
c.CourseDirectory.root = str(here)
c.CourseDirectory.course_id = "{course_id}"
c.CourseDirectory.db_url = "sqlite:///" + str(here / "gradebook.db")
c.Exchange.root = str(here / "exchange")  # on a JupyterHub: the shared exchange instead
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}}
c.Execute.timeout = 300
'''


def nbgrader_env(course: Path) -> dict[str, str]:
    """Environment for nbgrader runs: config and runtime files inside the course folder."""
    env = dict(os.environ)
    jupyter = Path(course).resolve() / ".jupyter"
    env["JUPYTER_CONFIG_DIR"] = str(jupyter / "config")
    env["JUPYTER_RUNTIME_DIR"] = str(jupyter / "runtime")
    env["IPYTHONDIR"] = str(jupyter / "ipython")  # kernels start without personal startup files
    # nbgrader runs `alembic` (and the kernel) from PATH: the environment's bin folder first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``nbgrader <args>`` in ``course`` (its config, its gradebook, no ~/.jupyter)."""
    exe = Path(sys.executable).with_name("nbgrader")
    command = [str(exe) if exe.exists() else "nbgrader", *args]
    result = subprocess.run(command, cwd=course, env=nbgrader_env(course), capture_output=True,
                            text=True)
    if check and result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n"
                           f"{result.stdout}\n{result.stderr}")
    return result


#: Chapters released under another assignment name than their file's (default: the file's stem).
_ASSIGNMENT_NAMES = {"09b_bug_zoo": "bug_zoo", "12b_capstone": "capstone"}


def write_course_source(chapters: Path, course: Path, names: list[str] | None = None,
                        assignment: str | None = None,
                        capstone_seed: int = CAPSTONE_HIDDEN_SEED) -> list[str]:
    """Write the course config and the instructor version of every chapter with exercises.

    Each chapter becomes the assignment ``<course>/source/<chapter>/<chapter>.ipynb`` (the bug
    zoo, ``09b_bug_zoo``, the assignment ``bug_zoo``; the capstone, ``12b_capstone``, the
    assignment ``capstone``); with ``assignment``, the chosen chapters are the notebooks of
    that one assignment instead.

    Returns:
        The names of the assignments written.
    """
    import nbformat

    refuse_overlap(course, chapters)
    course = Path(course)
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(NBGRADER_CONFIG.format(course_id="mha-book"))
    written = []
    for path in sorted(Path(chapters).glob("*.ipynb")):
        if names and path.stem not in names:
            continue
        nb = nbformat.read(path, as_version=4)
        if not has_exercises(nb):
            continue
        name = assignment or _ASSIGNMENT_NAMES.get(path.stem, path.stem)
        folder = course / "source" / name
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(source_notebook(nb, capstone_seed), folder / path.name)
        written.append(name)
    return list(dict.fromkeys(written))


def build(chapters: Path, course: Path, names: list[str] | None = None,
          assignment: str | None = None, capstone_seed: int = CAPSTONE_HIDDEN_SEED) -> list[Path]:
    """Write the course source and release every assignment with ``nbgrader
    generate_assignment``. Returns the released notebooks."""
    for name in write_course_source(chapters, course, names, assignment, capstone_seed):
        nbgrader(course, "generate_assignment", name, "--force")
    return sorted((Path(course) / "release").glob("*/*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    mark_cmd = commands.add_parser("mark", help="write nbgrader metadata into chapters (in place)")
    mark_cmd.add_argument("notebooks", type=Path, nargs="+")
    build_cmd = commands.add_parser("build", help="course source + nbgrader generate_assignment")
    build_cmd.add_argument("chapters", type=Path, help="folder of the chapters (chapters)")
    build_cmd.add_argument("course", type=Path, help="course folder to write (course)")
    build_cmd.add_argument("names", nargs="*", help="only these chapters (e.g. 01_model)")
    build_cmd.add_argument("--assignment", help="one assignment holding all chosen chapters")
    build_cmd.add_argument("--capstone-seed", type=int, default=CAPSTONE_HIDDEN_SEED,
                           help="odd seed of the stories of the capstone's hidden grade")
    args = parser.parse_args(argv)
    try:
        if args.command == "mark":
            for path, count in mark(args.notebooks).items():
                print(f"{path}: {count} exercise{'s' if count != 1 else ''} marked")
            return 0
        released = build(args.chapters, args.course, args.names, args.assignment, args.capstone_seed)
    except (OverlapError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in released:
        print(path)
    print(f"{len(released)} notebooks released into {args.course / 'release'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
