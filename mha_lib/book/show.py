"""Show the library's real source in a chapter (one source of truth, never a pasted copy)."""

from __future__ import annotations

import inspect

from IPython.display import Code

__all__ = ["show_source"]


class _Source(Code):
    """IPython's ``Code`` without its LaTeX form: a page shows the HTML, and a LaTeX output
    would count as an equation and make Sphinx load MathJax on a page with no mathematics."""

    _repr_latex_ = None


def show_source(obj) -> Code:
    """Syntax-highlighted source of a function, class or method of mha_lib.

    In Jupyter and on the website it renders as highlighted code (HTML, and plain text for
    other front ends); nbval does not compare it, so the chapters do not need re-running when
    the code changes.
    """
    return _Source(inspect.getsource(obj), language="python")
