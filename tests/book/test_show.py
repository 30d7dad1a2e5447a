"""show_source: the library's real code, as HTML and plain text, never as LaTeX."""

import inspect

from IPython.core.interactiveshell import InteractiveShell

from mha_lib.book.show import show_source
from mha_lib.multihead import MultiHeadAttention


def test_show_source_is_the_real_source_in_html_and_text_only():
    shown = show_source(MultiHeadAttention.forward)
    bundle, _ = InteractiveShell.instance().display_formatter.format(shown)
    # a LaTeX form would make Sphinx count an equation on the page and load MathJax for it
    assert sorted(bundle) == ["text/html", "text/plain"]
    assert bundle["text/plain"].strip() == inspect.getsource(MultiHeadAttention.forward).strip()
    assert "attend_heads" in bundle["text/html"]
