"""The book's own tooling and house rules: clean committed notebooks, the plotly renderer,
the Sphinx extension, the table of contents."""

from __future__ import annotations

import hashlib
import json
import re

import nbformat
import plotly.graph_objects as go
import yaml

from mha_lib.book import notebooks
from mha_lib.book.plotly_mime import PLOTLY_MIME, PlotlyMimeRenderer, figure_html, share_templates
from mha_lib.book import sphinx_ext

LIBRARY_DEFINITIONS = re.compile(
    r"^(class MultiHeadAttention|class DotProductAttention|def (transpose_qkv|transpose_output|masked_softmax))\b",
    re.M,
)


def test_every_toc_entry_exists_and_every_chapter_is_listed(root):
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for p in toc["parts"] for c in p["chapters"]]
    for name in files:
        assert any((root / f"{name}{ext}").exists() for ext in (".md", ".ipynb")), name
    chapters = sorted((root / "chapters").glob("*.ipynb"))
    assert chapters and {f"chapters/{p.stem}" for p in chapters} <= set(files)


def test_committed_notebook_is_small_and_clean(chapter_path):
    assert notebooks.problems(chapter_path) == []


def test_chapter_imports_library_code_instead_of_pasting_it(chapter_path):
    nb = nbformat.read(chapter_path, as_version=4)
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "code" and "solution" not in tags:
            assert not LIBRARY_DEFINITIONS.search(cell.source), f"{chapter_path.name} pastes library code"


def test_keeps_only_short_text_outputs():
    text = nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")])
    figure = nbformat.v4.new_code_cell("fig", outputs=[nbformat.v4.new_output(
        "display_data", data={PLOTLY_MIME: {"data": []}, "text/plain": "Figure"})])
    ignored = nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(2)",
                                        outputs=[nbformat.v4.new_output("stream", text="2\n")])
    long = nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("stream", text="x" * 5000)])
    assert notebooks.keeps_outputs(text)
    assert not notebooks.keeps_outputs(figure)
    assert not notebooks.keeps_outputs(ignored)
    assert not notebooks.keeps_outputs(long)

    nb = nbformat.v4.new_notebook(cells=[text, figure], metadata={"widgets": {"state": {}}})
    text.execution_count, figure.execution_count = 1, 2
    notebooks.clean(nb)
    assert "widgets" not in nb.metadata
    assert text.outputs and text.execution_count == 1
    assert figure.outputs == [] and figure.execution_count is None  # nbval: run, not compared


def test_figure_html_is_deterministic_and_needs_no_cdn():
    figure = json.loads(go.Figure(go.Heatmap(z=[[0, 1]]), layout={"height": 300}).to_json())
    html = figure_html(figure)
    assert html == figure_html(figure)
    assert 'class="plotly-graph-div' in html and "mhaPlot(" in html
    assert "height:300px" in html
    assert "src=" not in html and "cdn" not in html.lower()  # plotly.js comes from _static
    assert html.count("</script>") == 1  # the figure's JSON cannot close the script early


def test_plotly_renderer_takes_only_plotly_json():
    class Data:
        mime_type, content = "text/plain", "x"

    assert PlotlyMimeRenderer.handle_mime(None, Data(), False) is None
    Data.mime_type, Data.content = PLOTLY_MIME, {"data": [], "layout": {}}
    (node,) = PlotlyMimeRenderer.handle_mime(None, Data(), False)
    assert node.astext().startswith('<div id="plotly-')


def test_served_plotly_js_is_the_cartesian_bundle_of_the_wheels_version():
    bundle = sphinx_ext.STATIC / sphinx_ext.PLOTLY_JS
    assert sphinx_ext.wheel_plotly_js_version() == sphinx_ext.PLOTLY_JS_VERSION
    head = bundle.read_text(encoding="utf-8")[:200]
    assert f"plotly.js (cartesian - minified) v{sphinx_ext.PLOTLY_JS_VERSION}" in head
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == sphinx_ext.PLOTLY_JS_SHA256


def test_figure_html_has_a_text_alternative():
    figure = {"data": [{"type": "bar", "y": [1]}], "layout": {"title": {"text": "a <b>bold</b> title"}}}
    html = figure_html(figure)
    assert 'role="img"' in html and 'aria-label="Figure: a bold title (bar chart)."' in html
    figure["layout"]["meta"] = {"description": 'Two "quoted" heads'}
    assert 'aria-label="Two &quot;quoted&quot; heads"' in figure_html(figure)


def test_fontawesome_css_is_trimmed_to_the_icons_used():
    css = ('/*! licence */@font-face{font-family:A;src:url(../webfonts/fa-brands-400.woff2)}'
           '@font-face{font-weight:900;src:url(../webfonts/fa-solid-900.woff2) format("woff2")}'
           '.fa-solid{font-weight:900}.fa-bars:before,.fa-navicon:before{content:"\\f0c9"}'
           '.fa-bell:before{content:"\\f0f3"}')
    trimmed, kept = sphinx_ext.trim_fontawesome_css(css, {"bars"})
    assert trimmed.startswith("/*! licence */") and "fa-brands" not in trimmed
    assert "fa-solid-900.woff2" in trimmed and ".fa-solid{" in trimmed
    assert ".fa-bars:before" in trimmed and "fa-bell" not in trimmed
    assert kept == {0xF0C9}


def test_strip_code_styles_drops_only_ipythons_repeated_pygments_stylesheet():
    from IPython.display import Code

    listing = Code("def f(x):\n    return x\n", language="python")._repr_html_()
    assert "<style>pre { line-height: 125%; }" in listing  # what IPython writes today
    page = f"<p>before</p>{listing}<style>.mine {{ color: red; }}</style>{listing}"
    lighter = sphinx_ext.strip_code_styles(page)
    assert "line-height: 125%" not in lighter
    assert lighter.count('<div class="highlight">') == 2  # the listings stay
    assert "<style>.mine { color: red; }</style>" in lighter  # other styles stay


def test_highlighted_code_loses_only_the_spans_drawn_in_the_blocks_own_colour():
    page = ('<div class="highlight"><pre><span class="k">def</span><span class="w"> </span>'
            '<span class="nf">f</span><span class="p">(</span><span class="n">x</span>'
            '<span class="p">):</span></pre></div><p><span class="n">kept</span></p>')
    assert sphinx_ext.strip_plain_code_spans(page) == (
        '<div class="highlight"><pre><span class="k">def</span> <span class="nf">f</span>(x):</pre></div>'
        '<p><span class="n">kept</span></p>')


def test_a_page_writes_each_plotly_template_once():
    line = json.loads(go.Figure(go.Scatter(y=[1, 2], name="a </b> name")).to_json())
    heat = json.loads(go.Figure(go.Heatmap(z=[[0, 1]])).to_json())
    page = f"<main>{figure_html(line)}<p>text</p>{figure_html(heat)}</main>"
    shared = share_templates(page)
    assert shared.count("(window.mhaTemplates = ") == 1 and len(shared) < len(page) - 5000
    assert share_templates(shared) == shared  # a page already shared stays as it is
    keys = re.findall(r'"template":"(mha-template-[0-9a-f]+)"', shared)
    assert len(keys) == 2 and keys[0] == keys[1]
    assert f'["{keys[0]}"] = ' in shared.split("mhaPlot(")[0]  # defined before the first figure
    assert '"a <\\/b> name"' in shared  # still escaped inside the script


def test_an_explorers_model_leaves_the_page_for_a_file_of_its_own(tmp_path):
    model = {"format": "mha_lib.lm/1", "weights": {"w": "AAAA"}, "note": "a <\\/script> inside"}
    text = json.dumps(model, separators=(",", ":"))
    page = ('<main><div class="mha-lm" id="mha-lm" data-model="mha-lm-model" data-settings="{}">'
            f'<p>controls</p><script type="application/json" id="mha-lm-model">{text}</script></div>'
            '<script type="application/json" id="other">{"kept": 1}</script></main>')
    lighter, files = sphinx_ext.split_models(page, "../_static/")
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    name = f"{sphinx_ext.LM_MODELS}/{key}.js"
    assert list(files) == [name]
    assert files[name] == f'(window.mhaLMModels = window.mhaLMModels || {{}})["{key}"] = {text};\n'
    assert json.loads(files[name].split(" = ", 2)[2].rstrip(";\n")) == model
    assert text not in lighter and '<p>controls</p></div>' in lighter
    assert (f'data-model="mha-lm-model" data-model-key="{key}" data-model-src="../_static/{name}" '
            f'data-model-bytes="{len(files[name].encode())}"') in lighter
    assert '<script type="application/json" id="other">{"kept": 1}</script>' in lighter  # not a model
    assert sphinx_ext.split_models(lighter, "../_static/") == (lighter, {})  # split once
    # in a build: the file under _static, its address relative to the page
    (tmp_path / "chapters").mkdir()
    built = sphinx_ext._split_page_models(tmp_path / "chapters" / "12.html", tmp_path, page)
    assert built == lighter and (tmp_path / "_static" / name).read_text(encoding="utf-8") == files[name]


def test_figure_numbers_are_written_to_six_significant_digits():
    html = figure_html({"data": [{"type": "scatter", "y": [0.123456789, 2.0, None, 1e-9 / 3]}],
                        "layout": {"title": {"text": "t"}, "xaxis": {"range": [0.1 + 0.2, 1]}}})
    assert '"y":[0.123457,2.0,null,3.33333e-10]' in html and '"range":[0.3,1]' in html
