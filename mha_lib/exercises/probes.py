"""Symptom probes: run an attention layer on inputs whose right answer is known without it.

Each probe takes a layer with ``MultiHeadAttention``'s arguments (``MultiHeadAttention``,
``GroupedQueryAttention``, the bug zoo's layers; for a layer with RoPE, ``positions=`` places
the tokens) and returns a :class:`_ProbeResult` whose printout says what a healthy layer shows
and what this one shows. None of them needs the correct layer: each compares the layer with
itself (shuffled, padded, cached, one example at a time)
or with attention recomputed from the layer's own weights (``W_q``, ``W_k``, ``W_v``, ``W_o``,
RoPE with interleaved pairs, key/value head ``h // g`` for query head ``h``).

:data:`PROBES` names them all; :func:`run_probes` runs them; :func:`symptom_heatmaps` draws a
healthy layer's weights beside another's on a probe's input.

Shape legend
    B    batch size
    L    tokens; Lq queries, Lk keys
    H    query heads; Hkv key/value heads
    d    head size; D = H*d, d_model
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib.decoding import LayerCache
from mha_lib.heads import merge_heads, split_heads
from mha_lib.masks import Mask, causal
from mha_lib.positions import rotary
from mha_lib.viz.heatmaps import attention_heatmaps

__all__ = ["PROBES", "run_probes", "symptom_heatmaps", "symptom_table"]

_TOL = 1e-4  # relative error of a healthy float32 layer is ~1e-7; a bug's is > 1e-2


@dataclass
class _ProbeResult:
    """What a probe saw.

    Attributes:
        probe: the probe's name (a key of :data:`PROBES`).
        passed: whether the layer behaved as a healthy one does.
        healthy: what a healthy layer shows, in words.
        seen: what this layer showed, numbers rounded.
        numbers: the measurements by name (rounded to 4 significant digits).
    """

    probe: str
    passed: bool
    healthy: str
    seen: str
    numbers: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        verdict = "as a healthy layer" if self.passed else "NOT as a healthy layer"
        return (f"{self.probe} probe: {verdict}\n  healthy layer: {self.healthy}\n"
                f"  this layer:    {self.seen}")


def _r(x: float) -> float:
    """Rounded to 4 significant digits (NaN and inf as they are)."""
    return x if not math.isfinite(x) or x == 0 else float(f"{x:.4g}")


def _say(error: float) -> str:
    """An error for the printout: a bound at noise level (it differs from CPU to CPU)."""
    return f"less than {_TOL:g}" if error < _TOL else f"{_r(error)}"


def _rel(a: Tensor, b: Tensor) -> float:
    """max |a - b| / max |b|: NaN anywhere counts as an infinite error."""
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return math.inf
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _x(seed: int, *shape: int, scale: float = 1.0) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen) * scale


def _width(layer: nn.Module) -> int:
    """D, the layer's input width; a ValueError unless it is an attention layer of the library's
    kind (an ``nn.Module`` with ``W_q``, ``W_k``, ``W_v``, ``W_o`` and ``num_heads``)."""
    if not isinstance(layer, nn.Module) or not all(
            hasattr(layer, a) for a in ("W_q", "W_k", "W_v", "W_o", "num_heads")):
        raise ValueError("layer: expected an attention layer with W_q, W_k, W_v, W_o and "
                         f"num_heads (as MultiHeadAttention), got {type(layer).__name__}")
    if layer.W_q.weight.device.type != "cpu":  # (the probes draw their inputs on the CPU)
        raise ValueError(f"layer: the probes run on the CPU, got a layer on {layer.W_q.weight.device}: "
                         "pass layer.cpu()")
    return layer.W_q.in_features


def _placed(layer, positions: Tensor) -> dict:
    """``positions=`` for a layer with RoPE (the tokens' places); nothing for one without."""
    return {"positions": positions} if getattr(layer, "rope", False) else {}


def _self(layer, x, **options) -> Tensor:
    return layer(x, x, x, **options)


def _result(probe: str, error: float, healthy: str, seen: str, **numbers: float) -> _ProbeResult:
    return _ProbeResult(probe, error < _TOL, healthy, seen,
                       {"error": _r(error), **{k: _r(v) for k, v in numbers.items()}})


# --- a left-padding mask (the keys before each example's first token are padding) -------------


class _LeftPadding(Mask):
    def __init__(self, num_pads: Tensor) -> None:
        self.num_pads = num_pads

    def _keep(self, ix):
        _, j = ix.pairs()
        return j >= self.num_pads.to(ix.device)[:, None, None]  # (B, 1, 1) vs (B or 1, 1, Lk)

    def _tiles(self, ix):
        _, _, k_lo, k_hi = ix.position_ranges()
        pads = self.num_pads.to(ix.device)[:, None, None]
        return k_hi < pads, k_lo >= pads

    def __repr__(self) -> str:
        return f"left_padding({self.num_pads.tolist()})"


def _left_padding(num_pads: Tensor) -> Mask:
    """Left padding: example b's first ``num_pads[b]`` keys are padding (a mask to combine
    with ``causal()``). ``num_pads``: (B,) integers >= 0."""
    num_pads = torch.as_tensor(num_pads)
    if num_pads.dim() != 1 or num_pads.is_floating_point() or bool((num_pads < 0).any()):
        raise ValueError(f"num_pads must be a (B,) tensor of integers >= 0, got {num_pads!r}")
    return _LeftPadding(num_pads.long())


# --- attention recomputed from the layer's own weights -----------------------------------------


def _oracle(layer, x: Tensor, *, is_causal: bool) -> Tensor:
    """``F.scaled_dot_product_attention`` on the layer's projections (RoPE, interleaved pairs)."""
    L = x.shape[1]
    q, k = _projected(layer, x, torch.arange(L))
    v = split_heads(layer.W_v(x), k.shape[1])  # (B, L, Hkv*d) -> (B, Hkv, L, d)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    return layer.W_o(merge_heads(out))  # (B, H, L, d) -> (B, L, D)


def _projected(layer, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
    """Queries (B, H, L, d) and keys (B, Hkv, L, d) as a healthy layer builds them."""
    q = split_heads(layer.W_q(x), layer.num_heads)  # (B, L, D) -> (B, H, L, d)
    k = split_heads(layer.W_k(x), layer.W_k.out_features // q.shape[-1])  # -> (B, Hkv, L, d)
    if getattr(layer, "rope", False):
        q, k = rotary(q, positions), rotary(k, positions)
    return q, k


# --- the probes ---------------------------------------------------------------------------------


def permutation_probe(layer) -> _ProbeResult:
    """Shuffle the tokens, each keeping its position: the outputs shuffle the same way."""
    x = _x(1, 1, 8, _width(layer))
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(1))
    out = _self(layer, x, **_placed(layer, torch.arange(8)[None]))
    shuffled = _self(layer, x[:, perm], **_placed(layer, perm[None]))
    err = _rel(shuffled, out[:, perm])
    return _result("permutation", err, "the shuffled outputs equal the outputs shuffled (error 0)",
                   f"they differ by {_say(err)} (relative)")


def padding_right_probe(layer) -> _ProbeResult:
    """Right padding: the real tokens' outputs equal the unpadded run's, whatever the pads hold.

    Example 1 has 5 tokens and 3 pads (valid lengths 8, 5)."""
    D = _width(layer)
    x = _x(2, 2, 8, D)
    lens = torch.tensor([8, 5])
    out = _self(layer, x, valid_lens=lens)
    alone = _self(layer, x[1:, :5])
    other = x.clone()
    other[1, 5:] = _x(3, 3, D) * 10
    moved = _self(layer, other, valid_lens=lens)
    err = max(_rel(out[1, :5], alone[0]), _rel(moved[1, :5], out[1, :5]))
    return _result("padding_right", err, "the 5 real outputs equal the unpadded run's (error 0)",
                   f"they differ by {_say(err)} (relative)")


def padding_left_probe(layer) -> _ProbeResult:
    """Left padding under a causal mask: real outputs as unpadded, every output finite.

    Example 1 has 3 pads then 5 tokens (positions 0..4); the pads' rows see no key."""
    x, pads = _x(4, 2, 8, _width(layer)), torch.tensor([0, 3])
    positions = (torch.arange(8)[None] - pads[:, None]).clamp(min=0)  # (B, L)
    out = _self(layer, x, mask=causal() & _left_padding(pads), **_placed(layer, positions))
    alone = _self(layer, x[1:, 3:], mask=causal())
    finite = bool(torch.isfinite(out).all())
    err = _rel(out[1, 3:], alone[0]) if finite else math.inf
    seen = (f"the real outputs differ by {_say(err)} (relative)" if finite else
            f"{int((~torch.isfinite(out)).any(-1).sum())} output rows are NaN or infinite")
    broken = float((~torch.isfinite(out)).any(-1).sum())  # rows with a NaN or an infinity
    return _result("padding_left", err, "the 5 real outputs equal the unpadded run's, every "
                   "output is finite", seen, nonfinite_rows=broken)


def cache_probe(layer) -> _ProbeResult:
    """Decoding with a KV cache equals one causal pass over all the tokens.

    A 5-token prompt, 3 single tokens, then a chunk of 3: 11 tokens."""
    x = _x(5, 2, 11, _width(layer))
    full = _self(layer, x, mask=causal())
    cache, outs = LayerCache(), []
    for start, end in ((0, 5), (5, 6), (6, 7), (7, 8), (8, 11)):
        outs.append(_self(layer, x[:, start:end], cache=cache))
    cached = torch.cat(outs, dim=1)
    err = _rel(cached, full)
    per_position = (cached - full).abs().amax(dim=(0, 2)) / full.abs().max()  # (L,)
    bad = (per_position > _TOL).nonzero()
    first = int(bad[0]) if len(bad) else -1
    seen = (f"they differ by {_say(err)} (relative), first at position {first}" if first >= 0
            else f"they differ by {_say(err)} (relative)")
    return _result("cache", err, "cached decoding equals the full pass (error 0)", seen,
                   first_wrong_position=float(first))


def future_token_probe(layer) -> _ProbeResult:
    """Change the last token: no earlier output moves (at input scale 1 and 1000).

    Causal mask, 8 tokens; at scale 1000 the scores are ~1e5."""
    D, errors = _width(layer), []
    for scale in (1.0, 1000.0):
        x = _x(6, 1, 8, D, scale=scale)
        changed = x.clone()
        changed[:, -1] = _x(7, D, scale=scale)
        before, after = (_self(layer, t, mask=causal())[:, :-1] for t in (x, changed))
        errors.append(_rel(after, before))
    err = max(errors)
    return _result("future_token", err, "the earlier outputs do not move (0 at both scales)",
                   f"they move by {_say(errors[0])} at scale 1, {_say(errors[1])} at scale 1000 "
                   "(relative)", scale_1=errors[0], scale_1000=errors[1])


def batch_independence_probe(layer) -> _ProbeResult:
    """Each example of a padded batch gets what it gets alone (valid lengths 6, 2, 4)."""
    x, lens = _x(8, 3, 6, _width(layer)), torch.tensor([6, 2, 4])
    out = _self(layer, x, valid_lens=lens)
    err = max(_rel(out[b], _self(layer, x[b:b + 1], valid_lens=lens[b:b + 1])[0]) for b in range(3))
    return _result("batch_independence", err, "each example's outputs equal its run alone "
                   "(error 0)", f"they differ by {_say(err)} (relative)")


def score_scale_probe(layer) -> _ProbeResult:
    """The temperature of the weights, fitted: a healthy layer's is sqrt(d).

    Fits log w = (q . k) / tau + c for every query, q and k from the layer's projections."""
    x = _x(9, 1, 8, _width(layer))
    _, weights = _self(layer, x, need_weights=True)  # (1, H, L, L)
    q, k = _projected(layer, x, torch.arange(8))
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # (B, Hkv, L, d) -> (B, H, L, d)
    dots = (q @ k.transpose(-2, -1)).double()  # (1, H, L, L)
    logw = weights.double().clamp_min(1e-300).log()
    a, b = dots - dots.mean(-1, keepdim=True), logw - logw.mean(-1, keepdim=True)
    tau = float((a * a).sum() / (a * b).sum())
    fit = float(((b - a / tau) ** 2).sum() / (b ** 2).sum().clamp_min(1e-300))
    d = q.shape[-1]
    err = abs(tau / math.sqrt(d) - 1) + fit
    return _result("score_scale", err, f"tau = sqrt(d) = {math.sqrt(d):.3f} (d = {d}), "
                   "unexplained share 0", f"tau = {tau:.3f}, unexplained share {_say(fit)}",
                   tau=tau,
                   sqrt_d=math.sqrt(d), sqrt_D=math.sqrt(d * q.shape[1]))


def sdpa_probe(layer) -> _ProbeResult:
    """The layer against F.scaled_dot_product_attention on its own projections.

    Causal self-attention of 8 tokens."""
    x = _x(10, 2, 8, _width(layer))
    out, want = _self(layer, x, mask=causal()), _oracle(layer, x, is_causal=True)
    err = _rel(out, want)
    cosine = float(F.cosine_similarity(out.flatten(), want.flatten(), dim=0))
    return _result("sdpa", err, "the same outputs (error 0, cosine similarity 1.0000)",
                   f"error {_say(err)}, cosine similarity {cosine:.4f}", cosine=cosine)


def long_context_probe(layer) -> _ProbeResult:
    """The same over 64 causal tokens, position by position."""
    x = _x(11, 1, 64, _width(layer))
    out, want = _self(layer, x, mask=causal()), _oracle(layer, x, is_causal=True)
    per_position = (out - want).abs().amax(dim=(0, 2)) / want.abs().max()  # (L,)
    early, late = float(per_position[:8].max()), float(per_position[20:].max())
    err = _rel(out, want)
    return _result("long_context", err, "error 0 at every position",
                   f"error {_say(float(per_position[0]))} at position 0, up to {_say(early)} at "
                   f"positions 0-7, up to {_say(late)} at 20-63", at_0=float(per_position[0]),
                   early=early, late=late)


def eval_determinism_probe(layer) -> _ProbeResult:
    """In evaluation mode, the same input twice gives the same output."""
    x = _x(12, 1, 8, _width(layer))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        first, second = _self(layer, x), _self(layer, x)
    err = _rel(second, first)
    return _result("eval_determinism", err, "the same output twice (difference 0)",
                   f"the two outputs differ by {_say(err)} (relative)")


#: name -> probe, in the order a student might run them.
PROBES: dict[str, Callable[[nn.Module], _ProbeResult]] = {
    "permutation": permutation_probe,
    "padding_right": padding_right_probe,
    "padding_left": padding_left_probe,
    "cache": cache_probe,
    "future_token": future_token_probe,
    "batch_independence": batch_independence_probe,
    "score_scale": score_scale_probe,
    "sdpa": sdpa_probe,
    "long_context": long_context_probe,
    "eval_determinism": eval_determinism_probe,
}


def run_probes(layer: nn.Module, names: list[str] | None = None) -> dict[str, _ProbeResult]:
    """Run the probes ``names`` (default all) on ``layer`` in evaluation mode, without gradients;
    the layer's mode is put back afterwards."""
    _width(layer)
    names = list(PROBES) if names is None else names
    unknown = [n for n in names if n not in PROBES]
    if isinstance(names, str) or unknown:
        raise ValueError(f"names: expected a list of probes among {list(PROBES)}, got {names!r}")
    was_training = layer.training
    layer.eval()
    try:
        with torch.no_grad():
            return {name: PROBES[name](layer) for name in names}
    finally:
        layer.train(was_training)


def symptom_table(results: dict[str, _ProbeResult]) -> str:
    """One line per probe: ``healthy`` or ``SYMPTOM`` (the results of :func:`run_probes`)."""
    return "\n".join(f"{name:<20}{'healthy' if r.passed else 'SYMPTOM'}"
                     for name, r in results.items())


# --- pictures ----------------------------------------------------------------------------------


def _probe_weights(layer, probe: str, head: int) -> Tensor:
    """The weights (Lq, Lk) of query head ``head`` on the input of ``probe``."""
    D = _width(layer)
    if probe == "cache":  # the rows of every decoding step, one (11, 11) picture
        x, cache, rows = _x(5, 2, 11, D), LayerCache(), []
        for start, end in ((0, 5), (5, 6), (6, 7), (7, 8), (8, 11)):
            _, w = _self(layer, x[:, start:end], cache=cache, need_weights=True)  # (B, H, n, end)
            rows.append(F.pad(w[0, head], (0, 11 - w.shape[-1])))
        return torch.cat(rows)
    if probe == "padding_right":
        return _self(layer, _x(2, 2, 8, D), valid_lens=torch.tensor([8, 5]),
                     need_weights=True)[1][1, head]
    if probe == "padding_left":
        pads = torch.tensor([0, 3])
        positions = (torch.arange(8)[None] - pads[:, None]).clamp(min=0)
        return _self(layer, _x(4, 2, 8, D), mask=causal() & _left_padding(pads), need_weights=True,
                     **_placed(layer, positions))[1][1, head]
    if probe == "batch_independence":
        return _self(layer, _x(8, 3, 6, D), valid_lens=torch.tensor([6, 2, 4]),
                     need_weights=True)[1][1, head]
    if probe in ("permutation", "score_scale", "eval_determinism"):
        return _self(layer, _x(9, 1, 8, D), need_weights=True)[1][0, head]
    scale = 1000.0 if probe == "future_token" else 1.0
    return _self(layer, _x(6, 1, 8, D, scale=scale), mask=causal(), need_weights=True)[1][0, head]


def symptom_heatmaps(healthy: nn.Module, layer: nn.Module, probe: str, *, head: int = 0,
                     title: str | None = None):
    """A healthy layer's attention weights beside ``layer``'s, on the input of ``probe``
    (query head ``head``; keys on x, queries on y, viridis).

    For the cache probe the picture stacks the rows of every decoding step (a 5-token prompt,
    3 single tokens, a chunk of 3). NaN weights are drawn as 0 and said so in the title.

    Returns:
        A plotly figure (:func:`mha_lib.viz.heatmaps.attention_heatmaps`).
    """
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {list(PROBES)}, got {probe!r}")
    _width(healthy), _width(layer)
    was = healthy.training, layer.training
    healthy.eval(), layer.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            pair = torch.stack([_probe_weights(m, probe, head) for m in (healthy, layer)])
    finally:
        healthy.train(was[0]), layer.train(was[1])
    nan = bool(torch.isnan(pair).any())
    pair = torch.nan_to_num(pair, nan=0.0).clamp(0.0, 1.0)[:, None]  # (2, Lq, Lk) -> (2, 1, Lq, Lk)
    if title is None:
        title = f"head {head} on the {probe} probe's input" + (" (NaN drawn as 0)" if nan else "")
    return attention_heatmaps(pair, example_titles=("healthy", "this layer"), title=title)
