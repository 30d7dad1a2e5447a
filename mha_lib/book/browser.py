"""Driving the kernel-free explorer in a browser page (Playwright), as a reader would.

Shared by the browser test (``tests/browser/test_explorer.py``) and the benchmark
(:mod:`mha_lib.book.explorer_bench`). Nothing here imports Playwright: functions take a ``page``.
The explorer's controls are native range inputs (see
:func:`mha_lib.viz.static_explorer_html`): input 0 chooses the head count (its value
is an index into the head counts offered), input ``1 + b`` the valid length of example ``b``.
"""

from __future__ import annotations

from mha_lib.viz.static_explorer import CONTROLS_ID, DIV_ID

__all__ = ["click_control", "install_redraw_timer", "redraw_times"]

# The explorer's state: control positions and labels, the heatmaps drawn with their weights,
# how many heatmap images plotly rendered (a panel whose keys are all masked has no image: only
# its grey background shows), and the heights of the figure's box and of its drawing.
_READ_STATE_JS = """
([divId, controlsId]) => {
  const gd = document.getElementById(divId);
  const inputs = [...document.querySelectorAll(`#${controlsId} input[type=range]`)];
  const shown = gd.data.filter((t) => t.visible !== false);
  const svg = gd.querySelector(".main-svg");
  return {
    active: inputs.map((i) => Number(i.value)),
    labels: inputs.map((i) => document.querySelector(`label[for="${i.id}"]`).textContent.trim()),
    valuetexts: inputs.map((i) => i.getAttribute("aria-valuetext")),
    shown: shown.map((t) => ({example: t.meta.example, head: t.meta.head, z: t.z})),
    drawn: gd.querySelectorAll("g.heatmaplayer image").length,
    box_height: gd.getBoundingClientRect().height,
    svg_height: svg ? svg.getBoundingClientRect().height : 0,
    layout_height: gd._fullLayout.height,
    next_top: (() => {
      let box = gd.closest(".cell_output") || gd.parentElement, next = null;
      while (box && !(next = box.nextElementSibling)) box = box.parentElement;
      return next ? next.getBoundingClientRect().top : null;
    })(),
    bottom: gd.getBoundingClientRect().bottom,
  };
}
"""

# A promise that settles at the next redraw of the figure (or, a safety net for a failure to
# report, false after 60 s).
_ARM_REDRAW_JS = """
(divId) => {
  const gd = document.getElementById(divId);
  window.__mhaRedrawn = new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), 60000);
    gd.once("plotly_afterplot", () => { clearTimeout(timer); resolve(true); });
  });
}
"""


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
    """Click a control at ``value`` and wait until plotly redrew; False if no redraw in 60 s."""
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
    """Control positions and labels, visible heatmaps (``example``, ``head``, ``z``), drawn
    image count, and the heights of the figure's box and drawing (see :data:`_READ_STATE_JS`)."""
    return page.evaluate(_READ_STATE_JS, [div_id, controls_id])


# Times from the mouse press on a control to the first animation frame after plotly redrew.
_TIMER_JS = """
([divId, controlsId]) => {
  const gd = document.getElementById(divId);
  window.__mhaRedraws = [];
  let start = null;
  document.getElementById(controlsId).addEventListener(
    "mousedown", () => { start = performance.now(); }, true);
  gd.on("plotly_afterplot", () => {
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
