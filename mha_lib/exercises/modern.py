"""Checkers of the exercises on modern attention: rotary positions, grouped queries, tiles.

* :func:`check_rotary`          RoPE in the book's convention (chapter 3b; chapter 9 reuses it
  with positions past a KV cache);
* :func:`check_interpolation`   RoPE with position interpolation, from L to L' (chapter 12c);
* :func:`check_gqa_from_mha`    grouped-query attention from multi-head attention by
  mean-pooling (chapter 10);
* :func:`check_tiled_attention` attention over blocks of keys with an online softmax
  (chapter 11);
* :func:`check_left_padding_mask` the mask of a decoder over prompts padded on the left (the
  mask lab).

See :mod:`mha_lib.exercises` for how a checker works and how to add one. Each reference is the
library's own code (:func:`mha_lib.positions.rotary`, :func:`mha_lib.gqa.gqa_from_mha`,
:func:`mha_lib.flash.tiled_attention`), and each mistake model is built from it.

Shape legend
    B    batch size
    H    number of (query) heads
    Hkv  number of key/value heads, dividing H; g = H / Hkv heads per group
    L    sequence length (Lq queries, Lk key-value pairs)
    d    head size (query/key size in tiled attention), dv value size
    D    H*d, the model width ``d_model``
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib.exercises.runner import (
    Case,
    StudentError,
    call_student,
    checker,
    long_tensor,
    matmul_crash_hint,
    run_cases,
    seeded,
)
from mha_lib.flash import tiled_attention, tiled_attention_steps
from mha_lib.gqa import gqa_from_mha
from mha_lib.multihead import MultiHeadAttention
from mha_lib.positions import rotary

__all__ = ["check_gqa_from_mha", "check_interpolation", "check_left_padding_mask", "check_rotary",
           "check_tiled_attention"]

# --------------------------------------------------------------------------------------------
# Rotary positions
# --------------------------------------------------------------------------------------------


def _rotary_variant(x: Tensor, positions: Tensor, spec: dict[str, str]) -> Tensor:
    """:func:`mha_lib.positions.rotary` with the mistakes of ``spec``.

    Settings ``pairs`` (``halves``), ``angle`` (``opposite``), ``exponent`` (``i_over_d``),
    ``offset`` (``ignored``).

    Shapes:
        x: (B, H, L, d); positions: (L,) -> (B, H, L, d)
    """
    if spec.get("offset") == "ignored":
        positions = torch.arange(x.shape[-2], device=x.device)  # (L,): every sequence as if it started at 0
    if spec.get("angle") == "opposite":
        positions = -positions  # the angle -p * theta_i
    # 10000**(-i/d) = 100**(-2i/d): the exponent i/d is the book's formula with base 100
    base = 100.0 if spec.get("exponent") == "i_over_d" else 10000.0
    return rotary(x, positions, base, pairs=spec.get("pairs", "interleaved"))


_ROTARY_SETTINGS = {"pairs": ("halves",), "angle": ("opposite",), "exponent": ("i_over_d",),
                    "offset": ("ignored",)}


@checker
def check_rotary(fn: Callable) -> bool:
    """Check ``fn(x, positions)``: RoPE in this book's convention, against
    :func:`mha_lib.positions.rotary`.

    Pair i is the features ``(2i, 2i+1)``; at position p it turns by ``p * 10000**(-2i/d)``.

    Shapes:
        x: (B, H, L, d), d even; positions: (L,) integers; returns (B, H, L, d).

    Catches: the halves convention (pairs (i, i + d/2)), the opposite angle, the exponent i/d
    instead of 2i/d, the positions ignored (an offset lost), modifying x in place.
    """
    g = seeded(11)
    setups = [
        ("positions 0, 1, 2, 3; d = 8", (2, 3, 4, 8), [0, 1, 2, 3]),
        ("positions 5, 6, 7 (after 5 cached tokens); d = 6", (1, 2, 3, 6), [5, 6, 7]),
        ("positions 2, 4, 9, 10, 13; d = 4", (2, 1, 5, 4), [2, 4, 9, 10, 13]),
    ]
    cases = []
    for description, shape, positions in setups:
        x, positions = torch.randn(shape, generator=g), long_tensor(positions)
        cases.append(Case(description, run_student=lambda x, p: call_student(fn, x, p),
                          variant=lambda spec, x=x, p=positions: _rotary_variant(x, p, spec),
                          inputs=(x, positions)))
    return run_cases("check_rotary", cases, _ROTARY_SETTINGS,
                     "Rotate one pair by hand: x[..., 0] and x[..., 1] of the row at position p "
                     "turn by the angle p (i = 0), and compare with mha_lib.positions.rotary.")


def _interpolation_variant(x: Tensor, positions: Tensor, train_len: int, new_len: int,
                           spec: dict[str, str]) -> Tensor:
    """RoPE at the positions times ``train_len / new_len`` (position interpolation), with the
    mistakes of ``spec``: ``interp`` (``inverted``, ``rounded``, ``some_pairs``) and those of
    :func:`_rotary_variant` (``pairs``, ``angle``, ``exponent``, ``offset``).

    Shapes:
        x: (B, H, L, d); positions: (L,) -> (B, H, L, d)
    """
    mistake = spec.get("interp")
    scale = new_len / train_len if mistake == "inverted" else train_len / new_len
    rope = {k: v for k, v in spec.items() if k != "interp"}
    if mistake == "rounded":  # (the cases keep every fraction below 1/2: floor and round agree)
        return _rotary_variant(x, (positions * scale).floor().long(), rope)
    if spec.get("offset") == "ignored":
        positions = torch.arange(x.shape[-2], device=x.device)  # (L,)
    sign = -1 if spec.get("angle") == "opposite" else 1
    base = 100.0 if spec.get("exponent") == "i_over_d" else 10000.0
    pairs = spec.get("pairs", "interleaved")
    scaled = rotary(x, sign * positions, base, pairs=pairs, scale=scale)
    if mistake != "some_pairs":
        return scaled
    d = x.shape[-1]  # only the first half of the pairs (the fast ones) scaled
    feature = torch.arange(d, device=x.device)  # (d,)
    pair = feature // 2 if pairs == "interleaved" else feature % (d // 2)  # (d,): each feature's pair
    return torch.where(pair < d // 4, scaled, rotary(x, sign * positions, base, pairs=pairs))


_INTERPOLATION_SETTINGS = {"interp": ("inverted", "rounded", "some_pairs"), **_ROTARY_SETTINGS}


@checker
def check_interpolation(fn: Callable) -> bool:
    """Check ``fn(x, positions, train_len, new_len)``: RoPE with position interpolation (Chen
    et al., 2023), against ``mha_lib.positions.rotary(x, positions, scale=train_len / new_len)``.

    Pair i (features ``2i, 2i+1``) at position p turns by ``p * L / L' * 10000**(-2i/d)``.

    Shapes:
        x: (B, H, L, d), d even; positions: (L,) integers; returns (B, H, L, d).

    Catches: the inverted scale L'/L, the scaled positions rounded to integers, only some
    pairs scaled, and the mistakes of :func:`check_rotary`.
    """
    g = seeded(12)
    setups = [  # (every scaled position's fraction below 1/2: see _interpolation_variant)
        ("L = 16 to L' = 64 (scale 1/4), positions 0, 1, 4, 5, 8, 9; d = 8", (2, 2, 6, 8), [0, 1, 4, 5, 8, 9], 16, 64),
        ("L = 16 to L' = 40 (scale 2/5), positions 0, 1, 3, 5, 6, 8; d = 8", (1, 2, 6, 8), [0, 1, 3, 5, 6, 8], 16, 40),
        ("L = 16 to L' = 64 after 40 cached tokens, positions 40, 41, 44, 45; d = 12", (2, 1, 4, 12),
         [40, 41, 44, 45], 16, 64),
    ]
    cases = []
    for description, shape, positions, L, L_new in setups:
        x, positions = torch.randn(shape, generator=g), long_tensor(positions)
        cases.append(Case(description, run_student=lambda x, p, L=L, L_new=L_new: call_student(fn, x, p, L, L_new),
                          variant=lambda spec, x=x, p=positions, L=L, L_new=L_new: _interpolation_variant(x, p, L, L_new, spec),
                          inputs=(x, positions)))
    return run_cases("check_interpolation", cases, _INTERPOLATION_SETTINGS,
                     "Take one row at position p: its pair 0 must turn by the angle p * L / L', a "
                     "fraction; compare with mha_lib.positions.rotary(x, positions, scale=L / L').")


# --------------------------------------------------------------------------------------------
# Tiled attention (an online softmax over blocks of keys)
# --------------------------------------------------------------------------------------------


def _tiled_variant(q: Tensor, k: Tensor, v: Tensor, block_size: int,
                   spec: dict[str, str]) -> Tensor:
    """:func:`mha_lib.flash.tiled_attention` with the mistakes of ``spec``, in float64.

    Settings ``accumulator`` and ``running_sum`` (``not_rescaled``), ``blocks``
    (``averaged``), ``scale`` (``none``). Block b adds ``p_b @ V_b`` to the accumulator and
    ``p_b.sum(-1)`` to the running sum, ``p_b = exp(scores_b - m_b)`` with m_b the running
    maximum after it (read off the library's states); the right walk first rescales what came
    before by ``exp(m_{b-1} - m_b)``, a mistake leaves it as it was.

    Shapes:
        q: (B, Lq, d); k: (B, Lk, d); v: (B, Lk, dv) -> (B, Lq, dv)
    """
    q, k, v = q.double(), k.double(), v.double()
    if spec.get("scale") == "none":
        q = q * math.sqrt(q.shape[-1])  # the library divides by sqrt(d): cancel it
    blocks = [slice(start, start + block_size) for start in range(0, k.shape[1], block_size)]
    if spec.get("blocks") == "averaged":  # each block's own softmax, then the mean
        return torch.stack([tiled_attention(q, k[:, b], v[:, b], block_size=block_size)
                            for b in blocks]).mean(0)
    states = tiled_attention_steps(q, k, v, block_size=block_size)
    if not {"accumulator", "running_sum"} & spec.keys():
        return states[-1].output
    q = q / math.sqrt(q.shape[-1])
    acc, total = states[-1].accumulator, states[-1].running_sum  # (B, Lq, dv), (B, Lq)
    if spec.get("accumulator"):
        acc = sum(torch.exp(q @ k[:, b].mT - state.running_max[..., None]) @ v[:, b]
                  for b, state in zip(blocks, states))  # (B, Lq, b) @ (B, b, dv), summed
    if spec.get("running_sum"):
        total = sum(torch.exp(q @ k[:, b].mT - state.running_max[..., None]).sum(-1)
                    for b, state in zip(blocks, states))  # (B, Lq, b) -> (B, Lq), summed
    return acc / total[..., None]


_TILED_SETTINGS = {"accumulator": ("not_rescaled",), "running_sum": ("not_rescaled",),
                   "blocks": ("averaged",), "scale": ("none",)}


def _growing_scores(g: torch.Generator, B: int, Lq: int, Lk: int, d: int):
    """Queries and keys whose scores grow from key to key: the running maximum grows in every
    block. Shapes (B, Lq, d) and (B, Lk, d)."""
    u = torch.randn(d, generator=g)
    q = u + 0.3 * torch.randn(B, Lq, d, generator=g)
    steps = torch.arange(Lk, dtype=torch.float32)[:, None] * 0.6 / u.norm()  # (Lk, 1)
    return q, steps * u / u.norm() + 0.3 * torch.randn(B, Lk, d, generator=g)


@checker
def check_tiled_attention(fn: Callable) -> bool:
    """Check ``fn(q, k, v, block_size)``: softmax(q k^T / sqrt(d)) v computed over blocks of
    ``block_size`` keys with an online softmax, against :func:`mha_lib.flash.tiled_attention`.

    Shapes:
        q: (B, Lq, d); k: (B, Lk, d); v: (B, Lk, dv); returns (B, Lq, dv).

    Catches: the output accumulator or the running sum not rescaled when the running maximum
    grows, no 1/sqrt(d), each block normalised on its own and the blocks averaged, overflow of
    exp() on large scores (NaN), modifying an input in place.
    """
    g = seeded(12)
    cases = []
    # (description, B, Lq, Lk, d, dv, block_size)
    for description, B, Lq, Lk, d, dv, block_size in (
            ("Lk = 8 keys in blocks of 2", 2, 3, 8, 4, 5, 2),
            ("Lk = 7 keys in blocks of 3 (a shorter last block)", 1, 4, 7, 8, 3, 3),
            ("scores that grow from key to key, blocks of 1", 2, 2, 5, 4, 3, 1),
            ("one block holds every key (block_size 8 >= Lk = 5)", 2, 2, 5, 4, 3, 8),
            ("large scores (about 100 in size), blocks of 2", 1, 3, 6, 4, 4, 2)):
        if description.startswith("scores that grow"):
            q, k = _growing_scores(g, B, Lq, Lk, d)
        else:
            size = 10.0 if description.startswith("large") else 1.0
            q, k = (size * torch.randn(B, Lq, d, generator=g),
                    size * torch.randn(B, Lk, d, generator=g))
        v = torch.randn(B, Lk, dv, generator=g)
        cases.append(Case(
            description,
            run_student=lambda q, k, v, b=block_size: call_student(fn, q, k, v, b),
            variant=lambda spec, q=q, k=k, v=v, b=block_size: _tiled_variant(q, k, v, b, spec),
            inputs=(q, k, v)))
    return run_cases("check_tiled_attention", cases, _TILED_SETTINGS,
                     "Print the running maximum, the running sum and the accumulator after "
                     "each block next to mha_lib.flash.tiled_attention_steps(q, k, v, "
                     "block_size=...) and find the first block where they part.",
                     crash_hint=matmul_crash_hint)


# --------------------------------------------------------------------------------------------
# Grouped-query attention from multi-head attention (mean-pooling)
# --------------------------------------------------------------------------------------------


def _pooled_rows(weight: Tensor, H: int, Hkv: int, spec: dict[str, str]) -> Tensor:
    """The key (or value) heads of ``weight`` pooled into Hkv heads, with ``spec``'s mistakes.

    Settings ``kv_groups`` (``tiled``: group j = heads j, j + Hkv, ...) and ``pool`` (``sum``,
    ``first``).

    Shapes:
        weight: (H*d, D) or a bias (H*d,) -> (Hkv*d, D) or (Hkv*d,)
    """
    g, d, rest = H // Hkv, weight.shape[0] // H, weight.shape[1:]
    if spec.get("kv_groups") == "tiled":
        # (H*d, ..) -> (g, Hkv, d, ..) -> (Hkv, g, d, ..): group j = heads j, j + Hkv, ...
        heads = weight.reshape(g, Hkv, d, *rest).transpose(0, 1)
    else:
        heads = weight.reshape(Hkv, g, d, *rest)  # (H*d, ..) -> (Hkv, g, d, ..)
    pool = spec.get("pool")
    pooled = heads.sum(1) if pool == "sum" else heads[:, 0] if pool == "first" else heads.mean(1)
    return pooled.reshape(Hkv * d, *rest)  # (Hkv, d, ..) -> (Hkv*d, ..)


def _gqa_variant(mha: MultiHeadAttention, Hkv: int, x: Tensor, lens: Tensor,
                 spec: dict[str, str]) -> Tensor:
    """Self-attention output on ``x`` of :func:`mha_lib.gqa.gqa_from_mha` ``(mha, Hkv)``, its
    key and value heads pooled with ``spec``'s mistakes. Shapes: x (B, L, D) -> (B, L, D)."""
    gqa = gqa_from_mha(mha, Hkv).eval()
    with torch.no_grad():
        if spec:
            for name in ("W_k", "W_v"):
                for param in ("weight", "bias"):
                    source = getattr(getattr(mha, name), param)
                    if source is not None:
                        getattr(getattr(gqa, name), param).copy_(
                            _pooled_rows(source, mha.num_heads, Hkv, spec))
        return gqa(x, x, x, lens)


_GQA_SETTINGS = {"kv_groups": ("tiled",), "pool": ("sum", "first")}


@checker
def check_gqa_from_mha(fn: Callable) -> bool:
    """Check ``fn(mha, num_kv_heads)``: a ``GroupedQueryAttention`` made from the
    ``MultiHeadAttention`` ``mha`` as uptraining starts (Ainslie et al., 2023), against
    :func:`mha_lib.gqa.gqa_from_mha`: W_q and W_o copied, and the key and value heads of each
    group of g = H / Hkv *consecutive* heads mean-pooled (``mha_lib.gqa.kv_head_of``).

    The result is compared by its self-attention output on the same inputs (with valid
    lengths); ``mha`` has no biases and D = d_model for every size. ``fn`` gets a copy of
    ``mha`` each time.

    Catches: groups tiled (head h pooled into h % Hkv), a sum instead of the mean, the group's
    first head instead of the pool, a result that is not a module or has the wrong number of
    heads.
    """
    x, lens = torch.randn(2, 5, 12, generator=seeded(13)), long_tensor([5, 3])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(13)
        # key_size, query_size, value_size, D = d_model, H, dropout (positional: d2l's order)
        modules = {H: MultiHeadAttention(12, 12, 12, 12, H, 0.0).eval() for H in (4, 6)}
    cases = []
    for H, Hkv in ((4, 2), (6, 3), (6, 2), (4, 1)):
        mha = modules[H]

        def run(x, mha=mha, Hkv=Hkv):
            gqa = call_student(fn, copy.deepcopy(mha), Hkv)
            if not isinstance(gqa, nn.Module):
                raise StudentError(f"no error, but returned a {type(gqa).__name__}, not an "
                                   "nn.Module (expected a mha_lib.gqa.GroupedQueryAttention)")
            for name, want in (("num_heads", mha.num_heads), ("num_kv_heads", Hkv)):
                got = getattr(gqa, name, want)
                if got != want:
                    raise StudentError(f"no error, but the result has {name} = {got}, "
                                       f"expected {want}")
            with torch.no_grad():
                return call_student(gqa.eval(), x, x, x, lens.clone())

        cases.append(Case(f"H = {H} query heads, Hkv = {Hkv} key/value heads", run_student=run,
                          variant=lambda spec, mha=mha, Hkv=Hkv: _gqa_variant(
                              mha, Hkv, x, lens, spec), inputs=(x,)))
    return run_cases("check_gqa_from_mha", cases, _GQA_SETTINGS,
                     "Compare your W_k.weight with mha.W_k.weight.reshape(Hkv, H // Hkv, d, D)"
                     ".mean(1).reshape(Hkv * d, D), and W_q, W_o with mha's.")


# --------------------------------------------------------------------------------------------
# The mask of left-padded prompts (the mask lab)
# --------------------------------------------------------------------------------------------


def _attend_real_queries(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, pad_lens: Tensor) -> Tensor:
    """``F.scaled_dot_product_attention`` with ``mask`` as its ``attn_mask``; the rows of the
    padding queries (positions < pad_lens[b]) are zeroed: nobody reads them.

    Shapes:
        q, k: (B, L, d); v: (B, L, dv); mask: broadcastable to (B, L, L); returns (B, L, dv)
    """
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, L, dv)
    real = torch.arange(q.shape[1]) >= pad_lens[:, None]  # (B, L): the real queries
    return torch.where(real[..., None], out, 0.0)


def _left_padding_variant(pad_lens: Tensor, L: int, qkv: tuple, spec: dict[str, str]) -> Tensor:
    """The output of attention under the keep mask of a causal decoder over prompts padded on
    the left by ``pad_lens`` (B,), with ``spec``'s mistakes (the reference for ``{}``)."""
    j = torch.arange(L)
    if spec.get("padding_side") == "right":
        real = j < L - pad_lens[:, None]  # (B, L): valid lengths, padding on the right
    elif spec.get("pad_start") == "one_more":
        real = j > pad_lens[:, None]
    else:
        real = j >= pad_lens[:, None]  # (B, L): keys 0 .. pad_lens[b] - 1 are padding
    keep = real[:, None, :].expand(len(pad_lens), L, L)  # (B, 1, L) -> (B, L, L)
    if spec.get("causal") != "forgotten":
        keep = keep & (j[None, :, None] >= j[None, None, :])  # query i sees keys j <= i
    if spec.get("mask_convention") == "inverted":
        keep = ~keep
    mask = keep.float() if spec.get("mask_dtype") == "float01" else keep
    return _attend_real_queries(*qkv, mask, pad_lens)


@checker
def check_left_padding_mask(fn: Callable) -> bool:
    """Check ``fn(pad_lens, L)``: the ``attn_mask`` of ``F.scaled_dot_product_attention`` for a
    causal decoder over B prompts padded on the left, prompt b by ``pad_lens[b]`` padding
    tokens (the mask lab, ``ex-mask-left-padding``): a real query sees the real keys at or
    before it. The checker attends with the mask and compares the real queries' outputs.

    Shapes:
        pad_lens: (B,) integers; returns a mask broadcastable to (B, L, L), True = may attend.

    Catches: the padding hidden on the right (valid lengths), the first real token hidden too,
    causality forgotten, True = masked, a 0/1 float mask (added to the scores).
    """
    g = seeded(17)
    cases = []
    for pads, L in (([0, 2, 5], 6), ([1, 3], 5), ([0], 4)):
        pad_lens = long_tensor(pads)
        qkv = tuple(torch.randn(len(pads), L, 4, generator=g) for _ in range(3))

        def run(pad_lens, L=L, qkv=qkv):
            mask = call_student(fn, pad_lens, L)
            if not isinstance(mask, Tensor):  # (None from a missing return would mean "no mask")
                return mask  # the runner names what came instead of a tensor
            return call_student(lambda m: _attend_real_queries(*qkv, m, pad_lens), mask)

        cases.append(Case(f"pad_lens={pads}, L={L}", run_student=run, inputs=(pad_lens,),
                          variant=lambda spec, p=pad_lens, L=L, qkv=qkv: _left_padding_variant(
                              p, L, qkv, spec)))
    return run_cases("check_left_padding_mask", cases,
                     {"padding_side": ("right",), "pad_start": ("one_more",),
                      "causal": ("forgotten",), "mask_convention": ("inverted",),
                      "mask_dtype": ("float01",)},
                     "Print fn(torch.tensor([2]), 5).int(): rows 2 .. 4 (the real queries) must "
                     "show 1 at the keys 2 .. i and 0 elsewhere.")
