"""Show the library's real source in a chapter (one source of truth, never a pasted copy)."""

from __future__ import annotations

import inspect

from IPython.display import Code

__all__ = ["show_source"]


def show_source(obj) -> Code:
    """Syntax-highlighted source of a function, class or method of mha_lib.

    In Jupyter and on the website it renders as highlighted code; nbval does not compare it
    (its output is HTML), so the chapters do not need re-running when the code changes.
    """
    return Code(inspect.getsource(obj), language="python")
