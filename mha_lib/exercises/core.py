"""Checkers of the exercises of chapters 1-3: masked softmax, attention, heads, the module.

See :mod:`mha_lib.exercises` for how a checker works and how to add one. The mistake models
come first: for every classic mistake of :data:`mha_lib.exercises.MISTAKES` that these
checkers diagnose, ``_softmax_variant``, ``_attention_variant``, ``_split_variant``,
``_merge_variant`` and ``_multihead_variant`` build, from mha_lib's own pieces, an
implementation that makes exactly that mistake (or two of them at once); for the empty spec
they are the library's reference.

Shape legend
    B   batch size
    H   number of heads
    Lq  number of queries
    Lk  number of key-value pairs
    d   head size (query/key size in plain dot-product attention)
    D   H*d, the model width ``d_model``
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from mha_lib.attention import DotProductAttention
from mha_lib.exercises.runner import (
    Case,
    NotImplementedYet,
    StudentError,
    call_student,
    checker,
    long_tensor,
    matmul_crash_hint,
    run_cases,
    scalar_cases,
    seeded,
)
from mha_lib.heads import transpose_output, transpose_qkv
from mha_lib.mask_conventions import keep_mask_from_valid_lens
from mha_lib.masking import masked_softmax
from mha_lib.multihead import MultiHeadAttention

__all__ = [
    "check_dot_product_attention",
    "check_masked_softmax",
    "check_multihead_attention",
    "check_num_parameters",
    "check_transpose_output",
    "check_transpose_qkv",
]

# --------------------------------------------------------------------------------------------
# Mistake models, built from mha_lib pieces
# --------------------------------------------------------------------------------------------

_MASK_SHIFT = {"right": 0, "one_more": 1, "one_less": -1, "after_softmax": 0}
_SOFTMAX_DIM = {"right": -1, "queries": -2, "batch": 0}


def _softmax_variant(X: Tensor, valid_lens: Tensor | None, spec: dict[str, str]) -> Tensor:
    """``masked_softmax`` with the mistakes of ``spec`` (settings ``mask``, ``axis``, ``empty``).

    Shapes:
        X: (B, Lq, Lk); valid_lens: None, (B,) or (B, Lq) as ``torch.long``.

    Returns:
        (B, Lq, Lk) weights; equal to :func:`mha_lib.masked_softmax` for the empty spec.
    """
    if not spec:
        return masked_softmax(X, valid_lens)
    mask = spec.get("mask", "right")
    B, Lq, Lk = X.shape
    if valid_lens is None or mask == "none":
        keep = torch.ones_like(X, dtype=torch.bool)
    else:
        shifted = (valid_lens + _MASK_SHIFT[mask]).clamp(0, Lk)  # past either end: same mask
        keep = keep_mask_from_valid_lens(shifted, Lq, Lk)  # (B, Lq, Lk)
    empty = spec.get("empty", "zeros")
    if mask == "after_softmax":
        return torch.softmax(X, dim=_SOFTMAX_DIM[spec.get("axis", "right")]) * keep
    fill = {"zeros": torch.finfo(X.dtype).min, "nan": -math.inf, "uniform": -1e6}[empty]
    weights = torch.softmax(X.masked_fill(~keep, fill), dim=_SOFTMAX_DIM[spec.get("axis", "right")])
    return weights * keep if empty == "zeros" else weights


def _attention_variant(queries, keys, values, valid_lens, spec: dict[str, str], d_model=None):
    """Scaled dot-product attention with the mistakes of ``spec`` (adds setting ``scale``).

    Shapes:
        queries (B, Lq, d), keys (B, Lk, d), values (B, Lk, dv) -> (B, Lq, dv).
    """
    if not spec:
        return DotProductAttention(0.0)(queries, keys, values, valid_lens)
    d = queries.shape[-1]
    divisor = {"right": math.sqrt(d), "none": 1.0, "d": float(d), "sqrt_Lk": math.sqrt(keys.shape[1]),
               "sqrt_D": math.sqrt(d_model or d)}[spec.get("scale", "right")]
    scores = torch.bmm(queries, keys.transpose(1, 2)) / divisor  # (B, Lq, Lk)
    return torch.bmm(_softmax_variant(scores, valid_lens, spec), values)  # (B, Lq, dv)


def _split_variant(X: Tensor, num_heads: int, spec: dict[str, str]) -> Tensor:
    """``transpose_qkv`` with the mistakes of ``spec`` (settings ``fold``, ``split``).

    Shapes:
        X: (B, L, D) -> (B*H, L, d)
    """
    fold, split = spec.get("fold", "right"), spec.get("split", "right")
    if fold == "right" and split == "right":
        return transpose_qkv(X, num_heads)
    B, L, D = X.shape
    H, d = num_heads, D // num_heads
    if fold == "no_permute":
        return X.reshape(B * H, L, d)  # (B, L, D) -> (B*H, L, d), positions mixed with heads
    if fold == "permute_0231":
        # (B, L, D) -> (B, L, H, d) -> (B, H, d, L), read as (B*H, L, d)
        return X.reshape(B, L, H, d).permute(0, 2, 3, 1).reshape(B * H, L, d)
    if split == "interleaved":
        X = X.reshape(B, L, d, H).transpose(2, 3)  # (B, L, D) -> (B, L, d, H) -> (B, L, H, d)
    else:
        X = X.reshape(B, L, H, d)  # (B, L, D) -> (B, L, H, d)
    if fold == "head_major":
        return X.permute(2, 0, 1, 3).reshape(H * B, L, d)  # (B, L, H, d) -> (H, B, L, d) -> (H*B, L, d)
    return X.permute(0, 2, 1, 3).reshape(B * H, L, d)  # (B, L, H, d) -> (B, H, L, d) -> (B*H, L, d)


def _merge_variant(X: Tensor, num_heads: int, spec: dict[str, str]) -> Tensor:
    """``transpose_output`` with the mistakes of ``spec`` (settings ``fold``, ``split``, ``merge``).

    Shapes:
        X: (B*H, L, d) -> (B, L, D)
    """
    fold, split = spec.get("fold", "right"), spec.get("split", "right")
    if fold == "permute_0231":  # a mistake of transpose_qkv; on the way back it is "interleaved"
        fold = "right"
    plain_reshape = spec.get("merge") == "reshape"
    if fold == "right" and split == "right" and not plain_reshape:
        return transpose_output(X, num_heads)
    BH, L, d = X.shape
    H, B = num_heads, BH // num_heads
    if fold == "no_permute" or plain_reshape:
        return X.reshape(B, L, H * d)  # (B*H, L, d) -> (B, L, D), positions mixed with heads
    if fold == "head_major":
        X = X.reshape(H, B, L, d).permute(1, 2, 0, 3)  # (H*B, L, d) -> (H, B, L, d) -> (B, L, H, d)
    else:
        X = X.reshape(B, H, L, d).permute(0, 2, 1, 3)  # (B*H, L, d) -> (B, H, L, d) -> (B, L, H, d)
    if split == "interleaved":
        X = X.transpose(2, 3)  # (B, L, H, d) -> (B, L, d, H)
    return X.reshape(B, L, H * d)  # (B, L, H, d) or (B, L, d, H) -> (B, L, D)


def _multihead_variant(ref: MultiHeadAttention, queries, keys, values, valid_lens, spec):
    """The forward pass of ``ref`` (its weights) with the mistakes of ``spec``.

    Settings: those of :func:`_attention_variant`, :func:`_split_variant`, plus ``lens``
    (``repeat``) and ``W_o`` (``skip``).

    Shapes:
        queries (B, Lq, query_size), keys (B, Lk, key_size), values (B, Lk, value_size)
        -> (B, Lq, D)
    """
    if not spec:
        return ref(queries, keys, values, valid_lens)
    H = ref.num_heads
    q = _split_variant(ref.W_q(queries), H, spec)  # (B, Lq, D) -> (B*H, Lq, d)
    k = _split_variant(ref.W_k(keys), H, spec)  # (B, Lk, D) -> (B*H, Lk, d)
    v = _split_variant(ref.W_v(values), H, spec)  # (B, Lk, D) -> (B*H, Lk, d)
    if valid_lens is not None:
        if spec.get("lens") == "repeat":
            valid_lens = valid_lens.repeat(H, *[1] * (valid_lens.dim() - 1))  # (B*H,) or (B*H, Lq)
        else:
            valid_lens = valid_lens.repeat_interleave(H, dim=0)  # (B*H,) or (B*H, Lq)
    D = H * ref.head_size
    out = _attention_variant(q, k, v, valid_lens, spec, d_model=D)  # (B*H, Lq, d)
    out = _merge_variant(out, H, spec)  # (B*H, Lq, d) -> (B, Lq, D)
    return out if spec.get("W_o") == "skip" else ref.W_o(out)


# --------------------------------------------------------------------------------------------
# The checkers
# --------------------------------------------------------------------------------------------

_SOFTMAX_SETTINGS = {
    "mask": ("none", "one_more", "one_less", "after_softmax"),
    "axis": ("queries", "batch"),
    "empty": ("nan", "uniform"),
}


def _softmax_cases(call: Callable) -> list[Case]:
    """Cases for a function ``call(X, valid_lens)`` that should equal ``masked_softmax``."""
    g = seeded(0)
    setups = [
        ("no valid lengths (valid_lens=None)", (2, 3, 4), None),
        ("one valid length per example, valid_lens shape (B,)", (3, 2, 5), [2, 4, 3]),
        ("one valid length per query, valid_lens shape (B, Lq)", (2, 3, 4), [[1, 2, 3], [3, 1, 2]]),
        ("a query with valid length 0", (2, 2, 4), [[0, 2], [3, 1]]),
        ("large scores (about 100 in size)", (2, 2, 3), [2, 3]),
    ]
    cases = []
    for description, shape, lens in setups:
        X = torch.randn(shape, generator=g) * (100.0 if "large" in description else 1.0)
        lens = None if lens is None else long_tensor(lens)
        cases.append(Case(
            description,
            run_student=lambda X, lens=lens: call(X, None if lens is None else lens.clone()),
            variant=lambda spec, X=X, lens=lens: _softmax_variant(X, lens, spec),
            inputs=(X,),
        ))
    return cases


@checker
def check_masked_softmax(fn: Callable) -> bool:
    """Check a student's ``masked_softmax(X, valid_lens)`` against :func:`mha_lib.masked_softmax`.

    Shapes:
        X: (B, Lq, Lk); valid_lens: None, (B,) or (B, Lq); returns (B, Lq, Lk).

    Catches: no masking, a mask off by one, masking after the softmax without renormalising,
    softmax over the wrong axis, NaN or (d2l.ai's convention) uniform weights
    on a row with valid length 0, overflow on large scores, modifying X in place.

    Returns:
        True when every case matches the reference; otherwise prints the diagnosis and
        returns False.
    """
    cases = _softmax_cases(lambda X, lens: call_student(fn, X, lens))
    return run_cases("check_masked_softmax", cases, _SOFTMAX_SETTINGS,
                     "Print your weights next to mha_lib.masked_softmax(X, valid_lens) on a "
                     "tiny example and compare row by row.")


@checker
def check_dot_product_attention(fn: Callable) -> bool:
    """Check ``fn(queries, keys, values, valid_lens)``: scaled dot-product attention.

    Shapes:
        queries: (B, Lq, d); keys: (B, Lk, d); values: (B, Lk, dv); valid_lens: None, (B,) or
        (B, Lq); returns (B, Lq, dv).

    Catches the masking mistakes of :func:`check_masked_softmax`, a missing 1/sqrt(d) scaling,
    a scaling by 1/d or by 1/sqrt(Lk), and ``Q @ K`` without the transpose (Lk differs from d).
    """
    g = seeded(1)
    setups = [
        ("no valid lengths", 2, None),
        ("one valid length per example, shape (B,)", 3, [1, 3, 2]),
        ("one valid length per query, shape (B, Lq)", 2, [[1, 2, 3], [4, 0, 2]]),
    ]
    cases = []
    for description, B, lens in setups:
        q, k, v = (torch.randn(B, 3, 4, generator=g), torch.randn(B, 5, 4, generator=g),
                   torch.randn(B, 5, 3, generator=g))  # Lq=3, Lk=5, d=4, dv=3: all different
        lens = None if lens is None else long_tensor(lens)
        cases.append(Case(
            description,
            run_student=lambda q, k, v, lens=lens: call_student(
                fn, q, k, v, None if lens is None else lens.clone()),
            variant=lambda spec, q=q, k=k, v=v, lens=lens: _attention_variant(q, k, v, lens, spec),
            inputs=(q, k, v),
        ))
    settings = dict(_SOFTMAX_SETTINGS, scale=("none", "d", "sqrt_Lk"))
    return run_cases("check_dot_product_attention", cases, settings,
                     "Compute scores = Q K^T / sqrt(d), weights = masked_softmax(scores, "
                     "valid_lens), output = weights V, and compare each step with yours.",
                     crash_hint=matmul_crash_hint)


def _transpose_cases(call: Callable, qkv: bool) -> list[Case]:
    cases = []
    for B, L, H, d in ((3, 4, 2, 3), (2, 3, 4, 2)):  # B != H so head order is visible
        X = torch.arange(B * L * H * d, dtype=torch.float32)
        X = X.reshape(B, L, H * d) if qkv else X.reshape(B * H, L, d)  # distinct entries
        description = f"B={B}, L={L}, H={H}, d={d}"
        variant = _split_variant if qkv else _merge_variant
        cases.append(Case(
            description,
            run_student=lambda X, H=H: call(X, H),
            variant=lambda spec, X=X, H=H: variant(X, H, spec),
            inputs=(X,),
        ))
    return cases


_TRANSPOSE_SETTINGS = {"fold": ("no_permute", "head_major", "permute_0231"), "split": ("interleaved",)}


def _transpose_shape_hint(got: tuple, expected: tuple) -> str:
    if len(got) == 4:
        return ("A 4-D result means one reshape is missing at the end: merge two axes so the "
                f"result is 3-D, {expected}.")
    if len(got) == 3 and got[0] == expected[0] and got[1:] == expected[:0:-1]:
        return "The last two axes are swapped: the positions L come before the features."
    return ""


@checker
def check_transpose_qkv(fn: Callable) -> bool:
    """Check ``fn(X, num_heads)`` against :func:`mha_lib.transpose_qkv`.

    Shapes:
        X: (B, L, D) -> (B*H, L, d), row ``b*H + h`` = head ``h`` of example ``b``.

    Catches: a reshape without the permute, ``permute(0, 2, 3, 1)``, head-major order, heads made
    of every H-th feature,
    a wrong output shape.
    """
    cases = _transpose_cases(lambda X, H: call_student(fn, X, H), qkv=True)
    return run_cases("check_transpose_qkv", cases, _TRANSPOSE_SETTINGS,
                     "Follow one number: X[b, i, h*d + j] must land at out[b*H + h, i, j].",
                     _transpose_shape_hint)


@checker
def check_transpose_output(fn: Callable) -> bool:
    """Check ``fn(X, num_heads)`` against :func:`mha_lib.transpose_output`.

    Shapes:
        X: (B*H, L, d) -> (B, L, D); it must undo :func:`mha_lib.transpose_qkv`.

    Catches: a reshape without the permute, head-major order, interleaved heads, a wrong shape.
    """
    cases = _transpose_cases(lambda X, H: call_student(fn, X, H), qkv=False)
    return run_cases("check_transpose_output", cases, _TRANSPOSE_SETTINGS,
                     "Follow one number: X[b*H + h, i, j] must land at out[b, i, h*d + j]; "
                     "transpose_output(transpose_qkv(X, H), H) must give X back.",
                     _transpose_shape_hint)


_MHA_SETTINGS = dict(
    _SOFTMAX_SETTINGS,
    scale=("none", "d", "sqrt_D", "sqrt_Lk"),
    lens=("repeat",),
    fold=("no_permute", "head_major", "permute_0231"),
    merge=("reshape",),
    split=("interleaved",),
    W_o=("skip",),
)

# (key_size, query_size, value_size, D = d_model, num_heads, bias); every size distinct so a
# swapped constructor argument shows up as a shape error.
_MHA_CONFIGS = ((5, 6, 7, 8, 2, False), (3, 4, 5, 8, 4, True))


def _prepare_module(cls, config, name: str):
    """Build the student's module and the reference, copy the weights. Return (obj, ref) or
    a list of problems (strings)."""
    key_size, query_size, value_size, D, num_heads, bias = config
    torch.manual_seed(0)
    ref = MultiHeadAttention(key_size, query_size, value_size, D, num_heads, 0.0,
                             bias=bias).eval()
    call = f"{name}({key_size}, {query_size}, {value_size}, {D}, {num_heads}, 0.0, bias={bias})"
    # positionally, d2l's signature: whatever the student calls the width, it comes fourth
    obj = call_student(cls, key_size, query_size, value_size, D, num_heads, 0.0, bias=bias)
    if not isinstance(obj, nn.Module):
        return [f"- {call} built a {type(obj).__name__}, not an nn.Module"]
    problems = []
    sizes = {"W_q": "query_size", "W_k": "key_size", "W_v": "value_size", "W_o": "D"}
    for child, size in sizes.items():
        theirs, mine = getattr(obj, child, None), getattr(ref, child)
        if theirs is None:
            extra = (" Did you forget the output projection W_o?" if child == "W_o" else "")
            problems.append(f"- {call} has no attribute {child}: the checker copies the "
                            f"reference weights through W_q, W_k, W_v and W_o, so give your "
                            f"four nn.Linear layers these names.{extra}")
            continue
        weight = getattr(theirs, "weight", None)
        if not isinstance(weight, Tensor) or weight.shape != mine.weight.shape:
            got = tuple(weight.shape) if isinstance(weight, Tensor) else None
            problems.append(f"- {child} should be nn.Linear({size}, D) with weight "
                            f"shape {tuple(mine.weight.shape)}, got weight shape {got}. Check "
                            "the order of key_size, query_size, value_size.")
            continue
        has_bias = getattr(theirs, "bias", None) is not None
        if has_bias != bias:
            problems.append(f"- {child} {'has' if has_bias else 'has no'} bias although "
                            f"bias={bias}: pass bias=bias to nn.Linear")
            continue
        with torch.no_grad():
            weight.copy_(mine.weight)
            if bias:
                theirs.bias.copy_(mine.bias)
    if problems:
        return problems
    obj.eval()
    return obj, ref


@checker
def check_multihead_attention(cls: type) -> bool:
    """Check a student's multi-head attention class against :class:`mha_lib.MultiHeadAttention`.

    The class is built positionally with d2l's signature, ``cls(key_size, query_size,
    value_size, D, num_heads, dropout, bias=...)`` (D = d_model, whatever the student names it),
    and called as ``obj(queries, keys, values, valid_lens)``; the reference weights are copied
    into its ``W_q``, ``W_k``, ``W_v``, ``W_o`` children.

    Shapes:
        queries (B, Lq, query_size), keys (B, Lk, key_size), values (B, Lk, value_size),
        valid_lens None, (B,) or (B, Lq) -> output (B, Lq, D).

    Catches: every masking mistake, a missing or wrong scaling (1/d, 1/sqrt(D), 1/sqrt(Lk)),
    ``Q @ K`` without the transpose, ``repeat`` instead of ``repeat_interleave``, a reshape
    without the permute, ``permute(0, 2, 3, 1)``, ``transpose_output`` as a plain reshape,
    head-major order, interleaved heads, a forgotten ``W_o``, swapped constructor sizes, an
    ignored ``bias``.
    """
    name = getattr(cls, "__name__", "cls")
    cases: list[Case] = []
    problems: list[str] = []
    for config in _MHA_CONFIGS:
        try:
            built = call_student(_prepare_module, cls, config, name)  # it reads the student's module
        except NotImplementedYet:
            print("check_multihead_attention: not implemented yet (your class raises "
                  "NotImplementedError). Replace the `raise NotImplementedError` lines.")
            return False
        except StudentError as err:
            problems.append(f"- building {name}{config[:5]} with bias={config[5]} raised {err}")
            continue
        if isinstance(built, list):
            problems += built
            continue
        obj, ref = built
        key_size, query_size, value_size, _, H, _ = config
        g = seeded(2)
        B, Lq, Lk = 3, 2, 5  # B differs from H, Lq from Lk, Lk from d and D
        setups = [
            ("no valid lengths", None),
            ("one valid length per example, shape (B,)", [2, 3, 1]),
            ("one valid length per query, shape (B, Lq)", [[1, 3], [2, 2], [3, 1]]),
            ("an example with valid length 0", [0, 2, 3]),
        ]
        for description, lens in setups:
            q = torch.randn(B, Lq, query_size, generator=g)
            k = torch.randn(B, Lk, key_size, generator=g)
            v = torch.randn(B, Lk, value_size, generator=g)
            lens = None if lens is None else long_tensor(lens)

            def run(q, k, v, obj=obj, lens=lens):
                with torch.no_grad():
                    return call_student(obj, q, k, v, None if lens is None else lens.clone())

            def variant(spec, ref=ref, q=q, k=k, v=v, lens=lens):
                with torch.no_grad():
                    return _multihead_variant(ref, q, k, v, lens, spec)

            cases.append(Case(f"H={H}, bias={config[5]}: {description}", run, variant, (q, k, v)))
    if problems:
        print("\n".join(["check_multihead_attention: not yet right."] + problems))
        return False
    return run_cases("check_multihead_attention", cases, _MHA_SETTINGS,
                     "Compare step by step with mha_lib.MultiHeadAttention (same weights): "
                     "the projections, transpose_qkv, the attention, transpose_output, W_o.",
                     crash_hint=matmul_crash_hint)


def _num_parameters_variant(query_size, key_size, value_size, d_model, num_heads, bias,
                            spec) -> int:
    """The parameter count of multi-head attention, with the counting mistakes of ``spec``."""
    D = d_model
    projections = (query_size + key_size + value_size) * D
    if spec.get("params") == "per_head":
        projections *= num_heads
    output = 0 if spec.get("params") == "no_W_o" else D * D
    count_bias = {"ignored": False, "always": True}.get(spec.get("bias", ""), bias)
    biases = (3 + (output > 0)) * D if count_bias else 0
    return projections + output + biases


@checker
def check_num_parameters(fn: Callable) -> bool:
    """Check ``fn(query_size, key_size, value_size, d_model, num_heads, bias) -> int``,
    the number of learnable parameters of multi-head attention.

    Catches: a forgotten W_o, a full projection per head, biases ignored or always counted.
    """
    configs = ((6, 5, 7, 8, 2, False), (6, 5, 7, 8, 4, True), (16, 16, 16, 16, 8, True))
    for config in configs:
        query_size, key_size, value_size, d_model, num_heads, bias = config
        module = MultiHeadAttention(key_size, query_size, value_size, d_model, num_heads,
                                    0.0, bias=bias)
        assert sum(p.numel() for p in module.parameters()) == _num_parameters_variant(*config, {})
    cases = scalar_cases(fn, configs, "query_size={}, key_size={}, value_size={}, d_model={}, "
                         "num_heads={}, bias={}", _num_parameters_variant)
    settings = {"params": ("no_W_o", "per_head"), "bias": ("ignored", "always")}
    return run_cases("check_num_parameters", cases, settings,
                     "Compare with sum(p.numel() for p in MultiHeadAttention(...).parameters()).")
