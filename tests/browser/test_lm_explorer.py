"""The story language model running in a web page equals PyTorch, typed into from the keyboard.

The explorer of :func:`mha_lib.viz.text_explorer_html` runs the exported model in JavaScript
(``_static/mha-lm.js``). A small standalone page is written here (the fragment, plotly.js and
the book's scripts from ``_static``, nothing else) so the test needs no book build; when the
built website holds chapter 12, its real page is tested too (the same equality, offline, and
what the explorer adds to the page's weight). The test types sentences (known words, unknown
words, punctuation, a text longer than the explorer reads) and compares every layer's and
head's weights, read from the page's plotly traces, with PyTorch's
(``StoryLM(ids, need_weights=True)``) to 1e-4, the greedy continuation with
``StoryLM.generate``'s and the words offered for unknown ones, all as the live explorer reads
them (``mha_lib.viz.text_explorer._read``, which ``tests/viz/test_text_explorer.py`` checks
against the model itself): at 1366 x 900 and 390 x 844, keyboard only, no request leaving the
loopback server, no console error, axe-core clean. A grouped-query model checks the key/value
head sharing of the page's forward pass; the hybrid of chapter 12d
(:func:`mha_lib.why.linear_runs.load_hybrid`, and an untrained one) its Gated DeltaNet layer, of
which the page shows no weights (only the softmax layer's heads, and a note saying why).

On the website the model is a file of its own (:func:`mha_lib.book.sphinx_ext.split_models`)
that the page loads when the reader reaches the explorer or types into it: ``far.html`` (the
shipped model split out so, below a tall spacer) and the chapters' pages check that a first
visit does not load it, that scrolling to the explorer or typing into it does (what was typed
is read), also from ``file://``, and that each model file stays within the explorer's
allowance (:data:`EXPLORER_BYTES`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SITE_DIR, VIEWPORTS, serious_axe_violations
from mha_lib import lm
from mha_lib.book.browser import DECODE_PICTURE_JS, _picture_problems
from mha_lib.book.loopback import serve
from mha_lib.book.sphinx_ext import FIGURES_JS, LM_JS, LM_MODELS, PLOTLY_JS, STATIC, split_models
from mha_lib.linear import GatedDeltaNet
from mha_lib.stories import GENDER as NAMES
from mha_lib.stories import Tokenizer, sample_stories
from mha_lib.viz import text_explorer_html
from mha_lib.viz.text_explorer import _DEFAULT_TEXT, _EXAMPLES, _MAX_TOKENS, _read, _Reading
from mha_lib.why.linear_runs import load_hybrid

CHAPTER = "chapters/12_language_model.html"
HYBRID_CHAPTER = "chapters/12d_linear_attention.html"  # the hybrid's explorer (issue 48)
MAX_PAGE_BYTES = 3_000_000  # a first visit, uncompressed (as tests/browser/test_site.py)
EXPLORER_BYTES = 800_000  # what the explorer adds: its HTML, its model file (0.6-0.73 MB) and its script
SPACER = '<div style="height: 5000px">A long page above the explorer.</div>'  # far.html: out of reach
ATOL = 1e-4
LONG = " ".join(s.text for s in sample_stories(3, 11))  # more tokens than the explorer reads
SENTENCES = [
    "Mia has a red kite. Leo helps Mia because she",  # known words
    "The dragon eats a pizza because he",  # unknown words
    "Wow! Mia\u2019s kite, Leo's ball... and 42 cats?",  # punctuation, a curly 's, a number
    LONG,
]
_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<script src="_static/plotly.js"></script><script src="_static/{figures}"></script>
<script src="_static/{lm_js}"></script>
<style>body {{ font-family: sans-serif; margin: 0 auto; max-width: 52rem; padding: 0 1rem; }}</style>
</head><body><main><h1>{title}</h1>
{fragment}
</main></body></html>
"""


def _gqa_model() -> lm.StoryLM:
    torch.manual_seed(3)  # untrained: the page must get any weights right
    return lm.StoryLM(lm.Config(num_kv_heads=2, num_layers=3)).eval()


def _untrained_hybrid() -> lm.StoryLM:
    torch.manual_seed(4)  # Gated DeltaNet below softmax, weights far from their start
    model = lm.StoryLM(lm.Config())
    model.blocks[0].attention = GatedDeltaNet(64, 4)
    with torch.no_grad():
        for weight in model.blocks[0].attention.parameters():
            weight.normal_(0.0, 0.3)
    return model.eval()


@pytest.fixture(scope="module")
def shipped():
    return lm.load_pretrained()


@pytest.fixture(scope="module")
def hybrid():
    return load_hybrid()


@pytest.fixture(scope="module")
def pages(tmp_path_factory, shipped, hybrid) -> Path:
    """A folder with index.html (the shipped model), gqa.html (a grouped-query model),
    hybrid.html and hybrid-untrained.html (chapter 12d's hybrid, an untrained one), far.html (the
    shipped model in a file of its own, as the website's build writes it, below a tall spacer)
    and, when the website is built, ``site`` (a link to it)."""
    folder = tmp_path_factory.mktemp("lm-page")
    static = folder / "_static"
    static.mkdir()
    shutil.copy(STATIC / PLOTLY_JS, static / "plotly.js")
    for name in (FIGURES_JS, LM_JS):
        shutil.copy(STATIC / name, static / name)
    for name, (model, tokenizer) in {"index.html": shipped, "gqa.html": (_gqa_model(), Tokenizer()), "hybrid.html": hybrid,
                                     "hybrid-untrained.html": (_untrained_hybrid(), Tokenizer())}.items():
        (folder / name).write_text(_PAGE.format(
            title="The story model in a page", figures=FIGURES_JS, lm_js=LM_JS,
            fragment=text_explorer_html(model, tokenizer)), encoding="utf-8")
    far, models = split_models(_PAGE.format(
        title="The story model, far down a page", figures=FIGURES_JS, lm_js=LM_JS,
        fragment=SPACER + text_explorer_html(*shipped)), "_static/")
    assert len(models) == 1
    (folder / "far.html").write_text(far, encoding="utf-8")
    for name, text in models.items():
        (static / name).parent.mkdir(exist_ok=True)
        (static / name).write_text(text, encoding="utf-8")
    if (SITE_DIR / CHAPTER).exists() or (SITE_DIR / HYBRID_CHAPTER).exists():
        (folder / "site").symlink_to(SITE_DIR.resolve(), target_is_directory=True)
    return folder


@pytest.fixture(scope="module")
def site_url(pages):  # overrides conftest's: open_context then serves these pages
    with serve(pages) as url:
        yield url


def _expected(model: lm.StoryLM, tokenizer: Tokenizer, text: str) -> _Reading:
    """What PyTorch makes of ``text`` (the live explorer's reading, which tests/viz checks
    against the model): tokens, (N, H, L, L) weights, continuation, unknown words."""
    return _read(model, tokenizer, text)


# What the page shows: per head of the layer shown, its weights (the explorer's own account),
# its axes' tick labels and its picture on screen (decoded to pixels); the state of the
# explorer, the continuation and the marked tokens.
_READ_JS = """
async () => {
  const root = document.getElementById("mha-lm"), gd = document.getElementById("mha-lm-figure");
  const state = root.mhaLM.state, layout = gd.layout, shown = root.mhaLM.shown();
  const onScreen = [...gd.querySelectorAll(".layer-above .imagelayer image")].map((i) => i.getAttribute("href"));
  const decode = __DECODE__;
  const sources = (layout.images || []).map((i) => i.source);
  return {
    shown_layer: shown.layer,
    heads: await Promise.all(shown.heads.map(async (z, h) => {
      const sfx = h ? String(h + 1) : "";
      return {z, x: layout["xaxis" + sfx].ticktext, y: layout["yaxis" + sfx].ticktext,
              ticks: layout["xaxis" + sfx].tickvals, picture: await decode(sources[h])};
    })),
    pictures_on_screen: JSON.stringify(onScreen) === JSON.stringify(sources.filter((s) => s)),
    titles: (layout.annotations || []).filter((a) => a.name === "head").map((a) => a.text),
    layer: Number(root.querySelector("input[name=lm-layer]:checked").value),
    tokens: state.tokens, continuation: state.continuation,
    added: root.querySelector(".mha-lm-continuation strong").textContent,
    marked: [...root.querySelectorAll(".mha-lm-unk")].map((e) => e.firstChild.textContent),
    hint: root.querySelector(".mha-lm-hint").textContent,
    suggestions: [...root.querySelectorAll(".mha-lm-suggestion")].map((b) => b.textContent),
  };
}
""".replace("__DECODE__", DECODE_PICTURE_JS)


def _open(open_context, site_url, viewport: str = "desktop", path: str = "index.html", reach: bool = True):
    """Open the page; with ``reach``, scroll to its explorer (whose model, when it is a file of
    its own, loads then) and wait until it has drawn."""
    page = open_context(viewport)
    response = page.goto(site_url + path, wait_until="load")
    assert response is not None and response.ok
    if reach:
        if page.evaluate("() => document.getElementById('mha-lm').hasAttribute('data-model-src')"):
            page.locator("#mha-lm").scroll_into_view_if_needed()
        page.wait_for_function("() => Number(document.getElementById('mha-lm').dataset.rendered) >= 1")
    return page


def _model_requests(page) -> dict[str, int]:
    """URL -> bytes of every model file the page loaded (split_models' files)."""
    return {url: size for url, size in page.bytes_received.items() if f"/{LM_MODELS}/" in url}


def _waits_for_the_reader(page) -> None:
    """The explorer's controls are on the page, its model not loaded, and its status says so."""
    assert page.evaluate("() => document.getElementById('mha-lm').dataset.modelState") == "waiting"
    assert _model_requests(page) == {}
    assert page.locator("#lm-input").is_visible()
    status = page.locator(".mha-lm-status")
    assert status.get_attribute("role") == "status"
    assert "loads when you reach this explorer" in status.text_content()


def _loaded(page) -> None:
    """Wait until the explorer's model loaded and its heads were drawn; its status line is empty."""
    page.wait_for_function("() => { const root = document.getElementById('mha-lm');"
                           " return root.dataset.modelState === 'loaded' && Number(root.dataset.rendered) >= 1; }")
    assert page.locator(".mha-lm-status").text_content() == ""


def _rendered(page) -> int:
    return page.evaluate("() => Number(document.getElementById('mha-lm').dataset.rendered || 0)")


def _await_render(page, before: int, text: str | None = None) -> None:
    """Wait until the explorer drew again (and read ``text``, when given)."""
    page.wait_for_function(
        """([before, text]) => {
          const root = document.getElementById("mha-lm");
          return Number(root.dataset.rendered) > before && (text === null || root.mhaLM.state.text === text);
        }""", arg=[before, text])


def _tab_to(page, selector: str, key: str = "Tab", limit: int = 60) -> int:
    """Press ``key`` until the focused element matches ``selector``; returns the presses."""
    for presses in range(1, limit + 1):
        page.keyboard.press(key)
        if page.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", selector):
            return presses
    raise AssertionError(f"{selector} not reached with {limit} x {key}")


def _type(page, text: str) -> None:
    """Replace the text box's content from the keyboard, press Enter, wait for the drawing."""
    assert page.evaluate("() => document.activeElement.id") == "lm-input"
    page.keyboard.press("Control+A")
    page.keyboard.press("Backspace")
    if len(text) > 80:
        page.keyboard.insert_text(text)  # a paste: one input event for the long text
    else:
        page.keyboard.type(text)
    before = _rendered(page)
    page.keyboard.press("Enter")
    _await_render(page, before, text)


def _compare(shown: dict, expected: _Reading, layer: int | None = 0) -> float:
    """Assert the page shows PyTorch's weights and continuation, the heads of ``layer`` (None:
    the layer the page offers first); returns the largest |difference|."""
    layer = shown["layer"] if layer is None else layer
    assert shown["layer"] == shown["shown_layer"] == layer
    weights = expected.weights
    N, H, L, _ = weights.shape
    assert shown["tokens"] == expected.tokens
    assert len(shown["heads"]) == H
    assert shown["pictures_on_screen"]
    worst = 0.0
    for h, trace in enumerate(shown["heads"]):
        z = np.array([[np.nan if w is None else w for w in row] for row in trace["z"]], dtype=float)
        assert z.shape == (L, L)
        future = np.triu(np.ones((L, L), dtype=bool), k=1)
        assert np.isnan(z[future]).all() and not np.isnan(z[~future]).any()
        worst = max(worst, float(np.abs(z[~future] - weights[layer, h][~future]).max()))
        # the picture on screen: each cell in its weight's colour, later keys transparent
        assert _picture_problems(trace["picture"], trace["z"]) == [], f"head {h}"
        # the tick labels are the tokens; on small panels every step-th one (short texts: all)
        ticks = trace["ticks"]
        step = ticks[1] - ticks[0] if len(ticks) > 1 else 1
        assert ticks == list(range(0, L, step)) and (step == 1 or L > 12)
        assert trace["x"] == trace["y"] == [expected.tokens[i] for i in ticks]
    assert worst <= ATOL, f"page and PyTorch differ by {worst}"
    assert shown["continuation"] == expected.continuation
    assert shown["added"] == expected.continuation_text
    unknown = [u[0] for u in expected.unknown]
    assert shown["marked"] == [t for t in expected.tokens if t in unknown]
    assert shown["suggestions"] == [w.capitalize() if w in NAMES else w for u in expected.unknown for w in u[2]]
    assert shown["titles"] == [f"layer {layer}, head {h}" for h in range(H)]
    return worst


def _clean(page) -> None:
    assert page.external_requests == [], f"asked the network for {page.external_requests}"
    assert page.console_errors == []


def _no_sideways_scroll(page, viewport: str) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= VIEWPORTS[viewport]["width"] + 1, f"page is {width} px wide at {viewport}"


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_the_page_computes_what_pytorch_computes(open_context, site_url, shipped, screenshot_dir, viewport):
    page = _open(open_context, site_url, viewport)
    model, tokenizer = shipped
    worst = _compare(page.evaluate(_READ_JS), _expected(model, tokenizer, _DEFAULT_TEXT))
    assert _tab_to(page, "#lm-input") == 1  # the first stop on the page
    for text in SENTENCES:
        _type(page, text)
        shown = page.evaluate(_READ_JS)
        worst = max(worst, _compare(shown, _expected(model, tokenizer, text)))
        _no_sideways_scroll(page, viewport)
        if "dragon" in text:
            assert "does not know \u201cdragon\u201d, \u201cpizza\u201d" in shown["hint"]
            assert len(shown["suggestions"]) == 6
            page.screenshot(path=str(screenshot_dir / f"lm-explorer-{viewport}.png"), full_page=True)
    print(f"\nmax |page - PyTorch| over {len(SENTENCES) + 1} texts at {viewport}: {worst:.2e}")
    _clean(page)


@pytest.mark.browser
def test_grouped_query_heads_share_their_keys_in_the_page(open_context, site_url):
    page = _open(open_context, site_url, path="gqa.html")
    _reads_as_pytorch(page, _gqa_model(), Tokenizer(), SENTENCES[1:3], "desktop", layer=0)
    _clean(page)


def _reads_as_pytorch(page, model: lm.StoryLM, tokenizer: Tokenizer, texts: list[str], viewport: str,
                      layer: int = 1) -> float:
    """Type each text (waiting for the heads drawn again) and compare the heads of ``layer``
    (a hybrid's: its softmax layer 1) with PyTorch; the largest difference, the default text's included."""
    worst = _compare(page.evaluate(_READ_JS), _expected(model, tokenizer, _DEFAULT_TEXT), layer=layer)
    page.locator("#lm-input").focus()
    for text in texts:
        _type(page, text)
        worst = max(worst, _compare(page.evaluate(_READ_JS), _expected(model, tokenizer, text), layer=layer))
        _no_sideways_scroll(page, viewport)
    return worst


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_a_hybrid_runs_its_gated_deltanet_layer_and_shows_its_softmax_heads(open_context, site_url, hybrid,
                                                                            screenshot_dir, viewport):
    page = _open(open_context, site_url, viewport, path="hybrid.html")
    assert page.locator("input[name=lm-layer]").count() == 1  # layer 1, its softmax layer
    note = page.locator(".mha-lm-note")
    assert note.is_visible() and "Layer 0 is a Gated DeltaNet layer" in note.text_content()
    assert "no attention weights" in note.text_content()
    worst = _reads_as_pytorch(page, *hybrid, SENTENCES, viewport)
    page.screenshot(path=str(screenshot_dir / f"lm-hybrid-explorer-{viewport}.png"), full_page=True)
    print(f"\nhybrid: max |page - PyTorch| over {len(SENTENCES) + 1} texts at {viewport}: {worst:.2e}")
    _clean(page)


@pytest.mark.browser
def test_an_untrained_hybrid_in_the_page_equals_pytorch(open_context, site_url):
    page = _open(open_context, site_url, path="hybrid-untrained.html")
    model, tokenizer = _untrained_hybrid(), Tokenizer()
    worst = _reads_as_pytorch(page, model, tokenizer, SENTENCES[1:], "desktop")
    # the continuation depends on the Gated DeltaNet layer too: compare the logits of the last token
    logits = page.evaluate("() => Array.from(document.getElementById('mha-lm').mhaLM.state.result.logits.at(-1))")
    with torch.no_grad():
        expected = model(torch.tensor([tokenizer.encode(SENTENCES[-1])[:_MAX_TOKENS]]))[0, -1].double().numpy()
    worst_logit = float(np.abs(np.array(logits) - expected).max())
    print(f"\nuntrained hybrid: max |page - PyTorch| weights {worst:.2e}, last logits {worst_logit:.2e}")
    assert worst_logit <= 1e-3
    _clean(page)


@pytest.mark.browser
def test_examples_suggestions_layers_and_write_on_from_the_keyboard(open_context, site_url, shipped):
    page = _open(open_context, site_url)
    model, tokenizer = shipped
    # the examples: Tab from the text box, Enter on "unknown words"
    _tab_to(page, "#lm-input")
    label, example = _EXAMPLES[-1]
    _tab_to(page, f".mha-lm-example[data-text='{example}']")
    before = _rendered(page)
    page.keyboard.press("Enter")
    _await_render(page, before, example)
    shown = page.evaluate(_READ_JS)
    expected = _expected(model, tokenizer, example)
    _compare(shown, expected)
    unknown = [u[0] for u in expected.unknown]
    assert shown["marked"] == unknown and unknown
    # a suggested word: back (Shift+Tab) to one offered for the first unknown word, Enter puts it in
    _tab_to(page, f".mha-lm-suggestion[aria-label^='replace {unknown[0]} by ']", key="Shift+Tab")
    word = page.evaluate("() => document.activeElement.textContent")
    before = _rendered(page)
    page.keyboard.press("Enter")
    fixed = example.replace(unknown[0], word)
    _await_render(page, before, fixed)
    assert page.evaluate("() => document.activeElement.id") == "lm-input"  # back to typing
    shown = page.evaluate(_READ_JS)
    _compare(shown, _expected(model, tokenizer, fixed))
    assert shown["marked"] == unknown[1:]
    # the layer: Tab to the radio group, an arrow key chooses layer 1
    _tab_to(page, "input[name=lm-layer]")
    before = _rendered(page)
    page.keyboard.press("ArrowRight")
    _await_render(page, before)
    _compare(page.evaluate(_READ_JS), _expected(model, tokenizer, fixed), layer=1)
    # write on: the continuation joins the text, and the model reads on from there
    _tab_to(page, ".mha-lm-write-on", key="Shift+Tab")
    added = page.evaluate(_READ_JS)["added"]
    before = _rendered(page)
    page.keyboard.press("Enter")
    _await_render(page, before, fixed + added)
    _compare(page.evaluate(_READ_JS), _expected(model, tokenizer, fixed + added), layer=1)
    _clean(page)


@pytest.mark.browser
@pytest.mark.parametrize("path", ["index.html", "hybrid.html"])
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_axe_finds_nothing_serious(open_context, site_url, viewport, path):
    page = _open(open_context, site_url, viewport, path=path)
    page.locator("#lm-input").focus()
    _type(page, "The dragon eats a pizza because he")  # the hint and its buttons too
    page.locator("details summary").press("Enter")  # the known words, shown
    assert serious_axe_violations(page, [".js-plotly-plot"]) == []
    _clean(page)


@pytest.mark.browser
@pytest.mark.parametrize("path", ["index.html", "far.html"])
def test_the_page_works_from_a_file_without_any_server(browser, pages, shipped, path):
    context = browser.new_context(viewport=VIEWPORTS["desktop"])
    try:
        page = context.new_page()
        requests, errors = [], []
        page.on("request", lambda r: r.url.startswith("file://") or requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((pages / path).as_uri(), wait_until="load")
        if path == "far.html":  # its model, a file of its own, loads when the reader gets there
            assert page.evaluate("() => document.getElementById('mha-lm').dataset.modelState") == "waiting"
            page.locator("#mha-lm").scroll_into_view_if_needed()
            _loaded(page)
        page.wait_for_function("() => Number(document.getElementById('mha-lm').dataset.rendered) >= 1")
        _compare(page.evaluate(_READ_JS), _expected(*shipped, _DEFAULT_TEXT))
        assert requests == [] and errors == []
    finally:
        context.close()


def _cold_weight(page) -> int:
    page.wait_for_load_state("networkidle")
    return sum(page.bytes_received.values())


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_the_model_loads_when_the_reader_scrolls_to_the_explorer(open_context, site_url, shipped, viewport):
    page = _open(open_context, site_url, viewport, path="far.html", reach=False)
    _cold_weight(page)
    _waits_for_the_reader(page)
    page.locator("#mha-lm").scroll_into_view_if_needed()
    _loaded(page)
    _compare(page.evaluate(_READ_JS), _expected(*shipped, _DEFAULT_TEXT))
    assert list(_model_requests(page).values()) == [
        int(page.evaluate("() => document.getElementById('mha-lm').dataset.modelBytes"))]
    _clean(page)


@pytest.mark.browser
def test_what_the_reader_types_before_the_model_is_there_is_read(open_context, site_url, shipped):
    page = _open(open_context, site_url, path="far.html", reach=False)
    _cold_weight(page)
    _waits_for_the_reader(page)
    assert _tab_to(page, "#lm-input") == 1  # the keyboard reaches it: the model starts loading
    page.keyboard.type(SENTENCES[1])
    page.keyboard.press("Enter")  # before the model is there: the page stays (no form sent)
    _loaded(page)
    page.wait_for_function("(text) => document.getElementById('mha-lm').mhaLM.state.text === text", arg=SENTENCES[1])
    _compare(page.evaluate(_READ_JS), _expected(*shipped, SENTENCES[1]))
    assert page.url.endswith("far.html")
    _clean(page)


@pytest.mark.browser
def test_the_standalone_page_is_light(open_context, site_url):
    page = _open(open_context, site_url)
    transferred = _cold_weight(page)
    print(f"\nstandalone explorer page, first visit: {transferred} bytes "
          f"({sorted(page.bytes_received.items(), key=lambda kv: -kv[1])[:3]})")
    assert transferred <= MAX_PAGE_BYTES
    _clean(page)


@pytest.mark.browser
@pytest.mark.parametrize("chapter", [CHAPTER, HYBRID_CHAPTER])
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_the_chapter_page(open_context, site_url, pages, shipped, hybrid, screenshot_dir, viewport, chapter):
    if not (SITE_DIR / chapter).exists():
        pytest.skip(f"the website has no {chapter}: build the book first")
    page = _open(open_context, site_url, viewport, path="site/" + chapter, reach=False)
    transferred = _cold_weight(page)  # the page as it opens: the explorer's model is not loaded
    _waits_for_the_reader(page)
    assert transferred <= MAX_PAGE_BYTES
    html = (pages / "site" / chapter).read_text(encoding="utf-8")
    start = html.index('<div class="mha-lm"')
    fragment = len(html[start:html.index('class="mha-lm-known"', start)].encode())
    assert "application/json" not in html  # the model is a file of its own
    script = sum(size for url, size in page.bytes_received.items() if "/mha-lm.js" in url)
    scripts = page.evaluate("() => [...document.scripts].filter((s) => s.src && new URL(s.src).pathname.endsWith('/mha-lm.js'))"
                            ".map((s) => s.src)")
    assert len(scripts) == 1
    page.locator("#lm-input").focus()  # the reader reaches the explorer: its model loads
    _loaded(page)
    model = sum(_model_requests(page).values())
    print(f"\n{chapter} at {viewport}, first visit: {transferred} bytes; the explorer "
          f"{fragment + model + script} (its HTML {fragment}, model file {model}, mha-lm.js {script})")
    assert len(_model_requests(page)) == 1 and 500_000 < model
    assert fragment + model + script <= EXPLORER_BYTES  # the page's total is tests/browser/test_site.py's
    _type(page, SENTENCES[1])
    model = hybrid if chapter == HYBRID_CHAPTER else shipped  # the hybrid's page offers its softmax layer only
    _compare(page.evaluate(_READ_JS), _expected(*model, SENTENCES[1]), layer=None)
    _no_sideways_scroll(page, viewport)
    page.locator("#mha-lm").scroll_into_view_if_needed()
    name = Path(chapter).stem
    page.screenshot(path=str(screenshot_dir / f"lm-{name}-{viewport}.png"))
    page.evaluate("() => { document.documentElement.dataset.theme = 'dark'; }")  # the theme's switch
    page.wait_for_function(  # every themed figure redrawn dark (_static/mha-figures.js), then painted
        "() => [...document.querySelectorAll('.js-plotly-plot')]"
        ".every((gd) => !gd.mhaSource || gd.dataset.mhaTheme === 'dark')")
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    page.screenshot(path=str(screenshot_dir / f"lm-{name}-{viewport}-dark.png"))
    _clean(page)
