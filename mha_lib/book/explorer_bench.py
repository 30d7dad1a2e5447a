"""Timing of the explorers (a benchmark, not a test: tests never assert wall-clock times).

Usage::

    python -m mha_lib.book.explorer_bench                       # live explorer only
    python -m mha_lib.book.explorer_bench --site _build/html    # and the static one in Chromium

* live: median time from setting a slider's ``value`` (what a reader's drag does in the kernel)
  to the updated ``FigureWidget``, for the default explorer; goal <= 20 ms.
* static: median time in Chromium from the mouse press on a range input of the kernel-free
  explorer to the first animation frame after plotly redrew; goal <= 100 ms.
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


def _time_static_explorer(site_dir: Path, repeats: int = 30,
                         chromium: str = "/usr/bin/chromium") -> dict[str, float]:
    """Median milliseconds per slider step of the kernel-free explorer on the built page."""
    from playwright.sync_api import sync_playwright

    from mha_lib.book.browser import click_control, install_redraw_timer, redraw_times

    page_path = Path(site_dir).resolve() / "chapters" / "04_exploring_heads.html"
    if not page_path.exists():
        raise ValueError(f"site_dir must hold the built book, {page_path} does not exist")
    plans = {
        "valid length": [(1, i % 7) for i in range(repeats)],
        "heads": [(0, i % 4) for i in range(repeats)],
    }
    results = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(page_path.as_uri(), wait_until="load")
        page.locator("#mha-static-explorer .main-svg").first.wait_for(state="attached")
        page.locator("#mha-static-explorer").scroll_into_view_if_needed()
        for name, clicks in plans.items():
            install_redraw_timer(page)
            for slider, step in clicks:
                click_control(page, slider, (step + 1) % 4 if slider == 0 else step)
                page.wait_for_timeout(30)
            times = redraw_times(page)
            results[name] = statistics.median(times) if times else float("nan")
        browser.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, help="built website (e.g. _build/html)")
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: expected an integer >= 1, got {args.repeats}")
    if args.site is not None and not (args.site / "index.html").exists():
        parser.error(f"--site: expected the built website (with index.html), got {args.site}")
    for name, ms in _time_live_explorer(args.repeats).items():
        print(f"live explorer, {name} change: median {ms:.1f} ms")
    if args.site:
        for name, ms in _time_static_explorer(args.site, args.repeats).items():
            print(f"static explorer in Chromium, {name} step: median {ms:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
