"""The mask lab on the website, without a kernel: compose a mask and a score modification with
native controls, and see the mask, a head's weights and the tiles, computed in the page.

Shape legend
    L   sequence length (self-attention: Lq = Lk = L), at most ``max_len``
    H   heads of the example layer, d its head size
    b   block size of tiled attention

The page cannot run the library, so ``_static/mha-masklab.js`` evaluates the same predicates,
tile rules and score modifications as :mod:`mha_lib.masks` and :mod:`mha_lib.scores` (the
browser tests compare it with :func:`_reference` here, case by case). What only the library
can make is exported into the page as JSON: the queries and keys of each head of a seeded
:class:`~mha_lib.multihead.MultiHeadAttention` on a random sequence, so the script does only
scores -> modification -> mask -> softmax, as :meth:`mha_lib.masking.Visible.softmax` does.

A *spec* (what the controls describe, the same dict in Python and in the page)::

    {"L": 12, "block": 4, "head": 0,
     "terms": [["sliding_window", 4], ["sinks", 2]], "ops": ["|"],
     "mod": "alibi", "cap": 5.0, "floor_scale": 4.0, "scale": 0.5, "panel": "weights"}

``terms`` are one to three kinds of mask with their sizes, joined by ``ops`` ("&" or "|", with
Python's precedence: ``&`` first); ``mod`` is one of :data:`_MODS`; ``panel``: the second
panel shows the "weights" or the "scores" after the modification (the bias or the cap seen).
"""

from __future__ import annotations

import html
import json

import torch

from mha_lib._checks import check_positive_int
from mha_lib.heads import split_heads
from mha_lib.masking import visible
from mha_lib.masks import Mask, causal, chunked, document, padding, prefix_lm, sinks, sliding_window
from mha_lib.multihead import MultiHeadAttention
from mha_lib.scores import ScoreMod, alibi, softcap, temperature
from mha_lib.viz.masks import lab_frame

__all__ = ["site_mask_lab_html"]

_DIV_ID = "mha-masklab"

#: The kinds of mask: label, the label of their size (None: no size), smallest size, default.
_KINDS = {
    "causal": ("causal", None, 0, 0),
    "sliding_window": ("sliding window", "window w", 1, 4),
    "chunked": ("chunked (Llama 4)", "chunk size c", 1, 4),
    "prefix_lm": ("prefix-LM", "prefix length p", 0, 5),
    "sinks": ("sinks", "sink keys n", 0, 2),
    "padding": ("padding (valid length)", "valid length v", 0, 8),
    "document": ("packed documents", "documents n", 1, 3),
}
#: The score modifications the lab offers.
_MODS = {"none": "none", "alibi": "ALiBi", "softcap": "soft-capping",
         "temperature": "temperature by position", "alibi>>softcap": "ALiBi >> soft-capping"}
_MAX_TERMS = 3


def _doc_ids(num_docs: int, L: int) -> torch.Tensor:
    """(1, L): ``num_docs`` documents of (nearly) equal length packed in one row."""
    return (torch.arange(L) * num_docs // L)[None]


def _kind_mask(kind: str, size: int, L: int) -> Mask:
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {list(_KINDS)}, got {kind!r}")
    return {"causal": lambda: causal(), "sliding_window": lambda: sliding_window(size),
            "chunked": lambda: chunked(size), "prefix_lm": lambda: prefix_lm(size),
            "sinks": lambda: sinks(size), "padding": lambda: padding([size]),
            "document": lambda: document(_doc_ids(size, L))}[kind]()


def _lab_mask(spec: dict) -> Mask:
    """The library's mask of a spec: ``&`` binds tighter than ``|``, as in Python."""
    terms, ops = spec["terms"], spec["ops"]
    if not 1 <= len(terms) <= _MAX_TERMS or len(ops) != len(terms) - 1 or set(ops) - {"&", "|"}:
        raise ValueError(f"spec must have 1 to {_MAX_TERMS} terms joined by '&' or '|', got "
                         f"terms {terms!r} and ops {ops!r}")
    masks = [_kind_mask(kind, size, spec["L"]) for kind, size in terms]
    groups = [masks[0]]  # the & chains, joined by | at the end
    for op, mask in zip(ops, masks[1:]):
        if op == "&":
            groups[-1] = groups[-1] & mask
        else:
            groups.append(mask)
    out = groups[0]
    for group in groups[1:]:
        out = out | group
    return out


def _lab_score_mod(spec: dict, num_heads: int) -> ScoreMod | None:
    mod = spec.get("mod", "none")
    if mod not in _MODS:
        raise ValueError(f"mod must be one of {list(_MODS)}, got {mod!r}")
    made = {"none": None, "alibi": alibi(num_heads), "softcap": softcap(spec.get("cap", 5.0)),
            "temperature": temperature(spec.get("floor_scale", 4.0), spec.get("scale", 0.5))}
    return made["alibi"] >> made["softcap"] if mod == "alibi>>softcap" else made[mod]


def _example(max_len: int, num_heads: int, head_dim: int, seed: int,
             decimals: int = 4) -> tuple[torch.Tensor, torch.Tensor, MultiHeadAttention, torch.Tensor]:
    """The queries and keys (H, max_len, d) of each head of a seeded layer on a random sequence,
    rounded to ``decimals`` (what the page holds), with the layer and its input (1, max_len, D)."""
    D = num_heads * head_dim
    torch.manual_seed(seed)
    mha = MultiHeadAttention(D, D, D, D, num_heads, 0.0).double().eval()
    x = torch.randn(1, max_len, D, dtype=torch.float64)
    with torch.no_grad():
        q, k = (split_heads(W(x), num_heads)[0] for W in (mha.W_q, mha.W_k))  # (1, H, L, d) -> (H, L, d)
    return q.round(decimals=decimals), k.round(decimals=decimals), mha, x


def _lab_data(max_len: int = 16, num_heads: int = 8, head_dim: int = 4, seed: int = 0) -> dict:
    """What the page holds: the example's queries and keys, the controls' choices, the layouts."""
    q, k, _, _ = _example(max_len, num_heads, head_dim, seed)
    return {
        "max_len": max_len, "num_heads": num_heads, "head_dim": head_dim, "seed": seed,
        "q": q.tolist(), "k": k.tolist(),
        "kinds": {name: {"label": label, "size": size, "min": lo, "default": default}
                  for name, (label, size, lo, default) in _KINDS.items()},
        "mods": _MODS,
        "layout": lab_frame().to_plotly_json()["layout"],
        "narrow_layout": lab_frame(narrow=True).to_plotly_json()["layout"],
    }


def _reference(spec: dict, data: dict) -> dict:
    """What the library computes for a spec: keep (L, L) bool, the modified scores and the
    weights (L, L) of head ``spec["head"]`` (the one pipeline, :meth:`mha_lib.masking.Visible.softmax`, on the page's
    queries and keys), the tile states (nQ, nK) (0 skipped, 1 with the mask, 2 without) and
    the number of tiles computed."""
    L, H, d = spec["L"], data["num_heads"], data["head_dim"]
    mask = _lab_mask(spec)
    q = torch.tensor(data["q"], dtype=torch.float64)[None, :, :L]  # (1, H, L, d)
    k = torch.tensor(data["k"], dtype=torch.float64)[None, :, :L]
    scores = q @ k.transpose(-1, -2) / d ** 0.5  # (1, H, L, L)
    context = visible(mask, 1, L, L, score_mod=_lab_score_mod(spec, H))
    modified = context.modify(scores.clone())[0, spec["head"]]  # (L, L) (softmax writes over scores)
    weights = context.with_heads().softmax(scores)[0, spec["head"]]  # (L, L)
    tiles = mask.tiles(1, L, L, spec["block"])
    return {"keep": mask.dense(1, L, L)[0].tolist(), "weights": weights.tolist(), "scores": modified.tolist(),
            "tiles": tiles.states.tolist(), "computed": tiles.computed, "total": tiles.total}


def _select(name: str, label: str, options: dict, value: str) -> str:
    opts = "".join(f'<option value="{v}"{" selected" if v == value else ""}>{html.escape(t)}</option>'
                   for v, t in options.items())
    return (f'<div class="mha-control"><label for="{_DIV_ID}-{name}">{label}</label>'
            f'<select id="{_DIV_ID}-{name}" data-lab="{name}">{opts}</select></div>')


def _range(name: str, label: str, value: int, lo: int, hi: int, step: float = 1) -> str:
    return (f'<div class="mha-control"><label for="{_DIV_ID}-{name}"><span data-label>{label}</span>: '
            f'<output id="{_DIV_ID}-{name}-value" for="{_DIV_ID}-{name}">{value}</output></label>'
            f'<input type="range" id="{_DIV_ID}-{name}" data-lab="{name}" min="{lo}" max="{hi}" '
            f'step="{step}" value="{value}"></div>')


def _controls(spec: dict, data: dict) -> str:
    """The controls: three terms (kind and size, the first always used) joined by & or |, the
    modification and its numbers, the length, the block size and the head shown."""
    kinds = {name: label for name, (label, *_rest) in _KINDS.items()}
    L, terms = spec["L"], spec["terms"] + [["", 0]] * (_MAX_TERMS - len(spec["terms"]))
    ops = spec["ops"] + ["&"] * (_MAX_TERMS - 1 - len(spec["ops"]))
    parts = []
    for t, (kind, size) in enumerate(terms):  # one row each: (& or |), the kind, its size
        row = [_select(f"op{t}", "joined by", {"&": "& (both allow)", "|": "| (either allows)"},
                       ops[t - 1])] if t else []
        choices = kinds if t == 0 else {"": "(nothing more)", **kinds}
        row.append(_select(f"kind{t}", f"Mask {t + 1}", choices, kind))
        size_label = _KINDS[kind][1] if kind else "size"
        row.append(_range(f"size{t}", size_label or "size", size, 0, L))
        parts.append(f'<div class="mha-masklab-term">{"".join(row)}</div>')
    parts.append(_select("mod", "Score modification", _MODS, spec["mod"]))
    parts.append(_range("cap", "cap", int(spec["cap"]), 1, 10))
    parts.append(_range("floor_scale", "floor_scale", int(spec["floor_scale"]), 1, 8))
    parts.append(_range("L", "Length L", L, 2, data["max_len"]))
    parts.append(_range("block", "Block size", spec["block"], 1, 8))
    parts.append(_range("head", f"Head h of {data['num_heads']}", spec["head"], 0, data["num_heads"] - 1))
    parts.append(_select("panel", "Second panel", {"weights": "the weights", "scores": "the scores, modified"},
                         spec["panel"]))
    return (f'<div class="mha-explorer-controls mha-masklab-controls" id="{_DIV_ID}-controls" '
            f'role="group" aria-label="Mask lab controls">{"".join(parts)}</div>')


_DEFAULT_SPEC = {"L": 12, "block": 4, "head": 0, "terms": [["sliding_window", 4], ["sinks", 2]],
                 "ops": ["|"], "mod": "none", "cap": 5.0, "floor_scale": 4.0, "scale": 0.5, "panel": "weights"}


def site_mask_lab_html(spec: dict | None = None, *, max_len: int = 16, num_heads: int = 8,
                       head_dim: int = 4, seed: int = 0) -> str:
    """HTML for the website: the lab's controls, a text of what they compose (the library's
    mask and modification, FlexAttention's ``mask_mod`` and ``score_mod``), its figure and the
    example as JSON. ``_static/mha-masklab.js`` (loaded by ``mha_lib.book.sphinx_ext``) draws it;
    show it with ``IPython.display.HTML(...)``.

    Args:
        spec: the controls' first state (see the module docstring); default: a sliding window
            of 4 keys or 2 sinks, no modification, L = 12, blocks of 4, head 0.
        max_len: the longest L the length control offers (the example's positions).
        num_heads, head_dim, seed: the seeded layer whose queries and keys the page holds.

    Raises:
        ValueError: a size that is not a positive integer, or a spec the library refuses.
    """
    spec = {**_DEFAULT_SPEC, **(spec or {})}
    max_len, num_heads = check_positive_int(max_len, "max_len"), check_positive_int(num_heads, "num_heads")
    head_dim, seed = check_positive_int(head_dim, "head_dim"), int(seed)
    if not 1 <= spec["L"] <= max_len or not 0 <= spec["head"] < num_heads:
        raise ValueError(f"spec must have 1 <= L <= max_len = {max_len} and 0 <= head < {num_heads}, "
                         f"got L = {spec['L']}, head = {spec['head']}")
    data = _lab_data(max_len, num_heads, head_dim, seed)
    _reference(spec, data)  # the library accepts it (a ValueError otherwise)
    payload = json.dumps({"data": data, "spec": spec}, separators=(",", ":")).replace("</", "<\\/")
    caption = (f"The mask lab: keys left to right, queries top to bottom. First, the mask (yellow: "
               f"the query may see the key; dotted lines: the tiles' edges). Second, the attention "
               f"weights of one head of a seeded MultiHeadAttention of {num_heads} heads on a random "
               f"sequence, after the score modification and the mask (masked keys blank), or its "
               f"scores after the modification, before the softmax. Third, "
               f"the tiles of tiled attention: skipped (dark), computed with the mask (grey), "
               f"computed without it (yellow).")
    return (
        f'<div class="mha-explorer mha-masklab" id="{_DIV_ID}">'
        f'<p class="mha-masklab-waiting">The lab is drawn by the website\'s script; in Jupyter, '
        f'use <code>mask_lab()</code>.</p>{_controls(spec, data)}'
        f'<p class="mha-masklab-code" aria-live="polite"><span data-lab-out="library"></span><br>'
        f'<span data-lab-out="flex"></span></p>'
        f'<p class="mha-masklab-counts" aria-live="polite" data-lab-out="counts"></p>'
        f'<div class="plotly-graph-div mha-figure mha-masklab-figure" role="img" '
        f'aria-label="{html.escape(caption, quote=True)}" style="height:360px"></div>'
        f'<p class="mha-masklab-caption">{html.escape(caption)}</p>'
        f'<script type="application/json" class="mha-masklab-data">{payload}</script></div>'
    )
