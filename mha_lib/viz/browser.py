"""Driving the kernel-free explorer in a browser page (Playwright), as a reader would.

Shared by the browser test (``tests/browser/test_explorer.py``) and the benchmark
(:mod:`mha_lib.viz.bench`). Nothing here imports Playwright: functions take a ``page``.
"""

from __future__ import annotations

from mha_lib.viz.static_explorer import DIV_ID

# The explorer's state: slider positions, the heatmaps set visible with their weights, and how
# many heatmap images plotly actually rendered (a panel whose keys are all masked has no image:
# only its grey background shows).
READ_STATE_JS = """
(divId) => {
  const gd = document.getElementById(divId);
  const shown = gd.data.filter((t) => t.visible === true);
  return {
    active: gd.layout.sliders.map((s) => s.active),
    labels: [...gd.querySelectorAll("g.slider-group text.slider-label")].map((e) => e.textContent),
    shown: shown.map((t) => ({example: t.meta.example, head: t.meta.head, z: t.z})),
    drawn: gd.querySelectorAll("g.heatmaplayer image").length,
  };
}
"""


def click_slider_step(page, slider: int, step: int, div_id: str = DIV_ID) -> None:
    """Click step ``step`` of slider ``slider`` (0 = heads, 1 + b = valid length of example b)."""
    group = page.locator(f"#{div_id} g.slider-group").nth(slider)
    tick = group.locator("rect.slider-tick-rect").nth(step).bounding_box()
    rail = group.locator("rect.slider-rail-touch-rect").bounding_box()
    if tick is None or rail is None:
        raise ValueError(f"slider {slider} step {step} of #{div_id} is not on the page")
    page.mouse.click(tick["x"] + tick["width"] / 2, rail["y"] + rail["height"] / 2)


# A promise that settles at the next redraw of the figure (or after 5 s, to report a failure).
ARM_REDRAW_JS = """
(divId) => {
  const gd = document.getElementById(divId);
  window.__mhaRedrawn = new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), 5000);
    gd.once("plotly_afterplot", () => { clearTimeout(timer); resolve(true); });
  });
}
"""


def click_and_wait(page, slider: int, step: int, div_id: str = DIV_ID) -> bool:
    """Click a slider step and wait until plotly has redrawn; False if no redraw came in 5 s."""
    page.evaluate(ARM_REDRAW_JS, div_id)
    click_slider_step(page, slider, step, div_id)
    return page.evaluate("() => window.__mhaRedrawn")


def read_state(page, div_id: str = DIV_ID) -> dict:
    """Slider positions, visible heatmaps (``example``, ``head``, ``z``) and drawn image count."""
    return page.evaluate(READ_STATE_JS, div_id)


# Times from the mouse press on a slider to the first animation frame after plotly redrew.
TIMER_JS = """
(divId) => {
  const gd = document.getElementById(divId);
  window.__mhaRedraws = [];
  let start = null;
  gd.addEventListener("mousedown", () => { start = performance.now(); }, true);
  gd.on("plotly_afterplot", () => {
    if (start === null) return;
    const t0 = start;
    start = null;
    requestAnimationFrame(() => window.__mhaRedraws.push(performance.now() - t0));
  });
}
"""


def install_redraw_timer(page, div_id: str = DIV_ID) -> None:
    """Start recording redraw times (ms) into ``window.__mhaRedraws``."""
    page.evaluate(TIMER_JS, div_id)


def redraw_times(page) -> list[float]:
    return page.evaluate("() => window.__mhaRedraws")
