"""Timing of the explorers (a benchmark, not a test: tests never assert wall-clock times).

Usage::

    python -m mha_lib.book.explorer_bench                       # live explorer only
    python -m mha_lib.book.explorer_bench --site _build/html    # and the static one in Chromium

* live: median time from setting a slider's ``value`` (what a reader's drag does in the kernel)
  to the updated ``FigureWidget``, for the default explorer; goal <= 20 ms.
* website: median time in Chromium from the mouse press on a range input of chapter 4's
  kernel-free explorer (2 and 8 heads) to the first animation frame after the explorer put the
  new state on screen, and
  from a keystroke in chapter 12's text box (a 12-word and a 200-word text) to the first frame
  after its figure was drawn again; at full speed and with the CPU slowed down 4 times (a
  phone); goal <= 150 ms at full speed, <= 300 ms slowed down.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

__all__ = ["main"]


def _time_live_explorer(repeats: int = 40) -> dict[str, float]:
    """Median milliseconds per slider change of the default live explorer, by kind of change."""
    from mha_lib.viz import explore

    explorer = explore()
    heads = list(explorer.heads.options)
    for i in range(8):  # warm up: build every model once, touch every code path
        explorer.heads.value = heads[i % len(heads)]
        explorer.valid_lens[i % 2].value = i % 7
    results = {}
    plans = {
        "valid length": lambda i: setattr(explorer.valid_lens[0], "value", i % 7),
        "heads": lambda i: setattr(explorer.heads, "value", heads[i % len(heads)]),
        "seed": lambda i: setattr(explorer.seed, "value", i % 5),
    }
    for name, change in plans.items():
        times = []
        for i in range(repeats):
            start = time.perf_counter()
            change(i)
            times.append((time.perf_counter() - start) * 1000)
        results[name] = statistics.median(times)
    return results


# Chapter 12: milliseconds from a keystroke at the end of the text (an ``input`` event) to the
# first animation frame after the explorer drew its figure again, for each of ``n`` keystrokes.
_TYPE_JS = """
async ([text, n]) => {
  const root = document.querySelector(".mha-lm"), input = root.querySelector("#lm-input");
  const drawn = (before) => new Promise((resolve) => {
    const check = () => root.mhaLM.rendered > before ? requestAnimationFrame(resolve)
                                                     : requestAnimationFrame(check);
    check();
  });
  let before = root.mhaLM.rendered;
  input.value = text;
  input.dispatchEvent(new Event("input"));
  await drawn(before);
  const times = [];
  for (let i = 0; i < n; i++) {
    before = root.mhaLM.rendered;
    const start = performance.now();
    input.value += i % 2 ? "a" : " ";
    input.dispatchEvent(new Event("input"));
    await drawn(before);
    times.push(performance.now() - start);
  }
  return times;
}
"""
_STORY_WORDS = ("Mia and Leo go to the park . Mia has a red kite and Leo has a blue ball . "
                "Later Leo helps Mia because she is his friend . ").split()


def _words(n: int) -> str:
    """A text of ``n`` words from the story model's vocabulary."""
    return " ".join(_STORY_WORDS[i % len(_STORY_WORDS)] for i in range(n)).replace(" .", ".")


def _time_static_explorer(site_dir: Path, repeats: int = 30,
                         chromium: str = "/usr/bin/chromium", slowdown: float = 1) -> dict[str, float]:
    """Median milliseconds per update of the kernel-free explorers on the built pages, with
    the CPU slowed down ``slowdown`` times (Chromium's CPU throttling, 4 is about a phone)."""
    from playwright.sync_api import sync_playwright

    from mha_lib.book.browser import click_control, install_redraw_timer, redraw_times

    chapter4 = Path(site_dir).resolve() / "chapters" / "04_exploring_heads.html"
    chapter12 = Path(site_dir).resolve() / "chapters" / "12_language_model.html"
    if not chapter4.exists():
        raise ValueError(f"site_dir must hold the built book, {chapter4} does not exist")
    plans = {
        "heads": [(0, i % 4) for i in range(repeats)],
        "valid length": [(1, i % 7) for i in range(repeats)],
        "valid length at 8 heads": [(1, i % 7) for i in range(repeats)],
    }
    results = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        cdp = page.context.new_cdp_session(page)
        page.goto(chapter4.as_uri(), wait_until="load")
        page.locator("#mha-static-explorer .main-svg").first.wait_for(state="attached")
        page.locator("#mha-static-explorer").scroll_into_view_if_needed()
        cdp.send("Emulation.setCPUThrottlingRate", {"rate": slowdown})
        for name, clicks in plans.items():
            if name.endswith("8 heads"):
                click_control(page, 0, 3)  # the last head count: 8
                page.wait_for_timeout(500)
            install_redraw_timer(page)
            for slider, step in clicks:
                click_control(page, slider, (step + 1) % 4 if slider == 0 else step)
                page.wait_for_timeout(30)
            times = redraw_times(page)
            results[f"chapter 4, {name}"] = statistics.median(times) if times else float("nan")
        if chapter12.exists():
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
            page.goto(chapter12.as_uri(), wait_until="load")
            page.locator(".mha-lm").scroll_into_view_if_needed()  # its model loads when reached
            page.wait_for_function("() => document.querySelector('.mha-lm')?.mhaLM?.rendered > 0")
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": slowdown})
            for words in (12, 200):
                times = page.evaluate(_TYPE_JS, [_words(words), max(6, repeats // 3)])
                results[f"chapter 12, a keystroke in a {words}-word text"] = statistics.median(times)
        browser.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, help="built website (e.g. _build/html)")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--slowdown", type=float, nargs="+", default=[1, 4],
                        help="CPU slowdowns to time the website's explorers at (4: a phone)")
    parser.add_argument("--no-live", action="store_true", help="skip the live (kernel) explorer")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: expected an integer >= 1, got {args.repeats}")
    if args.site is not None and not (args.site / "index.html").exists():
        parser.error(f"--site: expected the built website (with index.html), got {args.site}")
    if not args.no_live:
        for name, ms in _time_live_explorer(args.repeats).items():
            print(f"live explorer, {name} change: median {ms:.1f} ms")
    if args.site:
        for slowdown in args.slowdown:
            for name, ms in _time_static_explorer(args.site, args.repeats, slowdown=slowdown).items():
                print(f"website explorer in Chromium, CPU slowed {slowdown:g}x, {name}: "
                      f"median {ms:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
