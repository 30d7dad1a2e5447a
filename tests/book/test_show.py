"""show_source: the library's real code, as HTML and plain text, never as LaTeX; its long lines
broken to fit a laptop's listing.

Every ``show_source(...)`` of the chapters is resolved as the chapter imports it, and its shown
copy is checked: the same program as the library's code (``_fit_lines`` keeps the tokens and
only breaks lines, moves a line's closing comment above it, splits a long string into adjacent
pieces or a docstring's long line at a space), and at most 5% of the listings still have a line
over ``_LISTING_WIDTH`` characters (what a 1366 px page shows without scrolling sideways; the
browser suite measures the pages themselves, ``tests/browser/test_site.py``).
"""

import ast
import inspect
import json
import re
from pathlib import Path

import pytest

from IPython.core.interactiveshell import InteractiveShell

from mha_lib.book.show import _LISTING_WIDTH, _fit_lines, _same_program, show_source
from mha_lib.multihead import MultiHeadAttention


def test_show_source_is_the_real_source_in_html_and_text_only():
    shown = show_source(MultiHeadAttention.forward)
    bundle, _ = InteractiveShell.instance().display_formatter.format(shown)
    # a LaTeX form would make Sphinx count an equation on the page and load MathJax for it
    assert sorted(bundle) == ["text/html", "text/plain"]
    assert bundle["text/plain"].strip() == _fit_lines(inspect.getsource(MultiHeadAttention.forward)).strip()
    assert "attend_heads" in bundle["text/html"]


CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))


def _listings() -> list[tuple[str, str, object]]:
    found = []
    for path in CHAPTERS:
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        namespace: dict = {}
        for cell in cells:
            source = "".join(cell["source"])
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and "mha_lib" in ast.unparse(node):
                    exec(ast.unparse(node), namespace)  # noqa: S102 (the chapter's own imports)
            for expr in re.findall(r"show_source\(([^()]*)\)", source):
                found.append((path.stem, expr, eval(expr, namespace)))  # noqa: S307
    return found


@pytest.fixture(scope="module")
def listings():
    return _listings()


def test_every_listing_is_the_same_program_and_nearly_all_fit(listings):
    assert len(listings) >= 80
    wide = []
    for chapter, expr, obj in listings:
        source = inspect.getsource(obj)
        shown = show_source(obj).data
        assert _same_program(source, shown), f"{chapter}: {expr}"
        longest = max(len(line) for line in shown.splitlines())
        if longest > _LISTING_WIDTH:
            wide.append((chapter, expr, longest))
    assert len(wide) <= 0.05 * len(listings), wide


def test_short_code_is_shown_as_it_is():
    source = "def f(x):\n    return x + 1  # one more\n"
    assert _fit_lines(source, 40) == source


def test_long_lines_break_inside_brackets_comments_go_above_and_strings_split():
    source = (
        "def f(alpha, beta):\n"
        "    total = combine(alpha, beta, gamma=alpha * beta, delta=alpha - beta)  # the sum\n"
        '    raise ValueError(f"alpha must be positive and smaller than beta, got {alpha} and {beta}")\n'
    )
    shown = _fit_lines(source, 50)
    assert _same_program(source, shown) and max(map(len, shown.splitlines())) <= 50, shown
    assert "    # the sum\n    total = combine(" in shown


def test_a_method_keeps_its_indent():
    source = "    def f(self):\n        return some_function(first_argument, second_argument, third)\n"
    shown = _fit_lines(source, 50)
    assert shown.startswith("    def f(self):\n        return some_function(")
    assert max(map(len, shown.splitlines())) <= 50 and _same_program(source, shown)
