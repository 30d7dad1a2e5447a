"""Tooling for building the book (not part of the attention library's layers).

* :mod:`mha_lib.book.plotly_mime`  renders plotly figures on the website, with no CDN
* :mod:`mha_lib.book.notebooks`    executes a chapter and keeps only its small text outputs
"""
