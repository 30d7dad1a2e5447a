"""The whole book as one PDF (``make pdf``, which ``make test`` runs before the browser tests).

The PDF printed from the built website (``mha_lib.book.pdf``) opens with a contents page that
lists every page of ``_toc.yml`` with the sheet it starts on; its outline has one entry per
page, pointing there; every chapter's title is on its first sheet; the maths is typeset (no
TeX source left); each explorer's page says where the explorer moves on the website.
"""

from __future__ import annotations

import re

import pytest

from conftest import SITE_DIR, _missing
from mha_lib.book.pdf import PDF_NAME, book_pages, website_url

EXPLORER_PAGES = ["chapters/04_exploring_heads", "chapters/08_induction_heads",
                  "chapters/12_language_model", "chapters/12d_linear_attention"]


@pytest.fixture(scope="module")
def reader():
    path = SITE_DIR / PDF_NAME
    if not path.exists():
        _missing(f"the book's PDF ({path})", "run 'make pdf' first")
    from pypdf import PdfReader

    return PdfReader(str(path))


def _text(reader, sheet: int) -> str:
    return re.sub(r"\s+", " ", reader.pages[sheet].extract_text() or "")


@pytest.mark.browser
def test_the_pdf_has_a_contents_page_and_every_page_of_the_book(reader):
    docs = book_pages()
    outline = [(item.title, reader.get_destination_page_number(item)) for item in reader.outline]
    assert len(outline) == len(docs)
    contents = _text(reader, 0)
    assert "Contents" in contents
    starts = [sheet for _, sheet in outline]
    assert starts == sorted(starts) and starts[0] >= 1 and len(set(starts)) == len(starts)
    for title, sheet in outline:
        first = _text(reader, sheet)
        words = title.split()[:4]
        assert " ".join(words) in first, f"{title!r} is not on its first sheet {sheet + 1}"
        assert re.search(rf"{re.escape(' '.join(words))}.*?\b{sheet + 1}\b", contents), \
            f"the contents page lacks {title!r} on page {sheet + 1}"
    assert len(reader.pages) > 5 * len(docs)


def _links(reader) -> set[str]:
    """The addresses the PDF's link annotations go to (no text extraction: fast)."""
    out = set()
    for page in reader.pages:
        for annot in page.get("/Annots") or []:
            action = annot.get_object().get("/A")
            if action is not None and "/URI" in action:
                out.add(str(action["/URI"]))
    return out


@pytest.mark.browser
def test_the_maths_is_typeset_and_explorers_point_to_the_website(reader):
    outline = {item.title: reader.get_destination_page_number(item) for item in reader.outline}
    first = outline["The model"]  # a chapter full of maths: its first sheets hold no TeX
    text = " ".join(_text(reader, i) for i in range(first, first + 4))
    assert "softmax" in text
    assert "\\(" not in text and "\\frac" not in text and "\\sqrt" not in text and "$$" not in text
    links = _links(reader)
    for doc in EXPLORER_PAGES:
        assert f"{website_url()}{doc}.html" in links, doc
