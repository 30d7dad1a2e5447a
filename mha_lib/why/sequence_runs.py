"""The experiments on small decoders (:class:`~mha_lib.why._common.SequenceModel`): positions,
and pre-LN or post-LN.

* :func:`positions_trial`  the *two back* task (predict the token two places back) needs
  relative position; trained at L = 16, measured at 16 and at 32 (twice the training length)
* :func:`norm_trial`       six pre-LN or post-LN blocks, with and without warm-up, on the
  same task at a high learning rate

Shape legend
    B   batch size
    L   sequence length
    H   heads
    d   head size
    D   model width
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterator

import torch
from torch import Tensor

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

__all__ = ["norm_trial", "positions_trial"]

_V, _D, _H = 16, 32, 2
_TRAIN_LEN = 16
"""L of the training sequences of the positions and norm experiments."""
_OFFSET = 2
"""The two-back task: the target at position i is the token at i - _OFFSET."""
_TEST_SEED = 2027
_NUM_TEST = 512


def _two_back_batch(batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
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


def positions_trial(seed: int, steps: int, kinds: tuple[str, ...] = POSITIONS) -> dict[str, Outcome]:
    """Two layers (D = 32, H = 2) for each of ``kinds`` (:data:`~mha_lib.why._common.POSITIONS`).

    ``accuracy_1x`` on held-out sequences of the training length, ``accuracy_2x`` on sequences
    twice as long. The learned table has 2 * 16 rows (the last 16 are never trained); the
    others have no position parameters.
    """
    held_out = torch.Generator().manual_seed(_TEST_SEED)
    test_1x = _two_back_batch(_NUM_TEST, _TRAIN_LEN, held_out)
    test_2x = _two_back_batch(_NUM_TEST, 2 * _TRAIN_LEN, held_out)
    out = {}
    for positions in kinds:
        model = seeded(seed, lambda: SequenceModel(_V, _D, _H, 2, 2 * _TRAIN_LEN, positions))
        history = fit(model, _loss, _batches(seed, lambda g: _two_back_batch(64, _TRAIN_LEN, g)),
                      steps=steps, lr=3e-3, warmup=min(50, steps))
        metrics = {"params": float(parameter_count(model)),
                   "accuracy_1x": _accuracy(model, *test_1x), "accuracy_2x": _accuracy(model, *test_2x),
                   "cpu_seconds": history["cpu_seconds"]}
        out[positions] = Outcome(metrics, summarise_curve(history["train_loss"]))
    return out


_NORM_LAYERS, _NORM_LR = 6, 3e-2


def norm_trial(seed: int, steps: int, lr: float = _NORM_LR) -> dict[str, Outcome]:
    """Six blocks (D = 32, H = 2, learned positions) pre-LN or post-LN, with a warm-up over the
    first quarter of the steps or none, at the learning rate ``lr`` (same parameters)."""
    out = {}
    for norm_first in (True, False):
        for warmup in (max(1, steps // 4), 0):  # (at least one step: a run of 2 steps has a warm-up too)
            name = f"{'pre' if norm_first else 'post'}-LN, {'warm-up' if warmup else 'no warm-up'}"
            model = seeded(seed, lambda: SequenceModel(_V, _D, _H, _NORM_LAYERS, _TRAIN_LEN, "learned",
                                                       norm_first=norm_first))
            history = fit(model, _loss, _batches(seed, lambda g: _two_back_batch(32, _TRAIN_LEN, g)),
                          steps=steps, lr=lr, warmup=warmup)
            losses = history["train_loss"]
            metrics = {"params": float(parameter_count(model)),
                       "final_loss": float(losses[-max(1, len(losses) // 10):].mean()),
                       "mean_loss": float(losses.mean()), "cpu_seconds": history["cpu_seconds"]}
            out[name] = Outcome(metrics, summarise_curve(losses))
    return out
