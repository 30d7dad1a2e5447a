"""The runs that could overturn each claim of :mod:`mha_lib.why` (its *threats*).

Every claim of an experiment holds for one size, one budget of steps and one learning rate.
Each threat changes the one thing a sceptic would change first and keeps everything else:

* :func:`heads_long_trial`     one head and two for three times the steps (3000)
* :func:`scale_t5_trial`       no 1/sqrt(d) in the scores, but W_q's initialisation divided by
  sqrt(d) (as T5 does), beside the scaled model and the plain unscaled one
* :func:`causal_long_trial`    the causal mask alone for five times the steps (3000)
* :func:`unseen_offsets_trial` the *copy* task: trained to copy 4 to 7 tokens (offsets 4 to
  7), measured copying 12 to 15 at twice the length (offsets never seen in training)
* :func:`norm_lr_trial`        pre-LN and post-LN over the learning rates 3e-3, 1e-2, 3e-2
* :func:`kv_story_trial`       MHA against MQA on chapter 12's story model, where the keys and
  values of one head must serve the pronoun, the colour and the object at once

Shapes in the book's notation (:mod:`mha_lib`), and L a sequence's length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mha_lib.decoding import kv_cache_bytes
from mha_lib.digits import Config, DigitAttentionModel
from mha_lib.lm_eval import evaluate, held_out_stories
from mha_lib.why._common import Outcome, SequenceModel, fit, parameter_count, seeded, summarise_curve
from mha_lib.why.modern_runs import learned_at, link_curves, story_config, story_run
from mha_lib.why.digit_runs import _digit_outcome, _train, _unscaled, scale_trial
from mha_lib.why.sequence_runs import _D, _H, _TRAIN_LEN, _V, _accuracy, _batches, _loss, norm_trial, positions_trial

__all__ = [
    "NORM_LRS",
    "causal_long_trial",
    "heads_long_trial",
    "kv_story_trial",
    "norm_lr_trial",
    "scale_t5_trial",
    "unseen_offsets_trial",
]


def heads_long_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """H = 1 and H = 2 at D = 32 on the previous-plus-last task (same parameters), ``steps`` long."""
    out = {}
    for H in (1, 2):
        model = seeded(seed, lambda: DigitAttentionModel(Config(num_heads=H)))
        out[f"H={H}"] = _digit_outcome(model, _train(model, seed, steps))
    return out


def _t5_init(model: DigitAttentionModel) -> DigitAttentionModel:
    """No 1/sqrt(d) in the scores, W_q's initial weights divided by sqrt(d) instead (T5)."""
    model = _unscaled(model)
    with torch.no_grad():
        model.attention.W_q.weight.div_(math.sqrt(model.attention.head_size))
    return model


def scale_t5_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """d = 128 scaled, unscaled, and unscaled with the factor folded into W_q's initialisation."""
    return scale_trial(seed, steps, extra=(("no scale, T5 init", _t5_init),))


def causal_long_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The positions experiment's ``causal`` and ``rotary`` decoders, ``steps`` long (two back)."""
    return positions_trial(seed, steps, kinds=("causal", "rotary"))


_SEP = _V
"""The separator of the copy task (one more token than the two-back task's 16)."""


def _copy_batch(batch_size: int, length: int, lengths: tuple[int, int], generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """The copy task: n random tokens in [0, 16), a separator, the same n tokens again.

    n is drawn per row from ``lengths`` (inclusive); the rest of the row is random tokens
    without labels. The target at position n + j (the separator, then the copy) is token j:
    the offset n back.

    Returns:
        tokens (B, L) in [0, 17) and targets (B, L) (-100: no label).
    """
    B, L = batch_size, length
    tokens = torch.randint(0, _V, (B, L), generator=generator)  # (B, L)
    n = torch.randint(lengths[0], lengths[1] + 1, (B, 1), generator=generator)  # (B, 1)
    i = torch.arange(L)[None]  # (1, L)
    source = tokens.gather(1, (i - n - 1).clamp(min=0))  # (B, L): token i - n - 1
    copying = (i > n) & (i <= 2 * n)  # (B, L): the copy's positions
    tokens = torch.where(copying, source, tokens)
    tokens = torch.where(i == n, torch.full_like(tokens, _SEP), tokens)
    targets = torch.full_like(tokens, -100)
    labelled = (i >= n) & (i < 2 * n)  # (B, L): the separator and the copy but its last token
    targets[labelled] = tokens.gather(1, (i - n).clamp(min=0))[labelled]
    return tokens, targets


_UNSEEN_POSITIONS = ("causal", "learned", "sinusoidal", "rotary")
_COPY_TRAIN, _COPY_UNSEEN = (4, 7), (12, 15)
"""n of the copy task in training (offsets 4-7, length 16) and in the unseen test (offsets 12-15, length 32)."""


def unseen_offsets_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """Two layers (D = 32, H = 2) trained at L = 16 to copy 4 to 7 tokens, from ``seed``.

    ``accuracy_seen``: held-out copies of 4 to 7 tokens (the offsets of training);
    ``accuracy_unseen``: copies of 12 to 15 tokens at length 32, offsets never seen in training.
    """
    held_out = torch.Generator().manual_seed(2028)
    seen = _copy_batch(512, 2 * _TRAIN_LEN, _COPY_TRAIN, held_out)
    unseen = _copy_batch(512, 2 * _TRAIN_LEN, _COPY_UNSEEN, held_out)
    out = {}
    for positions in _UNSEEN_POSITIONS:
        model = seeded(seed, lambda: SequenceModel(_V + 1, _D, _H, 2, 2 * _TRAIN_LEN, positions))
        history = fit(model, _loss, _batches(seed, lambda g: _copy_batch(64, _TRAIN_LEN, _COPY_TRAIN, g)),
                      steps=steps, lr=3e-3, warmup=min(50, steps))
        metrics = {"params": float(parameter_count(model)), "accuracy_seen": _accuracy(model, *seen),
                   "accuracy_unseen": _accuracy(model, *unseen), "cpu_seconds": history["cpu_seconds"]}
        out[positions] = Outcome(metrics, summarise_curve(history["train_loss"]))
    return out


NORM_LRS = (3e-3, 1e-2, 3e-2)
"""The learning rates of the norm threat (the claim was made at 3e-2 only)."""


def norm_lr_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The norm experiment's four variants at every learning rate of :data:`NORM_LRS`."""
    out = {}
    for lr in NORM_LRS:
        for name, outcome in norm_trial(seed, steps, lr=lr).items():
            out[f"{name}, lr={lr:g}"] = outcome
    return out


_STORY_HELD_OUT = 200


def kv_story_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """Chapter 12's story model (2 layers, H = 4, D = 64) with 4 key/value heads (MHA) or 1
    (MQA), from ``seed``, ``steps`` long; held-out loss and accuracy at each relation."""
    stories = held_out_stories(_STORY_HELD_OUT)
    out = {}
    for name, Hkv in (("MHA (Hkv=4)", 4), ("MQA (Hkv=1)", 1)):
        config = story_config(seed, steps, num_kv_heads=Hkv)
        result, cpu = story_run(config)  # (the runs of mla's MHA and MQA: trained once per process)
        got = evaluate(result.model, stories)
        metrics = {"params": float(parameter_count(result.model)),
                   **{k: float(v) for k, v in got.items()},
                   "cache_bytes": float(kv_cache_bytes(1, B=1, num_kv_heads=Hkv, head_size=config.d_model // config.num_heads,
                                                       num_layers=config.num_layers)),
                   "cpu_seconds": float(cpu)}
        out[name] = Outcome(metrics, summarise_curve(result.history["train_loss"]),
                            {"learned_at": learned_at(result.history), "links": link_curves(result.history)})
    return out
