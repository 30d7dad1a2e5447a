"""A myst-nb MIME renderer: plotly figures on the website without a CDN.

In a kernel, plotly's default renderer emits only ``application/vnd.plotly.v1+json``, a type
myst-nb does not know. This plugin (registered in ``pyproject.toml`` under the entry-point
group ``myst_nb.mime_renderers``) turns that JSON into a ``<div>`` and a ``Plotly.newPlot``
call. plotly.js itself is served once from ``_static`` (see ``_config.yml``), never embedded
and never fetched from a CDN.
"""

from __future__ import annotations

import hashlib
import json
from typing import ClassVar

from docutils import nodes

PLOTLY_MIME = "application/vnd.plotly.v1+json"


def figure_html(figure: dict) -> str:
    """HTML for a plotly figure dict: a div with a deterministic id and a newPlot script."""
    payload = json.dumps(figure, sort_keys=True, separators=(",", ":"))
    div_id = "plotly-" + hashlib.sha1(payload.encode()).hexdigest()[:12]
    data = json.dumps(figure.get("data", []), separators=(",", ":"))
    layout = json.dumps(figure.get("layout", {}), separators=(",", ":"))
    config = json.dumps({"responsive": True, "displaylogo": False, **figure.get("config", {})})
    script = (
        f'Plotly.newPlot("{div_id}", {data}, {layout}, {config});'.replace("</", "<\\/")
    )
    height = figure.get("layout", {}).get("height")
    style = f' style="height:{int(height)}px"' if height else ""
    return (
        f'<div id="{div_id}" class="plotly-graph-div mha-figure"{style}></div>\n'
        f'<script type="text/javascript">{script}</script>'
    )


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
