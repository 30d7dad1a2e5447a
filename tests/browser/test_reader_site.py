"""The website as a reader finds it: figures in dark mode, a landing page that leads to every
chapter. (Search on the first screen of every page is checked in ``test_site.py``, on the
page load of ``test_page``.)

* Dark mode: a reader who switches the theme to dark after the page loaded gets every plotly
  figure redrawn with the page's dark background and light text (contrast at least 4.5:1
  against the figure's background), dark lines and markers at 3:1 at least, masked cells (a
  borderless shape under a heatmap's gaps) 3:1 apart from the scale's lowest colour, in both
  themes, and the same colour scales; switching back restores the
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


def _open(page, url: str) -> None:
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, url
    page.wait_for_load_state("networkidle")


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
      // lines and markers as drawn; masked cells: a borderless shape under a heatmap with gaps,
      // beside the lowest colour of that heatmap's scale
      const marks = gd._fullData.filter(t => t.visible === true && t.type === "scatter")
        .flatMap(t => [t.mode.includes("lines") && t.line && t.line.color,
                       t.mode.includes("markers") && t.marker && typeof t.marker.color === "string" && t.marker.color])
        .filter(Boolean);
      const masked = (gd._fullLayout.shapes || []).filter(s => s.fillcolor && s.layer === "below"
          && (!s.line || !s.line.width))
        .flatMap(s => gd._fullData.filter(t => t.type === "heatmap" && t.xaxis === s.xref && t.colorscale)
          .map(t => [s.fillcolor, t.colorscale[0][1]]));
      return {id: gd.id, theme: gd.dataset.mhaTheme, paper, page, texts, scales, marks, masked};
    });
}"""


def _luminance(rgb) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _colour(text: str):
    """A CSS colour as plotly states it (#rrggbb, rgb(), rgba()) -> (r, g, b)."""
    if text.startswith("#") and len(text) == 7:
        return tuple(int(text[i:i + 2], 16) for i in (1, 3, 5))
    m = re.match(r"rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)", text)
    return tuple(float(v) for v in m.groups()) if m else None


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
        # dark lines and markers: 3:1 (WCAG non-text contrast; mha-figures.js lightens them; the
        # light figures keep the figure code's colour-blind-safe palettes)
        for mark in fig.get("marks", []) if theme == "dark" else []:
            rgb = _colour(mark)
            if rgb and _contrast(rgb, paper) < 3:
                problems.append(f"{name}: a line or marker in {mark} on {paper} "
                                f"(contrast {_contrast(rgb, paper):.1f})")
        for fill, lowest in fig.get("masked", []):  # masked cells apart from the lowest value
            a, b = _colour(fill), _colour(lowest)
            if a and b and _contrast(a, b) < 3:
                problems.append(f"{name}: masked cells {fill} next to the lowest value {lowest} "
                                f"(contrast {_contrast(a, b):.1f})")
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
