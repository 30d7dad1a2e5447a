"""Chapter 7's explorer on the website: the trained digit model's attention layer, no kernel.

At 1366 x 900 and 390 x 844, a reader drags a valid-length slider (mouse down on its thumb,
moves, mouse up), clicks the other one's track and uses the keyboard; after each the test waits
until the figure was drawn for the new lengths (``data-drawn`` on the figure), then checks that
the heatmaps are the weights of the shipped model's attention layer for those lengths (computed
here with :func:`mha_lib.viz.scene.make_source`, not by the page), that the labels say the
values, and that the model's four heads are shown without a slider for H.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import VIEWPORTS
from mha_lib.digits import held_out_set, load_pretrained, token_labels
from mha_lib.viz.scene import make_source
from mha_lib.viz.static_explorer import CONTROLS_ID, DIV_ID

PAGE = "chapters/07_head_importance.html"
H = 4


@pytest.fixture(scope="module")
def source():
    """The explorer's inputs as the chapter builds them: the two held-out examples of lengths 7, 12."""
    model, examples = load_pretrained(), held_out_set()
    pick = [int((examples.valid_lens == n).nonzero()[0]) for n in (7, 12)]
    tokens, valid_lens = examples.tokens[pick], examples.valid_lens[pick]
    labels = [token_labels(t, int(n)) for t, n in zip(tokens, valid_lens)]
    with torch.no_grad():
        embedded = model.embed(tokens)  # (2, L, D)
    return make_source(mha=model.attention, queries=embedded, tokens=labels, valid_lens=valid_lens.tolist())


# The figure's state once drawn: lengths, labels, the panels shown and the pictures of weights drawn.
_SHOWN_JS = """([divId, controlsId]) => {
  const gd = document.getElementById(divId);
  const inputs = [...document.querySelectorAll(`#${controlsId} input[type=range]`)];
  return {
    drawn: gd.dataset.drawn,
    lens: inputs.map((i) => Number(i.value)),
    labels: inputs.map((i) => document.querySelector(`label[for="${i.id}"]`).textContent.trim()),
    valuetexts: inputs.map((i) => i.getAttribute("aria-valuetext")),
    fixed: document.querySelector(`#${controlsId} .mha-control-fixed`)?.textContent,
    shown: gd.mhaExplorer.shown().map((s) => [s.example, s.head, s.z]),
    images: [...gd.mhaExplorer.graph().querySelectorAll(".layer-above .imagelayer image")].filter((i) => i.getAttribute("href")).length,
  };
}"""


def _wait_drawn(page, lens: list[int]) -> dict:
    """Wait until the figure was drawn for ``lens`` (head count index 0), return what it shows."""
    want = json.dumps([0, *lens], separators=(",", ":"))
    page.wait_for_function(f"(w) => document.getElementById('{DIV_ID}').dataset.drawn === w", arg=want)
    return page.evaluate(_SHOWN_JS, [DIV_ID, CONTROLS_ID])


def _assert_shows(shown: dict, source, lens: list[int]) -> None:
    assert shown["lens"] == lens
    assert shown["labels"] == [f"Valid length of example {b}: {v}" for b, v in enumerate(lens)]
    assert shown["valuetexts"] == [f"{v} of 12 keys" for v in lens]
    assert shown["fixed"] == "Heads: 4 (the model's)"
    assert sorted((b, h) for b, h, _ in shown["shown"]) == [(b, h) for b in range(2) for h in range(H)]
    assert shown["images"] == H * sum(v > 0 for v in lens)
    expected = source.weights(H, lens).numpy()  # (B, H, Lq, Lk)
    for b, h, z in shown["shown"]:
        z = np.array([[np.nan if w is None else w for w in row] for row in z])
        v = lens[b]
        assert np.isnan(z[:, v:]).all() and not np.isnan(z[:, :v]).any()
        np.testing.assert_allclose(z[:, :v], expected[b, h][:, :v], rtol=0, atol=6e-5)


def _thumb(page, index: int, value: int) -> tuple[float, float]:
    """Where the thumb of range input ``index`` sits at ``value`` (Chromium's 16 px thumb)."""
    slider = page.locator(f"#{CONTROLS_ID} input[type=range]").nth(index)
    box = slider.bounding_box()
    low, high = int(slider.get_attribute("min")), int(slider.get_attribute("max"))
    return (box["x"] + 8 + (value - low) / (high - low) * (box["width"] - 16), box["y"] + box["height"] / 2)


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_chapter_7_explorer_follows_drags_clicks_and_keys(open_context, site_url, source, viewport):
    page = open_context(viewport)
    page.goto(site_url + PAGE, wait_until="load")
    page.locator(f"#{DIV_ID} .main-svg").first.wait_for(state="attached")
    page.locator(f"#{CONTROLS_ID}").scroll_into_view_if_needed()
    _assert_shows(_wait_drawn(page, [7, 12]), source, [7, 12])

    start, end = _thumb(page, 0, 7), _thumb(page, 0, 4)  # drag example 0 from 7 keys to 4
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move(*end, steps=6)
    page.mouse.up()
    _assert_shows(_wait_drawn(page, [4, 12]), source, [4, 12])

    page.mouse.click(*_thumb(page, 1, 5))  # a click on example 1's track
    _assert_shows(_wait_drawn(page, [4, 5]), source, [4, 5])

    page.locator(f"#{CONTROLS_ID} input[type=range]").nth(0).focus()
    page.keyboard.press("Home")  # no key left: every cell of example 0 masked
    _assert_shows(_wait_drawn(page, [0, 5]), source, [0, 5])
    page.keyboard.press("End")
    _assert_shows(_wait_drawn(page, [12, 5]), source, [12, 5])
    assert page.console_errors == [] and page.external_requests == []
