"""The experiments on small decoders (:class:`~mha_lib.why._common.SequenceModel`): positions,
pre-LN or post-LN, and how many key/value heads.

* :func:`positions_trial`  the *two back* task (predict the token two places back) needs
  relative position; trained at L = 16, measured at 16 and at 32 (twice the training length)
* :func:`norm_trial`       six pre-LN or post-LN blocks, with and without warm-up, on the
  same task at a high learning rate
* :func:`kv_heads_trial`   H = 4 query heads with 4, 2 or 1 key/value heads on repeated random
  tokens (chapter 8's induction task): the loss against the KV cache's bytes

Shape legend
    B   batch size
    L   sequence length
    H   query heads, Hkv key/value heads
    d   head size
    D   model width
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterator

import torch
from torch import Tensor

from mha_lib.induction import make_repeated_batch
from mha_lib.why._common import (
    POSITIONS,
    Outcome,
    SequenceModel,
    cross_entropy,
    fit,
    parameter_count,
    seeded,
    summarise_curve,
)

__all__ = ["kv_cache_bytes", "kv_heads_trial", "norm_trial", "positions_trial", "two_back_batch"]

_V, _D, _H = 16, 32, 2
_TRAIN_LEN = 16
"""L of the training sequences of the positions and norm experiments."""
_OFFSET = 2
"""The two-back task: the target at position i is the token at i - _OFFSET."""
_TEST_SEED = 2027
_NUM_TEST = 512


def two_back_batch(batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random tokens (B, L) in [0, 16) and their targets (B, L): the token two places back
    (-100, no label, at the first two positions)."""
    tokens = torch.randint(0, _V, (batch_size, length), generator=generator)  # (B, L)
    targets = torch.full_like(tokens, -100)
    targets[:, _OFFSET:] = tokens[:, :-_OFFSET]
    return tokens, targets


def _batches(seed: int, make: Callable[[torch.Generator], tuple[Tensor, Tensor]]) -> Iterator:
    data = torch.Generator().manual_seed(seed + 1)
    return (make(data) for _ in itertools.count())


def _loss(model: SequenceModel, batch: tuple[Tensor, Tensor]) -> Tensor:
    tokens, targets = batch
    return cross_entropy(model(tokens), targets)


@torch.no_grad()
def _accuracy(model: SequenceModel, tokens: Tensor, targets: Tensor) -> float:
    labelled = targets != -100  # (B, L)
    correct = (model(tokens).argmax(-1) == targets) & labelled
    return correct.sum().item() / labelled.sum().item()


def positions_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """Two layers (D = 32, H = 2) for each of :data:`~mha_lib.why._common.POSITIONS`.

    ``accuracy_1x`` on held-out sequences of the training length, ``accuracy_2x`` on sequences
    twice as long. The learned table has 2 * 16 rows (the last 16 are never trained); the
    others have no position parameters.
    """
    held_out = torch.Generator().manual_seed(_TEST_SEED)
    test_1x = two_back_batch(_NUM_TEST, _TRAIN_LEN, held_out)
    test_2x = two_back_batch(_NUM_TEST, 2 * _TRAIN_LEN, held_out)
    out = {}
    for positions in POSITIONS:
        model = seeded(seed, lambda: SequenceModel(_V, _D, _H, 2, 2 * _TRAIN_LEN, positions))
        history = fit(model, _loss, _batches(seed, lambda g: two_back_batch(64, _TRAIN_LEN, g)),
                      steps=steps, lr=3e-3, warmup=min(50, steps))
        metrics = {"params": float(parameter_count(model)),
                   "accuracy_1x": _accuracy(model, *test_1x), "accuracy_2x": _accuracy(model, *test_2x),
                   "cpu_seconds": history["cpu_seconds"]}
        out[positions] = Outcome(metrics, summarise_curve(history["train_loss"]))
    return out


_NORM_LAYERS, _NORM_LR = 6, 3e-2


def norm_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """Six blocks (D = 32, H = 2, learned positions) pre-LN or post-LN, with a warm-up over the
    first quarter of the steps or none, at the learning rate 0.03 (same parameters)."""
    out = {}
    for norm_first in (True, False):
        for warmup in (steps // 4, 0):
            name = f"{'pre' if norm_first else 'post'}-LN, {'warm-up' if warmup else 'no warm-up'}"
            model = seeded(seed, lambda: SequenceModel(_V, _D, _H, _NORM_LAYERS, _TRAIN_LEN, "learned",
                                                       norm_first=norm_first))
            history = fit(model, _loss, _batches(seed, lambda g: two_back_batch(32, _TRAIN_LEN, g)),
                          steps=steps, lr=_NORM_LR, warmup=warmup)
            losses = history["train_loss"]
            metrics = {"params": float(parameter_count(model)),
                       "final_loss": float(losses[-max(1, len(losses) // 10):].mean()),
                       "mean_loss": float(losses.mean()), "cpu_seconds": history["cpu_seconds"]}
            out[name] = Outcome(metrics, summarise_curve(losses))
    return out


_KV_V, _KV_HEADS, _KV_LAYERS, _KV_HALF = 32, 4, 2, 12
_KV_CHOICES = (4, 2, 1)
"""Hkv of multi-head (MHA), grouped-query (GQA) and multi-query attention (MQA), with H = 4."""


def kv_cache_bytes(num_layers: int, num_kv_heads: int, head_size: int, bytes_per_number: int = 4) -> int:
    """Bytes a KV cache holds per token: keys and values of every layer's Hkv heads of size d."""
    return 2 * num_layers * num_kv_heads * head_size * bytes_per_number


def _repeated(generator: torch.Generator, half: int | None = None) -> tuple[Tensor, Tensor]:
    """Chapter 8's task: distinct random tokens, repeated; predict every next token. The half
    length is drawn for each batch (6 .. 12), so that no fixed offset finds the copy."""
    if half is None:
        half = int(torch.randint(6, _KV_HALF + 1, (), generator=generator))
    tokens = make_repeated_batch(32, half, _KV_V, generator)  # (B, 2*half)
    return tokens[:, :-1], tokens[:, 1:]  # inputs and next tokens, (B, 2*half - 1) each


def kv_heads_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """Two rotary blocks (D = 32, H = 4, d = 8) with Hkv = 4, 2, 1: ``repeat_loss`` is the loss on
    the predictable (repeated) half of held-out sequences, ``cache_bytes`` per token in float32.
    Fewer key/value heads also mean fewer parameters (W_k and W_v shrink to D x Hkv*d)."""
    held_out = _repeated(torch.Generator().manual_seed(_TEST_SEED), _KV_HALF)
    out = {}
    for Hkv in _KV_CHOICES:
        name = {4: "MHA (Hkv=4)", 2: "GQA (Hkv=2)", 1: "MQA (Hkv=1)"}[Hkv]
        model = seeded(seed, lambda: SequenceModel(_KV_V, _D, _KV_HEADS, _KV_LAYERS, 2 * _KV_HALF,
                                                   "rotary", num_kv_heads=Hkv))
        history = fit(model, _loss, _batches(seed, _repeated), steps=steps, lr=3e-3,
                      warmup=min(50, steps))
        with torch.no_grad():
            tokens, targets = held_out
            logits = model(tokens)[:, _KV_HALF:]  # the predictable next tokens: the repeat's 2nd on
            repeat_loss = float(cross_entropy(logits, targets[:, _KV_HALF:]))
        metrics = {"params": float(parameter_count(model)), "repeat_loss": repeat_loss,
                   "cache_bytes": float(kv_cache_bytes(_KV_LAYERS, Hkv, _D // _KV_HEADS)),
                   "cpu_seconds": history["cpu_seconds"]}
        out[name] = Outcome(metrics, summarise_curve(history["train_loss"]))
    return out
