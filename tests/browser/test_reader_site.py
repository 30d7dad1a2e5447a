"""The website as a reader finds it: search on the first screen, figures in dark mode, a landing
page that leads to every chapter.

* Search: on every page, at 1366 x 900 and 390 x 844, in a fresh browser context (the theme
  then scrolls the chapter list to the current chapter), one search control is on screen and
  not covered, before and after scrolling half-way down the page; Ctrl+K (laptop) or a tap
  on it (phone) opens the search box with the cursor in it (its text clear of the magnifying
  glass drawn over it); a typed query reaches the results page and lists matching pages,
  offline. A reader who hides the chapter list on a laptop gets the header's search button.
* Dark mode: a reader who switches the theme to dark after the page loaded gets every plotly
  figure redrawn with the page's dark background and light text (contrast at least 4.5:1
  against the figure's background) and the same colour scales; switching back restores the
  light figure; a page opened in dark mode draws dark figures at once; the kernel-free
  explorer stays dark while its controls redraw it.
* The landing page's text links every page of ``_toc.yml``.
* plotly.js and the figure script are loaded once on a page with figures and not at all on
  the others (Jupyter Book lists every file of ``_static`` on every page unless told not to).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import VIEWPORTS, toc_pages

ROOT = Path(__file__).resolve().parents[2]
PAGES = toc_pages()
FIGURE_PAGES = [p for p in PAGES if p.startswith("chapters/")]
QUERY = "valid length"
SEARCH_CONTROL = "button.search-button__button"

# The search controls the reader can see: displayed, inside the viewport, and the element at
# their centre is the control itself (nothing covers it).
_ON_SCREEN_JS = """(selector) => [...document.querySelectorAll(selector)].filter(el => {
  const style = getComputedStyle(el), r = el.getBoundingClientRect();
  if (style.display === "none" || style.visibility === "hidden" || r.width < 10 || r.height < 10)
    return false;
  if (r.top < 0 || r.left < 0 || r.bottom > innerHeight || r.right > innerWidth) return false;
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return el.contains(hit);
}).length"""


# The focused search box's text starts right of the magnifying glass the theme draws over it.
_TEXT_CLEAR_OF_ICON_JS = """() => {
  const box = document.activeElement;
  const icon = box.parentElement.querySelector(".fa-magnifying-glass");
  if (!icon) return true;
  const start = box.getBoundingClientRect().left + parseFloat(getComputedStyle(box).paddingLeft);
  return start >= icon.getBoundingClientRect().right;
}"""


def _open(page, url: str) -> None:
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, url
    if url.endswith("/index.html"):  # Jupyter Book's index redirects to the root page
        page.wait_for_url(re.compile(r".*/intro\.html$"))
    page.wait_for_load_state("networkidle")


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("path", PAGES)
def test_search_is_on_the_first_screen_and_finds_pages(open_context, site_url, path, viewport):
    page = open_context(viewport)
    _open(page, site_url + path)
    assert page.evaluate(_ON_SCREEN_JS, SEARCH_CONTROL) == 1, (
        f"{path} at {viewport}: no search control on the first screen")
    page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight / 2)")
    assert page.evaluate(_ON_SCREEN_JS, SEARCH_CONTROL) == 1, (
        f"{path} at {viewport}: the search control leaves the screen when the page scrolls")
    page.evaluate("() => window.scrollTo(0, 0)")

    if viewport == "desktop":
        page.keyboard.press("Control+k")
    else:
        page.locator(f"{SEARCH_CONTROL}:visible").first.tap()
    page.wait_for_function(  # the cursor in a search box the reader can see
        "() => { const el = document.activeElement;"
        " return el && el.name === 'q' && el.getBoundingClientRect().width > 50; }", timeout=30_000)
    assert page.evaluate(_TEXT_CLEAR_OF_ICON_JS), f"{path}: the icon covers the typed text"
    page.keyboard.type(QUERY)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    page.wait_for_load_state("networkidle")
    assert re.search(r"/search\.html\?q=valid\+length", page.url), page.url
    results = page.locator("#search-results ul.search li a")
    results.first.wait_for(state="attached", timeout=10_000)
    titles = results.all_text_contents()
    assert any("implementation" in t.lower() for t in titles), titles
    assert page.external_requests == []
    assert page.console_errors == []


@pytest.mark.browser
def test_search_stays_on_screen_when_the_chapter_list_is_hidden(open_context, site_url):
    """On a laptop, a reader who hides the chapter list (and its search field) gets the
    header's search button instead, and it opens the search box."""
    page = open_context("desktop")
    _open(page, site_url + FIGURE_PAGES[0])
    page.locator("button[aria-label='Toggle primary sidebar']").first.click()
    page.wait_for_function("() => getComputedStyle(document.querySelector('.bd-sidebar-primary'))"
                           ".visibility === 'hidden'")
    assert page.evaluate(_ON_SCREEN_JS, SEARCH_CONTROL) == 1
    page.locator(f"{SEARCH_CONTROL}:visible").first.click()
    page.wait_for_function("() => document.activeElement && document.activeElement.name === 'q'")


# --- dark mode -------------------------------------------------------------------------------

# Per figure: what the reader sees (the SVG's background, the fill of its text) and the colour
# scales plotly drew with.
_FIGURES_JS = """() => {
  const rgb = (text) => {
    const re = /rgba?\\(([\\d.]+),\\s*([\\d.]+),\\s*([\\d.]+)(?:,\\s*([\\d.]+))?\\)/;
    const m = re.exec(text || "");
    return m ? [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]] : null;
  };
  const page = rgb(getComputedStyle(document.body).backgroundColor);
  const textSelector = [".gtitle", ".g-xtitle text", ".g-ytitle text", ".xtick text", ".ytick text",
    ".legendtext", ".cbtitle text", ".cbaxis text", ".annotation-text"].join(",");
  return [...document.querySelectorAll(".js-plotly-plot")]
    .filter(gd => gd.offsetParent !== null)
    .map(gd => {
      const svg = gd.querySelector(".main-svg");
      let paper = rgb(getComputedStyle(svg).backgroundColor);
      if (!paper || paper[3] === 0) paper = page;
      const texts = [...gd.querySelectorAll(textSelector)]
        .filter(t => t.textContent.trim() && t.getBoundingClientRect().width > 0)
        .map(t => {  // an annotation with a background of its own is read against it
          const bg = t.closest(".annotation") && t.closest(".annotation").querySelector("rect.bg");
          const own = bg && rgb(getComputedStyle(bg).fill);
          const opaque = own && own[3] > 0 && +getComputedStyle(bg).fillOpacity > 0.5;
          return [t.textContent.trim().slice(0, 30), rgb(getComputedStyle(t).fill),
                  opaque ? own : null];
        });
      const scales = [
        ...gd._fullData.map(t => t.colorscale ? JSON.stringify(t.colorscale) : null),
        ...Object.keys(gd._fullLayout).filter(k => /^coloraxis\\d*$/.test(k))
          .map(k => JSON.stringify(gd._fullLayout[k].colorscale)),
      ];
      return {id: gd.id, theme: gd.dataset.mhaTheme, paper, page, texts, scales};
    });
}"""


def _luminance(rgb) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a, b) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)))
    return (lb + 0.05) / (la + 0.05)


def _check_theme(figures: list[dict], theme: str) -> list[str]:
    """Problems with figures drawn in ``theme``: background, text contrast."""
    problems = []
    for fig in figures:
        name = fig["id"]
        if fig["theme"] != theme:
            problems.append(f"{name} drawn for the {fig['theme']} theme")
        paper = fig["paper"]
        dark_paper = _luminance(paper) < 0.05
        if dark_paper != (theme == "dark"):
            problems.append(f"{name}: background {paper} in the {theme} theme")
        if theme == "dark" and _contrast(paper, fig["page"]) > 1.1:
            problems.append(f"{name}: background {paper} is not the page's {fig['page']}")
        if not fig["texts"]:
            problems.append(f"{name}: no text found")
        for text, fill, own in fig["texts"]:
            ground = own or paper
            if fill is None or _contrast(fill, ground) < 4.5:
                problems.append(f"{name}: text {text!r} in {fill} on {ground} "
                                f"(contrast {_contrast(fill, ground) if fill else 0:.1f})")
    return problems


def _switch_theme(page, theme: str) -> None:
    """Click the theme's light/dark button, as a reader does, until ``theme`` is shown."""
    button = page.locator(".theme-switch-button:visible").first
    for _ in range(3):
        if page.evaluate("() => document.documentElement.dataset.theme") == theme:
            break
        button.click()
    assert page.evaluate("() => document.documentElement.dataset.theme") == theme
    page.wait_for_function(
        "(t) => [...document.querySelectorAll('.js-plotly-plot')]"
        ".every(gd => gd.dataset.mhaTheme === t)", arg=theme, timeout=10_000)


@pytest.mark.browser
@pytest.mark.parametrize("path", FIGURE_PAGES)
def test_figures_follow_the_theme(open_context, site_url, site_dir, path):
    if "mhaPlot(" not in (site_dir / path).read_text(encoding="utf-8"):
        pytest.skip(f"{path} has no plotly figure")
    page = open_context("desktop")
    _open(page, site_url + path)
    light = page.evaluate(_FIGURES_JS)
    assert light, f"{path}: no figure drawn"
    assert _check_theme(light, "light") == []

    _switch_theme(page, "dark")
    dark = page.evaluate(_FIGURES_JS)
    assert _check_theme(dark, "dark") == []
    assert [f["scales"] for f in dark] == [f["scales"] for f in light], "colour scales changed"

    _switch_theme(page, "light")
    again = page.evaluate(_FIGURES_JS)
    assert [(f["paper"], f["texts"]) for f in again] == [(f["paper"], f["texts"]) for f in light]
    assert page.console_errors == []


EXPLORER_PAGE = "chapters/04_exploring_heads.html"


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_dark_page_draws_dark_figures_and_explorer_stays_dark(open_context, site_url, viewport):
    page = open_context(viewport)
    page.add_init_script(
        "localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark')")
    _open(page, site_url + EXPLORER_PAGE)
    assert _check_theme(page.evaluate(_FIGURES_JS), "dark") == []

    explorer = page.locator("#mha-static-explorer")
    before = explorer.get_attribute("data-state")
    heads = page.locator("#mha-static-explorer-controls input[type=range]").first
    heads.scroll_into_view_if_needed()
    heads.focus()
    page.keyboard.press("End")
    page.wait_for_function(
        "(s) => document.getElementById('mha-static-explorer').dataset.state !== s", arg=before)
    assert _check_theme(page.evaluate(_FIGURES_JS), "dark") == []
    assert page.external_requests == []
    assert page.console_errors == []


# --- landing page ----------------------------------------------------------------------------


@pytest.mark.browser
def test_landing_page_links_every_page_of_the_toc(browser_page, site_url):
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    _open(browser_page, site_url + "intro.html")
    links = browser_page.eval_on_selector_all(
        "article.bd-article a[href]", "els => els.map(e => e.getAttribute('href').split('#')[0])")
    missing = [f for f in files if f"{f}.html" not in links]
    assert missing == [], f"the landing page's text does not link {missing}"


_SCRIPT_SRC = re.compile(r'<script[^>]*\bsrc="([^"?]+)')


@pytest.mark.browser
@pytest.mark.parametrize("path", [p for p in PAGES if p != "index.html"])  # index: a redirect
def test_figure_scripts_load_once_and_only_where_figures_are(site_dir, path):
    html = (site_dir / path).read_text(encoding="utf-8")
    scripts = [Path(src).name for src in _SCRIPT_SRC.findall(html)]
    wanted = 1 if "mhaPlot(" in html else 0
    for name in ("plotly-cartesian.min.js", "mha-figures.js"):
        assert scripts.count(name) == wanted, f"{path}: {name} loaded {scripts.count(name)} times"
    assert scripts.count("mha-site.js") == 1
    assert html.count("mha-site.css") == 1
