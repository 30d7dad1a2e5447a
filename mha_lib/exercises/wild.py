"""Checkers of the exercises on attention code in the wild (chapter 5).

* :func:`check_gpt2_c_attn`  split GPT-2's fused ``c_attn`` (a ``Conv1D``) into the weights
  and biases of ``W_q``, ``W_k``, ``W_v``;
* :func:`check_llama_qk`     turn Llama's ``q_proj`` and ``k_proj`` (RoPE in halves, grouped
  keys) into the queries and keys of a multi-head layer with the book's RoPE.

See :mod:`mha_lib.exercises` for how a checker works. The references are the library's own
conversions (:func:`mha_lib.interop.from_gpt2_attention`, :func:`mha_lib.positions.rope_permutation`
with :func:`mha_lib.positions.rotary`), and each mistake model is built from their pieces.

Shape legend
    B    batch size
    H    query heads; Hkv key/value heads, g = H / Hkv
    L    sequence length
    d    head size
    D    H*d, the model width ``d_model``
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from mha_lib.exercises.runner import (
    Case,
    StudentError,
    call_student,
    checker,
    run_cases,
    seeded,
)
from mha_lib.heads import split_heads
from mha_lib.masking import causal_valid_lens
from mha_lib.multihead import MultiHeadAttention
from mha_lib.positions import rope_permutation, rotary

__all__ = ["check_gpt2_c_attn", "check_llama_qk"]

# --------------------------------------------------------------------------------------------
# GPT-2's fused c_attn
# --------------------------------------------------------------------------------------------


def _c_attn_case(seed: int, D: int) -> tuple[Tensor, Tensor, Tensor]:
    """GPT-2's c_attn, a Conv1D: weight (D, 3D) stored (in, out), bias (3D,); inputs (2, 5, D)."""
    gen = seeded(seed)
    return (torch.randn(D, 3 * D, generator=gen), torch.randn(3 * D, generator=gen),
            torch.randn(2, 5, D, generator=gen))


def _causal_output(seed: int, D: int, H: int, weights, biases) -> Tensor:
    """The causal output of a layer with these W_q, W_k, W_v (W_o seeded), on the case's inputs."""
    x = _c_attn_case(seed, D)[2]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mha = MultiHeadAttention(D, D, D, D, H, 0.0, bias=True).eval()
    with torch.no_grad():
        for linear, w, b in zip((mha.W_q, mha.W_k, mha.W_v), weights, biases):
            linear.weight.copy_(w)
            linear.bias.copy_(b)
        return mha(x, x, x, causal_valid_lens(2, 5))


def _c_attn_variant(seed: int, D: int, H: int, spec: dict[str, str]) -> Tensor:
    """The causal output with W_q, W_k, W_v, b_q, b_k, b_v split from c_attn with the mistakes
    of ``spec``: settings ``conv1d`` (``not_transposed``), ``c_attn_split`` (``kqv``: keys
    first), ``c_attn_bias`` (``ignored``:
    zero biases)."""
    weight, bias, _ = _c_attn_case(seed, D)
    w, b = weight.T, bias  # (D, 3D) -> (3D, D), nn.Linear's layout
    ws, bs = list(w.split(D)), list(b.split(D))
    if spec.get("c_attn_split") == "kqv":
        ws[0], ws[1], bs[0], bs[1] = ws[1], ws[0], bs[1], bs[0]
    if spec.get("conv1d") == "not_transposed":  # Conv1D's (D, D) column block copied as it is
        ws = [block.T for block in ws]
    if spec.get("c_attn_bias") == "ignored":
        bs = [torch.zeros(D)] * 3
    return _causal_output(seed, D, H, ws, bs)


_C_ATTN_SETTINGS = {"conv1d": ("not_transposed",), "c_attn_split": ("kqv",),
                    "c_attn_bias": ("ignored",)}


def _read_split(out: object, D: int) -> tuple[list[Tensor], list[Tensor]]:
    """The six tensors of an answer to :func:`check_gpt2_c_attn`, or a StudentError saying why not."""
    if not isinstance(out, (tuple, list)) or len(out) != 6 or not all(isinstance(t, Tensor) for t in out):
        raise StudentError(f"TypeError: expected six tensors (W_q, W_k, W_v, b_q, b_k, b_v), got "
                           f"{type(out).__name__}")
    for name, t, shape in zip(("W_q", "W_k", "W_v", "b_q", "b_k", "b_v"), out, [(D, D)] * 3 + [(D,)] * 3):
        if tuple(t.shape) != shape or t.is_meta or t.is_complex() or t.is_sparse:
            raise StudentError(f"ValueError: {name} must be a real tensor of shape {shape} with values, "
                               f"got {t.dtype} of shape {tuple(t.shape)}"
                               + (" on the meta device" if t.is_meta else ""))
    return [t.detach().float() for t in out[:3]], [t.detach().float() for t in out[3:]]


@checker
def check_gpt2_c_attn(fn: Callable) -> bool:
    """Check ``fn(weight, bias) -> (W_q, W_k, W_v, b_q, b_k, b_v)``: GPT-2's fused ``c_attn``.

    ``weight`` (D, 3D) and ``bias`` (3D,) are a ``Conv1D``'s: it computes ``x @ weight + bias``,
    and its 3D outputs are the queries, then the keys, then the values. The answer gives them
    as ``nn.Linear`` stores them: weights (D, D), (out, in), and biases (D,). The checker loads
    them into a ``MultiHeadAttention``, runs it causally and compares with the right split.
    """
    def run(seed, D, H):
        weight, bias, _ = _c_attn_case(seed, D)
        weights, biases = _read_split(call_student(fn, weight, bias), D)
        return _causal_output(seed, D, H, weights, biases)

    cases = [Case(f"D = {D}, H = {H}", run_student=lambda s=s, D=D, H=H: call_student(run, s, D, H),
                  variant=lambda spec, s=s, D=D, H=H: _c_attn_variant(s, D, H, spec))
             for s, D, H in ((0, 8, 2), (1, 12, 3), (2, 8, 4))]
    return run_cases("check_gpt2_c_attn", cases, _C_ATTN_SETTINGS,
                     "Split c_attn's weight into three blocks of D columns (queries, keys, "
                     "values), transpose each to (D, D), and split the bias the same way.")


# --------------------------------------------------------------------------------------------
# Llama's q_proj and k_proj
# --------------------------------------------------------------------------------------------


def _llama_case(seed: int, H: int, Hkv: int, d: int) -> tuple[Tensor, Tensor, Tensor]:
    """Llama's q_proj (H*d, D) and k_proj (Hkv*d, D) weights, and inputs (2, 6, D)."""
    gen = seeded(seed)
    D = H * d
    return (torch.randn(D, D, generator=gen), torch.randn(Hkv * d, D, generator=gen),
            torch.randn(2, 6, D, generator=gen))


def _scores(W_q: Tensor, W_k: Tensor, x: Tensor, H: int) -> Tensor:
    """The rotated scores of a multi-head layer with the book's RoPE: (B, H, L, L)."""
    positions = torch.arange(x.shape[1])
    q = rotary(split_heads(x @ W_q.T, H), positions)  # (B, L, D) -> (B, H, L, d), rotated
    k = rotary(split_heads(x @ W_k.T, H), positions)
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _llama_variant(seed: int, H: int, Hkv: int, d: int, spec: dict[str, str]) -> Tensor:
    """The scores with W_q, W_k converted with the mistakes of ``spec``.

    Settings ``rope_rows`` (``not_permuted``; ``wrong_way``: ``rope_permutation`` instead of its
    inverse), ``kv_repeat`` (``tiled``: ``repeat`` instead of ``repeat_interleave``).
    """
    q_proj, k_proj, x = _llama_case(seed, H, Hkv, d)
    g = H // Hkv
    k_heads = k_proj.reshape(Hkv, d, -1)  # (Hkv*d, D) -> (Hkv, d, D)
    if spec.get("kv_repeat") == "tiled":
        k_heads = k_heads.repeat(g, 1, 1)  # heads 0, 1, .., 0, 1, ..: the wrong groups
    else:
        k_heads = k_heads.repeat_interleave(g, dim=0)  # heads 0, 0, 1, 1, ..: as repeat_kv
    W_q, W_k = q_proj, k_heads.reshape(H * d, -1)  # (H, d, D) -> (H*d, D)
    if spec.get("rope_rows") != "not_permuted":
        perm = rope_permutation(d, H)
        rows = perm if spec.get("rope_rows") == "wrong_way" else perm.argsort()
        W_q, W_k = W_q[rows], W_k[rows]  # halves -> interleaved, head by head
    return _scores(W_q, W_k, x, H)


_LLAMA_SETTINGS = {"rope_rows": ("not_permuted", "wrong_way"), "kv_repeat": ("tiled",)}


@checker
def check_llama_qk(fn: Callable) -> bool:
    """Check ``fn(q_proj_weight, k_proj_weight, num_heads, num_kv_heads) -> (W_q, W_k)``.

    Llama's projections (RoPE in halves, Hkv key heads) become the (D, D) weights of a
    multi-head layer with the book's RoPE (interleaved pairs) and H key heads: the rows of
    both permuted head by head, each key head repeated for the g query heads of its group.
    The checker compares the rotated scores of every head.
    """
    def run(seed, H, Hkv, d):
        q_proj, k_proj, x = _llama_case(seed, H, Hkv, d)
        out = call_student(fn, q_proj.clone(), k_proj.clone(), H, Hkv)
        if not isinstance(out, (tuple, list)) or len(out) != 2 or not all(isinstance(w, Tensor) for w in out):
            raise StudentError(f"TypeError: expected (W_q, W_k), two tensors, got {type(out).__name__}")
        if any(w.is_meta or w.is_complex() or w.is_sparse for w in out):
            raise StudentError("ValueError: W_q and W_k must be real tensors with values, got "
                               f"{out[0].dtype} and {out[1].dtype}")
        W_q, W_k = (w.detach().to(x.dtype) for w in out)
        if W_q.shape != (H * d, H * d) or W_k.shape != (H * d, H * d):
            raise StudentError(f"W_q and W_k of shape {tuple(W_q.shape)} and {tuple(W_k.shape)}; "
                               f"both must be (D, D) = ({H * d}, {H * d}): one key head per "
                               "query head, each of the Hkv key heads repeated g = H / Hkv times")
        return _scores(W_q, W_k, x, H)

    cases = [Case(f"H = {H}, Hkv = {Hkv}, d = {d}",
                  run_student=lambda s=s, H=H, Hkv=Hkv, d=d: call_student(run, s, H, Hkv, d),
                  variant=lambda spec, s=s, H=H, Hkv=Hkv, d=d: _llama_variant(s, H, Hkv, d, spec))
             for s, H, Hkv, d in ((0, 4, 2, 8), (1, 6, 2, 6), (2, 2, 1, 8))]
    return run_cases("check_llama_qk", cases, _LLAMA_SETTINGS,
                     "Permute the rows of both projections head by head with "
                     "rope_permutation(d, ...).argsort(), and repeat each key head g times "
                     "next to itself (repeat_interleave), as repeat_kv does.")
