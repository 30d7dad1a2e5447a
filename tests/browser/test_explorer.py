"""The kernel-free explorer on the built chapter page follows its sliders, offline.

Clicks the plotly slider steps like a reader and checks that the drawn heatmaps are the
library's weights for the chosen (heads, valid lengths): H visible heatmaps per example,
masked key columns empty (exactly 0 in the stored weights), no console error, no request
leaving the loopback server.
"""

from __future__ import annotations

import numpy as np
import pytest

from mha_lib.viz.browser import click_and_wait, read_state
from mha_lib.viz.scene import make_source

PAGE = "chapters/04_exploring_heads.html"
HEADS = (1, 2, 4, 8)


def _expected(num_heads: int, valid_lens: list[int]) -> np.ndarray:
    """The default explorer's weights, from MultiHeadAttention (seed 0)."""
    return make_source().weights(num_heads, valid_lens).numpy()  # (B, H, Lq, Lk)


def _assert_follows(state: dict, num_heads: int, valid_lens: list[int]) -> None:
    assert state["active"] == [HEADS.index(num_heads), *valid_lens]
    assert f"heads: {num_heads}" in state["labels"]
    assert f"valid length (example 0): {valid_lens[0]}" in state["labels"]
    shown = {(s["example"], s["head"]): s["z"] for s in state["shown"]}
    assert sorted(shown) == [(b, h) for b in range(2) for h in range(num_heads)]
    # heatmap images plotly rendered: H per example that has at least one valid key
    assert state["drawn"] == num_heads * sum(v > 0 for v in valid_lens)
    expected = _expected(num_heads, valid_lens)
    for (b, h), z in shown.items():
        z = np.array([[np.nan if w is None else w for w in row] for row in z])
        v = valid_lens[b]
        assert np.isnan(z[:, v:]).all(), f"masked keys of example {b} are drawn"
        assert not np.isnan(z[:, :v]).any()
        np.testing.assert_allclose(z[:, :v], expected[b, h][:, :v], rtol=0, atol=6e-5)
        np.testing.assert_array_equal(expected[b, h][:, v:], 0.0)  # masked means exactly 0


@pytest.mark.browser
def test_static_explorer_follows_its_sliders(browser_page, site_url):
    page = browser_page
    page.goto(site_url + PAGE, wait_until="load")
    page.wait_for_load_state("networkidle")
    page.locator("#mha-static-explorer .main-svg").first.wait_for(state="attached")
    page.locator("#mha-static-explorer").scroll_into_view_if_needed()
    _assert_follows(read_state(page), 2, [6, 4])

    steps = [  # (slider, step) -> configuration after the click
        ((0, 3), (8, [6, 4])),
        ((1, 2), (8, [2, 4])),
        ((2, 0), (8, [2, 0])),  # example 1 sees no key: every cell masked
        ((0, 0), (1, [2, 0])),
        ((2, 5), (1, [2, 5])),
        ((0, 2), (4, [2, 5])),
        ((1, 6), (4, [6, 5])),
    ]
    for (slider, step), (num_heads, lens) in steps:
        assert click_and_wait(page, slider, step), f"no redraw after slider {slider} step {step}"
        _assert_follows(read_state(page), num_heads, lens)

    assert page.external_requests == []
    assert page.console_errors == []

