"""Driving the kernel-free explorer in a browser page (Playwright), as a reader would.

Shared by the browser test (``tests/browser/test_explorer.py``) and the benchmark
(:mod:`mha_lib.book.explorer_bench`). Nothing here imports Playwright: functions take a ``page``.
The explorer's controls are native range inputs (see
:func:`mha_lib.viz.static_explorer_html`): input 0 chooses the head count (its value
is an index into the head counts offered), input ``1 + b`` the valid length of example ``b``.
"""

from __future__ import annotations

from mha_lib.viz.static_explorer import CONTROLS_ID, DIV_ID

__all__ = ["DECODE_PICTURE_JS", "click_control", "install_redraw_timer", "redraw_times"]

_COLOUR_TOLERANCE = 1.5  # per channel (0-255): the page rounds colours to integers, weights to 4 decimals

# A picture of weights (a data URL, "" for none) decoded in the page: null, or its width, height
# and pixels (RGBA, row by row), for :func:`_picture_problems`.
DECODE_PICTURE_JS = """async (href) => {
  if (!href) return null;
  const image = new Image();
  image.src = href;
  await image.decode();
  const canvas = Object.assign(document.createElement("canvas"), {width: image.width, height: image.height});
  const context = canvas.getContext("2d");
  context.drawImage(image, 0, 0);
  return {width: image.width, height: image.height,
          rgba: [...context.getImageData(0, 0, image.width, image.height).data]};
}"""

# The explorer's state: control positions and labels, the panels on screen with their weights
# (the explorer's own account, ``gd.mhaExplorer.shown()``), the pictures of weights on screen
# and the colour of every cell in them (a panel whose keys are all masked has no picture: only
# its grey background shows), and the heights of the figure's box and of its drawing.
_READ_STATE_JS = """
async ([divId, controlsId]) => {
  const gd = document.getElementById(divId), graph = gd.mhaExplorer.graph();  // the plotly div on screen
  const inputs = [...document.querySelectorAll(`#${controlsId} input[type=range]`)];
  const svg = graph.querySelector(".main-svg");
  // the pictures in the layout, in the order of the panels ("" where every key of a panel is
  // masked), and those plotly put on screen
  const pictures = (graph.layout.images || []).map((image) => image.source || "");
  const onScreen = [...graph.querySelectorAll(".layer-above .imagelayer image")]
    .map((image) => image.getAttribute("href"));
  const pixels = await Promise.all(pictures.map(__DECODE__));
  return {
    active: inputs.map((i) => Number(i.value)),
    labels: inputs.map((i) => document.querySelector(`label[for="${i.id}"]`).textContent.trim()),
    valuetexts: inputs.map((i) => i.getAttribute("aria-valuetext")),
    shown: gd.mhaExplorer.shown(),
    drawn: onScreen.length,
    drawn_as_laid_out: JSON.stringify(onScreen) === JSON.stringify(pictures.filter((href) => href)),
    pixels: pixels,
    box_height: gd.getBoundingClientRect().height,
    svg_height: svg ? svg.getBoundingClientRect().height : 0,
    layout_height: graph._fullLayout.height,
    next_top: (() => {
      let box = gd.closest(".cell_output") || gd.parentElement, next = null;
      while (box && !(next = box.nextElementSibling)) box = box.parentElement;
      return next ? next.getBoundingClientRect().top : null;
    })(),
    bottom: gd.getBoundingClientRect().bottom,
  };
}
""".replace("__DECODE__", DECODE_PICTURE_JS)

# A promise that settles when the explorer has put its next state on screen (its
# "mha-explorer-drawn" event), or, a safety net for a failure to report, false after 60 s.
_ARM_REDRAW_JS = """
(divId) => {
  const gd = document.getElementById(divId);
  window.__mhaRedrawn = new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), 60000);
    gd.addEventListener("mha-explorer-drawn", () => { clearTimeout(timer); resolve(true); }, {once: true});
  });
}
"""


def _picture_problems(picture: dict | None, z: list[list[float | None]],
                      colorscale: str = "Viridis") -> list[str]:
    """What is wrong with a panel's picture (from :data:`_READ_STATE_JS`'s ``pixels``) for its
    (Lq, Lk) weights ``z`` (masked keys None): one pixel per cell, each weight in the colour
    plotly's own colour scale gives it (:func:`plotly.colors.sample_colorscale`, the reference),
    masked cells transparent; no picture when every cell is masked."""
    import numpy as np
    import plotly.colors as pc

    cells = [(i, j, w) for i, row in enumerate(z) for j, w in enumerate(row)]
    if picture is None:
        return [] if all(w is None for *_, w in cells) else ["no picture, but some keys are not masked"]
    if (picture["height"], picture["width"]) != (len(z), len(z[0])):
        return [f"picture {picture['height']} x {picture['width']} for {len(z)} x {len(z[0])} cells"]
    rgba = np.asarray(picture["rgba"], dtype=float).reshape(len(z), len(z[0]), 4)
    problems = []
    for i, j, w in cells:
        if w is None:
            if rgba[i, j, 3] != 0:
                problems.append(f"cell ({i}, {j}) is masked but not transparent")
            continue
        want = np.array(pc.unlabel_rgb(pc.sample_colorscale(colorscale, [w])[0]), dtype=float)
        if rgba[i, j, 3] != 255 or np.abs(rgba[i, j, :3] - want).max() > _COLOUR_TOLERANCE:
            problems.append(f"cell ({i}, {j}) weight {w}: colour {rgba[i, j].tolist()}, expected {want.tolist()}")
    return problems


def _control(page, index: int, controls_id: str = CONTROLS_ID):
    """The ``index``-th range input of the explorer (0 = heads, 1 + b = example b's length)."""
    return page.locator(f"#{controls_id} input[type=range]").nth(index)


def click_control(page, index: int, value: int, controls_id: str = CONTROLS_ID) -> None:
    """Click range input ``index`` where its thumb sits at ``value``, as a mouse user would."""
    slider = _control(page, index, controls_id)
    box = slider.bounding_box()
    if box is None:
        raise ValueError(f"control {index} of #{controls_id} is not on the page")
    low, high = int(slider.get_attribute("min")), int(slider.get_attribute("max"))
    thumb = 16  # Chromium's range thumb, in px
    x = box["x"] + thumb / 2 + (value - low) / max(high - low, 1) * (box["width"] - thumb)
    page.mouse.click(x, box["y"] + box["height"] / 2)


def _click_and_wait(page, index: int, value: int, div_id: str = DIV_ID,
                   controls_id: str = CONTROLS_ID) -> bool:
    """Click a control at ``value`` and wait until the explorer drew; False if no redraw in 60 s."""
    page.evaluate(_ARM_REDRAW_JS, div_id)
    click_control(page, index, value, controls_id)
    return page.evaluate("() => window.__mhaRedrawn")


def _key_and_wait(page, index: int, key: str, div_id: str = DIV_ID,
                 controls_id: str = CONTROLS_ID) -> bool:
    """Focus control ``index``, press ``key`` (ArrowRight, ArrowLeft, Home, End...), await redraw."""
    _control(page, index, controls_id).focus()
    page.evaluate(_ARM_REDRAW_JS, div_id)
    page.keyboard.press(key)
    return page.evaluate("() => window.__mhaRedrawn")


def _read_state(page, div_id: str = DIV_ID, controls_id: str = CONTROLS_ID) -> dict:
    """Control positions and labels, the panels shown (``example``, ``head``, ``z``), the
    pictures of weights on screen (``drawn``, and ``pixels``: per panel, in the order of
    ``shown``, None when all its keys are masked, else its ``width``, ``height`` and ``rgba``),
    and the heights of the figure's box and drawing (see :data:`_READ_STATE_JS`)."""
    return page.evaluate(_READ_STATE_JS, [div_id, controls_id])


# Times from the mouse press on a control to the first animation frame after the explorer put
# the new state on screen.
_TIMER_JS = """
([divId, controlsId]) => {
  const gd = document.getElementById(divId);
  window.__mhaRedraws = [];
  let start = null;
  document.getElementById(controlsId).addEventListener(
    "mousedown", () => { start = performance.now(); }, true);
  gd.addEventListener("mha-explorer-drawn", () => {
    if (start === null) return;
    const t0 = start;
    start = null;
    requestAnimationFrame(() => window.__mhaRedraws.push(performance.now() - t0));
  });
}
"""


def install_redraw_timer(page, div_id: str = DIV_ID, controls_id: str = CONTROLS_ID) -> None:
    """Start recording redraw times (ms) into ``window.__mhaRedraws``."""
    page.evaluate(_TIMER_JS, [div_id, controls_id])


def redraw_times(page) -> list[float]:
    return page.evaluate("() => window.__mhaRedraws")
