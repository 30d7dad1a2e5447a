"""Checkers of the exercises on today's attention (chapter 12c), one per experiment.

* :func:`check_streaming_mask`  StreamingLLM's mask: a sliding window plus the first keys (the
  sinks), what ``KVCache(window=, num_sinks=)`` keeps;
* :func:`check_absorbed_scores` the scores of multi-head latent attention from the queries and
  the cached latent, ``W_uk`` folded into the queries (the absorbed form);
* :func:`check_gated_output`    gated attention: each head's output times its sigmoid gate,
  then ``W_o``.

See :mod:`mha_lib.exercises` for how a checker works and how to add one. Each reference is the
library's own code (:mod:`mha_lib.masks`' ``sliding_window(w) | sinks(n)``, the keys of
:class:`mha_lib.latent.LatentAttention` built by its ``W_uk``, :func:`mha_lib.heads.gate_heads`),
and each mistake model is built next to it.

Shape legend
    B    batch size
    H    number of heads
    L    sequence length (Lq queries, Lk keys)
    d    head size
    D    H*d, the model width ``d_model``
    r    the latent's size (multi-head latent attention)
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
from torch import Tensor, nn

from mha_lib.exercises.runner import MATMUL_ERRORS, Case, StudentError, call_student, checker, run_cases, seeded
from mha_lib.heads import gate_heads, merge_heads, split_heads
from mha_lib.latent import LatentAttention
from mha_lib.masks import sinks, sliding_window

__all__ = ["check_absorbed_scores", "check_gated_output", "check_streaming_mask"]

# --------------------------------------------------------------------------------------------
# StreamingLLM's mask: a sliding window and the first keys
# --------------------------------------------------------------------------------------------


def _streaming_variant(L: int, window: int, num_sinks: int, spec: dict[str, str]) -> Tensor:
    """The keep mask of a causal window of ``window`` keys joined to the first ``num_sinks``
    keys, with the mistakes of ``spec``, as 0/1 integers (the reference for ``{}`` is
    ``(sliding_window(window) | sinks(num_sinks)).dense(1, L, L)``).

    Settings ``window`` (``one_more``, ``one_less``, ``without_self``), ``sink_keys`` (``not_causal``,
    ``in_window``, ``and``, ``forgotten``), ``window_causal`` (``forgotten``),
    ``mask_convention`` (``inverted``).

    Shapes:
        returns (L, L) torch.long, row i = query i, column j = key j
    """
    if not spec:
        return (sliding_window(window) | sinks(num_sinks)).dense(1, L, L)[0].long()
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]  # (L, 1), (1, L)
    size = window + {"one_more": 1, "one_less": -1}.get(spec.get("window"), 0)
    rule = spec.get("sink_keys")
    if rule == "in_window":  # the sinks take their places from the window
        size = max(size - num_sinks, 0)
    past = (j <= i) if spec.get("window_causal") != "forgotten" else torch.ones(L, L, dtype=torch.bool)
    recent = past & (j > i - size)  # (L, L)
    if spec.get("window") == "without_self":  # the `window` keys before the query, not itself
        recent = (j < i) & (j >= i - window)
    first = (j < num_sinks) if rule == "not_causal" else (j < num_sinks) & (j <= i)  # (L, L)
    keep = recent if rule == "forgotten" else recent & first if rule == "and" else recent | first
    if spec.get("mask_convention") == "inverted":
        keep = ~keep
    return keep.long()


_STREAMING_SETTINGS = {"window": ("one_more", "one_less", "without_self"),
                       "sink_keys": ("not_causal", "in_window", "and", "forgotten"),
                       "window_causal": ("forgotten",), "mask_convention": ("inverted",)}

#: (L, window, num_sinks) of the streaming-mask cases
_STREAMING_CASES = ((10, 3, 2), (9, 4, 1), (12, 5, 4), (7, 2, 3))


def _read_mask(mask: object, L: int) -> object:
    """The student's boolean (L, L) mask as 0/1 integers; another kind of result is named."""
    if not isinstance(mask, Tensor):
        return mask  # the runner names what came instead of a tensor
    if mask.dtype != torch.bool:
        raise StudentError(f"no error, but returned a tensor of dtype {mask.dtype}: return a "
                           "boolean mask (True = may attend), e.g. the comparisons themselves")
    if tuple(mask.shape) != (L, L):
        raise StudentError(f"no error, but returned a mask of shape {tuple(mask.shape)}, "
                           f"expected (L, L) = ({L}, {L}): one row per query, one column per key")
    return mask.long()


@checker
def check_streaming_mask(fn: Callable) -> bool:
    """Check ``fn(L, window, num_sinks)``: StreamingLLM's keep mask over L positions, against
    ``(sliding_window(window) | sinks(num_sinks)).dense(1, L, L)[0]`` (:mod:`mha_lib.masks`),
    the keys ``KVCache(window=window, num_sinks=num_sinks)`` hands to each new query.

    Query i may see key j when ``i - window < j <= i`` (its window, itself included) or when
    ``j < num_sinks`` and ``j <= i`` (a sink of its past).

    Shapes:
        returns a boolean (L, L) tensor, True = may attend.

    Catches: the window one key too long or too short or without the query's own key, sinks seen by queries before them, the
    sinks counted inside the window, window and sinks joined with & or the sinks forgotten, no
    causal part, True = masked, a mask that is not boolean or not (L, L).
    """
    cases = [Case(f"L = {L}, window = {window}, num_sinks = {num_sinks}",
                  run_student=lambda L=L, w=window, n=num_sinks: _read_mask(call_student(fn, L, w, n), L),
                  variant=lambda spec, L=L, w=window, n=num_sinks: _streaming_variant(L, w, n, spec),
                  exact=True)
             for L, window, num_sinks in _STREAMING_CASES]
    return run_cases("check_streaming_mask", cases, _STREAMING_SETTINGS,
                     "Print fn(8, 3, 2).int() next to (sliding_window(3) | sinks(2)).dense(1, 8, 8)"
                     "[0].int() (mha_lib.masks) and compare row by row: row 6 keeps keys 0, 1 "
                     "(the sinks) and 4, 5, 6 (its window).")


# --------------------------------------------------------------------------------------------
# Multi-head latent attention: the absorbed scores
# --------------------------------------------------------------------------------------------


def _absorbed_variant(layer: LatentAttention, q: Tensor, c: Tensor, spec: dict[str, str]) -> Tensor:
    """The scores of ``layer``'s heads, ``q_h . k_h / sqrt(d)`` with the keys
    ``k = split_heads(layer.W_uk(c))``, or, for a spec of mistakes, the absorbed form
    ``(q_h @ W_uk,h) @ c^T`` with them.

    Settings ``scale`` (``none``, ``sqrt_r``, ``sqrt_D``), ``uk_heads`` (``interleaved``), ``uk_layout``
    (``in_out``, ``transposed_view``).

    Shapes:
        q: (B, H, Lq, d); c: (B, Lk, r) -> (B, H, Lq, Lk)
    """
    H, d, r = q.shape[1], q.shape[-1], c.shape[-1]
    with torch.no_grad():
        if not spec:
            k = split_heads(layer.W_uk(c), H)  # (B, Lk, r) -> (B, Lk, D) -> (B, H, Lk, d)
            return q @ k.mT / math.sqrt(d)  # (B, H, Lq, d) @ (B, H, d, Lk) -> (B, H, Lq, Lk)
        W = layer.W_uk.weight  # (H*d, r), nn.Linear's (out, in)
        if spec.get("uk_layout") == "in_out":
            W_h = W.reshape(r, H, d).permute(1, 2, 0)  # read as (r, H*d) -> (H, d, r)
        elif spec.get("uk_layout") == "transposed_view":
            W_h = W.T.reshape(H, d, r)  # (r, H*d) read in memory order as (H, d, r)
        elif spec.get("uk_heads") == "interleaved":
            W_h = W.reshape(d, H, r).transpose(0, 1)  # (H*d, r) -> (d, H, r) -> (H, d, r)
        else:
            W_h = W.reshape(H, d, r)  # (H*d, r) -> (H, d, r): head h's block of rows
        scale = {"none": 1.0, "sqrt_r": math.sqrt(r), "sqrt_D": math.sqrt(H * d)}.get(
            spec.get("scale"), math.sqrt(d))
        q_lat = q @ W_h  # (B, H, Lq, d) @ (H, d, r) -> (B, H, Lq, r)
        return q_lat @ c[:, None].mT / scale  # (B, H, Lq, r) @ (B, 1, r, Lk) -> (B, H, Lq, Lk)


_ABSORBED_SETTINGS = {"scale": ("none", "sqrt_r", "sqrt_D"), "uk_heads": ("interleaved",),
                      "uk_layout": ("in_out", "transposed_view")}


def _absorbed_crash_hint(message: str) -> list[str]:
    """A matrix product whose sizes do not fit, in the absorbed scores, is usually W_uk's layout."""
    if not any(pattern in message for pattern in MATMUL_ERRORS):
        return []
    return ["  A matrix product got sizes that do not fit. W_uk is an nn.Linear weight, (out, in) "
            "= (H*d, r): head h's block W_uk.reshape(H, d, r)[h] is (d, r), q_h @ block is "
            "(Lq, r), and (Lq, r) @ c^T (r, Lk) gives the head's scores."]


def _scores_shape_hint(got: tuple, expected: tuple) -> str:
    if got[-2:] == expected[-2:][::-1]:
        return "Rows are queries, columns keys: (B, H, Lq, Lk), not (B, H, Lk, Lq)."
    return "The scores of every head: (B, H, Lq, Lk)."


@checker
def check_absorbed_scores(fn: Callable) -> bool:
    """Check ``fn(q, c, W_uk)``: the attention scores of multi-head latent attention from the
    heads' queries and the cached latent, against the naive form, the keys built by
    :class:`mha_lib.latent.LatentAttention`'s ``W_uk`` (no bias):
    ``scores_h = q_h @ (c @ W_uk,h^T)^T / sqrt(d)``. The exercise asks for the absorbed form,
    ``(q_h @ W_uk,h) @ c^T / sqrt(d)``, which never builds the keys; both give these numbers.

    Shapes:
        q: (B, H, Lq, d); c: (B, Lk, r); W_uk: (H*d, r) (``layer.W_uk.weight``);
        returns (B, H, Lq, Lk).

    Catches: no 1/sqrt(d), 1/sqrt(r) or 1/sqrt(D) instead, W_uk's heads read interleaved, W_uk read as
    (r, H*d), W_uk.T reshaped to (H, d, r) without moving its axes, modifying an input in place.
    """
    g = seeded(19)
    cases = []
    # (description, B, H, d, r, Lq, Lk)
    for description, B, H, d, r, Lq, Lk in (
            ("H = 4 heads of d = 4, latent r = 6, 5 queries on 5 tokens", 2, 4, 4, 6, 5, 5),
            ("decoding: 1 new query on 7 cached latents, H = 2, d = 8, r = 3", 1, 2, 8, 3, 1, 7),
            ("H = 3 heads of d = 5, latent r = 5, 3 queries on 6 tokens", 2, 3, 5, 5, 3, 6)):
        D = H * d
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(19 + H)
            layer = LatentAttention(D, D, D, D, H, 0.0, rank=r).eval()
        x = torch.randn(B, Lk, D, generator=g)
        with torch.no_grad():
            c = layer.W_dkv(x)  # (B, Lk, r): what the cache keeps
            q = split_heads(layer.W_q(x[:, Lk - Lq:]), H)  # the last Lq tokens: (B, H, Lq, d)
        W_uk = layer.W_uk.weight.detach().clone()  # (H*d, r)
        cases.append(Case(description, run_student=lambda q, c, W: call_student(fn, q, c, W),
                          variant=lambda spec, layer=layer, q=q, c=c: _absorbed_variant(layer, q, c, spec),
                          inputs=(q, c, W_uk)))
    return run_cases("check_absorbed_scores", cases, _ABSORBED_SETTINGS,
                     "Compare head by head with the naive form: k = (c @ W_uk.T).reshape(B, Lk, "
                     "H, d).transpose(1, 2), scores = q @ k.transpose(-2, -1) / math.sqrt(d).",
                     shape_hint=_scores_shape_hint, crash_hint=_absorbed_crash_hint)


# --------------------------------------------------------------------------------------------
# Gated attention: a sigmoid gate on each head's output, before W_o
# --------------------------------------------------------------------------------------------


def _gated_heads(X: Tensor, gate_logits: Tensor, spec: dict[str, str]) -> Tensor:
    """:func:`mha_lib.heads.gate_heads` with the mistakes of ``spec``.

    Settings ``gate_fn`` (``none``, ``softmax_heads``), ``gate_axes`` (``reshape``,
    ``tiled``, ``first_head``).

    Shapes:
        X: (B, H, Lq, d); gate_logits: (B, Lq, H) or (B, Lq, H*d) -> (B, H, Lq, d)
    """
    if not {"gate_fn", "gate_axes"} & spec.keys():
        return gate_heads(X, gate_logits)
    B, H, Lq, d = X.shape
    per_head = gate_logits.shape[-1] == H
    fn = spec.get("gate_fn")
    if fn == "none":
        gates = gate_logits
    elif fn == "softmax_heads":  # the heads share one budget
        gates = (gate_logits.softmax(-1) if per_head else  # (B, Lq, H)
                 gate_logits.reshape(B, Lq, H, d).softmax(2).reshape(B, Lq, H * d))
    else:
        gates = torch.sigmoid(gate_logits)
    axes = spec.get("gate_axes")
    if axes == "tiled" and per_head:  # (B, Lq, H) -> (B, Lq, H*d), feature f gets head f % H
        gates = gates.repeat(1, 1, d)
        per_head = False
    if axes == "reshape":  # the numbers kept in memory order: (B, Lq, ..) read as (B, H, Lq, ..)
        return X * gates.reshape(B, H, Lq, 1 if per_head else d)
    if per_head:
        gates = gates.transpose(1, 2)[..., None]  # (B, Lq, H) -> (B, H, Lq, 1)
    else:
        gates = split_heads(gates, H)  # (B, Lq, H*d) -> (B, H, Lq, d)
    if axes == "first_head":
        gates = gates[:, :1]  # (B, 1, Lq, 1 or d): head 0's gates for every head
    return X * gates


def _gated_variant(X: Tensor, gate_logits: Tensor, W_o: nn.Linear, spec: dict[str, str]) -> Tensor:
    """The output of gated attention, ``W_o(merge_heads(gate_heads(X, gate_logits)))`` as in
    ``MultiHeadAttention.forward``, with the mistakes of ``spec`` (setting ``gate_place``:
    ``after_W_o``, and those of :func:`_gated_heads`).

    Shapes:
        X: (B, H, Lq, d); gate_logits: (B, Lq, H) or (B, Lq, H*d) -> (B, Lq, D)
    """
    H = X.shape[1]
    with torch.no_grad():
        if spec.get("gate_place") == "after_W_o":  # W_o's output, split as if it were the heads'
            out = split_heads(W_o(merge_heads(X)), H)  # (B, Lq, D) -> (B, H, Lq, d)
            return merge_heads(_gated_heads(out, gate_logits, spec))  # (B, H, Lq, d) -> (B, Lq, D)
        return W_o(merge_heads(_gated_heads(X, gate_logits, spec)))  # (B, H, Lq, d) -> (B, Lq, D)


_GATED_SETTINGS = {"gate_fn": ("none", "softmax_heads"), "gate_place": ("after_W_o",),
                   "gate_axes": ("reshape", "tiled", "first_head")}


@checker
def check_gated_output(fn: Callable) -> bool:
    """Check ``fn(X, gate_logits, W_o)``: the output of gated attention (Qiu et al., 2025) from
    the heads' outputs, against ``W_o(merge_heads(gate_heads(X, gate_logits)))``
    (:func:`mha_lib.heads.gate_heads`, as ``MultiHeadAttention(..., gate=...)`` computes it):
    head h of query i scaled by ``sigmoid(gate_logits[b, i, h])`` (head-wise gates) or feature
    by feature by ``sigmoid(gate_logits[b, i, h*d:(h+1)*d])`` (element-wise), then merged and
    projected by ``W_o``. ``fn`` gets a copy of ``W_o`` each time.

    Shapes:
        X: (B, H, Lq, d); gate_logits: (B, Lq, H) or (B, Lq, H*d); W_o: nn.Linear(D, D);
        returns (B, Lq, D).

    Catches: no sigmoid, a softmax over the heads, the gate after W_o, the gates reshaped where
    a transpose belongs, a head-wise gate tiled over the features, head 0's gate for every
    head, modifying an input in place.
    """
    g = seeded(23)
    cases = []
    # (description, B, H, Lq, d, gate width: "head" or "element")
    for description, B, H, Lq, d, kind in (
            ("head-wise gates, H = 4, d = 2, 3 queries", 2, 4, 3, 2, "head"),
            ("element-wise gates, H = 3, d = 2, 4 queries", 2, 3, 4, 2, "element"),
            ("head-wise gates, decoding one query, H = 2, d = 3", 1, 2, 1, 3, "head"),
            ("element-wise gates, H = 2, d = 4, 5 queries", 1, 2, 5, 4, "element")):
        D = H * d
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(23 + D)
            W_o = nn.Linear(D, D)
        X = torch.randn(B, H, Lq, d, generator=g)
        logits = 2 * torch.randn(B, Lq, H if kind == "head" else D, generator=g)
        cases.append(Case(description,
                          run_student=lambda X, z, W_o=W_o: call_student(fn, X, z, copy.deepcopy(W_o)),
                          variant=lambda spec, X=X, z=logits, W_o=W_o: _gated_variant(X, z, W_o, spec),
                          inputs=(X, logits)))
    return run_cases("check_gated_output", cases, _GATED_SETTINGS,
                     "Compare your gated heads with mha_lib.heads.gate_heads(X, gate_logits) "
                     "before merging them: head h of query i is X[b, h, i] * sigmoid(gate_logits"
                     "[b, i, h]) with head-wise gates.")
