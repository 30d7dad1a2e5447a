"""Type a sentence, watch the story language model's heads read it: the explorers of chapter 12.

* :func:`explore_text`: live in Jupyter (ipywidgets and a plotly ``FigureWidget``; needs a
  kernel). Every change of its text box runs :class:`mha_lib.lm.StoryLM` again.
* :func:`text_explorer_html`: the same on the website, without a kernel. The fragment holds the
  model as :func:`mha_lib.lm_export.export` writes it, and ``_static/mha-lm.js`` runs its forward
  pass in the browser (the book's Sphinx extension loads that script on the page, and moves the
  model into a file of its own that the page loads when the reader reaches the explorer).

Both read a text the same way (:func:`_read`): its first ``_MAX_TOKENS`` tokens, every
layer's and head's attention weights (``StoryLM(..., need_weights=True)``), and the model's
greedy continuation (:meth:`~mha_lib.lm.StoryLM.generate`: at most
``_CONTINUATION_TOKENS`` tokens, up to the first "."). The figure shows the heads of one
layer at a time, one heatmap each: keys on x, queries on y, the tokens as tick labels, and
grey where a query cannot look (later keys). Its data holds every layer: N*H heatmap traces,
trace ``n*H + h`` for head ``h`` of layer ``n`` with ``meta={"layer": n, "head": h}``, those of
the other layers hidden. Words the tokenizer does not know (read as ``<unk>``) are marked,
with known words to try instead.

A hybrid (:func:`mha_lib.why.linear_runs.load_hybrid`: a :class:`~mha_lib.linear.GatedDeltaNet`
in place of attention in some blocks) reads the same way; its layers with a state have no
attention weights (NaN in ``weights``, :func:`mha_lib.linear.nan_weights_without_softmax`), so
both explorers offer its softmax layers only, and say so.

Shape legend
    N   number of layers
    H   heads per layer
    L   number of tokens read
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from typing import Sequence

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import torch

from mha_lib import lm
from mha_lib._modes import eval_mode
from mha_lib.linear import GatedDeltaNet, nan_weights_without_softmax
from mha_lib.lm_export import export
from mha_lib.stories import Tokenizer
from mha_lib.viz.heatmaps import MASKED_COLOR, colour_stops

__all__ = [
    "explore_text",
    "text_explorer_html",
]

_MAX_TOKENS = 128
"""The explorers read at most this many tokens of a text (the stories are shorter)."""
_CONTINUATION_TOKENS = 12
"""The continuation has at most this many tokens; it stops after the first "."."""
_STOP = "."
_DEFAULT_TEXT = "Mia and Leo go to the park. Mia has a red kite. Later, Leo helps Mia because"
"""The text the explorers start with."""
_EXAMPLES = (
    ("a pronoun", "Zoe and Leo go to the park. Later, Zoe helps Leo because"),
    ("a colour to recall", "Leo has a red kite. Zoe has a ball. Later, Leo's kite is"),
    ("whose thing", "Ivy and Omar walk to the beach. Omar brings a drum. Ivy has a cup. Then, Omar shows Ivy his"),
    ("a story", "One day, Carl and Finn walk to the pond. Carl brings a red ball. Finn brings a chair. "
                "Then, Finn shows Carl his chair. In the end, Carl's ball is"),
    ("unknown words", "Mia eats a pizza because she"),
)
"""(label, text) of the example buttons."""

_ROOT_ID = "mha-lm"
_INPUT_ID = "lm-input"
_MODEL_ID = "mha-lm-model"
_FIGURE_ID = "mha-lm-figure"
_WIDTH_PX = 900  # the width the live figure is laid out for (JupyterLab's notebook column)
_CHAR_PX = 6.6  # width of one character of an 11 px tick label
_MAX_HINT_ROWS = 3  # unknown tokens offered replacements (a row of buttons each on the page)
_TICK_PX = 13  # room for one tick label across its axis (a panel shows every label when it can)


@dataclass(frozen=True)
class _Reading:
    """What the model makes of a text.

    Attributes:
        tokens: the tokens read (the first ``_MAX_TOKENS`` of ``tokenizer.tokenize(text)``).
        ids: their ids (``unk_id`` for unknown words).
        truncated: the text had more tokens than were read.
        weights: (N, H, L, L) float64 attention weights, 0 at later keys.
        continuation: the greedy continuation's ids.
        continuation_text: what the continuation adds to the text
            (``decode(ids + continuation)`` minus ``decode(ids)``).
        unknown: ``(token, position of its first use, up to 3 known words to try instead)``;
            only the first ``_MAX_HINT_ROWS`` unknown tokens get words to try.
    """

    tokens: list[str]
    ids: list[int]
    truncated: bool
    weights: np.ndarray
    continuation: list[int]
    continuation_text: str
    unknown: list[tuple[str, int, list[str]]]


def _check_pair(model: object, tokenizer: object) -> tuple[lm.StoryLM, Tokenizer]:
    """The model and tokenizer to use: the shipped ones when both are None."""
    if model is None and tokenizer is None:
        return lm.load_pretrained()
    if not isinstance(model, lm.StoryLM):
        raise ValueError(f"model must be a mha_lib.lm.StoryLM (or None with tokenizer None), got {type(model).__name__}")
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ValueError("model must hold real weights, got a StoryLM on the meta device")
    if not isinstance(tokenizer, Tokenizer) or tokenizer.vocab_size != model.config.vocab_size:
        got = f"vocab_size {tokenizer.vocab_size}" if isinstance(tokenizer, Tokenizer) else type(tokenizer).__name__
        raise ValueError(f"tokenizer must be the model's Tokenizer (vocab_size {model.config.vocab_size}), got {got}")
    return model, tokenizer


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return text


def _kinds(model: lm.StoryLM) -> list[str]:
    """Each layer's attention, lowest first: "softmax" or "gated_deltanet" (what the page runs)."""
    kinds = []
    for n, block in enumerate(model.blocks):
        if isinstance(block.attention, GatedDeltaNet):
            kinds.append("gated_deltanet")
        elif hasattr(block.attention, "num_kv_heads"):
            kinds.append("softmax")
        else:
            raise ValueError(f"model must have softmax or Gated DeltaNet layers (what the explorers run), got "
                             f"{type(block.attention).__name__} in layer {n}")
    return kinds


def _check_layer(layer: object, model: lm.StoryLM) -> int:
    """``layer`` if it is one of the model's softmax layers (None: the first of them)."""
    softmax = [n for n, kind in enumerate(_kinds(model)) if kind == "softmax"]
    if layer is None and softmax:
        return softmax[0]
    if isinstance(layer, bool) or not isinstance(layer, int) or layer not in softmax:
        raise ValueError(f"layer must be one of the model's softmax layers {softmax} (the others have no "
                         f"attention weights), got {layer!r}")
    return layer


def _no_weights_note(model: lm.StoryLM) -> str:
    """What the explorers say of a hybrid's layers with a state ("" for a softmax model)."""
    state = [n for n, kind in enumerate(_kinds(model)) if kind != "softmax"]
    if not state:
        return ""
    which = ", ".join(str(n) for n in state)
    return (f"Layer{'s' * (len(state) > 1)} {which} {'are' if len(state) > 1 else 'is a'} Gated DeltaNet "
            f"layer{'s' * (len(state) > 1)}: a state of d x d numbers per head in place of attention, with "
            "no attention weights to draw. The heads shown are the softmax layer's, reading what the "
            "state wrote below them.")


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _is_word(token: str) -> bool:
    """A word begins with a letter of any script (str.isalpha: Unicode's L), as the page's isWord."""
    return token[:1].isalpha()


def _suggestions(tokenizer: Tokenizer, token: str, position: int, logits: np.ndarray) -> list[str]:
    """Up to 3 known tokens to try instead of the unknown ``token`` (``_static/mha-lm.js`` does
    the same). For a word: the closest known spelling (if it is close), then the words the model
    expects at ``position`` (``logits`` (L, V): row i scores token i+1), then more spellings.
    For a number or a sign: the punctuation the model knows, the most expected first."""
    vocab, word = tokenizer.vocab, _is_word(token)
    candidates = [i for i, t in enumerate(vocab) if i not in (tokenizer.pad_id, tokenizer.unk_id)
                  and t != "'s" and _is_word(t) == word]
    expected = [vocab[i] for i in sorted(candidates, key=lambda i: -logits[position - 1, i])] \
        if position > 0 else []  # a stable sort, as the page's
    if not word:
        return (expected or [vocab[i] for i in candidates])[:3]
    close = [t for _, t in sorted((_edit_distance(token, vocab[i]), vocab[i]) for i in candidates)]
    out = [close[0]] if _edit_distance(token, close[0]) <= max(1, len(token) // 3) else []
    for t in expected + close:
        if len(out) == 3:
            break
        if t not in out:
            out.append(t)
    return out


@torch.no_grad()
def _read(model: lm.StoryLM, tokenizer: Tokenizer, text: str) -> _Reading:
    """Read ``text`` with the model: tokens, weights, continuation, unknown words."""
    tokens = tokenizer.tokenize(text)
    truncated = len(tokens) > _MAX_TOKENS
    tokens = tokens[:_MAX_TOKENS]
    ids = tokenizer.encode(text)[:_MAX_TOKENS]
    N, H = model.config.num_layers, model.config.num_heads
    if not ids:
        return _Reading([], [], False, np.zeros((N, H, 0, 0)), [], "", [])
    with eval_mode(model), nan_weights_without_softmax(model):
        device = next(model.parameters()).device
        logits, weights = model(torch.tensor([ids], device=device), need_weights=True)  # (1, L, V), (1, N, H, L, L)
    # (generate's KV cache has no room for a state: a hybrid decodes without it, to the same tokens)
    new = model.generate([ids], _CONTINUATION_TOKENS, use_cache=set(_kinds(model)) == {"softmax"})[0]
    stop = tokenizer.vocab.index(_STOP)
    if stop in new:
        new = new[: new.index(stop) + 1]
    head = tokenizer.decode(ids)
    logits = logits[0].double().cpu().numpy()  # (L, V)
    unknown, seen = [], set()
    for i, (token, token_id) in enumerate(zip(tokens, ids)):
        if token_id == tokenizer.unk_id and token not in seen:
            seen.add(token)
            few = len(unknown) < _MAX_HINT_ROWS  # suggestions for the first few only
            unknown.append((token, i, _suggestions(tokenizer, token, i, logits) if few else []))
    return _Reading(tokens, ids, truncated, weights[0].double().cpu().numpy(), new,
                    tokenizer.decode(ids + new)[len(head):], unknown)


# --- the figure (the page's script lays it out the same way, for the page's width) -------------

def _grid(tokens: Sequence[str], H: int, width: int) -> dict:
    """Columns, panel size (px), tick step and the figure's height for the H panels of a layer."""
    L = len(tokens)
    longest = max([1] + [min(len(t), 14) for t in tokens])
    margin = {"l": round(longest * _CHAR_PX) + 44, "r": 86, "t": 12, "b": 8}
    plot_w, gap = max(120, width - margin["l"] - margin["r"]), 18
    cols = max(1, min(H, math.floor((plot_w + gap) / (max(150, _TICK_PX * L) + gap))))
    if cols == 3 and H == 4:
        cols = 2  # 2 x 2 rather than 3 + 1
    panel = (plot_w - gap * (cols - 1)) / cols
    step = max(1, math.ceil(L * _TICK_PX / panel))
    turned = (L / step) * (longest * _CHAR_PX + 6) > panel
    row_px = 22 + panel + (longest * _CHAR_PX + 10 if turned else 18) + 22
    rows = math.ceil(H / cols)
    return {"cols": cols, "panel": panel, "gap": gap, "plot_w": plot_w, "step": step,
            "turned": turned, "row_px": row_px, "margin": margin,
            "height": round(margin["t"] + rows * row_px + margin["b"])}


def _figure(reading: _Reading, layer: int, num_layers: int, num_heads: int) -> tuple[list, dict]:
    """The N*H heatmap traces (layer ``layer`` visible) and the layout of its H panels."""
    tokens, L, H = reading.tokens, len(reading.tokens), num_heads
    grid = _grid(tokens, H, _WIDTH_PX)
    plot_h = grid["height"] - grid["margin"]["t"] - grid["margin"]["b"]
    unknown = {u[0] for u in reading.unknown}
    mark = [t + (" (unknown)" if t in unknown else "") for t in tokens]
    hover = [[f"query {i}: {mark[i]}<br>key {j}: {mark[j]}" for j in range(L)] for i in range(L)]
    traces = []
    for n in range(num_layers):
        for h in range(H):
            w = reading.weights[n, h].tolist()  # (L, L); NaN in a layer without weights (Gated DeltaNet)
            z = [[w[i][j] if j <= i and w[i][j] == w[i][j] else None for j in range(L)] for i in range(L)]
            axis = "" if h == 0 else str(h + 1)
            traces.append({
                "type": "heatmap", "z": z, "x": list(range(L)), "y": list(range(L)),
                "xaxis": "x" + axis, "yaxis": "y" + axis, "coloraxis": "coloraxis",
                "meta": {"layer": n, "head": h}, "name": f"layer {n}, head {h}",
                "visible": n == layer, "hoverongaps": False, "text": hover,
                "hovertemplate": f"layer {n}, head {h}<br>%{{text}}<br>weight %{{z:.3f}}<extra></extra>",
            })
    ticks = list(range(0, L, grid["step"]))
    layout = {
        "height": grid["height"], "margin": grid["margin"], "showlegend": False,
        "plot_bgcolor": "rgba(0,0,0,0)", "font": {"size": 12}, "annotations": [], "shapes": [],
        "coloraxis": {"colorscale": "Viridis", "cmin": 0.0, "cmax": 1.0, "colorbar": {
            "title": {"text": "weight", "side": "right"}, "thickness": 14,
            "len": min(1.0, 320 / plot_h), "y": 1, "yanchor": "top", "x": 1.01, "xpad": 6}},
    }
    for h in range(H):
        col, row, axis = h % grid["cols"], h // grid["cols"], "" if h == 0 else str(h + 1)
        x0 = col * (grid["panel"] + grid["gap"]) / grid["plot_w"]
        x1 = min(1.0, x0 + grid["panel"] / grid["plot_w"])
        top = 1 - (row * grid["row_px"] + 22) / plot_h
        common = {"tickmode": "array", "tickvals": ticks, "ticktext": [tokens[i] for i in ticks],
                  "showgrid": False, "zeroline": False, "fixedrange": True, "ticks": "",
                  "tickfont": {"size": 11}}
        layout["xaxis" + axis] = {**common, "domain": [x0, x1], "anchor": "y" + axis,
                                  "range": [-0.5, L - 0.5], "tickangle": -90 if grid["turned"] else 0,
                                  "title": {"text": "key", "standoff": 4, "font": {"size": 12}}}
        layout["yaxis" + axis] = {**common, "domain": [max(0.0, top - grid["panel"] / plot_h), min(1.0, top)],
                                  "anchor": "x" + axis, "range": [L - 0.5, -0.5],
                                  "showticklabels": col == 0,
                                  "title": {"text": "query" if col == 0 else "", "standoff": 4,
                                            "font": {"size": 12}}}
        layout["shapes"].append({  # seen through the missing (None) weights of later keys
            "type": "rect", "xref": f"x{axis} domain", "yref": f"y{axis} domain", "x0": 0, "x1": 1,
            "y0": 0, "y1": 1, "layer": "below", "fillcolor": MASKED_COLOR, "line": {"width": 0}})
        layout["annotations"].append({
            "text": f"layer {layer}, head {h}", "xref": "paper", "yref": "paper",
            "x": (x0 + x1) / 2, "y": min(1.0, top), "xanchor": "center", "yanchor": "bottom",
            "showarrow": False, "font": {"size": 13}})
    return traces, layout


# --- the live explorer ------------------------------------------------------------------------------

_CHIP = "display:inline-block;padding:0 0.3em;margin:0 0.15em 0.2em 0;border-radius:3px;font-family:monospace;"


def _tokens_html(reading: _Reading) -> str:
    """The tokens as chips (unknown ones dashed), and the hint about unknown words."""
    if not reading.tokens:
        return "<p>Type a sentence: the model needs at least one word.</p>"
    unknown = {u[0] for u in reading.unknown}
    chips = " ".join(
        f'<span style="{_CHIP}border:{"2px dashed #b35900" if t in unknown else "1px solid #bbb"}"'
        f'{" title=&quot;not in the vocabulary: read as &lt;unk&gt;&quot;" if t in unknown else ""}>'
        f"{html.escape(t)}</span>" for t in reading.tokens)
    parts = [f"<p>The model reads {len(reading.tokens)} token{'s' * (len(reading.tokens) > 1)}: {chips}"
             + (f" (only the first {_MAX_TOKENS} are read)" if reading.truncated else "") + "</p>"]
    if reading.unknown:
        words = ", ".join(f"“{html.escape(u[0])}”" for u in reading.unknown)
        tries = "; ".join(f"“{html.escape(u[0])}” → {', '.join(u[2])}" for u in reading.unknown if u[2])
        parts.append(f"<p>The model does not know {words}: it reads "
                     f"{'it' if len(reading.unknown) == 1 else 'each'} as &lt;unk&gt;, a token it never "
                     f"saw in training. Try a word it knows: {tries}.</p>")
    return "".join(parts)


def _continuation_html(text: str, reading: _Reading) -> str:
    if not reading.tokens:
        return ""
    typed = text.rstrip()
    tail = "…" + typed[-70:] if len(typed) > 70 else typed
    return (f"<p>The model goes on (its most likely words): {html.escape(tail)}"
            f"<b>{html.escape(reading.continuation_text)}</b></p>")


class _TextExplorer(widgets.VBox):
    """The live explorer of :func:`explore_text` (an ipywidgets ``VBox``).

    Attributes:
        text: the ``Text`` box; every change reads the text again and redraws.
        layer: ``ToggleButtons`` choosing the layer whose heads are shown.
        examples: one ``Button`` per entry of ``_EXAMPLES`` (a click puts its text in the box).
        tokens: ``HTML``, the tokens read (unknown words dashed) and a hint about unknown words.
        continuation: ``HTML``, the model's greedy continuation.
        figure: the plotly ``FigureWidget``, updated in place: N*H heatmap traces, trace
            ``n*H + h`` with ``meta={"layer": n, "head": h}``; only the chosen layer's are visible.
        reading: the current reading of the text (tokens, weights, continuation, unknown words).
    """

    def __init__(self, model: lm.StoryLM, tokenizer: Tokenizer, text: str, layer: int) -> None:
        self.model, self.tokenizer = model, tokenizer
        N = model.config.num_layers
        self.text = widgets.Text(value=text, description="text", continuous_update=True,
                                 placeholder="Type a sentence", layout=widgets.Layout(width="100%"))
        self.layer = widgets.ToggleButtons(options=[(f"layer {n}", n) for n, kind in enumerate(_kinds(model))
                                                    if kind == "softmax"], value=layer, description="layer")
        self.examples = tuple(widgets.Button(description=label, tooltip=example)
                              for label, example in _EXAMPLES)
        for button, (_, example) in zip(self.examples, _EXAMPLES):
            button.on_click(lambda _, example=example: setattr(self.text, "value", example))
        self.tokens, self.continuation = widgets.HTML(), widgets.HTML()
        self.reading = _read(model, tokenizer, text)
        traces, layout = _figure(self.reading, layer, N, model.config.num_heads)
        self.figure = go.FigureWidget(data=traces, layout=layout)
        self._describe()
        self.text.observe(lambda _: self.update(), names="value")
        self.layer.observe(lambda _: self._redraw(), names="value")
        note = _no_weights_note(model)
        super().__init__([self.text, widgets.HBox([widgets.Label("examples"), *self.examples]),
                          self.tokens, self.continuation, self.layer,
                          *([widgets.HTML(f"<p>{html.escape(note)}</p>")] if note else []), self.figure])

    def _describe(self) -> None:
        self.tokens.value = _tokens_html(self.reading)
        self.continuation.value = _continuation_html(self.text.value, self.reading)

    def _redraw(self) -> None:
        traces, layout = _figure(self.reading, self.layer.value, self.model.config.num_layers,
                                 self.model.config.num_heads)
        with self.figure.batch_update():
            for trace, new in zip(self.figure.data, traces):
                trace.update({k: new[k] for k in ("z", "x", "y", "text", "visible", "hovertemplate")})
            self.figure.layout.update(layout)

    def update(self) -> None:
        """Read the text box again and redraw the figure in place."""
        self.reading = _read(self.model, self.tokenizer, self.text.value)
        self._redraw()
        self._describe()


def explore_text(model: lm.StoryLM | None = None, tokenizer: Tokenizer | None = None,
                 text: str = _DEFAULT_TEXT, *, layer: int | None = None) -> _TextExplorer:
    """Type a sentence and watch every head of the story language model read it (live, Jupyter).

    A text box (``.text``), example buttons, the tokens the model reads (words it does not
    know are marked and read as ``<unk>``), its greedy continuation, a choice of layer and a
    ``FigureWidget`` (``.figure``) with one heatmap per head of that layer: keys on x, queries
    on y, the tokens as tick labels, later keys grey. The figure's data holds every layer's
    weights (``meta={"layer": n, "head": h}`` on each heatmap); see the module docstring.

    Args:
        model: a :class:`mha_lib.lm.StoryLM`; with ``tokenizer`` None too, the shipped model
            (:func:`mha_lib.lm.load_pretrained`).
        tokenizer: the model's :class:`mha_lib.stories.Tokenizer`.
        text: the text in the box at the start.
        layer: the layer whose heads are shown at the start (a softmax layer; None: the first).

    Returns:
        The explorer (display it as the last expression of a cell); set ``.text.value`` to
        drive it from code.

    Raises:
        ValueError: a model that is not a StoryLM (or on the meta device), a tokenizer of
            another vocabulary size, only one of the two given, a text that is not a str, or a
            layer the model does not have.
    """
    model, tokenizer = _check_pair(model, tokenizer)
    return _TextExplorer(model, tokenizer, _check_text(text), _check_layer(layer, model))


# --- the website's explorer -----------------------------------------------------------------------

def text_explorer_html(model: lm.StoryLM | None = None, tokenizer: Tokenizer | None = None,
                       text: str = _DEFAULT_TEXT, *, layer: int | None = None) -> str:
    """HTML of the kernel-free explorer for the website: the model runs in the page.

    The fragment holds the controls (a form with ``<input id="lm-input">`` and the layer
    choice, which stays on screen while the reader scrolls through the figure; example
    buttons), an empty figure div, and the model as :func:`mha_lib.lm_export.export` writes it, in a
    ``<script type="application/json">``. ``_static/mha-lm.js`` (loaded by
    :mod:`mha_lib.book.sphinx_ext` on the page, after plotly.js) runs the forward pass and draws
    the figure as :func:`explore_text` does. On the website the build moves the model into
    ``_static/mha-lm-models/<key>.js`` (:func:`mha_lib.book.sphinx_ext.split_models`), which the
    page loads with a ``<script src>`` (nothing is fetched: it works from ``file://`` too) when
    the reader reaches the explorer or types into it.
    Without that script (in Jupyter) only a note pointing to :func:`explore_text` shows. Show
    it with ``IPython.display.HTML(...)``.

    Args:
        model, tokenizer, text, layer: as for :func:`explore_text`.

    Raises:
        ValueError: as :func:`explore_text`.
    """
    model, tokenizer = _check_pair(model, tokenizer)
    text, layer = _check_text(text), _check_layer(layer, model)
    exported = export(model, tokenizer)
    exported["config"]["layers"] = _kinds(model)  # the page's forward pass runs each layer's kind
    exported = json.dumps(exported, separators=(",", ":")).replace("</", "<\\/")
    settings = json.dumps({"max_tokens": _MAX_TOKENS, "continuation_tokens": _CONTINUATION_TOKENS,
                           "stop": _STOP, "colorscale": colour_stops()}, separators=(",", ":"))
    examples = "".join(
        f'<button type="button" class="mha-lm-example" data-text="{html.escape(example, quote=True)}">'
        f"{html.escape(label)}</button>" for label, example in _EXAMPLES)
    layers = "".join(
        f'<label><input type="radio" name="lm-layer" value="{n}"{" checked" if n == layer else ""}> '
        f"layer {n}</label>" for n, kind in enumerate(_kinds(model)) if kind == "softmax")
    note = _no_weights_note(model)
    return (
        f'<div class="mha-lm" id="{_ROOT_ID}" data-model="{_MODEL_ID}" '
        f'data-settings="{html.escape(settings, quote=True)}">'
        '<p class="mha-lm-fallback">This explorer runs the model in the web page, with the '
        "book's own scripts: on the website it works without a kernel. In Jupyter, run "
        "<code>explore_text()</code> instead.</p>"
        '<div class="mha-lm-live" hidden>'
        '<form class="mha-lm-form" autocomplete="off">'
        f'<label for="{_INPUT_ID}">Type a sentence for the model to read</label>'
        f'<div class="mha-lm-row"><input id="{_INPUT_ID}" type="text" value="{html.escape(text, quote=True)}" '
        'autocomplete="off" autocapitalize="off" spellcheck="false" aria-describedby="lm-tokens lm-hint">'
        '<button type="button" class="mha-lm-write-on">Write on</button></div>'
        f'<fieldset class="mha-lm-layers"><legend>Show the heads of</legend>{layers}</fieldset></form>'
        + (f'<p class="mha-lm-note">{html.escape(note)}</p>' if note else "") +
        '<p id="lm-tokens" class="mha-lm-tokens"></p>'
        '<div id="lm-hint" class="mha-lm-hint" aria-live="polite"></div>'
        '<p class="mha-lm-continuation" aria-live="polite"></p>'
        '<div class="mha-lm-row" role="group" aria-labelledby="lm-examples-label">'
        f'<span id="lm-examples-label">Examples:</span>{examples}</div>'
        f'<div id="{_FIGURE_ID}" class="plotly-graph-div mha-figure mha-lm-figure" role="img" '
        'aria-label="Attention weights of the story model"></div>'
        '<details><summary>The words the model knows</summary><p class="mha-lm-known"></p></details>'
        "</div>"
        f'<script type="application/json" id="{_MODEL_ID}">{exported}</script>'
        "</div>"
    )
