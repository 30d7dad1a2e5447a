"""The live explorer in a real JupyterLab, driven in Chromium: the server, the page, a benchmark.

Usage (a benchmark that prints numbers, not a test; it needs Debian's ``/usr/bin/chromium``)::

    python -m mha_lib.book.lab                      # chapter 4, 10 moves per control
    python -m mha_lib.book.lab --moves 20 --notebook chapters/07_head_importance.ipynb

It copies the notebook into a temporary folder, starts JupyterLab on the loopback interface
(a free port, no token, a temporary HOME, config, data and runtime folder, so nothing of the
reader's is read or written), opens the copy in Chromium, runs all cells and times, for every
control of the first live explorer, the key press on the slider to the first animation frame
after plotly redrew the figure. Goal: at most 150 ms.

The browser test ``tests/browser/test_jupyterlab.py`` uses the same (private) functions.
Nothing here imports Playwright at module level: functions take a ``page``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["main"]

_ROOT = Path(__file__).resolve().parents[2]
_CHROMIUM = os.environ.get("MHA_CHROMIUM", "/usr/bin/chromium")
_CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# No news, no update check, no announcement toast: nothing asks for the network.
_PAGE_CONFIG = {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}
_STDERR_MIME = "application/vnd.jupyter.stderr"
# Every wait here is for a state (a status text, a prompt, a redraw); this is only the safety
# net after which a wait gives up, generous for a machine busy with other work.
_PATIENCE_MS = 300_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The line the server logs once it is set up. jupyter_server (2.x) binds its port in the first
# turn of its event loop, *after* this line: the server may still refuse a connection for a
# moment, so ``_until_it_answers`` follows.
_READY_LINE = "Use Control-C to stop this server"


def _until_it_answers(server: subprocess.Popen, url: str, timeout: float, log_path: Path) -> None:
    """Return once ``url`` answers; raise (with the server's log) if the server exits first, or
    after ``timeout`` seconds (a safety net). Between tries it waits on the server process, so a
    server that exits ends the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=timeout).read()
            return
        except (ConnectionRefusedError, urllib.error.URLError) as error:
            if not isinstance(getattr(error, "reason", error), ConnectionRefusedError):
                raise
        try:
            server.wait(timeout=0.1)  # returns early only if the server exited
        except subprocess.TimeoutExpired:
            if time.monotonic() < deadline:
                continue
            raise RuntimeError(f"JupyterLab did not answer at {url} within {timeout:.0f} s:\n"
                               + log_path.read_text()) from None
        raise RuntimeError(f"JupyterLab exited with code {server.returncode}:\n" + log_path.read_text())


def _copy_log(stream, path: Path, ready: threading.Event) -> None:
    """Copy the server's output into ``path`` line by line; set ``ready`` when the server
    announces that it serves, or when its output ends (it exited)."""
    with open(path, "w") as log:
        for line in stream:
            log.write(line)
            log.flush()
            if _READY_LINE in line:
                ready.set()
    ready.set()


@contextlib.contextmanager
def _lab_server(notebooks: list[Path], timeout: float = 180.0):
    """A JupyterLab server on 127.0.0.1 over temporary copies of ``notebooks``.

    Yields ``(base_url, folder)`` once the server says it serves (``timeout``: a safety net
    in seconds, never a wait); the server (and its kernels) stop on exit, also on error.
    """
    with tempfile.TemporaryDirectory(prefix="mha-lab-") as tmp:
        tmp = Path(tmp)
        folder = tmp / "notebooks"
        folder.mkdir()
        for path in notebooks:
            shutil.copy(path, folder / Path(path).name)
        config = tmp / "config"
        (config / "labconfig").mkdir(parents=True)
        (config / "labconfig" / "page_config.json").write_text(json.dumps(_PAGE_CONFIG))
        env = {**os.environ, "HOME": str(tmp / "home"), "JUPYTER_CONFIG_DIR": str(config),
               "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "IPYTHONDIR": str(tmp / "ipython"),
               "JUPYTER_PLATFORM_DIRS": "1", "PYTHONPATH": str(_ROOT)}
        (tmp / "home").mkdir()
        port = _free_port()
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
            f"--port={port}", "--ServerApp.port_retries=0", "--ServerApp.token=",
            "--ServerApp.password=", "--ServerApp.open_browser=False",
            f"--ServerApp.root_dir={folder}", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
            f"--LabApp.user_settings_dir={tmp / 'settings'}",
        ] + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])
        log_path = tmp / "server.log"
        server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, encoding="utf-8", errors="replace", start_new_session=True)
        ready = threading.Event()  # set when the server says it serves, or when it exits
        copier = threading.Thread(target=_copy_log, args=(server.stdout, log_path, ready), daemon=True)
        copier.start()
        base = f"http://127.0.0.1:{port}/"
        try:
            if not ready.wait(timeout) or _READY_LINE not in log_path.read_text():
                raise RuntimeError(f"JupyterLab did not start within {timeout:.0f} s:\n"
                                   + log_path.read_text())
            _until_it_answers(server, base + "api/status", timeout, log_path)
            yield base, folder
        finally:
            server.terminate()  # the server shuts its kernels down on SIGTERM
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
                server.wait()
            copier.join(timeout=15)


@contextlib.contextmanager
def _lab_page(base_url: str, notebook: str, viewport=(1400, 1000), browser=None):
    """Chromium showing ``notebook`` in JupyterLab; every request off the server is aborted.

    ``browser``: a Playwright browser to open the page in (a test session's own); without it,
    one is launched and closed here. The page gets ``external_requests`` (aborted URLs) and
    ``console_errors``.
    """
    with contextlib.ExitStack() as stack:
        if browser is None:
            from playwright.sync_api import sync_playwright

            p = stack.enter_context(sync_playwright())
            browser = p.chromium.launch(executable_path=_CHROMIUM, args=_CHROMIUM_ARGS)
            stack.callback(browser.close)
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        stack.callback(context.close)
        context.set_default_timeout(_PATIENCE_MS)  # clicks and goto wait for states, up to this
        page = context.new_page()
        page.external_requests, page.console_errors = [], []

        def route(r):
            if r.request.url.startswith(base_url) or r.request.url.startswith("ws://127.0.0.1"):
                r.continue_()
            else:
                page.external_requests.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
        page.goto(f"{base_url}lab/tree/{notebook}", wait_until="load")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for()
        yield page


def _kernel_idle(page, timeout_ms: float = _PATIENCE_MS) -> None:
    """Wait until the notebook's kernel has started and is idle (status bar: "... | Idle")."""
    page.wait_for_function(
        r"""() => [...document.querySelectorAll("#jp-main-statusbar span")].some(
               (s) => /\| Idle$/.test(s.textContent.trim()))""", timeout=timeout_ms)


def _menu(page, menu_name: str, item: str) -> None:
    """Click ``item`` of the menu bar's ``menu_name`` menu."""
    page.locator(".lm-MenuBar-itemLabel", has_text=menu_name).first.click()
    page.locator(".lm-Menu-item:visible .lm-Menu-itemLabel").filter(has_text=item).first.click()


def _run_all(page, timeout_ms: float = 2 * _PATIENCE_MS) -> None:
    """Clear the outputs, run all cells (Run menu) and wait until every code cell has run."""
    _kernel_idle(page)
    _menu(page, "Edit", "Clear Outputs of All Cells")
    _menu(page, "Run", "Run All Cells")
    page.wait_for_function(
        r"""() => {
          const prompts = [...document.querySelectorAll(".jp-CodeCell .jp-InputArea-prompt")];
          return prompts.length > 0 && prompts.every((p) => /\[\d+\]/.test(p.textContent));
        }""", timeout=timeout_ms)
    _kernel_idle(page, timeout_ms)


def _bad_outputs(page) -> list[str]:
    """Text of every error, stderr or warning output in the notebook."""
    return page.evaluate(
        """(mime) => [...document.querySelectorAll(
              `.jp-OutputArea-output[data-mime-type="${mime}"], .jp-RenderedText[data-mime-type="${mime}"]`)]
            .map((e) => e.textContent.slice(0, 500))""", _STDERR_MIME)


_EXPLORER_JS = """
() => {
  const boxes = [...document.querySelectorAll(".widget-vbox")].filter(
    (b) => b.querySelector(".js-plotly-plot") && b.querySelector(".widget-slider"));
  return boxes.length;
}
"""

# The state of explorer number ``i``: slider labels and values, the z of each example's
# heatmap (H heads side by side, None between them) and the head names drawn above each example.
_STATE_JS = """
(i) => {
  const box = [...document.querySelectorAll(".widget-vbox")].filter(
    (b) => b.querySelector(".js-plotly-plot") && b.querySelector(".widget-slider"))[i];
  const gd = box.querySelector(".js-plotly-plot");
  const tops = Object.keys(gd.layout).filter((k) => k.startsWith("xaxis") && gd.layout[k].side === "top");
  return {
    sliders: [...box.querySelectorAll(".widget-slider")].map((s) => ({
      label: s.querySelector(".widget-label").textContent,
      value: s.querySelector(".widget-readout").textContent.trim()})),
    z: gd.data.filter((t) => t.type === "heatmap").map((t) => t.z),
    heads: tops.map((k) => [...gd.querySelectorAll(`.xtick text, .x${k.slice(5)}tick text`)]
      .filter((e) => e.textContent.startsWith("head")).length),
    headNames: [...gd.querySelectorAll("text")].filter((e) => /^head [0-9]+$/.test(e.textContent))
      .map((e) => e.textContent),
  };
}
"""


def _explorer_count(page) -> int:
    return page.evaluate(_EXPLORER_JS)


def _explorer_state(page, index: int = 0) -> dict:
    return page.evaluate(_STATE_JS, index)


def _await_explorer(page, sliders: dict[str, str], head_names: list[str], index: int = 0,
                    timeout_ms: float = _PATIENCE_MS) -> dict:
    """Wait until explorer ``index`` is drawn with these slider readouts (label -> text) and
    head names (after Run All its widgets render after the kernel is idle; after a move the
    figure redraws after the slider); return its state (:data:`_STATE_JS`)."""
    page.wait_for_function(
        f"""([i, sliders, names]) => {{
          let state;
          try {{ state = ({_STATE_JS})(i); }} catch (e) {{ return false; }}  // not drawn yet
          const values = Object.fromEntries(state.sliders.map((s) => [s.label, s.value]));
          return Object.entries(sliders).every(([label, value]) => values[label] === value)
            && JSON.stringify(state.headNames) === JSON.stringify(names);
        }}""", arg=[index, sliders, head_names], timeout=timeout_ms)
    return _explorer_state(page, index)


_BLANK_JS = """
(i) => {
  const box = [...document.querySelectorAll(".widget-vbox")].filter(
    (b) => b.querySelector(".js-plotly-plot") && b.querySelector(".widget-slider"))[i];
  const gd = box && box.querySelector(".js-plotly-plot");
  return gd && gd._fullLayout ? gd.data.length === 0 : null;  // null: not drawn yet
}
"""


def _redraw_if_blank(page, index: int = 0, timeout_ms: float = _PATIENCE_MS) -> bool:
    """Run explorer ``index``'s cell once more if its figure was drawn without data; True if so.

    plotly's ``FigureWidget`` opens its comm with empty data and sends the data just after; a
    view that JupyterLab renders between the two draws an empty figure and never redraws it
    (plotly 7.1's widget view listens only to edits). A reader sees a blank figure and reruns
    the cell, as this does (four of nine Run Alls on one machine, one morning; none since).
    """
    page.wait_for_function(f"(i) => ({_BLANK_JS})(i) !== null", arg=index, timeout=timeout_ms)
    if not page.evaluate(_BLANK_JS, index):
        return False
    k = page.evaluate("""(i) => {
      const cells = [...document.querySelectorAll(".jp-CodeCell")];
      return cells.filter((c) => c.querySelector(".widget-vbox .js-plotly-plot")
        && c.querySelector(".widget-vbox .widget-slider")).map((c) => cells.indexOf(c))[i];
    }""", index)
    prompt = page.locator(".jp-CodeCell").nth(k).locator(".jp-InputArea-prompt")
    before = prompt.text_content()
    prompt.click()  # select the cell (command mode)
    page.keyboard.press("Control+Enter")  # run it in place
    prompt.filter(has_not_text=before).wait_for(timeout=timeout_ms)  # a new execution count
    _kernel_idle(page, timeout_ms)
    return True


def _slider(page, label: str, index: int = 0):
    """The ``.widget-slider`` of explorer ``index`` whose label starts with ``label``."""
    box = page.locator(".widget-vbox:has(.js-plotly-plot):has(.widget-slider)").nth(index)
    return box.locator(".widget-slider", has=page.locator(".widget-label", has_text=label)).first


# Records, for each key press or mouse press, the time to the first animation frame after the
# next plotly redraw of the explorer's figure.
_TIMER_JS = """
(i) => {
  const box = [...document.querySelectorAll(".widget-vbox")].filter(
    (b) => b.querySelector(".js-plotly-plot") && b.querySelector(".widget-slider"))[i];
  const gd = box.querySelector(".js-plotly-plot");
  window.__mhaRedraws = window.__mhaRedraws || [];
  if (box.__mhaTimed) return;  // one timer per explorer
  box.__mhaTimed = true;
  let start = null;
  const arm = () => { start = performance.now(); };
  box.addEventListener("keydown", arm, true);
  box.addEventListener("mousedown", arm, true);
  gd.on("plotly_afterplot", () => {
    if (start === null) return;
    const t0 = start;
    start = null;
    requestAnimationFrame(() => window.__mhaRedraws.push(performance.now() - t0));
  });
}
"""


def _install_redraw_timer(page, index: int = 0) -> None:
    page.evaluate(_TIMER_JS, index)


def _redraw_count(page) -> int:
    return page.evaluate("() => window.__mhaRedraws.length")


def _press(page, label: str, key: str, index: int = 0, timeout_ms: float = _PATIENCE_MS) -> None:
    """Press ``key`` on a slider's handle and wait for the figure's next redraw."""
    before = _redraw_count(page)
    _slider(page, label, index).locator(".noUi-handle").press(key)
    page.wait_for_function(f"() => window.__mhaRedraws.length > {before}", timeout=timeout_ms)


def _click_at(page, label: str, fraction: float, index: int = 0,
              timeout_ms: float = _PATIENCE_MS) -> None:
    """Click a slider's track at ``fraction`` (0 = left end, 1 = right end); wait for a redraw."""
    before = _redraw_count(page)
    box = _slider(page, label, index).locator(".noUi-base").bounding_box()
    x = box["x"] + min(max(fraction, 0.01), 0.99) * box["width"]  # inside the track
    page.mouse.click(x, box["y"] + box["height"] / 2)
    page.wait_for_function(f"() => window.__mhaRedraws.length > {before}", timeout=timeout_ms)


def _at_end(page, label: str, key: str, index: int = 0) -> bool:
    """Whether the slider's handle sits at the end ``key`` moves it towards (its aria values)."""
    handle = _slider(page, label, index).locator(".noUi-handle")
    end = handle.get_attribute("aria-valuemax" if key == "ArrowRight" else "aria-valuemin")
    return float(handle.get_attribute("aria-valuenow")) == float(end)


def _time_controls(page, moves: int = 10, index: int = 0) -> dict[str, list[float]]:
    """Redraw times (ms) of ``moves`` key presses on every slider of explorer ``index``."""
    _install_redraw_timer(page, index)
    labels = [s["label"] for s in _explorer_state(page, index)["sliders"]]
    results = {}
    for label in labels:
        if _slider(page, label, index).locator(".noUi-target[disabled]").count():
            continue  # a fixed head count
        start = len(page.evaluate("() => window.__mhaRedraws"))
        for i in range(moves):
            key = "ArrowLeft" if (i // 3) % 2 else "ArrowRight"  # back and forth, 3 steps each
            if _at_end(page, label, key, index):  # there the key changes nothing: turn around
                key = "ArrowLeft" if key == "ArrowRight" else "ArrowRight"
            _press(page, label, key, index)
        results[label] = page.evaluate("() => window.__mhaRedraws")[start:]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path,
                        default=_ROOT / "chapters" / "04_exploring_heads.ipynb")
    parser.add_argument("--moves", type=int, default=10)
    args = parser.parse_args(argv)
    if args.moves < 1:
        parser.error(f"--moves: expected an integer >= 1, got {args.moves}")
    if not args.notebook.is_file():
        parser.error(f"--notebook: expected a notebook file, got {args.notebook}")
    with _lab_server([args.notebook]) as (base, _), _lab_page(base, args.notebook.name) as page:
        started = time.perf_counter()
        _run_all(page)
        print(f"Run All: {time.perf_counter() - started:.1f} s")
        for label, times in _time_controls(page, args.moves).items():
            print(f"{label:28s} median {statistics.median(times):6.1f} ms, "
                  f"max {max(times):6.1f} ms over {len(times)} moves (goal <= 150 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
