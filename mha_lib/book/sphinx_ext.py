"""Sphinx extension that keeps the website offline and its console clean.

* serves plotly.js from ``_static`` (copied from the plotly wheel, so its version always matches
  the Python package) and loads it, as a blocking script before any other, only on pages that
  draw a plotly figure;
* keeps live ipywidgets off the website: a notebook executed during the build stores its
  widgets' state (megabytes of JavaScript for a plotly ``FigureWidget``), and myst-nb would
  embed it in the page and load the widget manager from a CDN. Without a kernel those widgets
  could not react anyway; the chapters offer kernel-free explorers instead;
* removes sphinx-thebe's scripts: the book has no live-code launch button, and Jupyter Book
  1.0.4 registers thebe's configuration script twice, which logs
  ``Identifier 'THEBE_JS_URL' has already been declared`` on every page.
"""

from __future__ import annotations

import shutil
from pathlib import Path

PLOTLY_JS = "plotly.min.js"


def plotly_js_source() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / PLOTLY_JS


def _drop_thebe(app) -> None:
    import sphinx_thebe

    for event in ("env-before-read-docs", "doctree-resolved"):
        listeners = app.events.listeners.get(event, [])
        app.events.listeners[event] = [
            listener for listener in listeners
            if getattr(listener.handler, "__module__", "") != sphinx_thebe.__name__
        ]


def _drop_widget_state(app, doctree) -> None:
    js_files = getattr(app.env, "nb_metadata", {}).get(app.env.docname, {}).get("js_files", {})
    for key in [k for k in js_files if k.startswith("ipywidgets")]:
        del js_files[key]


def _add_plotly_js(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body", "")
    if "plotly-graph-div" in body:
        app.add_js_file(PLOTLY_JS, priority=1)


def _copy_plotly_js(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plotly_js_source(), static / PLOTLY_JS)


def setup(app):
    app.connect("builder-inited", _drop_thebe)
    app.connect("doctree-read", _drop_widget_state)
    app.connect("html-page-context", _add_plotly_js)
    app.connect("build-finished", _copy_plotly_js)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
