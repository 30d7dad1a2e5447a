"""Checkers of the exercises on linear attention and the delta rule (chapter 12d).

* :func:`check_delta_step`     one token of the delta rule: the state corrected toward the new
  value at the new key, then read by the query, against :func:`mha_lib.linear.delta_recurrent`;
* :func:`check_delta_chunk`    one chunk of the delta rule at once (the triangular system of the
  chunked form), against :func:`mha_lib.linear.delta_chunked`, in float64.

See :mod:`mha_lib.exercises` for how a checker works. The references are the library's own
recurrent and chunked forms (without a decay, ``log_alpha = 0``: DeltaNet); each mistake model
is built next to them. The book's convention: row vectors, a head's state ``S`` (d, d) maps a
key to a value, ``k S``; the step is ``S <- S + beta k^T (v - k S)``, the output ``q S``.

Shape legend
    B    batch size
    H    number of heads
    C    a chunk's positions
    d    head size
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from mha_lib.exercises.runner import Case, StudentError, call_student, checker, run_cases, seeded
from mha_lib.linear import delta_chunked, delta_recurrent

__all__ = ["check_delta_chunk", "check_delta_step"]


def _part(result: object, index: int, names: str) -> object:
    """Entry ``index`` of the student's pair ``(a, b)``; another kind of result is named."""
    if not (isinstance(result, tuple) and len(result) == 2):
        got = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
        raise StudentError(f"no error, but returned {got}: return the pair {names}")
    return result[index]


# --------------------------------------------------------------------------------------------
# One token of the delta rule
# --------------------------------------------------------------------------------------------


def _step_variant(S: Tensor, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, spec: dict[str, str]) -> tuple[Tensor, Tensor]:
    """The new state and the output of one delta-rule step, with the mistakes of ``spec`` (the
    reference for ``{}``: :func:`mha_lib.linear.delta_recurrent` on one token).

    Settings ``delta_beta`` (``forgotten``), ``delta_read`` (``S_k``, ``none``), ``delta_write``
    (``swapped``), ``delta_output`` (``old_state``).

    Shapes:
        S: (B, H, d, d); q, k, v: (B, H, d); beta: (B, H) -> ((B, H, d, d), (B, H, d))
    """
    if not spec:
        out, new = delta_recurrent(q[:, :, None], k[:, :, None], v[:, :, None], beta[:, :, None],
                                   torch.zeros_like(beta[:, :, None]), S)  # one token: L = 1
        return new, out[:, :, 0]
    b = torch.ones_like(beta) if spec.get("delta_beta") == "forgotten" else beta  # (B, H)
    read = spec.get("delta_read")
    if read == "S_k":
        stored = (S @ k[..., None])[..., 0]  # S k^T: the state read the other way round
    elif read == "none":
        stored = torch.zeros_like(v)  # no correction: linear attention's write
    else:
        stored = (k[..., None, :] @ S)[..., 0, :]  # k S: (B, H, 1, d) @ (B, H, d, d) -> (B, H, d)
    error = b[..., None] * (v - stored)  # (B, H, d)
    if spec.get("delta_write") == "swapped":
        new = S + error[..., :, None] * k[..., None, :]  # error^T k
    else:
        new = S + k[..., :, None] * error[..., None, :]  # k^T error
    read_from = S if spec.get("delta_output") == "old_state" else new
    return new, (q[..., None, :] @ read_from)[..., 0, :]


_STEP_SETTINGS = {"delta_beta": ("forgotten",), "delta_read": ("S_k", "none"), "delta_write": ("swapped",),
                  "delta_output": ("old_state",)}


@checker
def check_delta_step(fn: Callable) -> bool:
    """Check ``fn(S, q, k, v, beta)``: one token of the delta rule (DeltaNet), returning the new
    state and the output, against :func:`mha_lib.linear.delta_recurrent` on that token:
    ``S' = S + beta k^T (v - k S)`` and ``o = q S'``.

    Shapes:
        S: (B, H, d, d); q, k, v: (B, H, d); beta: (B, H); returns ``(S', o)``, (B, H, d, d)
        and (B, H, d).

    Catches: beta forgotten, the state read as ``S k^T`` instead of ``k S``, no correction
    (linear attention's ``S + k^T v``), the outer product ``error^T k`` instead of ``k^T error``,
    the output read from the state before the update, modifying an input in place.
    """
    g = seeded(48)
    cases = []
    # (description, B, H, d)
    for description, B, H, d in (("B = 2, H = 2 heads of d = 4", 2, 2, 4), ("B = 1, H = 3 heads of d = 3", 1, 3, 3),
                                 ("B = 1, one head of d = 5", 1, 1, 5)):
        S = torch.randn(B, H, d, d, generator=g)  # a state that is not symmetric: k S and S k^T differ
        q, k, v = (torch.randn(B, H, d, generator=g) for _ in range(3))
        k = k / k.norm(dim=-1, keepdim=True)  # DeltaNet's unit keys
        beta = 0.2 + 0.6 * torch.rand(B, H, generator=g)  # in (0.2, 0.8): not 1
        for index, part in ((0, "the new state"), (1, "the output")):
            cases.append(Case(f"{description}: {part}",
                              run_student=lambda *x, i=index: _part(call_student(fn, *x), i, "(new state, output)"),
                              variant=lambda spec, x=(S, q, k, v, beta), i=index: _step_variant(*x, spec)[i],
                              inputs=(S, q, k, v, beta)))
    return run_cases("check_delta_step", cases, _STEP_SETTINGS,
                     "Compare with mha_lib.linear.delta_recurrent(q[:, :, None], k[:, :, None], "
                     "v[:, :, None], beta[:, :, None], torch.zeros_like(beta[:, :, None]), S): its "
                     "outputs (B, H, 1, d) and its last state.")


# --------------------------------------------------------------------------------------------
# One chunk of the delta rule at once
# --------------------------------------------------------------------------------------------


def _chunk_variant(S: Tensor, Q: Tensor, K: Tensor, V: Tensor, beta: Tensor, spec: dict[str, str]) -> tuple[Tensor, Tensor]:
    """The outputs of a chunk and the state after it, with the mistakes of ``spec`` (the reference
    for ``{}``: :func:`mha_lib.linear.delta_chunked` with one chunk and no decay).

    Settings ``chunk_system`` (``with_diagonal``, ``no_beta``), ``chunk_output`` (``strict``,
    ``no_state``), ``chunk_state`` (``not_carried``).

    Shapes:
        S: (B, H, d, d); Q, K, V: (B, H, C, d); beta: (B, H, C) -> ((B, H, C, d), (B, H, d, d))
    """
    C = Q.shape[2]
    if not spec:
        return delta_chunked(Q, K, V, beta, torch.zeros_like(beta), S, chunk_size=C)
    b = beta[..., None]  # (B, H, C, 1)
    KK = K @ K.mT  # (B, H, C, C)
    system = {"with_diagonal": (b * KK).tril(), "no_beta": KK.tril(-1)}.get(spec.get("chunk_system"), (b * KK).tril(-1))
    system = system + torch.eye(C, dtype=Q.dtype, device=Q.device)
    U = torch.linalg.solve_triangular(system, b * (V - K @ S), upper=False)  # (B, H, C, d)
    mix = (Q @ K.mT).tril(-1 if spec.get("chunk_output") == "strict" else 0)  # (B, H, C, C)
    O = mix @ U + (0 if spec.get("chunk_output") == "no_state" else Q @ S)
    new = K.mT @ U + (0 if spec.get("chunk_state") == "not_carried" else S)  # (B, H, d, C) @ (B, H, C, d)
    return O, new


_CHUNK_SETTINGS = {"chunk_system": ("with_diagonal", "no_beta"), "chunk_output": ("strict", "no_state"),
                   "chunk_state": ("not_carried",)}


@checker
def check_delta_chunk(fn: Callable) -> bool:
    """Check ``fn(S, Q, K, V, beta)``: the delta rule over a chunk of C tokens at once, returning
    the outputs and the state after the chunk, against :func:`mha_lib.linear.delta_chunked` (one
    chunk, no decay) in float64: ``U`` solves ``(I + tril_{-1}(beta K K^T)) U = beta (V - K S)``,
    ``O = Q S + tril(Q K^T) U``, and the next state is ``S + K^T U``. Equal to the recurrent
    form token by token.

    Shapes:
        S: (B, H, d, d); Q, K, V: (B, H, C, d); beta: (B, H, C), all float64; returns ``(O, S')``,
        (B, H, C, d) and (B, H, d, d).

    Catches: the diagonal kept in the system, beta left out of the system, the strict triangle
    in the output (each token's own correction missed), the state before the chunk forgotten in
    the output or not carried to the next state, modifying an input in place.
    """
    g = seeded(12)
    cases = []
    # (description, B, H, C, d)
    for description, B, H, C, d in (("a chunk of C = 4, H = 2 heads of d = 3", 1, 2, 4, 3),
                                    ("a chunk of C = 6, one head of d = 4, B = 2", 2, 1, 6, 4),
                                    ("a chunk of one token, H = 2, d = 2", 1, 2, 1, 2)):
        S = torch.randn(B, H, d, d, generator=g, dtype=torch.float64)
        Q, K, V = (torch.randn(B, H, C, d, generator=g, dtype=torch.float64) for _ in range(3))
        K = K / K.norm(dim=-1, keepdim=True)  # unit keys
        beta = 0.2 + 0.6 * torch.rand(B, H, C, generator=g, dtype=torch.float64)
        for index, part in ((0, "the outputs"), (1, "the state after the chunk")):
            cases.append(Case(f"{description}: {part}",
                              run_student=lambda *x, i=index: _part(call_student(fn, *x), i, "(outputs, new state)"),
                              variant=lambda spec, x=(S, Q, K, V, beta), i=index: _chunk_variant(*x, spec)[i],
                              inputs=(S, Q, K, V, beta)))
    return run_cases("check_delta_chunk", cases, _CHUNK_SETTINGS,
                     "Run mha_lib.linear.delta_recurrent on the same chunk (log_alpha = 0) and "
                     "compare token by token: the first token's output is q_0 (S + beta_0 k_0^T "
                     "(v_0 - k_0 S)).")
