"""The controls of the book's plotly figures, from the keyboard (issue 46, "finished pages").

A figure whose code gives it plotly sliders or menus (``layout.sliders``, ``layout.updatemenus``:
chapters 12c and 13) shows the book's HTML controls instead (``_static/mha-figures.js``). At
1366 x 900 and 390 x 844, for every such figure of those pages:

* its first control follows the element before it in the Tab order (Tab reaches it) and shows a
  focus ring;
* the keyboard operates it: ArrowRight on a slider, Enter on the next toggle button, ArrowDown
  on a select, and the figure then shows another state (waited for, never slept);
* after a switch to the dark theme the figure still shows the state the controls name.
"""

from __future__ import annotations

import pytest

from conftest import VIEWPORTS

PAGES = ["chapters/12c_attention_today.html", "chapters/13_why.html"]

# the figure's state as drawn: what its controls change (trace visibility, data, titles)
_STATE_JS = """(gd) => JSON.stringify([gd.data.map((t) => [t.visible, t.y, t.z, t.name]),
  gd.layout.title && gd.layout.title.text, (gd.layout.annotations || []).map((a) => a.text),
  (gd.layout.shapes || []).map((s) => [s.x0, s.x1, s.y0, s.y1])])"""

# focus the tabbable element right before `el` in document order (what Tab leaves from)
_FOCUS_BEFORE_JS = """(el) => {
  const all = [...document.querySelectorAll(
    "a[href], button, input, select, textarea, [tabindex]")].filter((e) =>
      e.tabIndex >= 0 && !e.disabled && e.getBoundingClientRect().width > 0
      && getComputedStyle(e).visibility !== "hidden");
  const i = all.indexOf(el);
  if (i < 1) return false;
  all[i - 1].focus();
  return document.activeElement === all[i - 1];
}"""


def _ring(page) -> bool:
    return page.evaluate("""() => { const s = getComputedStyle(document.activeElement);
      return (s.outlineStyle !== "none" && parseFloat(s.outlineWidth) >= 2) || s.boxShadow !== "none"; }""")


@pytest.mark.browser
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("path", PAGES)
def test_figure_controls_work_from_the_keyboard(open_context, site_url, path, viewport):
    page = open_context(viewport)
    assert page.goto(site_url + path, wait_until="load").ok
    bars = page.locator(".mha-figure-controls")
    assert bars.count() >= 1, f"{path}: no figure with controls"
    for i in range(bars.count()):
        bar = bars.nth(i)
        gd = bar.locator("xpath=following-sibling::div[contains(@class, 'js-plotly-plot')][1]")
        gd.locator(".main-svg").first.wait_for(state="attached")
        control = bar.locator("input, select, button").first
        control.scroll_into_view_if_needed()
        assert control.evaluate(_FOCUS_BEFORE_JS), f"{path} figure {i}: nothing before it to Tab from"
        page.keyboard.press("Tab")
        assert control.evaluate("(el) => el === document.activeElement"), (
            f"{path} figure {i}: Tab does not reach its first control")
        assert _ring(page), f"{path} figure {i}: no focus ring on its control"
        before = gd.evaluate(_STATE_JS)
        kind = control.evaluate("(el) => el.tagName.toLowerCase() + (el.type ? ':' + el.type : '')")
        if kind == "input:range":
            at_end = control.evaluate("(el) => el.value === el.max")
            page.keyboard.press("ArrowLeft" if at_end else "ArrowRight")
        elif kind.startswith("button"):
            page.keyboard.press("Tab")  # the next button of the group
            page.keyboard.press("Enter")
            pressed = page.evaluate("() => document.activeElement.getAttribute('aria-pressed')")
            assert pressed == "true", f"{path} figure {i}: Enter did not press the button"
        else:
            page.keyboard.press("ArrowDown")
        page.wait_for_function(f"([gd, before]) => ({_STATE_JS})(gd) !== before",
                               arg=[gd.element_handle(), before])
        shown = gd.evaluate(_STATE_JS)
        page.evaluate("() => { document.documentElement.dataset.theme = 'dark'; }")
        gd.evaluate("(gd) => new Promise((ok) => { const wait = () => gd.dataset.mhaTheme === 'dark' ? ok() : requestAnimationFrame(wait); wait(); })")
        assert gd.evaluate(_STATE_JS) == shown, f"{path} figure {i}: the dark redraw lost the control's state"
        page.evaluate("() => { document.documentElement.dataset.theme = 'light'; }")
    assert page.console_errors == []
