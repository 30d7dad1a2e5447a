"""The kernel-free explorer on the built chapter page follows its controls, offline.

Drives the native range inputs like readers do, with the keyboard (arrow keys, Home, End on a
focused input) and the mouse (a click on the track), on a laptop and on a phone, and checks that
the panels shown are the library's weights for the chosen (heads, valid lengths): H panels per
example, each cell drawn in its weight's colour, masked key columns empty (transparent over the
grey background; exactly 0 in the stored weights), labels that
say the values, and a figure box that always holds the whole figure (the text after it is never
covered, even at 8 heads). No console error, no request leaving the loopback server.
"""

from __future__ import annotations

import numpy as np
import pytest

from mha_lib.book.browser import _click_and_wait, _key_and_wait, _picture_problems, _read_state
from mha_lib.viz.scene import make_source

PAGE = "chapters/04_exploring_heads.html"
HEADS = (1, 2, 4, 8)


def _expected(num_heads: int, valid_lens: list[int]) -> np.ndarray:
    """The default explorer's weights, from MultiHeadAttention (seed 0)."""
    return make_source().weights(num_heads, valid_lens).numpy()  # (B, H, Lq, Lk)


def _assert_follows(state: dict, num_heads: int, valid_lens: list[int]) -> None:
    assert state["active"] == [HEADS.index(num_heads), *valid_lens]
    assert state["labels"][0] == f"Heads: {num_heads}"
    assert state["labels"][1] == f"Valid length of example 0: {valid_lens[0]}"
    assert state["valuetexts"][0] == f"{num_heads} head{'s' if num_heads > 1 else ''}"
    shown = {(s["example"], s["head"]): s["z"] for s in state["shown"]}
    assert sorted(shown) == [(b, h) for b in range(2) for h in range(num_heads)]
    # pictures of weights on screen: H per example that has at least one valid key, each cell
    # in the colour of its weight on plotly's scale, masked keys transparent (the grey shows)
    assert state["drawn"] == num_heads * sum(v > 0 for v in valid_lens)
    assert state["drawn_as_laid_out"]
    for s, picture in zip(state["shown"], state["pixels"], strict=True):
        assert _picture_problems(picture, s["z"]) == [], (s["example"], s["head"])
    expected = _expected(num_heads, valid_lens)
    for (b, h), z in shown.items():
        z = np.array([[np.nan if w is None else w for w in row] for row in z])
        v = valid_lens[b]
        assert np.isnan(z[:, v:]).all(), f"masked keys of example {b} are drawn"
        assert not np.isnan(z[:, :v]).any()
        np.testing.assert_allclose(z[:, :v], expected[b, h][:, :v], rtol=0, atol=6e-5)
        np.testing.assert_array_equal(expected[b, h][:, v:], 0.0)  # masked means exactly 0
    # the figure's box holds the whole drawing, and what follows starts below it
    assert state["box_height"] >= state["svg_height"] - 1 >= state["layout_height"] - 2
    if state["next_top"] is not None:
        assert state["next_top"] >= state["bottom"] - 1, "the text after the explorer covers it"


@pytest.mark.browser
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_static_explorer_follows_its_controls(open_context, site_url, viewport):
    page = open_context(viewport)
    page.goto(site_url + PAGE, wait_until="load")
    page.wait_for_load_state("networkidle")
    page.locator("#mha-static-explorer .main-svg").first.wait_for(state="attached")
    page.locator("#mha-static-explorer-controls").scroll_into_view_if_needed()
    _assert_follows(_read_state(page), 2, [6, 4])

    steps = [  # (how, control, key or value) -> configuration after it
        (("key", 0, "End"), (8, [6, 4])),
        (("mouse", 1, 2), (8, [2, 4])),
        (("key", 2, "Home"), (8, [2, 0])),  # example 1 sees no key: every cell masked
        (("mouse", 0, 0), (1, [2, 0])),
        (("key", 2, "ArrowRight"), (1, [2, 1])),
        (("mouse", 2, 5), (1, [2, 5])),
        (("key", 0, "ArrowRight"), (2, [2, 5])),
        (("key", 0, "ArrowRight"), (4, [2, 5])),
        (("key", 1, "ArrowLeft"), (4, [1, 5])),
        (("mouse", 1, 6), (4, [6, 5])),
    ]
    for (how, index, what), (num_heads, lens) in steps:
        if how == "key":
            redrawn = _key_and_wait(page, index, what)
        else:
            redrawn = _click_and_wait(page, index, what)
        assert redrawn, f"no redraw after {how} {what} on control {index}"
        _assert_follows(_read_state(page), num_heads, lens)

    assert page.external_requests == []
    assert page.console_errors == []
