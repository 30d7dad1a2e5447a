"""The whole book as one PDF, printed offline from the built website (``make pdf``).

Usage::

    python -m mha_lib.book.pdf _build/html              # writes _build/html/<PDF_NAME>

Every page of ``_toc.yml`` is opened in Chromium (Playwright, Debian's ``/usr/bin/chromium``)
from a loopback server over the built website, as a reader's browser draws it: plotly
figures drawn, maths typeset by the MathJax copy in ``_static``, the story model of chapter 12
run in the page. Chromium's print-to-PDF (``page.pdf``) prints each page on A4 with the
theme's print stylesheet (no sidebars, header or buttons) and :data:`_PRINT_CSS`: an explorer
prints as a still of its first state with the address of its page on the website, where it
moves. A contents page (chapter titles and their page numbers) comes first, and the PDF's
outline (bookmarks) has one entry per page of the book. The PDF is written into the built
website, which links it from its landing page. No network: every request outside the
loopback server is refused.
"""

from __future__ import annotations

import argparse
import html
import io
import re
from pathlib import Path

import yaml

from mha_lib.book.loopback import serve

__all__ = ["PDF_NAME", "book_pages", "main", "website_url"]

ROOT = Path(__file__).resolve().parents[2]
PDF_NAME = "multihead-attention-book.pdf"
MARGIN = {"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"}
VIEWPORT = {"width": 820, "height": 1100}  # about A4's printable width at 96 px per inch

# What printing changes on a page of the website: code and outputs wrap (nothing past the
# paper's edge), figures do not split across sheets, explorers print as a still with a note.
_PRINT_CSS = """
@media print {
  .bd-article pre, .bd-article div.highlight pre { white-space: pre-wrap !important;
    overflow-wrap: anywhere; overflow: visible !important; background: none !important;
    font-size: 8.5pt; }
  .bd-article .cell_output, .bd-article .output { overflow: visible !important; }
  .mha-figure, .js-plotly-plot, .cell_output img { break-inside: avoid; }
  .mha-explorer-controls, .mha-lm form, .mha-lm-hint, .mha-lm-status, .mha-lm details, .mha-lm fieldset,
  .mha-lm button, #pst-skip-link, .prev-next-area, .header-article, .bd-footer-article,
  .bd-footer-content, .dropdown-download-buttons { display: none !important; }
  .mha-print-note { font-style: italic; border-left: 3px solid #3b528b; padding-left: 0.5rem; }
  a[href^="http"]::after { content: ""; }
}
"""

# The explorers (their controls) get a note with the address of their page on the website.
_NOTE_JS = """
(url) => {
  for (const root of document.querySelectorAll(".mha-explorer, .mha-lm")) {
    const note = document.createElement("p");
    note.className = "mha-print-note";
    note.append("On paper this explorer is a still of its first state; it moves on the website: ");
    const a = document.createElement("a");
    a.href = url; a.textContent = url;
    note.append(a, ".");
    root.append(note);
  }
}
"""

# Everything a reader's browser draws, drawn: fonts, figures, maths, the story model (its
# model, which the page loads when the reader reaches the explorer, loaded now: mha-lm.js).
_READY_JS = """
async () => {
  await document.fonts.ready;
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  if (window.mhaLM && window.mhaLM.loadAll) await window.mhaLM.loadAll();
  const figures = [...document.querySelectorAll(".plotly-graph-div")];
  const drawn = () => figures.every((gd) => gd.querySelector(".main-svg") || gd.offsetParent === null);
  for (let i = 0; i < 200 && !drawn(); i++) await new Promise((r) => setTimeout(r, 50));
  return drawn();
}
"""


def book_pages(root: Path = ROOT) -> list[str]:
    """The documents of ``_toc.yml`` in reading order (``intro``, ``chapters/01_model``...)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    docs = [toc["root"]]
    for part in toc.get("parts", []):
        docs += [chapter["file"] for chapter in part.get("chapters", [])]
    return docs


def website_url(root: Path = ROOT) -> str:
    """Where the website lives: ``html.baseurl`` of ``_config.yml`` if set, else the GitHub
    Pages address of ``repository.url`` (https://github.com/OWNER/NAME -> OWNER.github.io/NAME)."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    base = (config.get("html") or {}).get("baseurl") or ""
    if base:
        return base.rstrip("/") + "/"
    repo = (config.get("repository") or {}).get("url", "")
    match = re.match(r"https://github\.com/([^/]+)/([^/]+?)/?$", repo)
    if not match:
        raise ValueError(f"_config.yml: expected html.baseurl or a GitHub repository.url, got {repo!r}")
    return f"https://{match.group(1).lower()}.github.io/{match.group(2)}/"


def _contents_html(title: str, entries: list[tuple[str, int]], url: str) -> str:
    rows = "".join(f'<li><span class="t">{html.escape(t)}</span><span class="p">{p}</span></li>'
                   for t, p in entries)
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
body {{ font-family: sans-serif; margin: 0; }} h1 {{ font-size: 22pt; margin: 0 0 0.3em; }}
ol {{ list-style: none; padding: 0; font-size: 11.5pt; }}
li {{ display: flex; gap: 0.5em; margin: 0.35em 0; }}
li .t {{ flex: 1; border-bottom: 1px dotted #999; }}
p {{ font-size: 10pt; color: #333; }}</style></head><body>
<h1>{html.escape(title)}</h1><p>The website, with every explorer live: {html.escape(url)}</p>
<h2>Contents</h2><ol>{rows}</ol></body></html>"""


def _write_pdf(site: Path, out: Path, *, chromium: str = "/usr/bin/chromium") -> dict:
    """Print the book in ``site`` (the built website) to ``out``.

    Returns:
        ``{"pages": sheets in the PDF, "bytes": its size, "chapters": [(title, first sheet)]}``.

    Raises:
        ValueError: ``site`` holds no built website, or a page of the book is missing, or a
            page's figures are not drawn.
    """
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    site = Path(site)
    if not (site / "index.html").exists():
        raise ValueError(f"site must be the built website (with index.html), got {site}")
    docs = book_pages()
    missing = [d for d in docs if not (site / f"{d}.html").exists()]
    if missing:
        raise ValueError(f"site lacks pages of the book: {missing}")
    url = website_url()
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    printed: list[tuple[str, bytes]] = []
    with serve(site) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport=VIEWPORT)
        context.route("**/*", lambda route: route.continue_()
                      if route.request.url.startswith(base) else route.abort())
        page = context.new_page()
        for doc in docs:
            page.goto(f"{base}{doc}.html", wait_until="load")
            if not page.evaluate(_READY_JS):
                raise ValueError(f"{doc}: its figures were not drawn")
            page.add_style_tag(content=_PRINT_CSS)
            page.evaluate(_NOTE_JS, f"{url}{doc}.html")
            page.emulate_media(media="print")
            page.evaluate(_READY_JS)  # figures redrawn for the printed width
            title = page.evaluate(
                "() => (document.querySelector('.bd-article h1') || {textContent: document.title})"
                ".textContent.replace(/#\\s*$/, '').trim()")
            printed.append((title, page.pdf(format="A4", margin=MARGIN, print_background=True,
                                            outline=False)))
            page.emulate_media(media="screen")
        # the contents page: one sheet (or more) before the chapters
        starts, sheet = [], 0
        for title, data in printed:
            starts.append((title, sheet))
            sheet += len(PdfReader(io.BytesIO(data)).pages)
        head = _contents_html(config.get("title", "The book"), [(t, 1) for t, _ in starts], url)
        page.set_content(head)
        contents_sheets = len(PdfReader(io.BytesIO(page.pdf(format="A4", margin=MARGIN))).pages)
        entries = [(t, s + contents_sheets + 1) for t, s in starts]
        page.set_content(_contents_html(config.get("title", "The book"), entries, url))
        contents = page.pdf(format="A4", margin=MARGIN)
        browser.close()
    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(contents)))
    for (title, data), (_, first) in zip(printed, entries):
        start = len(writer.pages)
        writer.append(PdfReader(io.BytesIO(data)))
        writer.add_outline_item(title, start)
        assert start + 1 == first
    writer.add_metadata({"/Title": config.get("title", ""), "/Author": config.get("author", "")})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as handle:
        writer.write(handle)
    return {"pages": len(writer.pages), "bytes": out.stat().st_size, "chapters": entries}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built website (e.g. _build/html)")
    parser.add_argument("--out", type=Path, help=f"the PDF (default: SITE/{PDF_NAME})")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        parser.error(f"site: expected the built website (with index.html), got {args.site}")
    out = args.out or args.site / PDF_NAME
    result = _write_pdf(args.site, out, chromium=args.chromium)
    print(f"{out}: {result['pages']} pages, {result['bytes'] / 1e6:.1f} MB, "
          f"{len(result['chapters'])} chapters and pages of the book")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
