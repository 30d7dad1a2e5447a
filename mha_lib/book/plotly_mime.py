"""A myst-nb MIME renderer: plotly figures on the website without a CDN.

In a kernel, plotly's default renderer emits only ``application/vnd.plotly.v1+json``, a type
myst-nb does not know. This plugin (registered in ``pyproject.toml`` under the entry-point
group ``myst_nb.mime_renderers``) turns that JSON into a ``<div>`` and a call to
``mhaPlot`` (``_static/mha-figures.js``), which draws it with ``Plotly.newPlot``. plotly.js
itself is served once from ``_static`` (see :mod:`mha_lib.book.sphinx_ext`), never embedded
and never fetched from a CDN.

Every figure div is an image for assistive technology: ``role="img"`` and an ``aria-label``
from :func:`figure_description` (``layout.meta.description`` when the figure code set one,
else its title). On a narrow screen ``mhaPlot`` applies ``layout.meta.narrow`` (layout
overrides the figure code computed for a phone) or general rules (smaller margins and fonts,
legend below); see :func:`mha_lib.viz.heatmaps.layout_overrides`. In the theme's dark mode
``mha-figures.js`` draws every figure with dark colours derived from the light ones (figure
code describes the light figure only) and redraws it when the reader switches the theme.

Every figure made in Python carries its template (plotly's default: about 6 kB of JSON), the
same on every figure. :func:`share_templates` (run on the built pages by
:mod:`mha_lib.book.sphinx_ext`) writes each template once per page, in a script before the
first figure that uses it, and leaves its key in the figures' layouts; ``mhaPlot`` puts the
template back before drawing.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from typing import ClassVar

from docutils import nodes

__all__ = ["PLOTLY_MIME", "PlotlyMimeRenderer", "figure_html", "share_templates"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
CONFIG = {"responsive": True, "displaylogo": False, "displayModeBar": False}


def _plain(text: str) -> str:
    """Title text without plotly's HTML tags (``<br>``, ``<b>``...)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)).strip()


def figure_description(figure: dict) -> str:
    """The text alternative of a figure: ``layout.meta.description``, else its title."""
    layout = figure.get("layout") or {}
    meta = layout.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("description"), str):
        return meta["description"]
    title = layout.get("title")
    text = title.get("text") if isinstance(title, dict) else title
    if isinstance(text, str) and text.strip():
        kinds = sorted({t.get("type", "scatter") for t in figure.get("data", [])})
        return f"Figure: {_plain(text)} ({', '.join(kinds)} chart)."
    return "Figure (no description given)."


def _rounded(value, digits: int = 6):
    """``value`` with its floats to ``digits`` significant digits (a figure's numbers as the
    page needs them: 17 digits of a float64 draw the same picture and weigh three times as much)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if value == value and abs(value) != float("inf") else value
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    return value


def figure_html(figure: dict) -> str:
    """HTML for a plotly figure dict: a div with a deterministic id and an ``mhaPlot`` script."""
    payload = json.dumps(figure, sort_keys=True, separators=(",", ":"))
    div_id = "plotly-" + hashlib.sha1(payload.encode()).hexdigest()[:12]
    data = json.dumps(_rounded(figure.get("data", [])), separators=(",", ":"))
    layout = json.dumps(_rounded(figure.get("layout", {})), separators=(",", ":"))
    config = json.dumps({**CONFIG, **figure.get("config", {})})
    script = f'mhaPlot("{div_id}", {data}, {layout}, {config});'.replace("</", "<\\/")
    label = html.escape(figure_description(figure), quote=True)
    height = figure.get("layout", {}).get("height")
    style = f' style="height:{int(height)}px"' if height else ""
    return (
        f'<div id="{div_id}" class="plotly-graph-div mha-figure" role="img" '
        f'aria-label="{label}"{style}></div>\n'
        f'<script type="text/javascript">{script}</script>'
    )


_FIGURE_SCRIPT = re.compile(r'<script type="text/javascript">mhaPlot\("(plotly-[0-9a-f]+)", ')
_TEMPLATE_KEY = "mha-template-"


def share_templates(page: str) -> str:
    """A built page with each plotly template written once (see the module's docstring).

    A figure's layout keeps the key of its template (``"template": "mha-template-<hash>"``);
    the template is defined, ``mhaTemplates[key] = {...}``, in a script right before the first
    figure that uses it. A page already shared is returned as it is.
    """
    decoder = json.JSONDecoder()
    out, done, defined = [], 0, set()
    for match in _FIGURE_SCRIPT.finditer(page):
        start = match.end()
        _, data_end = decoder.raw_decode(page, start)
        if not page.startswith(", ", data_end):
            continue
        layout, layout_end = decoder.raw_decode(page, data_end + 2)
        template = layout.get("template") if isinstance(layout, dict) else None
        if not isinstance(template, dict):
            continue
        text = json.dumps(template, separators=(",", ":")).replace("</", "<\\/")
        key = _TEMPLATE_KEY + hashlib.sha1(text.encode()).hexdigest()[:12]
        out.append(page[done:match.start()])
        if key not in defined:
            defined.add(key)
            out.append(f'<script type="text/javascript">(window.mhaTemplates = window.mhaTemplates '
                       f'|| {{}})["{key}"] = {text};</script>\n')
        shared = json.dumps({**layout, "template": key}, separators=(",", ":")).replace("</", "<\\/")
        out.append(page[match.start():data_end + 2] + shared)
        done = layout_end
    return "".join(out) + page[done:]


class PlotlyMimeRenderer:
    """myst-nb plugin: prefer the plotly JSON over any other output of the same cell."""

    mime_priority_overrides: ClassVar = [
        ("html", PLOTLY_MIME, 1),
        ("dirhtml", PLOTLY_MIME, 1),
        ("singlehtml", PLOTLY_MIME, 1),
    ]

    @staticmethod
    def handle_mime(renderer, data, inline):
        if data.mime_type != PLOTLY_MIME:
            return None
        figure = data.content if isinstance(data.content, dict) else json.loads(data.content)
        return [nodes.raw(text=figure_html(figure), format="html", classes=["output", "plotly"])]
