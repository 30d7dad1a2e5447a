"""The experiments on chapter 7's previous-plus-last task: several heads, ``W_o``, the scale,
and how many key/value heads.

The task (:mod:`mha_lib.digits`) needs two lookups at every position at once: the previous
digit (a fixed offset) and the last digit (which moves with the valid length). One head has
one set of weights per query; several heads can look at both keys at once.

* :func:`heads_trial`   H = 1, 2, 4, 8 at D = 32 (same parameters for every H)
* :func:`output_trial`  H = 4 with ``W_o`` learned, or fixed at the identity
* :func:`scale_trial`   d = 128 with and without the 1/sqrt(d) of the scores
* :func:`kv_heads_trial` H = 4 query heads with 4, 2 or 1 key/value heads (MHA, GQA, MQA)

Shape legend
    B   batch size
    H   heads, Hkv key/value heads
    L   padded sequence length
    d   head size, D / H
    D   model width
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from mha_lib.decoding import kv_cache_bytes
from mha_lib.digits import Config, DigitAttentionModel, accuracy, held_out_set, make_batch
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.importance import attention_entropy
from mha_lib.why._common import Outcome, cross_entropy, fit, parameter_count, seeded, summarise_curve

__all__ = ["heads_trial", "kv_heads_trial", "output_trial", "scale_trial"]

_HEADS = (1, 2, 4, 8)
"""The head counts of the heads experiment (D = 32, so d = 32, 16, 8, 4)."""
_LR, _WARMUP, _BATCH = 3e-3, 50, 128
_EXAMPLE = 3
"""The held-out example whose weights the figure shows."""


def _train(model: DigitAttentionModel, seed: int, steps: int, lr: float = _LR) -> dict:
    """Train on fresh batches drawn from ``seed + 1`` (the initialisation came from ``seed``)."""
    data = torch.Generator().manual_seed(seed + 1)
    batches = (make_batch(_BATCH, generator=data) for _ in itertools.count())
    return fit(model, lambda m, b: cross_entropy(m(b.tokens, b.valid_lens), b.targets), batches,
               steps=steps, lr=lr, warmup=min(_WARMUP, steps))


@torch.no_grad()
def _lookup_weights(model: DigitAttentionModel) -> Tensor:
    """Each head's mean weight on the two keys the task needs, over the held-out queries.

    Returns:
        (H, 2): column 0 the weight on the previous position (key i-1 for query i), column 1
        on the last valid position (key L-1), averaged over every labelled query.
    """
    batch = held_out_set()
    _, weights = model(batch.tokens, batch.valid_lens, need_weights=True)  # (B, H, L, L)
    B, H, L, _ = weights.shape
    queries = torch.arange(1, L)  # query i >= 1 has a previous position
    previous = weights[:, :, queries, queries - 1]  # (B, H, L-1)
    last = weights.gather(3, (batch.valid_lens - 1)[:, None, None, None].expand(B, H, L, 1))[..., 0]
    last = last[:, :, 1:]  # (B, H, L-1), the same queries
    labelled = (queries[None] < batch.valid_lens[:, None]).float()[:, None]  # (B, 1, L-1)
    count = labelled.sum()
    return torch.stack([(previous * labelled).sum((0, 2)) / count, (last * labelled).sum((0, 2)) / count], 1)


@torch.no_grad()
def _example_weights(model: DigitAttentionModel) -> dict:
    """One held-out example's weights (H, n, n) over its n valid positions, and its tokens."""
    batch = held_out_set()
    n = int(batch.valid_lens[_EXAMPLE])
    _, weights = model(batch.tokens[_EXAMPLE:_EXAMPLE + 1], batch.valid_lens[_EXAMPLE:_EXAMPLE + 1],
                       need_weights=True)  # (1, H, L, L)
    return {"weights": weights[0, :, :n, :n].double().numpy().round(3).tolist(),
            "tokens": batch.tokens[_EXAMPLE, :n].tolist()}


def _digit_outcome(model: DigitAttentionModel, history: dict, extra: dict | None = None) -> Outcome:
    split = _lookup_weights(model)  # (H, 2)
    metrics = {"params": float(parameter_count(model)), "accuracy": accuracy(model, held_out_set()),
               "previous_weight": float(split[:, 0].max()), "last_weight": float(split[:, 1].max()),
               "cpu_seconds": history["cpu_seconds"]}
    return Outcome(metrics, summarise_curve(history["train_loss"]), extra or {})


def heads_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """H = 1, 2, 4, 8 heads at D = 32 on the previous-plus-last task, from ``seed``.

    ``previous_weight`` and ``last_weight``: the largest mean weight any head puts on each of
    the two keys the task needs (one head must split its weight between them).
    """
    out = {}
    for H in _HEADS:
        model = seeded(seed, lambda: DigitAttentionModel(Config(num_heads=H)))
        history = _train(model, seed, steps)
        extra = _example_weights(model) if H in (1, 2) else {}
        out[f"H={H}"] = _digit_outcome(model, history, extra)
    return out


def _identity_output(model: DigitAttentionModel) -> DigitAttentionModel:
    """Fix ``W_o`` at the identity, untrained: head h writes its d features and nothing else."""
    W_o = model.attention.W_o
    with torch.no_grad():
        W_o.weight.copy_(torch.eye(W_o.out_features))
    W_o.weight.requires_grad_(False)
    return model


def output_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """H = 4 at D = 32 with ``W_o`` learned, or fixed at the identity (D*D fewer trained parameters)."""
    out = {}
    for name, change in (("learned W_o", lambda m: m), ("no W_o (identity)", _identity_output)):
        model = seeded(seed, lambda: change(DigitAttentionModel(Config(num_heads=4))))
        out[name] = _digit_outcome(model, _train(model, seed, steps))
    return out


# --- the scale ---------------------------------------------------------------------------------

_SCALE_D_MODEL, _SCALE_HEADS, _SCALE_LR = 256, 2, 1e-3
"""d = 128: the head size where the scale matters (the issue asks for d >= 64)."""


def _softmax_gradient(weights: Tensor) -> Tensor:
    """The Frobenius norm of the softmax's Jacobian ``diag(w) - w w^T`` of every row.

    0 for a one-hot row (a saturated softmax passes no gradient to its scores).

    Shapes:
        weights: (..., Lk); returns (...)
    """
    outer = weights[..., :, None] * weights[..., None, :]  # (..., Lk, Lk)
    jacobian = torch.diag_embed(weights) - outer
    return jacobian.flatten(-2).norm(dim=-1)  # (..., Lk*Lk) -> (...)


def _unscaled(model: DigitAttentionModel) -> DigitAttentionModel:
    """Scores q.k without the 1/sqrt(d): the queries leave W_q multiplied by sqrt(d)."""
    d = model.attention.head_size
    model.attention.W_q.register_forward_hook(lambda module, args, q: q * math.sqrt(d))
    return model


@torch.no_grad()
def _at_initialisation(model: DigitAttentionModel) -> dict[str, float]:
    batch = held_out_set()
    _, weights = model(batch.tokens, batch.valid_lens, need_weights=True)  # (B, H, L, L)
    real = (torch.arange(weights.shape[2])[None] < batch.valid_lens[:, None])[:, None]  # (B, 1, L)
    real = real.expand(weights.shape[:3])  # (B, H, L)
    return {"entropy_init": float(attention_entropy(weights, batch.valid_lens).mean()),
            "max_weight_init": float(weights.max(-1).values[real].mean()),
            "softmax_gradient_init": float(_softmax_gradient(weights)[real].mean())}


def scale_trial(seed: int, steps: int, extra: tuple = ()) -> dict[str, Outcome]:
    """d = 128 (D = 256, H = 2) with and without 1/sqrt(d): the softmax at initialisation,
    then the loss and accuracy after ``steps`` steps at one learning rate (same parameters).

    ``extra``: more variants, ``(name, change)`` pairs, ``change(model) -> model``.
    """
    config = Config(d_model=_SCALE_D_MODEL, num_heads=_SCALE_HEADS)
    out = {}
    for name, change in (("1/sqrt(d)", lambda m: m), ("no scale", _unscaled), *extra):
        model = seeded(seed, lambda: change(DigitAttentionModel(config)))
        start = _at_initialisation(model)
        history = _train(model, seed, steps, lr=_SCALE_LR)
        losses = history["train_loss"]
        metrics = {"params": float(parameter_count(model)), **start,
                   "final_loss": float(losses[-max(1, len(losses) // 10):].mean()),
                   "accuracy": accuracy(model, held_out_set()), "cpu_seconds": history["cpu_seconds"]}
        out[name] = Outcome(metrics, summarise_curve(losses))
    return out


_KV_CHOICES = (4, 2, 1)
"""Hkv of multi-head (MHA), grouped-query (GQA) and multi-query attention (MQA), with H = 4."""
_LEARNED = 0.1
"""A training loss below this (nats; chance is ln 10 = 2.30) counts as the task learned."""


def kv_heads_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """H = 4 query heads at D = 32 (d = 8) with Hkv = 4, 2, 1 key/value heads, from ``seed``.

    The model of the heads experiment with its attention swapped for grouped-query attention
    (``W_k`` and ``W_v`` shrink to D x Hkv*d). ``learned_at``: the first step whose training loss
    is below 0.1 (``steps`` + 1 if none is); ``cache_bytes``: what the KV cache holds per token
    (float32, keys and values).
    """
    out = {}
    for Hkv in _KV_CHOICES:
        def build() -> DigitAttentionModel:
            model = DigitAttentionModel(Config(num_heads=4))
            model.attention = GroupedQueryAttention(32, 4, Hkv, dropout=0.0)
            return model

        model = seeded(seed, build)
        history = _train(model, seed, steps)
        below = (history["train_loss"] < _LEARNED).nonzero()
        outcome = _digit_outcome(model, history)
        outcome.metrics["learned_at"] = float(below[0, 0] + 1 if len(below) else steps + 1)
        outcome.metrics["cache_bytes"] = float(kv_cache_bytes(1, B=1, num_kv_heads=Hkv, head_size=8))
        out[{4: "MHA (Hkv=4)", 2: "GQA (Hkv=2)", 1: "MQA (Hkv=1)"}[Hkv]] = outcome
    return out
