"""Fixtures for the browser tests: the built website on a loopback server, and Chromium.

The site is served from ``_build/html`` (or ``$MHA_SITE_DIR``) on 127.0.0.1. Every other
request is aborted and recorded, so a page that needs the network fails its test.
Debian's Chromium (``/usr/bin/chromium``) is driven by Playwright; we never download a browser.
Pages are opened at two viewports, a laptop (1366 x 900) and a phone (390 x 844), each in a
fresh browser context (an empty cache: the bytes counted are what a first visit transfers).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from mha_lib.book.loopback import serve

ROOT = Path(__file__).resolve().parents[2]
SITE_DIR = Path(os.environ.get("MHA_SITE_DIR", ROOT / "_build" / "html"))
SCREENSHOTS = Path(os.environ.get("MHA_SCREENSHOTS", ROOT / "_build" / "screenshots"))
CHROMIUM = Path(os.environ.get("MHA_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}


def toc_pages() -> list[str]:
    """HTML paths of every page in _toc.yml, plus Sphinx's own index and search pages."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return ["index.html", "genindex.html", "search.html"] + [f"{f}.html" for f in files]


def _missing(what: str, how: str) -> None:
    """Fail in CI, skip elsewhere, and say how to get what is missing."""
    message = f"{what} is missing: {how}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def site_dir() -> Path:
    if not (SITE_DIR / "index.html").exists():
        _missing(f"the built website ({SITE_DIR})", "run 'make book' first")
    return SITE_DIR


@pytest.fixture(scope="session")
def site_url(site_dir: Path):
    """Base URL (ending in '/') of a loopback HTTP server over the built website."""
    with serve(site_dir) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        _missing(f"Chromium ({CHROMIUM})", "run 'apt-get install -y chromium' as root")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture
def open_context(browser, site_url):
    """``open_context(viewport_name)``: a fresh page that may only talk to the loopback server.

    Attributes added for the tests: ``console_errors`` (console errors and uncaught page
    errors), ``external_requests`` (every aborted URL) and ``bytes_received`` (a dict
    URL -> body size of every response from the site).
    """
    contexts = []

    def open_(viewport: str = "desktop"):
        phone = viewport == "phone"
        context = browser.new_context(viewport=VIEWPORTS[viewport], is_mobile=phone,
                                      has_touch=phone, device_scale_factor=1)
        contexts.append(context)
        page = context.new_page()
        page.console_errors = []
        page.external_requests = []
        page.bytes_received = {}

        def route(route):
            if route.request.url.startswith(site_url):
                route.continue_()
            else:
                page.external_requests.append(route.request.url)
                route.abort()

        def on_finished(request):
            if request.url.startswith(site_url):
                sizes = request.sizes()
                page.bytes_received[request.url] = sizes["responseBodySize"]

        page.route("**/*", route)
        page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
        page.on("pageerror", lambda e: page.console_errors.append(str(e)))
        page.on("requestfinished", on_finished)
        return page

    yield open_
    for context in contexts:
        context.close()


@pytest.fixture
def browser_page(open_context):
    """A fresh desktop page (see :func:`open_context`)."""
    return open_context("desktop")


# Resolves when every finite animation or transition on the page has finished.
_TRANSITIONS_DONE_JS = """() => Promise.all(document.getAnimations()
  .filter(a => a.effect && a.effect.getComputedTiming().endTime < Infinity)
  .map(a => a.finished.catch(() => null)))"""

# The theme's tooltips settled: each shown at its full opacity, none fading out (Bootstrap
# removes a hidden one). A tooltip can start to fade in after the transitions above are waited
# for (the search control's, when the search box closes and gives it the focus back).
_TOOLTIPS_SETTLED_JS = """() => [...document.querySelectorAll('.tooltip')].every(t => {
  const style = getComputedStyle(t);
  return t.classList.contains('show')
    && style.opacity === style.getPropertyValue('--bs-tooltip-opacity').trim(); })"""


def serious_axe_violations(page, exclude: list[str]) -> list[str]:
    """axe-core's critical and serious findings, outside the elements ``exclude`` selects."""
    from axe_playwright_python.sync_playwright import Axe

    # axe reads colours as they are in that frame: a tooltip half-way through its fade (the
    # search control's, shown again when the search box closes) fails contrast it passes shown.
    # A tooltip may start to fade in even after the wait below (twice in fresh-clone runs), so
    # its fade is switched off: a tooltip is then either hidden (opacity 0, which axe skips) or
    # shown as the reader reads it, and axe checks that.
    page.add_style_tag(content=".tooltip.fade { transition: none !important; }")
    page.evaluate(_TRANSITIONS_DONE_JS)
    page.wait_for_function(_TOOLTIPS_SETTLED_JS)
    results = Axe().run(page, context={"exclude": [[selector] for selector in exclude]})
    return [
        f"{v['id']} ({v['impact']}): {len(v['nodes'])} node(s), e.g. {v['nodes'][0]['target']}"
        for v in results.response["violations"]
        if v["impact"] in ("critical", "serious")
    ]


# The language-model explorer's model, loaded and drawn (chapters 12 and 12d). On the website its
# model is a file of its own (mha_lib.book.sphinx_ext.split_models) that the page loads when the
# reader reaches the explorer: scrolled to it, the explorer loads and draws.
_LM_DRAWN_JS = "() => document.querySelector('.mha-lm')?.mhaLM?.rendered > 0"


def reach_lm_explorer(page) -> None:
    """Scroll to the page's language-model explorer and wait until it has drawn."""
    page.locator(".mha-lm").first.scroll_into_view_if_needed()
    page.wait_for_function(_LM_DRAWN_JS)
