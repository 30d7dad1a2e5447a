"""The book's own tooling and house rules: clean committed notebooks, the plotly renderer,
the Sphinx extension, the table of contents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import plotly.graph_objects as go
import pytest
import yaml

from mha_lib.book import notebooks
from mha_lib.book.plotly_mime import PLOTLY_MIME, PlotlyMimeRenderer, figure_html
from mha_lib.book.sphinx_ext import plotly_js_source

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
LIBRARY_DEFINITIONS = re.compile(
    r"^(class MultiHeadAttention|class DotProductAttention|def (transpose_qkv|transpose_output|masked_softmax))\b",
    re.M,
)


def test_every_toc_entry_exists_and_every_chapter_is_listed():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for p in toc["parts"] for c in p["chapters"]]
    for name in files:
        assert any((ROOT / f"{name}{ext}").exists() for ext in (".md", ".ipynb")), name
    assert {f"chapters/{p.stem}" for p in CHAPTERS} <= set(files)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_committed_notebook_is_small_and_clean(path):
    assert notebooks.problems(path) == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_imports_library_code_instead_of_pasting_it(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "code" and "solution" not in tags:
            assert not LIBRARY_DEFINITIONS.search(cell.source), f"{path.name} pastes library code"


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
    assert 'class="plotly-graph-div' in html and "Plotly.newPlot(" in html
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


def test_plotly_js_ships_with_the_wheel():
    source = plotly_js_source()
    assert source.exists() and source.stat().st_size > 1_000_000
