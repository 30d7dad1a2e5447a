"""Checkers of the exercises of chapters 4-7: head statistics, counting, cost, pruning.

See :mod:`mha_lib.exercises` for how a checker works and how to add one. Each checker here
follows the same pattern as those of :mod:`mha_lib.exercises.core`: a mistake model
``_<name>_variant(..., spec)`` (the reference for the empty spec), the cases, and one call of
:func:`mha_lib.exercises.runner.run_cases` with the settings it may diagnose.

Shapes in the book's notation (:mod:`mha_lib`): B batch, H heads, Lq queries, Lk key-value
pairs, d head size, D = H*d = ``d_model``.
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
from torch import Tensor, nn

from mha_lib.exercises.runner import (
    MATMUL_ERRORS,
    Case,
    StudentError,
    call_student,
    checker,
    long_tensor,
    run_cases,
    scalar_cases,
    seeded,
)
from mha_lib.importance import prune_heads
from mha_lib.masking import masked_softmax
from mha_lib.multihead import MultiHeadAttention

__all__ = [
    "check_crossover_length",
    "check_longest_sequence",
    "check_mean_entropy",
    "check_prune_heads",
    "check_stiefel_dimension",
]


def _mean_entropy_variant(w: Tensor, spec: dict[str, str]) -> Tensor:
    """Mean row entropy per head of weights (H, Lq, Lk) -> (H,), with the mistakes of ``spec``."""
    log = {"nan": torch.log(w), "log2": torch.log2(w)}.get(spec.get("entropy"))
    terms = torch.xlogy(w, w) if log is None else w * log  # (H, Lq, Lk)
    if spec.get("entropy") == "queries":
        rows = terms.sum(-2)  # (H, Lk): the wrong axis
    else:
        rows = terms.sum(-1)  # (H, Lq)
    return (rows.mean(-1) if spec.get("entropy") == "sign" else -rows.mean(-1))  # (H,)


@checker
def check_mean_entropy(fn: Callable) -> bool:
    """Check ``fn(w)``: the mean row entropy of each head, for weights (H, Lq, Lk) -> (H,).

    Chapter 4's exercise ``ex-04-entropy``. Masked keys have weight 0 and count 0 log 0 = 0.

    Catches: NaN from 0 log 0, log2 instead of the natural log, a missing minus sign, the sum
    over the queries instead of the keys.
    """
    g = seeded(4)
    cases = []
    for description, H, Lq, Lk, lens in (("3 heads, no masked key", 3, 4, 5, [5, 5, 5, 5]),
                                         ("2 heads, masked keys (weight 0)", 2, 3, 6, [6, 2, 4])):
        scores = torch.randn(1, H * Lq, Lk, generator=g)
        lens = torch.tensor(lens).repeat(H)[None]  # (1, H*Lq): one valid length per query
        w = masked_softmax(scores, lens).reshape(H, Lq, Lk)  # (H, Lq, Lk)
        cases.append(Case(description, run_student=lambda w: call_student(fn, w),
                          variant=lambda spec, w=w: _mean_entropy_variant(w, spec), inputs=(w,)))
    return run_cases("check_mean_entropy", cases,
                     {"entropy": ("nan", "log2", "sign", "queries")},
                     "Compute -(torch.xlogy(w, w)).sum(-1).mean(-1) by hand on one head.")


def _stiefel_dimension_variant(N: int, d: int, spec: dict[str, str]) -> int:
    """N*d minus the number of independent equations of P^T P = I (with ``spec``'s mistake)."""
    constraints = {"d_squared": d * d, "antisymmetric": d * (d - 1) // 2, "free": 0}
    return N * d - constraints.get(spec.get("stiefel"), d * (d + 1) // 2)


@checker
def check_stiefel_dimension(fn: Callable) -> bool:
    """Check ``fn(N, d) -> int``, the dimension of the Stiefel manifold St(d, N).

    Chapter 5's exercise ``ex-05-stiefel-dimension``: the answer is N d - d(d+1)/2.

    Catches: d*d or d(d-1)/2 constraints instead of d(d+1)/2, no constraint at all.
    """
    cases = scalar_cases(fn, ((6, 2), (5, 1), (4, 4), (6, 3)), "N={}, d={}",
                         _stiefel_dimension_variant)
    return run_cases("check_stiefel_dimension", cases,
                     {"stiefel": ("d_squared", "antisymmetric", "free")},
                     "Count the entries of P (N*d) and the independent equations of P^T P = I.")


def _crossover_length_variant(D: int, spec: dict[str, str]) -> int:
    """Smallest L with 4 L^2 D >= 8 L D^2 (self-attention), i.e. 2D, or ``spec``'s mistake."""
    return {"half": D, "double": 4 * D, "strict": 2 * D + 1}.get(spec.get("crossover"), 2 * D)


@checker
def check_crossover_length(fn: Callable) -> bool:
    """Check ``fn(D) -> int``: the smallest self-attention length L at which the scores and the
    weighted sum cost as many FLOPs as the four projections (chapter 6, ``ex-06-crossover``).

    Catches: two projections instead of four, the weighted sum forgotten, a strict inequality.
    """
    cases = scalar_cases(fn, ((1,), (8,), (64,), (100,)), "D={}", _crossover_length_variant)
    return run_cases("check_crossover_length", cases,
                     {"crossover": ("half", "double", "strict")},
                     "Write both FLOP counts for L = Lq = Lk and solve 4 L^2 D >= 8 L D^2.")


def _longest_sequence_variant(budget: int, B: int, H: int, spec: dict[str, str]) -> int:
    """Largest L with B*H*L*L*4 <= budget (float32 weights), or ``spec``'s mistake."""
    mistake = spec.get("memory")
    if mistake == "float_sqrt":
        return int(math.sqrt(budget / (4 * B * H)))
    per_weight = {"no_bytes": 1, "float64": 8}.get(mistake, 4)
    return math.isqrt(budget // (per_weight * B * H))


@checker
def check_longest_sequence(fn: Callable) -> bool:
    """Check ``fn(budget, B, H) -> int``: the longest self-attention length whose float32
    weights (B, H, L, L) fit in ``budget`` bytes (chapter 6, ``ex-06-budget``).

    Catches: weights counted instead of bytes, 8 bytes per weight, float rounding of the
    square root for large budgets.
    """
    big = 4 * ((10**8 + 1) ** 2 - 1)  # the exact answer is 10**8; a float sqrt says 10**8 + 1
    configs = ((2**30, 16, 8), (10**9, 3, 5), (4 * 7 * 9, 7, 1), (1, 1, 1), (big, 1, 1))
    cases = scalar_cases(fn, configs, "budget={}, B={}, H={}", _longest_sequence_variant)
    return run_cases("check_longest_sequence", cases,
                     {"memory": ("no_bytes", "float64", "float_sqrt")},
                     "Solve B * H * L * L * 4 <= budget for the largest integer L.")


def _pruned_interleaved(mha: MultiHeadAttention, heads: list[int]) -> nn.Module:
    """The "interleaved" mistake: head h taken as every H-th feature (rows h, h + H, ...) of a
    ``mha`` without biases, then those heads removed (by :func:`mha_lib.importance.prune_heads`
    on a copy whose rows are reordered so that these features sit together)."""
    H, d = mha.num_heads, mha.head_size
    order = [i * H + h for h in range(H) for i in range(d)]  # rows of head h: h, h + H, ...
    shuffled = copy.deepcopy(mha)
    with torch.no_grad():
        for name in ("W_q", "W_k", "W_v"):
            getattr(shuffled, name).weight.copy_(getattr(mha, name).weight[order])  # (D, in)
        shuffled.W_o.weight.copy_(mha.W_o.weight[:, order])  # (D, D)
    return prune_heads(shuffled, heads)


def _prune_heads_variant(mha, heads, x, lens, spec: dict[str, str]) -> Tensor:
    """Output on ``x`` of ``mha`` without ``heads`` (gated to 0), or with ``spec``'s mistake."""
    H = mha.num_heads
    removed = [h for h in range(H) if h not in heads] if spec.get("prune") == "kept_listed" else heads
    with torch.no_grad():
        if spec.get("prune") == "interleaved":
            return _pruned_interleaved(mha, heads)(x, x, x, lens)
        gates = torch.ones(H)
        gates[list(removed)] = 0.0
        return mha(x, x, x, lens, head_mask=gates)  # (B, L, D)


@checker
def check_prune_heads(fn: Callable) -> bool:
    """Check ``fn(mha, heads)``: a smaller ``MultiHeadAttention`` without the listed heads,
    equal to ``mha`` with those heads gated to 0 (chapter 7, ``ex-07-prune``; no biases).

    Catches: keeping the listed heads instead of removing them, rows of every H-th feature
    instead of a block of d, W_o's rows instead of its columns (a shape error), a wrong
    number of heads.
    """
    torch.manual_seed(5)
    mha = MultiHeadAttention(6, 6, 6, 12, 4, 0.0).eval()  # sizes 6, D = 12, H = 4, no dropout
    x, lens = torch.randn(2, 5, 6, generator=seeded(5)), long_tensor([5, 3])
    cases = []
    for heads in ([0], [1, 3], [0, 1, 2]):
        def run(x, heads=heads):
            pruned = call_student(fn, copy.deepcopy(mha), list(heads))  # a copy: mha stays the reference
            if not isinstance(pruned, nn.Module):
                return pruned
            expected = mha.num_heads - len(heads)
            if getattr(pruned, "num_heads", expected) != expected:
                raise StudentError(
                    f"no error, but the result has num_heads = {pruned.num_heads}; removing "
                    f"{len(heads)} of {mha.num_heads} heads leaves {expected}")
            with torch.no_grad():
                return call_student(pruned.eval(), x, x, x, lens.clone())

        cases.append(Case(f"removing heads {heads}", run_student=run,
                          variant=lambda spec, heads=heads: _prune_heads_variant(
                              mha, heads, x, lens, spec), inputs=(x,)))

    def crash_hint(message: str) -> list[str]:
        if any(pattern in message for pattern in MATMUL_ERRORS + ("size of tensor", "shape")):
            return ["  The heads are W_o's *input* features: keep its columns, "
                    "W_o.weight[:, rows], since nn.Linear stores (out_features, in_features)."]
        return []

    return run_cases("check_prune_heads", cases, {"prune": ("kept_listed", "interleaved")},
                     "Compare with mha(x, x, x, valid_lens, head_mask=gates), the gates 0 at "
                     "the removed heads.", crash_hint=crash_hint)
