"""The house rules of the package's layout, checked: every public module declares ``__all__``,
almost every public name is used outside its own module, and no module is long.

(The layers themselves are checked by import-linter: ``lint-imports`` in ``make test``.)
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "mha_lib"
# Where a public name may be used: the chapters, the docs and build files, other modules.
USERS = [*sorted((ROOT / "chapters").glob("*.ipynb")),
         *(ROOT / n for n in ("README.md", "CONTRIBUTING.md", "teaching.md", "intro.md",
                              "_config.yml", "Makefile", "pyproject.toml", ".importlinter"))]
MAX_LINES = 600
MAX_UNUSED = 15


def _public_modules() -> dict[Path, str]:
    modules = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__" or any(p.startswith("_") for p in parts[1:]):
            continue
        modules[path] = ".".join(parts)
    return modules


def _declared_all(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return None


def test_every_public_module_declares_all():
    missing = [name for path, name in _public_modules().items() if _declared_all(path) is None]
    assert missing == []


def test_no_module_is_longer_than_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def unused_public_names() -> list[str]:
    """``module.name`` for each name in an ``__all__`` that nothing outside the module uses."""
    modules = _public_modules()
    # each file's words, once: a name (an identifier) matches ``\bname\b`` in a text exactly
    # when it is one of the text's maximal runs of word characters
    words = {p: set(re.findall(r"\w+", p.read_text()))
             for p in [*USERS, *PKG.rglob("*.py"), *PKG.rglob("*.js")] if p.exists()}
    unused = []
    for path, module in modules.items():
        for name in _declared_all(path) or []:
            assert name.isidentifier(), f"{module}.__all__ holds {name!r}"
            inside = path.parent if path.name == "__init__.py" else path
            users = [p for p, found in words.items()
                     if name in found and not (p == path or (path.name == "__init__.py"
                                                             and p.suffix == ".py" and inside in p.parents))]
            if not users:
                unused.append(f"{module}.{name}")
    return unused


def test_public_names_are_used_outside_their_module():
    unused = unused_public_names()
    assert len(unused) <= MAX_UNUSED, unused
