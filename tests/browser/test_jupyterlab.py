"""Chapter 4 in a real JupyterLab, as a reader runs it: Run All, then the live explorer's sliders.

Starts JupyterLab on 127.0.0.1 (a free port, no token, a temporary HOME, config and runtime
folder) over a temporary COPY of the chapter, so neither chapters/ nor the reader's Jupyter
settings are touched, opens it in Debian's Chromium and checks that

* the freshly opened notebook is not marked modified (its kernelspec is what Jupyter stores);
* Run All gives no error, stderr or warning output in any cell;
* the explorer's heatmaps follow its heads slider and a valid-length slider, moved with the
  keyboard and with the mouse: H heads named per example, masked key columns grey (the
  value ``_MASKED_Z``), the weights those of MultiHeadAttention;
* no request leaves the loopback server.

The server is stopped also when the test fails (``mha_lib.book.lab._lab_server``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mha_lib.book import lab
from mha_lib.viz.explorer import _MASKED_Z, _Canvas
from mha_lib.viz.scene import make_source

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "chapters" / "04_exploring_heads.ipynb"


@pytest.fixture(scope="module")
def lab_page(browser):  # the session's Chromium (conftest): one Playwright per process
    with lab._lab_server([CHAPTER]) as (base, _), \
            lab._lab_page(base, CHAPTER.name, browser=browser) as page:
        yield page


def _assert_explorer_shows(page, num_heads: int, valid_lens: list[int]) -> None:
    """Wait until the explorer shows these sliders and H panels per example, then check its weights."""
    B = len(valid_lens)
    sliders = {"heads H": str(num_heads), **{f"valid length (example {b})": str(v)
                                             for b, v in enumerate(valid_lens)}}
    state = lab._await_explorer(page, sliders, [f"head {h}" for h in range(num_heads)] * B)
    expected = make_source().weights(num_heads, valid_lens).numpy()  # (B, H, Lq, Lk)
    canvas = _Canvas(num_heads, expected.shape[2], expected.shape[3])
    for b, z in enumerate(state["z"]):
        z = np.array([[np.nan if w is None else w for w in row] for row in z])
        assert z.shape == canvas.shape
        for h in range(num_heads):
            c = canvas.column(h)
            panel = z[:, c:c + canvas.num_keys]
            v = valid_lens[b]
            assert (panel[:, v:] == _MASKED_Z).all(), f"example {b} head {h}: keys >= {v} masked"
            np.testing.assert_allclose(panel[:, :v], expected[b, h, :, :v], atol=1e-6)
            np.testing.assert_array_equal(expected[b, h, :, v:], 0.0)


@pytest.mark.browser
def test_chapter_4_runs_clean_and_its_explorer_follows_the_sliders(lab_page):
    page = lab_page
    lab._kernel_idle(page)
    assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0, "opened notebook is modified"

    lab._run_all(page)
    assert lab._bad_outputs(page) == []
    lab._redraw_if_blank(page)  # plotly's widget can come up blank (see the helper): rerun once
    _assert_explorer_shows(page, 2, [6, 4])  # the defaults, after Run All

    lab._install_redraw_timer(page)
    lab._press(page, "heads H", "ArrowRight")  # keyboard: 2 -> 4 heads
    _assert_explorer_shows(page, 4, [6, 4])
    for _ in range(2):
        lab._press(page, "valid length (example 0)", "ArrowLeft")  # 6 -> 4
    _assert_explorer_shows(page, 4, [4, 4])
    lab._click_at(page, "heads H", 0.0)  # mouse: the left end, 1 head
    _assert_explorer_shows(page, 1, [4, 4])
    lab._click_at(page, "valid length (example 1)", 1.0)  # mouse: the right end, 6 keys
    _assert_explorer_shows(page, 1, [4, 6])
    lab._click_at(page, "heads H", 1.0)  # 8 heads
    _assert_explorer_shows(page, 8, [4, 6])

    assert lab._bad_outputs(page) == []
    assert page.external_requests == []
