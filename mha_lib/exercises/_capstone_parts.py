"""The capstone's component checks of its own interface: the student's attention and block.

Chapter 12b's attention is chapter 3's layer with four additions, each checked here on its own,
with the book's rotary positions plugged in (so a mistake in the student's rotary cannot hide
one in the layer) and seeded random weights:

* **head_mask**: ``head_mask[h]`` multiplies head h's *output*: all gates 0 leave only the output
  layer's bias; the gates add up head by head; a gate of 0.5 gives half the head's output.
* **cached step**: a prefix, then one token at a time (and a chunk), through a cache dict, gives
  the full forward's outputs at every position, at every offset up to 40.
* **rotary inside**: queries and keys are turned by their positions (shifting every position by
  the same amount changes nothing; turning nothing changes the output).
* **reported weights**: ``attention_weights`` are the weights the output is made of:
  ``W_o(merge(weights @ W_v(values)))`` is the output.

The block: causal, and pre-LN (:func:`block_points`).

Shape legend
    B   batch; L length; D = H * d model width; H heads; d head size
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from mha_lib._modes import eval_mode
from mha_lib.exercises.runner import NotImplementedYet, StudentError, call_student, seeded
from mha_lib.positions import rotary as book_rotary

__all__: list[str] = []

_D, _H, _L, _B = 16, 2, 40, 2
_TOLERANCE = 1e-4
INTERFACE_CHECKS = ("head_mask", "cached step", "rotary inside", "reported weights")
"""The checks of the capstone attention's own interface, one point each."""


class Broken(Exception):
    """The student's code cannot be checked here; the message says why."""


def call(what: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` through :func:`call_student`, no grad, its exceptions as :class:`Broken`."""
    try:
        with torch.no_grad():
            return call_student(fn, *args, **kwargs)
    except NotImplementedYet:
        raise Broken(f"{what} raises NotImplementedError: not implemented yet") from None
    except StudentError as err:
        raise Broken(f"{what} raised {err}") from None


def _randomised(module: nn.Module, seed: int) -> nn.Module:
    g = seeded(seed)
    with torch.no_grad():
        for p in module.parameters():  # random weights, so that no part is close to zero
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module.eval()


def _layer(attention_class: Callable, rotary: Callable | None) -> nn.Module:
    name = getattr(attention_class, "__name__", "attention")
    layer = call(f"{name}({_D}, {_D}, {_D}, {_D}, {_H}, bias=True, rotary=...)", attention_class,
                 _D, _D, _D, _D, _H, bias=True, rotary=rotary)
    if not isinstance(layer, nn.Module):
        raise Broken(f"{name}(...) is not an nn.Module")
    return _randomised(layer, 36)


def _run(layer: nn.Module, x: Tensor, lens: Tensor | None, **kwargs) -> Tensor:
    out = call("attention(x, x, x, valid_lens, ...)", layer, x, x, x, lens, **kwargs)
    if not isinstance(out, Tensor) or out.shape != x.shape:
        got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise Broken(f"attention(x, x, x, valid_lens) must return (B, L, D) = {tuple(x.shape)}, got {got}")
    return out


def _causal_lens(start: int, stop: int) -> Tensor:
    """(B, stop - start): query at position p sees the keys 0 .. p."""
    return torch.arange(start + 1, stop + 1).expand(_B, stop - start)


def _close(a: Tensor, b: Tensor) -> bool:
    return bool(torch.allclose(a, b, atol=_TOLERANCE, rtol=1e-4))


def _head_mask(layer: nn.Module, x: Tensor) -> str | None:
    lens = _causal_lens(0, x.shape[1])

    def gated(*gates: float) -> Tensor:
        return _run(layer, x, lens, positions=torch.arange(x.shape[1], device=x.device),
                    head_mask=torch.tensor(gates, device=x.device))

    full = gated(*[1.0] * _H)
    if not _close(_run(layer, x, lens, positions=torch.arange(x.shape[1], device=x.device)), full):
        return "head_mask=None must keep every head, as gates of 1 do"
    none = gated(*[0.0] * _H)
    if not _close(none, none[:1, :1].expand_as(none)):
        return ("with every gate 0 the output still depends on the input: a gate must multiply its head's "
                "output (weights @ values), not the queries, keys or scores (a head whose queries are zeroed "
                "attends evenly, it does not fall silent)")
    off = [gated(*[0.0 if g == h else 1.0 for g in range(_H)]) for h in range(_H)]
    half = gated(*[0.5] + [1.0] * (_H - 1))
    if not _close(sum(full - o for o in off), full - none) or not _close(half, (full + off[0]) / 2):
        return ("the gates do not scale each head's output: gating heads off one at a time must add up to "
                "gating them all off, and a gate of 0.5 must give half of the head's output")
    return None


def _cached_step(layer: nn.Module, x: Tensor) -> str | None:
    L = x.shape[1]
    full = _run(layer, x, _causal_lens(0, L), positions=torch.arange(L, device=x.device))
    for prefix in (1, 5, 17, 24, 25, 33):
        cache: dict = {}
        parts = [_run(layer, x[:, :prefix], _causal_lens(0, prefix), positions=torch.arange(prefix), cache=cache)]
        step = min(L, prefix + 3)
        for t in range(prefix, step):
            parts.append(_run(layer, x[:, t:t + 1], _causal_lens(t, t + 1), positions=torch.tensor([t]), cache=cache))
        parts.append(_run(layer, x[:, step:], _causal_lens(step, L), positions=torch.arange(step, L), cache=cache))
        got = torch.cat(parts, dim=1)  # (B, L, D)
        wrong = [p for p in range(L) if not _close(got[:, p], full[:, p])]
        if wrong:
            return (f"after a cached prefix of {prefix}, the cached steps differ from the full forward pass at "
                    f"positions {wrong[0]}-{wrong[-1]}: look at what the cache keeps (every key and value so far, "
                    "in order), the positions the new tokens are turned by, and the mask over the cached keys")
    return None


def _rotary_inside(attention_class: Callable, layer: nn.Module, x: Tensor) -> str | None:
    L = x.shape[1]
    lens = _causal_lens(0, L)
    out = _run(layer, x, lens, positions=torch.arange(L, device=x.device))
    if not _close(_run(layer, x, lens, positions=torch.arange(L, device=x.device) + 7), out):
        return ("shifting every position by 7 changes the output: rotary must turn both the queries and the "
                "keys (and nothing else, not the values), each by its own position")
    plain = _layer(attention_class, None)
    plain.load_state_dict(layer.state_dict())
    if _close(_run(plain, x, lens), out):
        return "the rotary function passed to the layer is never used: turn the queries and keys with it"
    return None


def _reported_weights(layer: nn.Module, x: Tensor) -> str | None:
    L = x.shape[1]
    out = _run(layer, x, _causal_lens(0, L), positions=torch.arange(L, device=x.device))
    weights = getattr(layer, "attention_weights", None)
    if not isinstance(weights, Tensor) or tuple(weights.shape) != (_B, _H, L, L):
        got = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
        return f"self.attention_weights must hold the weights (B, H, Lq, Lk) = {(_B, _H, L, L)}, got {got}"
    if float(weights.detach().triu(diagonal=1).abs().max()) > 1e-6:
        return "self.attention_weights put weight on masked keys (a query's later keys)"
    W_v, W_o = getattr(layer, "W_v", None), getattr(layer, "W_o", None)
    if not (isinstance(W_v, nn.Module) and isinstance(W_o, nn.Module)):
        return "the layer needs the nn.Linear layers W_v and W_o of chapter 3"
    with torch.no_grad():
        v = W_v(x).reshape(_B, L, _H, -1).transpose(1, 2)  # (B, L, D) -> (B, H, L, d)
        rebuilt = W_o((weights.float() @ v).transpose(1, 2).reshape(_B, L, _D))  # (B, H, L, d) -> (B, L, D)
    if not _close(rebuilt, out):
        return ("self.attention_weights are not the weights the output is made of: keep the softmax's result "
                "after masking, the one multiplied by the values")
    return None


def interface_points(attention_class: Callable) -> tuple[int, list[str]]:
    """One point per check of :data:`INTERFACE_CHECKS` passed, and a line per check."""
    x = torch.randn(_B, _L, _D, generator=seeded(37))
    try:
        layer = _layer(attention_class, book_rotary)
    except Broken as err:
        return 0, [f"attention interface: {err}"]
    checks = {"head_mask": lambda: _head_mask(layer, x), "cached step": lambda: _cached_step(layer, x),
              "rotary inside": lambda: _rotary_inside(attention_class, layer, x),
              "reported weights": lambda: _reported_weights(layer, x)}
    points, lines = 0, []
    with eval_mode(layer):
        for name, check in checks.items():
            try:
                problem = check()
            except Broken as err:
                problem = str(err)
            points += problem is None
            lines.append(f"{name}: " + ("right" if problem is None else problem))
    return points, lines


def block_points(block_class: object, most: float) -> tuple[float, str]:
    """A pre-LN block ``block_class(d_model, num_heads, d_ff)``, ``block(x) -> (B, L, D)``, causal.

    Half the points: causal (changing token 3 leaves positions 0-2 unchanged); half: pre-LN
    (``block(c x) - c x`` settles as ``c`` grows, since every sublayer reads a LayerNorm of the
    residual stream and adds to it; a post-LN block normalises its output and does not).
    """
    D, H, d_ff = 16, 2, 32
    name = getattr(block_class, "__name__", "block")
    try:
        block = call(f"{name}({D}, {H}, {d_ff})", block_class, D, H, d_ff)
        if not isinstance(block, nn.Module):
            return 0.0, f"block: {name}({D}, {H}, {d_ff}) is not an nn.Module"
        g = seeded(35)
        with torch.no_grad():
            for p in block.parameters():  # random weights, so that no sublayer is close to zero
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        x = torch.randn(2, 5, D, generator=g)
        with eval_mode(block):
            out = call("block(x)", block, x)
            if not isinstance(out, Tensor) or out.shape != x.shape:
                got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
                return 0.0, f"block: block(x) must return (B, L, D) = {tuple(x.shape)}, got {got}"
            changed = x.clone()
            changed[:, 3:] = torch.randn(2, 2, D, generator=g)
            causal = torch.allclose(call("block(x)", block, changed)[:, :3], out[:, :3], atol=_TOLERANCE)
            far = [call("block(x)", block, c * x) - c * x for c in (1e3, 1e4)]
    except Broken as err:
        return 0.0, f"block: {err}"
    pre_ln = float((far[1] - far[0]).norm() / (9e3 * x.norm())) < 1e-2
    points = most / 2 * (causal + pre_ln)
    notes = [("causal" if causal else "not causal: a later token changed the outputs at earlier positions "
              "(the causal mask is missing or built the wrong way round)"),
             ("pre-LN" if pre_ln else "not pre-LN: the output is not x + sublayer(LayerNorm(x)) "
              "(a LayerNorm after the residual sum, post-LN, or no residual connection)")]
    return points, "block: " + "; ".join(notes)
