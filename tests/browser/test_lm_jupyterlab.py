"""The live text explorer in a real JupyterLab: type into ``explore_text()``'s box, the heads follow.

Starts JupyterLab on 127.0.0.1 over a temporary notebook that displays ``explore_text()`` (the
shipped model), with the server and page of :mod:`mha_lib.book.lab`; runs it, types a
sentence into the explorer's text box from the keyboard, and checks that the FigureWidget
redraws: its heatmap traces (``meta={"layer": n, "head": h}``) hold the model's weights for the
new tokens (to 1e-4, as the website's explorer), the tick labels are the tokens, the
continuation is the greedy one (both as ``mha_lib.viz.text_explorer._read`` computes them,
which ``tests/viz/test_text_explorer.py`` checks against the model itself). No request leaves the loopback server.
"""

from __future__ import annotations

import nbformat
import numpy as np
import pytest

from mha_lib import lm
from mha_lib.book import lab
from mha_lib.book.notebooks import set_kernel_metadata
from mha_lib.viz.text_explorer import _read

TYPED = "Leo helps Mia because he"

# The explorer's figure: its heatmap traces and tick labels, and the continuation shown.
_FIGURE_JS = """
() => {
  const gd = document.querySelector(".jp-OutputArea .js-plotly-plot");
  if (!gd || !gd.data) return null;
  return {
    traces: gd.data.filter((t) => t.type === "heatmap").map((t) => ({
      meta: t.meta, visible: t.visible, z: t.z, x: gd.layout["xaxis" + t.xaxis.slice(1)].ticktext})),
    said: [...document.querySelectorAll(".jp-OutputArea .widget-html b")].map((b) => b.textContent),
  };
}
"""


@pytest.fixture(scope="module")
def lab_page(browser, tmp_path_factory):  # the session's Chromium (conftest)
    notebook = tmp_path_factory.mktemp("lm-lab") / "explore_text.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from mha_lib.viz import explore_text\n\nexplorer = explore_text()\nexplorer")])
    set_kernel_metadata(nb)
    nbformat.write(nb, notebook)
    with lab._lab_server([notebook]) as (base, _), \
            lab._lab_page(base, notebook.name, browser=browser) as page:
        yield page


@pytest.mark.browser
def test_typing_into_explore_text_redraws_its_heads(lab_page):
    page = lab_page
    lab._run_all(page)
    assert lab._bad_outputs(page) == []
    page.wait_for_function(f"() => ({_FIGURE_JS})() !== null", timeout=lab._PATIENCE_MS)

    box = page.locator(".jp-OutputArea .widget-text input[type=text]").first
    box.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Backspace")
    page.keyboard.type(TYPED)
    model, tokenizer = lm.load_pretrained()
    tokens = tokenizer.tokenize(TYPED)
    expected = _read(model, tokenizer, TYPED)  # which tests/viz checks against the model
    try:  # every key press redraws in the kernel: a loaded machine takes minutes for the sentence
        page.wait_for_function(  # the figure's ticks are the typed tokens and the continuation is shown
            f"""([tokens, said]) => {{
              const shown = ({_FIGURE_JS})();
              return shown && shown.traces.length > 0 && shown.traces.every(
                (t) => JSON.stringify(t.x) === JSON.stringify(tokens))
                && JSON.stringify(shown.said) === JSON.stringify([said]);
            }}""", arg=[tokens, expected.continuation_text], timeout=3 * lab._PATIENCE_MS)
    except Exception as error:  # say what the page shows instead
        shown = page.evaluate(_FIGURE_JS) or {"traces": [], "said": None}
        raise AssertionError(f"expected ticks {tokens} and {[expected.continuation_text]}; the page shows "
                             f"ticks {[t['x'] for t in shown['traces']][:1]} and {shown['said']}") from error
    shown = page.evaluate(_FIGURE_JS)

    N, H = model.config.num_layers, model.config.num_heads
    assert [t["meta"] for t in shown["traces"]] == [{"layer": n, "head": h} for n in range(N) for h in range(H)]
    future = np.triu(np.ones((len(tokens), len(tokens)), dtype=bool), k=1)
    for trace in shown["traces"]:
        n, h = trace["meta"]["layer"], trace["meta"]["head"]
        z = np.array([[np.nan if w is None else w for w in row] for row in trace["z"]], dtype=float)
        assert np.isnan(z[future]).all()
        np.testing.assert_allclose(z[~future], expected.weights[n, h][~future], rtol=0, atol=1e-4)
        assert trace["visible"] is (n == 0)
    assert shown["said"] == [expected.continuation_text]
    assert lab._bad_outputs(page) == []
    assert page.external_requests == []
