"""RoPE past its training length, and position interpolation (chapter 12c).

The copy task of :mod:`mha_lib.why.threats` (n random tokens, a separator, the same n tokens
again: the target is the token n places back) trained at L = 16 on n = 4 to 7, then run on
sequences of length L' = 32 and 64 with every n that fits (4 to L'/2 - 1): n = 8 and more are
*offsets* the model never saw in training. Variants (two layers, D = 32, H = 2):

* ``rotary``                 RoPE as trained (the angles of positions 0 .. L' - 1);
* ``rotary + PI``            position interpolation (Chen et al., 2023), no training: at length
  L' every angle times L / L' (:func:`mha_lib.positions.rotary`'s ``scale``);
* ``rotary + NTK``           NTK-aware scaling for L' / L times the length, no training: the base
  grows, so the slow pairs are interpolated and the fast ones barely move
  (``Rope(ntk=L' / L)``);
* ``rotary + YaRN``          YaRN for L' / L times the length, no training: pairs that turn many
  times within L keep their frequency, the slow ones are interpolated, and the scores are
  sharpened by the attention factor (``Rope(yarn=L' / L, original_length=L)``);
* ``rotary + PI + fine-tune`` the same with the scale L / 64 = 1/4, fine-tuned for a few steps
  on copies at length 64 (n = 4 to 31), then run with that scale at both lengths;
* ``rotary + fine-tune``     the control: the same fine-tune without the interpolation;
* ``causal`` (NoPE)           the causal mask alone, no position embedding;
* ``alibi``                  the causal mask and ALiBi's linear penalty on the scores.

Shapes in the book's notation (:mod:`mha_lib`), and L a sequence's length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mha_lib.positions import Rope
from mha_lib.why._common import Outcome, SequenceModel, fit, parameter_count, seeded, summarise_curve
from mha_lib.why.sequence_runs import _D, _H, _TRAIN_LEN, _V, _accuracy, _batches, _loss
from mha_lib.why.threats import _COPY_TRAIN, _copy_batch

__all__ = ["LENGTHS", "LENGTH_VARIANTS", "length_trial"]

LENGTHS = (32, 64)
"""The test lengths L' (two and four times the training length L = 16)."""

LENGTH_VARIANTS = ("rotary", "rotary + PI", "rotary + NTK", "rotary + YaRN", "rotary + PI + fine-tune",
                   "rotary + fine-tune", "causal", "alibi")
"""The variants of :func:`length_trial`, in the order they are reported."""

_LR, _FT_LR = 3e-3, 3e-3
_FT_PART = 6  # the fine-tunes take steps // _FT_PART steps
_TEST_ROWS = 64  # rows per copy length n in the test sets
_TEST_SEED = 2029


def _test_sets(length: int) -> dict[int, tuple[Tensor, Tensor]]:
    """``{n: (tokens, targets)}``: copies of n = 4 .. length/2 - 1 tokens at ``length``."""
    held_out = torch.Generator().manual_seed(_TEST_SEED + length)
    return {n: _copy_batch(_TEST_ROWS, length, (n, n), held_out) for n in range(4, length // 2)}


def _scored(model: SequenceModel, sets: dict[int, tuple[Tensor, Tensor]], length: int) -> tuple[dict, list]:
    """The mean accuracy over the trained offsets (n = 4 to 7) and the new ones (n >= 8) at
    ``length``, and the accuracy at each offset n (the figure's)."""
    by_offset = [_accuracy(model, *sets[n]) for n in sorted(sets)]
    lo, hi = _COPY_TRAIN
    trained = [a for n, a in zip(sorted(sets), by_offset) if lo <= n <= hi]
    new = [a for n, a in zip(sorted(sets), by_offset) if n > hi]
    return ({f"accuracy_{length}_trained": sum(trained) / len(trained),
             f"accuracy_{length}_new": sum(new) / len(new)}, [round(a, 4) for a in by_offset])


def _with_scale(model: SequenceModel, scale: float) -> SequenceModel:
    """A copy of the rotary ``model`` whose RoPE angles are multiplied by ``scale``."""
    return _with_rope(model, Rope(scale=scale))


def _with_rope(model: SequenceModel, rope: Rope) -> SequenceModel:
    """A copy of the rotary ``model`` that rotates by the position spec ``rope``."""
    scaled = SequenceModel(_V + 1, _D, _H, 2, max(LENGTHS), "rotary", rope=rope)
    scaled.load_state_dict(model.state_dict())
    return scaled


def _fine_tuned(model: SequenceModel, scale: float, seed: int, steps: int) -> tuple[SequenceModel, dict]:
    """``model`` with RoPE scale ``scale``, trained ``steps`` more on copies at the longest length."""
    tuned = _with_scale(model, scale)
    L = max(LENGTHS)
    history = fit(tuned, _loss, _batches(seed + 100, lambda g: _copy_batch(64, L, (4, L // 2 - 1), g)),
                  steps=steps, lr=_FT_LR, warmup=0)
    return tuned, history


def length_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The variants of :data:`LENGTH_VARIANTS` from ``seed``: ``steps`` at L = 16, and the
    fine-tunes ``steps // 6`` more at L' = 64.

    Metrics: ``accuracy_16`` (n = 4 to 7 at the training length), ``accuracy_{L'}_trained``
    and ``accuracy_{L'}_new`` (the mean over the offsets n = 4 to 7, and over n = 8 to L'/2 - 1);
    ``extra["by_offset"]``: ``{L': [accuracy at n = 4, 5, ...]}``.
    """
    sets = {L: _test_sets(L) for L in (_TRAIN_LEN, *LENGTHS)}
    trained, out = {}, {}
    for kind in ("rotary", "causal", "alibi"):  # the same initial weights, the same batches
        model = seeded(seed, lambda: SequenceModel(_V + 1, _D, _H, 2, max(LENGTHS), kind))
        batches = _batches(seed, lambda g: _copy_batch(64, _TRAIN_LEN, _COPY_TRAIN, g))
        trained[kind] = (model, fit(model, _loss, batches, steps=steps, lr=_LR, warmup=min(50, steps)))
    rotary, base = trained["rotary"]
    ft_steps = max(1, steps // _FT_PART)
    pi_model, pi_history = _fine_tuned(rotary, _TRAIN_LEN / max(LENGTHS), seed, ft_steps)
    plain_model, plain_history = _fine_tuned(rotary, 1.0, seed, ft_steps)
    runs = {  # variant: (the model at each length, its training history, the fine-tune's or None)
        "rotary": ({L: rotary for L in LENGTHS}, base, None),
        "rotary + PI": ({L: _with_scale(rotary, _TRAIN_LEN / L) for L in LENGTHS}, base, None),
        "rotary + NTK": ({L: _with_rope(rotary, Rope(ntk=L / _TRAIN_LEN)) for L in LENGTHS}, base, None),
        "rotary + YaRN": ({L: _with_rope(rotary, Rope(yarn=L / _TRAIN_LEN, original_length=_TRAIN_LEN))
                           for L in LENGTHS}, base, None),
        "rotary + PI + fine-tune": ({L: pi_model for L in LENGTHS}, base, pi_history),
        "rotary + fine-tune": ({L: plain_model for L in LENGTHS}, base, plain_history),
        "causal": ({L: trained["causal"][0] for L in LENGTHS}, trained["causal"][1], None),
        "alibi": ({L: trained["alibi"][0] for L in LENGTHS}, trained["alibi"][1], None),
    }
    for name in LENGTH_VARIANTS:
        models, history, tune = runs[name]
        first = models[LENGTHS[0]] if "fine-tune" in name else trained.get(name, (rotary,))[0]
        at_16 = [_accuracy(first, *batch) for batch in sets[_TRAIN_LEN].values()]  # (n = 4 to 7)
        metrics = {"params": float(parameter_count(first)), "accuracy_16": sum(at_16) / len(at_16)}
        by_offset = {}
        for L in LENGTHS:
            scores, by_offset[str(L)] = _scored(models[L], sets[L], L)
            metrics.update(scores)
        cpu = history["cpu_seconds"] + (tune["cpu_seconds"] if tune is not None else 0.0)
        metrics["cpu_seconds"] = float(cpu)
        curve = summarise_curve(history["train_loss"] if tune is None else
                                torch.cat([history["train_loss"], tune["train_loss"]]))
        out[name] = Outcome(metrics, curve, {"by_offset": by_offset})
    return out
