"""Tooling for building the book (not part of the attention library's layers).

* :mod:`mha_lib.book.plotly_mime`     renders plotly figures on the website, with no CDN
* :mod:`mha_lib.book.notebooks`       executes a chapter and keeps only its small text outputs
* :mod:`mha_lib.book.browser`         drives the website's kernel-free explorer in Chromium
* :mod:`mha_lib.book.lab`             the live explorer in a real JupyterLab
  (``python -m mha_lib.book.lab``: times its controls)
* :mod:`mha_lib.book.explorer_bench`  ``python -m mha_lib.book.explorer_bench``: times both explorers
"""

__all__ = []  # a package of tools; each module says what it offers
