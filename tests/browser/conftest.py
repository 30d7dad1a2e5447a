"""Fixtures for the browser tests: the built website on a loopback server, and Chromium.

The site is served from ``_build/html`` (or ``$MHA_SITE_DIR``) on 127.0.0.1. Every other
request is aborted and recorded, so a page that needs the network fails its test.
Debian's Chromium (``/usr/bin/chromium``) is driven by Playwright; we never download a browser.
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE_DIR = Path(os.environ.get("MHA_SITE_DIR", ROOT / "_build" / "html"))
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


def _missing(what: str, how: str) -> None:
    """Fail in CI, skip elsewhere, and say how to get what is missing."""
    message = f"{what} is missing: {how}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def site_dir() -> Path:
    if not (SITE_DIR / "index.html").exists():
        _missing(f"the built website ({SITE_DIR})", "run 'make book' first")
    return SITE_DIR


@pytest.fixture(scope="session")
def site_url(site_dir: Path):
    """Base URL (ending in '/') of a loopback HTTP server over the built website."""
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        _missing(f"Chromium ({CHROMIUM})", "run 'apt-get install -y chromium' as root")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_page(browser, site_url):
    """A fresh page that may only talk to the loopback server.

    Attributes added for the tests: ``console_errors`` (console errors and uncaught page
    errors), ``external_requests`` (every aborted URL) and ``bytes_received`` (a dict
    URL -> body size of every response from the site).
    """
    context = browser.new_context(viewport={"width": 1280, "height": 900})
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

    def on_response(response):
        if response.url.startswith(site_url):
            try:
                page.bytes_received[response.url] = len(response.body())
            except Exception:  # redirects and aborted bodies have none
                pass

    page.route("**/*", route)
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    page.on("pageerror", lambda e: page.console_errors.append(str(e)))
    page.on("response", on_response)
    yield page
    context.close()
