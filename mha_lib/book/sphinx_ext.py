"""Sphinx extension that keeps the website offline, light and its console clean.

* serves plotly.js from ``_static``: the partial bundle ``plotly.js-cartesian-dist-min`` (npm,
  vendored under ``_static/vendor``; heatmap, scatter and bar traces, a third of the full
  bundle) at the version of the plotly.js inside the plotly wheel, and loads it, as a blocking
  script before any other, only on pages that draw a plotly figure, followed by
  ``mha-figures.js`` (phone layouts, and dark figures in the theme's dark mode; see
  ``mha_lib.book.plotly_mime``); on the page of the language-model explorer
  (``mha_lib.viz.text_explorer``) only, its script ``mha-lm.js`` after them; on the page of
  the kernel-free mask lab (``mha_lib.viz.mask_lab_site``) only, ``mha-masklab.js``;
* moves each language-model explorer's model (0.6-0.75 MB of JSON that
  ``text_explorer_html`` puts in the page) into a file of its own,
  ``_static/mha-lm-models/<key>.js`` (:func:`split_models`), which ``mha-lm.js`` loads with a
  ``<script src>`` (it works from ``file://``) only when the reader reaches the explorer or
  types into it: a first visit transfers the page without the model;
* adds the site's stylesheet ``mha-site.css`` (no sideways scrolling on a phone, link
  contrast, the kernel-free explorer's controls, the search field kept on screen) and
  ``mha-site.js`` (scrollable regions reachable with the keyboard);
* Font Awesome on a diet: drops its 1.5 MB SVG-injecting script from every page (the theme
  also links Font Awesome's CSS and web fonts, which draw the same icons), and cuts that CSS
  and the solid web font down to the icons the built pages and stylesheets use (250 kB -> a
  few kB; :func:`subset_fontawesome`, with fontTools);
* writes plotly's template (6 kB of JSON that every figure made in Python carries) once per
  page instead of once per figure (:func:`mha_lib.book.plotly_mime.share_templates`; 85 kB
  fewer on the bug zoo's page);
* gives the entries of the References list the role their list needs (``listitem``);
* keeps live ipywidgets off the website: a notebook executed during the build stores its
  widgets' state (megabytes of JavaScript for a plotly ``FigureWidget``), and myst-nb would
  embed it in the page and load the widget manager from a CDN. Without a kernel those widgets
  could not react anyway; the chapters offer kernel-free explorers instead;
* links each of its own files once, on the pages that need it: Jupyter Book lists every
  ``.js`` and ``.css`` file under ``_static`` in ``html_js_files``/``html_css_files``, which
  loaded plotly.js (1.5 MB) on every page, a second time after ``mha-figures.js`` on pages
  with figures (replacing the ``Plotly`` object that script prepared), and the stylesheet twice;
* steps a reader's "Next"/"Previous" links over the page for teachers (:data:`FOR_TEACHERS`);
* removes sphinx-thebe's scripts: the book has no live-code launch button, and Jupyter Book
  1.0.4 registers thebe's configuration script twice, which logs
  ``Identifier 'THEBE_JS_URL' has already been declared`` on every page.

Stylesheets on a diet too: Bootstrap's full CSS (200 kB, linked by the theme), the theme's,
myst-nb's, sphinx-design's, Sphinx's ``basic.css`` and the Pygments colours are cut down to
the rules whose class names occur somewhere in the built pages or in the site's scripts
(:func:`purge_css`, a conservative "unused CSS" removal); sphinx-thebe's stylesheet goes.

MathJax is loaded by Sphinx only on pages that contain maths (``has_equations``); here as
MathJax's components (startup, core, TeX input, CHTML output: 0.8 MB) instead of the combined
``tex-chtml.js`` (1.2 MB, mostly its context menu). sphinx-design's stylesheet and script are
kept only on pages that use its components (``sd-`` classes).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from sphinx.util import logging

from mha_lib.book.plotly_mime import share_templates

__all__ = ["setup"]

logger = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parents[2] / "_static"
PLOTLY_JS_VERSION = "4.1.1"
PLOTLY_JS = f"vendor/plotly.js-cartesian-dist-min-{PLOTLY_JS_VERSION}/plotly-cartesian.min.js"
# sha256 of the file in the npm tarball plotly.js-cartesian-dist-min-4.1.1.tgz (whose sha512
# integrity is o8GrFeusncwBIxbBynRJpY4pkgVB6caM+JLpwrLYbbsO7dZ8FJ+SVN2Fr+L7kiG/Z6w4P5O0Jus/Qr5EefHVeg==)
PLOTLY_JS_SHA256 = "79542150855a52c567260e3137095dbe2b744e6d702a5cabe67da246942fba7a"
FIGURES_JS = "mha-figures.js"
SITE_CSS = "mha-site.css"
SITE_JS = "mha-site.js"
LM_JS = "mha-lm.js"
MASKLAB_JS = "mha-masklab.js"
_MASKLAB_MARKER = 'class="mha-explorer mha-masklab"'  # the box of mha_lib.viz.mask_lab_site
_LM_MARKER = 'id="lm-input"'  # the text box of mha_lib.viz.text_explorer.text_explorer_html
LM_MODELS = "mha-lm-models"  # _static/mha-lm-models/<key>.js: the explorers' models (split_models)
# A model as text_explorer_html writes it: the JSON in a script named by its root's data-model
_INLINE_MODEL = re.compile(r'<script type="application/json" id="(?P<id>[^"]+)">(?P<json>.*?)</script>', re.S)
# The theme's Font Awesome script tag (pydata-sphinx-theme 0.15: vendor/fontawesome/<v>/js/all.min.js)
_FONTAWESOME_JS = re.compile(r'\s*<script src="[^"]*fontawesome/[^"]*/js/all\.min\.js[^"]*"></script>')
# Preloads of the brands and regular web fonts, which no page uses (the theme's icons are solid)
_UNUSED_FONT_PRELOAD = re.compile(
    r'\s*<link rel="preload" as="font" type="font/woff2" crossorigin href="[^"]*'
    r'fontawesome/[^"]*/webfonts/fa-(?:brands|regular)-400\.woff2" />'
)


def wheel_plotly_js_version() -> str:
    """The plotly.js version bundled in the installed plotly wheel (from its header comment)."""
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    head = path.read_text(encoding="utf-8", errors="replace")[:300]
    match = re.search(r"plotly\.js v(\d+\.\d+\.\d+)", head)
    return match.group(1) if match else "unknown"


def _check_plotly_js(app) -> None:
    wheel = wheel_plotly_js_version()
    if wheel != PLOTLY_JS_VERSION:
        logger.warning(
            "plotly.js in the plotly wheel is %s but _static serves the cartesian bundle %s: "
            "vendor plotly.js-cartesian-dist-min@%s (see mha_lib/book/sphinx_ext.py)",
            wheel, PLOTLY_JS_VERSION, wheel,
        )
    if not (STATIC / PLOTLY_JS).exists():
        logger.warning("_static/%s is missing", PLOTLY_JS)


def _drop_thebe(app) -> None:
    import sphinx_thebe

    for event in ("env-before-read-docs", "doctree-resolved"):
        listeners = app.events.listeners.get(event, [])
        app.events.listeners[event] = [
            listener for listener in listeners
            if getattr(listener.handler, "__module__", "") != sphinx_thebe.__name__
        ]


def _drop_widget_state(app, doctree) -> None:
    js_files = getattr(app.env, "nb_metadata", {}).get(app.env.docname, {}).get("js_files", {})
    for key in [k for k in js_files if k.startswith("ipywidgets")]:
        del js_files[key]


def _own_assets_once(app, config) -> None:
    ours = {SITE_CSS, SITE_JS, FIGURES_JS, PLOTLY_JS, LM_JS, MASKLAB_JS, SEARCH_JS}
    for key in ("html_js_files", "html_css_files"):
        files = list(getattr(config, key, None) or [])
        kept = [f for f in files if (f[0] if isinstance(f, (tuple, list)) else f) not in ours]
        if len(kept) != len(files):
            setattr(config, key, kept)


def _mathjax_components(app, config) -> None:
    if getattr(config, "mathjax_path", "").endswith("mathjax/tex-chtml.js"):  # sphinx-mathjax-offline
        config.mathjax_path = "mathjax/startup.js"
        mathjax3 = dict(config.mathjax3_config or {})
        mathjax3.setdefault("loader", {"load": ["input/tex", "output/chtml"]})
        config.mathjax3_config = mathjax3


FOR_TEACHERS = {"teaching"}  # pages a reader's "Next" and "Previous" links step over


def _reading_order(app, pagename, templatename, context, doctree) -> None:
    """A reader's "Next" from the last chapter goes on to the back matter, not to the page for
    teachers (and "Previous" from the back matter comes back to the last chapter); the
    teachers' page keeps its own links."""
    builder, relations = app.builder, getattr(app.builder, "relations", {})
    if pagename in FOR_TEACHERS or pagename not in relations:
        return
    for key, index in (("next", 2), ("prev", 1)):
        target, seen = relations[pagename][index], set()
        if target not in FOR_TEACHERS:
            continue
        while target in FOR_TEACHERS and target not in seen:
            seen.add(target)
            target = relations.get(target, [None, None, None])[index]
        context[key] = None if target is None else {
            "link": builder.get_relative_uri(pagename, target),
            "title": builder.render_partial(app.env.titles[target])["title"],
        }


def _page_assets(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body", "")
    if pagename == "search":  # after searchtools.js (priority 500): snippets and ranking
        app.add_js_file(f"{SEARCH_TEXTS}/counts.js", priority=600)
        app.add_js_file(SEARCH_JS, priority=601)
    if "plotly-graph-div" in body:
        app.add_js_file(PLOTLY_JS, priority=1)
        app.add_js_file(FIGURES_JS, priority=2)
        if _LM_MARKER in body:
            app.add_js_file(LM_JS, priority=3)
        if _MASKLAB_MARKER in body:
            app.add_js_file(MASKLAB_JS, priority=3)
    unused = ["sphinx-thebe"]  # its stylesheet: thebe's scripts are gone (see _drop_thebe)
    if not _DESIGN_CLASS.search(body):
        unused += ["sphinx-design", "design-tabs"]
    for key in ("css_files", "script_files"):
        context[key] = [asset for asset in context.get(key, [])
                        if not any(name in str(getattr(asset, "filename", asset))
                                   for name in unused)]


def strip_fontawesome_js(html: str) -> str:
    """The page without Font Awesome's script and the preloads of unused icon fonts."""
    return _UNUSED_FONT_PRELOAD.sub("", _FONTAWESOME_JS.sub("", html))


_ICON_CLASS = re.compile(r"\bfa-([a-z0-9-]+)")
_CSS_CODEPOINT = re.compile(r'"\\(f[0-9a-f]{3})"')
_BIBLIOENTRY = re.compile(r'(<div class="citation"[^>]*?)role="doc-biblioentry"')
_DESIGN_CLASS = re.compile(r'class="[^"]*\bsd-')
_PRIVATE_USE = re.compile("[\ue000-\uf8ff]")
_CSS_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
_FONT_FACE = re.compile(r"@font-face\{[^}]*\}")


def _used_icons(outdir: Path, fa_css: Path) -> tuple[set[str], set[int]]:
    """Icon class names in the pages and code points in the other stylesheets of the site."""
    names: set[str] = set()
    for page in outdir.rglob("*.html"):
        names |= set(_ICON_CLASS.findall(page.read_text(encoding="utf-8")))
    codepoints: set[int] = set()
    for css in (outdir / "_static").rglob("*.css"):
        if css != fa_css:
            text = css.read_text(encoding="utf-8")
            codepoints |= {int(c, 16) for c in _CSS_CODEPOINT.findall(text)}
            codepoints |= {ord(c) for c in _PRIVATE_USE.findall(text)}  # written as characters
    return names, codepoints


def trim_fontawesome_css(css: str, names: set[str],
                         fonts: tuple[str, ...] = ("fa-solid-900",)) -> tuple[str, set[int]]:
    """Font Awesome's CSS with only the icon rules for ``names`` and the faces of ``fonts``
    (the solid font; the brands font too when a page shows a brand icon, e.g. the
    repository's).

    Returns:
        The trimmed CSS and the code points of the icons kept.
    """
    kept_points: set[int] = set()
    licence = re.match(r"\s*/\*!.*?\*/", css, re.S)
    out = [licence.group(0)] if licence else []
    css = css[licence.end():] if licence else css
    body = _FONT_FACE.sub("", css)
    for face in _FONT_FACE.findall(css):  # the faces of the fonts kept, woff2 only
        for font in fonts:
            if f"{font}." in face and "unicode-range" not in face:
                out.append(face.replace(f',url(../webfonts/{font}.ttf) format("truetype")', ""))
    for selector, declarations in _CSS_RULE.findall(body):
        icon_rule = declarations.startswith("content:") and ":before" in selector
        if icon_rule:
            icons = re.findall(r"\.fa-([a-z0-9-]+):before", selector)
            if not set(icons) & names:
                continue
            point = _CSS_CODEPOINT.search(declarations)
            if point:
                kept_points.add(int(point.group(1), 16))
        out.append(f"{selector}{{{declarations}}}")
    return "".join(out), kept_points


def subset_fontawesome(outdir: Path) -> None:
    """Trim Font Awesome's CSS and solid web font in a built site to the icons it uses."""
    from fontTools import subset

    for fa_css in (outdir / "_static" / "vendor" / "fontawesome").glob("*/css/all.min.css"):
        names, codepoints = _used_icons(outdir, fa_css)
        fonts = ("fa-solid-900",) + (("fa-brands-400",) if names & {"brands", "github", "gitlab"} else ())
        css, kept = trim_fontawesome_css(fa_css.read_text(encoding="utf-8"), names, fonts)
        for name in fonts:
            font = fa_css.parent.parent / "webfonts" / f"{name}.woff2"
            options = subset.Options()
            options.flavor = "woff2"
            options.layout_features = ["*"]
            subsetter = subset.Subsetter(options)
            ttfont = subset.load_font(str(font), options)
            subsetter.populate(unicodes=sorted(codepoints | kept))
            subsetter.subset(ttfont)
            subset.save_font(ttfont, str(font), options)
        fa_css.write_text(css, encoding="utf-8")


_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_SELECTOR_CLASS = re.compile(r"\.(-?[A-Za-z_][A-Za-z0-9_-]*)")
PURGED_CSS = ("styles/bootstrap.css", "styles/pydata-sphinx-theme.css", "mystnb.*.css",
              "sphinx-design.min.css", "basic.css", "pygments.css")


def _split_selectors(prelude: str) -> list[str]:
    """Split a selector list at its top-level commas (not those inside ``:not(a, b)``)."""
    out, depth, current = [], 0, []
    for ch in prelude:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            out.append("".join(current))
            current = []
        else:
            current.append(ch)
    out.append("".join(current))
    return out


def purge_css(css: str, used: set[str]) -> str:
    """``css`` without the selectors naming a class outside ``used`` (rules left empty go).

    ``@media``/``@supports``/``@layer`` blocks are purged inside; other at-rules are kept whole.
    """
    out, i, n = [], 0, len(css)
    while i < n:
        open_at = css.find("{", i)
        if open_at < 0:
            out.append(css[i:])
            break
        depth, k = 1, open_at + 1
        while depth and k < n:
            depth += (css[k] == "{") - (css[k] == "}")
            k += 1
        prelude, block = css[i:open_at], css[open_at + 1:k - 1]
        head = prelude.strip()
        if head.startswith(("@media", "@supports", "@layer")):
            inner = purge_css(block, used)
            if inner.strip():
                out.append(f"{prelude}{{{inner}}}")
        elif head.startswith("@"):
            out.append(f"{prelude}{{{block}}}")
        else:
            kept = [s for s in _split_selectors(prelude) if set(_SELECTOR_CLASS.findall(s)) <= used]
            if kept:
                out.append(",".join(kept) + "{" + block + "}")
        i = k
    return "".join(out)


def _purge_stylesheets(outdir: Path) -> None:
    static = outdir / "_static"
    used: set[str] = set()
    for path in [*outdir.rglob("*.html"), *static.rglob("*.js")]:
        used |= set(_TOKEN.findall(path.read_text(encoding="utf-8", errors="replace")))
    for pattern in PURGED_CSS:
        for css in static.glob(pattern):
            css.write_text(purge_css(css.read_text(encoding="utf-8"), used), encoding="utf-8")


def fix_citation_roles(html: str) -> str:
    """Entries of a citation list as ``role="listitem"``: docutils writes ``role="list"`` on the
    list but the DPUB role ``doc-biblioentry`` on its entries, which breaks the list for
    assistive technology (axe: critical ``aria-required-children``)."""
    return _BIBLIOENTRY.sub(r'\1role="listitem"', html)


_CODE_STYLE = re.compile(r"<style>pre \{ line-height: 125%; \}.*?</style>", re.S)


def strip_code_styles(html: str) -> str:
    """Drop the pygments stylesheet that IPython's ``Code`` display (``show_source``) repeats in
    every listing's HTML output: the page's own ``pygments.css`` already colours ``.highlight``,
    in the theme's accessible palette, and the copies cost about 5 kB per listing."""
    return _CODE_STYLE.sub("", html)


_PLAIN_TOKEN = re.compile(r'<span class="[npw]">([^<]*)</span>')
_HIGHLIGHT_PRE = re.compile(r'(<div class="highlight"><pre>)(.*?)(</pre>)', re.S)


def strip_plain_code_spans(html: str) -> str:
    """Unwrap the highlighted code's names, punctuation and whitespace (Pygments' ``n``, ``p``,
    ``w`` tokens): the theme's palettes draw them in the code block's own text colour in both
    themes (``pygments.css``: ``.highlight .n`` and ``.p`` have the colour of ``.highlight``,
    whitespace shows no colour), so the page looks the same, 23 bytes lighter per token (about
    100 kB on a chapter with much code)."""
    return _HIGHLIGHT_PRE.sub(lambda m: m.group(1) + _PLAIN_TOKEN.sub(r"\1", m.group(2)) + m.group(3), html)


SEARCH_TEXTS = "mha-search"  # _static/mha-search/<page>.html: each page's text, for snippets
SEARCH_JS = "mha-search.js"
_ARTICLE = re.compile(r'<article class="bd-article"[^>]*>(.*)</article>', re.S)
_SCRIPT_OR_STYLE = re.compile(r"<(script|style)\b.*?</\1>", re.S)
_CODE_SPAN = re.compile(r'<span class="[a-z0-9]{1,3}">([^<]*)</span>')
# what a snippet never shows: outputs (but the listings show_source prints) and figures, the
# header's buttons, permalinks
_NOT_TEXT = ("script, style, svg, img, .cell_output .output:not(.text_html), .headerlink, "
             ".dropdown-download-buttons, "
             ".mha-lm, .mha-explorer, .plotly-graph-div, .prev-next-area, nav, button, "
             "details.hide > summary")
_KEEP_TAGS = ("section", "h1", "h2", "h3", "h4", "p", "li", "pre", "dt", "dd", "td", "th")


def search_text(page_html: str) -> str:
    """The text of a page's article as a small HTML document for the search page's snippets:
    ``<div role="main">`` with its sections (their ``id``, which a hit's anchor names), headings,
    paragraphs, code and listings, no other outputs, figures, scripts or attributes (a few kB where the page
    has hundreds: Sphinx's search page fetches the page of every hit to make its snippet)."""
    import bs4

    match = _ARTICLE.search(page_html)
    body = _SCRIPT_OR_STYLE.sub("", match.group(1) if match else "")
    body = _CODE_SPAN.sub(r"\1", body)  # Pygments' token spans: most of a page's tags
    soup = bs4.BeautifulSoup(f'<div role="main">{body}</div>', "html.parser")
    main = soup.div
    for el in main.select(_NOT_TEXT):
        el.decompose()
    for el in main.find_all(True):
        if el is main:
            continue
        if el.name in _KEEP_TAGS:
            el.attrs = {"id": el["id"]} if el.has_attr("id") else {}
        elif el.has_attr("id"):
            el.attrs = {"id": el["id"]}
            el.name = "span"
        else:
            el.unwrap()
    parts = re.split(r"(<pre>.*?</pre>)", str(main), flags=re.S)  # code keeps its lines
    return "".join(part if part.startswith("<pre>") else
                   re.sub(r"[ \t]*\n\s*", "\n", re.sub(r"[ \t]+", " ", part)) for part in parts)


#: A word in a section heading counts this many times: the page that teaches a topic names it
#: in a heading, a page that only uses it (an exercise, a capstone) says it often in its code.
_HEADING_WEIGHT = 10
_HEADING = re.compile(r"<h[1-4][^>]*>(.*?)</h[1-4]>", re.S)


def term_counts(texts: dict[str, str], stem) -> dict:
    """How often each word stem occurs on each page, for ranking: ``{"docs": [docname...],
    "terms": {stem: [doc index, count, ...]}}``, pages with a stem at least twice, stems seen
    at least 3 times on some page (a few tens of kB for the book); a word of a section heading
    counts :data:`_HEADING_WEIGHT` times."""
    import collections

    docs = sorted(texts)
    table: dict[str, list[int]] = collections.defaultdict(list)
    for i, doc in enumerate(docs):
        headings = " ".join(_HEADING.findall(texts[doc])) + " "
        words = re.findall(r"\w+", re.sub(r"<[^>]+>", " ", texts[doc] + headings * (_HEADING_WEIGHT - 1)).lower())
        for term, count in collections.Counter(stem(w) for w in words if not w.isdigit()).items():
            if count >= 2:
                table[term] += [i, count]
    return {"docs": docs, "terms": {t: v for t, v in sorted(table.items()) if max(v[1::2]) >= 3}}


def _write_search_texts(app, outdir: Path) -> None:
    """``_static/mha-search/<page>.html`` (:func:`search_text`) for every page, and
    ``counts.js`` (:func:`term_counts`, with the stemmer of Sphinx's English index)."""
    import json

    from sphinx.search.en import SearchEnglish

    target = outdir / "_static" / SEARCH_TEXTS
    texts = {}
    for docname in app.env.found_docs:
        page = outdir / f"{docname}.html"
        if page.exists() and docname not in ("search", "genindex"):
            texts[docname] = search_text(page.read_text(encoding="utf-8"))
            out = target / f"{docname}.html"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(texts[docname], encoding="utf-8")
    counts = json.dumps(term_counts(texts, SearchEnglish({}).stem), separators=(",", ":"))
    (target / "counts.js").write_text(f"window.mhaSearchCounts = {counts};\n", encoding="utf-8")


def split_models(html: str, static: str) -> tuple[str, dict[str, str]]:
    """Move the language-model explorers' inline models out of a page.

    Each ``<script type="application/json" id=ID>`` that an explorer's root names in
    ``data-model="ID"`` (:func:`mha_lib.viz.text_explorer.text_explorer_html`) leaves the page;
    its JSON becomes the script ``mha-lm-models/<key>.js`` (``key``: the first 16 hex digits of
    its sha256), which sets ``window.mhaLMModels[key]``, and the root gets ``data-model-key``,
    ``data-model-src`` (``static`` + that name) and ``data-model-bytes`` (the file's size), from
    which ``_static/mha-lm.js`` loads it when the reader reaches the explorer.

    Args:
        html: the page.
        static: the address of ``_static/`` from the page, ending in "/" (``"../_static/"``).

    Returns:
        ``(page, {"mha-lm-models/<key>.js": the file's text})``; the page unchanged and ``{}``
        when it holds no explorer's model.
    """
    files: dict[str, str] = {}
    for match in list(_INLINE_MODEL.finditer(html)):
        root = f'data-model="{match["id"]}"'
        if root not in html:
            continue
        key = hashlib.sha256(match["json"].encode()).hexdigest()[:16]
        name = f"{LM_MODELS}/{key}.js"
        files[name] = f"(window.mhaLMModels = window.mhaLMModels || {{}})[\"{key}\"] = {match['json']};\n"
        size = len(files[name].encode())
        html = html.replace(match[0], "", 1).replace(
            root, f'{root} data-model-key="{key}" data-model-src="{static}{name}" data-model-bytes="{size}"', 1)
    return html, files


def _split_page_models(page: Path, outdir: Path, html: str) -> str:
    """:func:`split_models` on a built page, its model files written under ``outdir/_static``."""
    static = os.path.relpath(outdir / "_static", page.parent).replace(os.sep, "/") + "/"
    html, files = split_models(html, static)
    for name, text in files.items():
        target = outdir / "_static" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return html


def _lighten_pages(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    _write_search_texts(app, outdir)
    for page in outdir.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        lighter = fix_citation_roles(strip_plain_code_spans(strip_code_styles(strip_fontawesome_js(html))))
        lighter = share_templates(_split_page_models(page, outdir, lighter))
        if lighter != html:
            page.write_text(lighter, encoding="utf-8")
    subset_fontawesome(outdir)
    _purge_stylesheets(outdir)


def setup(app):
    app.connect("builder-inited", _drop_thebe)
    app.connect("builder-inited", _check_plotly_js)
    app.connect("doctree-read", _drop_widget_state)
    app.connect("config-inited", _mathjax_components)
    app.connect("config-inited", _own_assets_once)
    app.connect("html-page-context", _page_assets)
    app.connect("html-page-context", _reading_order)
    # after the theme's own build-finished handlers (pydata-sphinx-theme rewrites pygments.css)
    app.connect("build-finished", _lighten_pages, priority=900)
    app.add_css_file(SITE_CSS)
    app.add_js_file(SITE_JS, loading_method="defer")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
