"""Every page of the website works offline: no external request, no console error, math
typeset by the MathJax copy in _static, every plotly figure drawn, no page over 2 MB."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MAX_PAGE_BYTES = 2_000_000


def _toc_pages() -> list[str]:
    """HTML paths of every page in _toc.yml, plus Sphinx's own index and search pages."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return ["index.html", "genindex.html", "search.html"] + [f"{f}.html" for f in files]


PAGES = _toc_pages()


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_page_works_offline(browser_page, site_url, site_dir, path):
    page = browser_page
    html = site_dir / path
    assert html.exists(), f"{path} was not built"
    assert html.stat().st_size < MAX_PAGE_BYTES, f"{path} is {html.stat().st_size} bytes"

    response = page.goto(site_url + path, wait_until="load")
    assert response is not None and response.ok
    page.wait_for_load_state("networkidle")

    if page.locator(".math").count():
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
        untypeset = page.evaluate(
            "() => [...document.querySelectorAll('.math')]"
            ".filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60))"
        )
        assert untypeset == [], f"math not typeset on {path}: {untypeset[:3]}"

    figures = page.locator(".plotly-graph-div")
    for i in range(figures.count()):
        figure = figures.nth(i)
        figure.scroll_into_view_if_needed()
        figure.locator(".main-svg").first.wait_for(state="attached", timeout=10_000)
        box = figure.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 100, f"figure {i} on {path} is not drawn"

    assert page.external_requests == [], f"{path} asked the network for {page.external_requests}"
    assert page.console_errors == [], f"console errors on {path}: {page.console_errors}"


@pytest.mark.browser
def test_toc_pages_are_all_linked_from_the_home_page(browser_page, site_url):
    browser_page.goto(site_url + "intro.html")
    links = browser_page.eval_on_selector_all(
        "nav.bd-links a.reference.internal", "els => els.map(e => e.getAttribute('href'))"
    )
    chapters = [p for p in PAGES if p.startswith("chapters/")]
    for chapter in chapters:
        assert any(chapter in (link or "") for link in links), f"{chapter} missing from the navigation"
