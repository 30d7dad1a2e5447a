"""teaching.md's session plans: each session's times add up to its stated length, and the
exercises it sets exist and fit the minutes it gives them.

A session is a ``## ...`` section whose heading says its length (``## A 90-minute session``,
``## A second 90-minute session``); its plan is the first markdown table of the section whose
first column is headed ``Time``, one activity per row, each time written ``<n> min``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

SESSION_HEADING = re.compile(r"^##\s+(?P<title>.*?\b(?P<length>\d+)-minute session\b.*)$", re.MULTILINE)
SECTION_HEADING = re.compile(r"^##\s", re.MULTILINE)
TIME_CELL = re.compile(r"^(?P<minutes>\d+)\s*min$")
EXERCISE_LABEL = re.compile(r"\bex-[0-9]+[a-z]?-[a-z0-9-]*[a-z0-9]\b")
STATED_TIME = re.compile(r"\*\*Difficulty\s+([123])\s+·\s+(\d+)\s+min\.\*\*")


@dataclass
class Row:
    minutes: int
    cells: list[str]

    @property
    def labels(self) -> list[str]:
        return sorted(set(EXERCISE_LABEL.findall(" ".join(self.cells))))


@dataclass
class Session:
    title: str
    length: int
    rows: list[Row]


def _table_cells(line: str) -> list[str]:
    """The cells of one markdown table row (``| a | b |`` -> ``["a", "b"]``)."""
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")):
        raise ValueError(f"not a table row: {line!r}")
    return [cell.strip() for cell in body[1:-1].split("|")]


def _plan(section: str, title: str) -> list[Row]:
    """The rows of the first table of ``section`` whose first column is headed Time."""
    lines = section.splitlines()
    for start, line in enumerate(lines):
        if line.strip().startswith("|") and _table_cells(line)[0].lower() == "time":
            break
    else:
        raise ValueError(f"session {title!r} has no table with a Time column")
    separator = _table_cells(lines[start + 1])
    if not all(re.fullmatch(r":?-{3,}:?", cell) for cell in separator):
        raise ValueError(f"session {title!r}: the Time table has no separator row")
    rows = []
    for line in lines[start + 2:]:
        if not line.strip().startswith("|"):
            break
        cells = _table_cells(line)
        match = TIME_CELL.match(cells[0])
        if match is None:
            raise ValueError(f"session {title!r}: a row's time is not '<n> min': {cells[0]!r}")
        rows.append(Row(int(match["minutes"]), cells))
    if not rows:
        raise ValueError(f"session {title!r}: the Time table has no rows")
    return rows


def sessions(text: str) -> list[Session]:
    """Every session of a teaching page, with the rows of its plan."""
    found = []
    for match in SESSION_HEADING.finditer(text):
        rest = text[match.end():]
        following = SECTION_HEADING.search(rest)
        section = rest if following is None else rest[: following.start()]
        title = match["title"].strip()
        found.append(Session(title, int(match["length"]), _plan(section, title)))
    return found


def stated_minutes(chapters: Path) -> dict[str, int]:
    """``{label: minutes}`` of every exercise whose first line states its difficulty and time."""
    minutes = {}
    for path in sorted(chapters.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            label = re.search(r"^:label:\s*(\S+)", cell.source, re.MULTILINE)
            if cell.cell_type != "markdown" or "{exercise" not in cell.source or label is None:
                continue
            stated = STATED_TIME.search(cell.source)
            if stated is not None:
                minutes[label.group(1)] = int(stated.group(2))
    return minutes


def exercise_labels(chapters: Path) -> set[str]:
    labels = set()
    for path in sorted(chapters.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown" and "{exercise" in cell.source:
                labels.update(re.findall(r"^:label:\s*(ex-\S+)", cell.source, re.MULTILINE))
    return labels


# ------------------------------------------------------------------------- the parser itself

_PAGE = """\
# For teachers

## A 45-minute session

Some text.

| Time | Activity | Material |
| --- | --- | --- |
| 20 min | Exercise one | `ex-01-one` |
| 25 min | Discussion | chapter 1 |

| Time | Other table |
| --- | --- |
| 99 min | ignored: only the first Time table is the plan |

## Another section

| Time | Activity |
| --- | --- |
| 99 min | not a session |

## A second 30-minute session

| Time | Activity | Material |
|:---|---|---|
| 10 min | Predict | `ex-02-two` |
| 15 min | Exercise | `ex-02-three` and `ex-02-four` |
"""


def test_the_parser_reads_every_session_and_only_its_plan():
    found = sessions(_PAGE)
    assert [(s.title, s.length) for s in found] == [
        ("A 45-minute session", 45), ("A second 30-minute session", 30)]
    assert [[r.minutes for r in s.rows] for s in found] == [[20, 25], [10, 15]]
    assert found[0].rows[0].labels == ["ex-01-one"]
    assert found[1].rows[1].labels == ["ex-02-four", "ex-02-three"]
    assert sum(r.minutes for r in found[1].rows) != found[1].length  # a plan that does not add up


@pytest.mark.parametrize("broken, message", [
    ("| 20 min | Exercise one | `ex-01-one`", "not a table row"),  # a damaged row is not skipped
    ("| 20 | Exercise one | `ex-01-one` |", "is not '<n> min'"),
    ("| twenty min | Exercise one | `ex-01-one` |", "is not '<n> min'"),
])
def test_the_parser_refuses_a_row_it_cannot_read(broken, message):
    page = _PAGE.replace("| 20 min | Exercise one | `ex-01-one` |", broken)
    assert page != _PAGE
    with pytest.raises(ValueError, match=message):
        sessions(page)


def test_the_parser_refuses_a_session_without_a_plan():
    with pytest.raises(ValueError, match="no table with a Time column"):
        sessions("## A 60-minute session\n\nNo table here.\n\n## Next\n")


# ------------------------------------------------------------------------- teaching.md


@pytest.fixture(scope="module")
def page(root) -> str:
    return (root / "teaching.md").read_text()


def test_there_are_two_sessions_and_each_adds_up_to_its_length(page):
    found = sessions(page)
    assert len(found) >= 2, [s.title for s in found]
    for session in found:
        minutes = [row.minutes for row in session.rows]
        assert len(minutes) >= 4 and sum(minutes) == session.length, (session.title, minutes)


def test_the_second_session_covers_chapters_7_to_11(page):
    second = sessions(page)[1]
    material = " ".join(row.cells[-1] for row in second.rows)
    for chapter in range(7, 12):
        assert f"chapter {chapter}" in material, (chapter, material)


def test_every_exercise_teaching_md_names_exists(page, root):
    named = set(EXERCISE_LABEL.findall(page))
    assert named, "teaching.md names no exercise"
    assert named <= exercise_labels(root / "chapters"), sorted(named - exercise_labels(root / "chapters"))


def test_a_session_gives_an_exercise_at_least_its_stated_time(page, root):
    minutes = stated_minutes(root / "chapters")
    checked = 0
    for session in sessions(page):
        for row in session.rows:
            if len(row.labels) == 1 and row.labels[0] in minutes:
                assert row.minutes >= minutes[row.labels[0]], (session.title, row.cells)
                checked += 1
    assert checked >= 2  # the second session's exercises state their times


# ------------------------------------------------------------------------- the exercises themselves

EXERCISE_DIRECTIVE = re.compile(r"^```\{exercise\}(?P<title>[^\n]*)\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)
STATED_COUNT = re.compile(r"\b(?P<count>\d+) in all\b")


def exercises(chapters: Path) -> list[tuple[str, str, str]]:
    """``(notebook, title, body)`` of every ``{exercise}`` directive of the book, in order."""
    found = []
    for path in sorted(chapters.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                found += [(path.stem, m["title"].strip(), m["body"]) for m in EXERCISE_DIRECTIVE.finditer(cell.source)]
    return found


def test_the_directive_parser_finds_each_exercise_with_its_title():
    source = "```{exercise} One\n:label: ex-1-a\n\n**Difficulty 1 · 5 min.**\nText.\n```\n\n```{exercise}\n:label: ex-1-b\nNo title.\n```"
    found = EXERCISE_DIRECTIVE.findall(source)
    assert [title.strip() for title, _ in found] == ["One", ""]
    assert STATED_TIME.search(found[0][1]) and not STATED_TIME.search(found[1][1])


def test_teaching_md_states_the_number_of_exercises_of_the_book(page, root):
    stated = STATED_COUNT.search(page.split("\n## ", 1)[0])
    assert stated is not None, "teaching.md's opening paragraph states no '<n> in all'"
    assert int(stated["count"]) == len(exercises(root / "chapters"))


def test_every_exercise_has_a_title_a_label_a_difficulty_and_a_time(root):
    found = exercises(root / "chapters")
    assert len(found) > 50
    missing = [(notebook, title or "(no title)", body.split("\n", 1)[0]) for notebook, title, body in found
               if not title or not re.search(r"^:label:\s*ex-\S+", body, re.MULTILINE)
               or not STATED_TIME.search(body)]
    assert not missing, missing
