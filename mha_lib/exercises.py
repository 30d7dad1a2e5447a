"""Checkers for the book's coding exercises: run the student's code, name the mistake.

Each ``check_*`` function runs a student's implementation on a few small cases chosen to expose
the classic mistakes, and compares it with mha_lib's reference. When every case passes it
prints one line and returns ``True``. Otherwise it prints, in plain words, which mistake it
sees and where to look for it, and returns ``False``. A stub that raises
``NotImplementedError`` is reported as "not implemented yet"; any other exception of the
student's code is reported with the case that triggered it. A checker never raises because of
the code it checks.

How a mistake gets its name: the student's source is never read. For every classic mistake this
module builds, from mha_lib's own pieces, an implementation that makes exactly that mistake (or
two of them at once) and runs it on the same cases. The mistake whose outputs match the
student's outputs on every case is the diagnosis.

Shape legend
    B   batch size
    H   number of heads
    Lq  number of queries
    Lk  number of key-value pairs
    d   head size (query/key size in plain dot-product attention)
    D   H*d, ``num_hiddens``
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn

from mha_lib.attention import DotProductAttention
from mha_lib.heads import transpose_output, transpose_qkv
from mha_lib.masking import keep_mask_from_valid_lens, masked_softmax
from mha_lib.multihead import MultiHeadAttention

__all__ = [
    "MISTAKES",
    "check_crossover_length",
    "check_dot_product_attention",
    "check_longest_sequence",
    "check_masked_softmax",
    "check_mean_entropy",
    "check_multihead_attention",
    "check_num_parameters",
    "check_prune_heads",
    "check_stiefel_dimension",
    "check_transpose_output",
    "check_transpose_qkv",
]


# --------------------------------------------------------------------------------------------
# The catalogue of mistakes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mistake:
    """A classic mistake: its name in plain words and how to find it in one's own code.

    ``convention`` marks a choice that is not wrong in itself but differs from the book's
    specification (d2l.ai's uniform rows for valid length 0); the checker says so.
    """

    title: str
    hint: str
    convention: bool = False


#: Every mistake a checker can name, keyed by ``(setting, wrong value)``. A *spec* is a dict of
#: such settings; the empty spec is the correct implementation.
MISTAKES: dict[tuple[str, str], Mistake] = {
    ("mask", "none"): Mistake(
        "no masking: the valid lengths are ignored",
        "Every key gets a weight, even those past the valid length. Build a mask from "
        "valid_lens (key position j is kept when j < valid_len) and fill the scores outside it "
        "with a very negative number before the softmax.",
    ),
    ("mask", "one_more"): Mistake(
        "mask off by one: one key too many is kept",
        "Key positions run from 0, so a valid length of 3 keeps keys 0, 1, 2. Look for `<=` "
        "where `<` belongs (or a `+ 1`) in the comparison that builds the mask.",
    ),
    ("mask", "after_softmax"): Mistake(
        "masked after the softmax, without renormalising",
        "Zeroing the padded keys' weights after the softmax leaves each row summing to less "
        "than 1: the weight the padding received is lost, not given to the valid keys. Mask the "
        "scores before the softmax (fill them with a very negative number), or divide each row "
        "by its new sum.",
    ),
    ("mask", "one_less"): Mistake(
        "mask off by one: one key too few is kept",
        "A valid length of 3 keeps keys 0, 1 and 2, three keys. Look for a `- 1` or for `<` "
        "where the comparison should be `j < valid_len` on 0-based positions.",
    ),
    ("axis", "queries"): Mistake(
        "softmax over the wrong axis (over the queries)",
        "Each query distributes its attention over the keys, so the softmax runs over the last "
        "axis (dim=-1): every row of the (B, Lq, Lk) weights sums to 1. Yours makes the columns "
        "sum to 1 (dim=1 or dim=-2).",
    ),
    ("axis", "batch"): Mistake(
        "softmax over the wrong axis (over the batch)",
        "The softmax must run over the keys, the last axis (dim=-1); yours normalises across "
        "the examples of the batch (dim=0). Check the `dim` argument of your softmax.",
    ),
    ("empty", "nan"): Mistake(
        "NaN on a row with valid length 0",
        "When a query may attend to no key, every score of its row is masked. Filling with "
        "-inf then makes the softmax compute 0/0 = NaN. Fill with a finite very negative number "
        "(torch.finfo(X.dtype).min) and set such rows to zero afterwards.",
    ),
    ("empty", "uniform"): Mistake(
        "another convention for a row with valid length 0: uniform weights instead of zeros",
        "Every row with at least one valid key is right. Filling masked scores with a finite "
        "number such as -1e6, as d2l.ai's masked_softmax does, makes a fully masked row a "
        "uniform average over all keys, padding included: that is d2l.ai's convention. This "
        "book's convention is that a query with valid length 0 attends to nothing; to follow "
        "it, multiply the weights by the mask so that row is all 0.",
        convention=True,
    ),
    ("scale", "none"): Mistake(
        "missing 1/sqrt(d) scaling",
        "The scores are Q K^T / sqrt(d), with d the size of a query/key (of one head). Without "
        "the division, large d makes the softmax saturate.",
    ),
    ("scale", "d"): Mistake(
        "scaling by 1/d instead of 1/sqrt(d)",
        "Divide the scores by math.sqrt(d), not by d: the dot product of two random vectors "
        "with d unit-variance entries has standard deviation sqrt(d).",
    ),
    ("scale", "sqrt_Lk"): Mistake(
        "scaling by 1/sqrt(Lk), the number of keys, instead of 1/sqrt(d)",
        "The scale comes from the size of one dot product: d, the last axis of the queries "
        "and keys (queries.shape[-1]), not the number of keys (keys.shape[1]). The variance of "
        "a score grows with d, whatever the number of keys.",
    ),
    ("scale", "sqrt_D"): Mistake(
        "scaling by 1/sqrt(num_hiddens) instead of 1/sqrt(d)",
        "Each head computes dot products of size d = num_hiddens / num_heads, so the scores of "
        "a head are divided by sqrt(d), the head size, not by sqrt(num_hiddens).",
    ),
    ("lens", "repeat"): Mistake(
        "repeat instead of repeat_interleave for the valid lengths",
        "After transpose_qkv, row b*H + h holds head h of example b, so each example's valid "
        "length must appear H times in a row: valid_lens.repeat_interleave(H, dim=0) turns "
        "[3, 2] into [3, 3, 2, 2]. `repeat` gives [3, 2, 3, 2] and hands the heads of one "
        "example the lengths of another.",
    ),
    ("fold", "no_permute"): Mistake(
        "reshape without the permute: positions mixed with heads",
        "Reshaping (B, L, D) straight to (B*H, L, d) cuts the memory in the wrong places: one "
        "'head' then holds pieces of several positions. Reshape to (B, L, H, d), permute to "
        "(B, H, L, d), and only then merge B and H (and the reverse in transpose_output).",
    ),
    ("scores", "no_transpose"): Mistake(
        "Q @ K without the transpose",
        "The scores are Q K^T: (B, Lq, d) @ (B, d, Lk) -> (B, Lq, Lk). Multiplying by the keys "
        "themselves, (B, Lk, d), fails as soon as Lk differs from d, and silently computes "
        "something else when they happen to be equal. Use keys.transpose(-2, -1) (or keys.mT).",
    ),
    ("fold", "permute_0231"): Mistake(
        "permute(0, 2, 3, 1) instead of permute(0, 2, 1, 3)",
        "After reshaping (B, L, D) to (B, L, H, d), permute(0, 2, 1, 3) gives (B, H, L, d). "
        "permute(0, 2, 3, 1) gives (B, H, d, L); the final reshape to (B*H, L, d) still "
        "succeeds (L*d = d*L) but every row now mixes positions and features. Write the shape "
        "after each step in a comment.",
    ),
    ("merge", "reshape"): Mistake(
        "transpose_output as a plain reshape",
        "(B*H, Lq, d) cannot go straight to (B, Lq, D) by reshape: the heads of one example sit "
        "in consecutive rows, so a reshape glues positions of one head together. Reshape to "
        "(B, H, Lq, d), permute to (B, Lq, H, d), then merge the last two axes.",
    ),
    ("fold", "head_major"): Mistake(
        "heads ordered head-major instead of batch-major",
        "The folded batch must be ordered example by example: row b*H + h is head h of example "
        "b (permute to (B, H, L, d) before merging the first two axes). Yours puts all "
        "examples of head 0 first (row h*B + b), which no longer matches valid lengths "
        "repeated with repeat_interleave.",
    ),
    ("split", "interleaved"): Mistake(
        "heads take every H-th feature instead of a block of d features",
        "Split the features as (H, d): head h owns features h*d .. h*d + d - 1. Reshaping to "
        "(B, L, d, H) gives head h the features h, h + H, h + 2H, ... instead.",
    ),
    ("W_o", "skip"): Mistake(
        "forgot the output projection W_o",
        "After transpose_output concatenates the heads, the result still goes through W_o, "
        "which mixes the heads: return self.W_o(output_concat).",
    ),
    ("params", "no_W_o"): Mistake(
        "forgot the output projection W_o",
        "Multi-head attention has four projections: W_q, W_k, W_v and the output projection "
        "W_o of shape (num_hiddens, num_hiddens).",
    ),
    ("params", "per_head"): Mistake(
        "counted a full-size projection for every head",
        "The heads share the projections: W_q maps query_size to num_hiddens = H*d once, and "
        "head h uses its own d output columns. The count does not depend on num_heads.",
    ),
    ("bias", "ignored"): Mistake(
        "the biases are not counted",
        "With bias=True each of the four nn.Linear layers has a bias of num_hiddens entries.",
    ),
    ("bias", "always"): Mistake(
        "biases counted although bias=False",
        "With bias=False the four projections are plain matrices without a bias vector.",
    ),
}


# --------------------------------------------------------------------------------------------
# Reference implementations of each mistake, built from mha_lib pieces
# --------------------------------------------------------------------------------------------

_MASK_SHIFT = {"right": 0, "one_more": 1, "one_less": -1, "after_softmax": 0}
_SOFTMAX_DIM = {"right": -1, "queries": -2, "batch": 0}


def softmax_variant(X: Tensor, valid_lens: Tensor | None, spec: dict[str, str]) -> Tensor:
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


def attention_variant(queries, keys, values, valid_lens, spec: dict[str, str], num_hiddens=None):
    """Scaled dot-product attention with the mistakes of ``spec`` (adds setting ``scale``).

    Shapes:
        queries (B, Lq, d), keys (B, Lk, d), values (B, Lk, dv) -> (B, Lq, dv).
    """
    if not spec:
        return DotProductAttention(0.0)(queries, keys, values, valid_lens)
    d = queries.shape[-1]
    divisor = {"right": math.sqrt(d), "none": 1.0, "d": float(d), "sqrt_Lk": math.sqrt(keys.shape[1]),
               "sqrt_D": math.sqrt(num_hiddens or d)}[spec.get("scale", "right")]
    scores = torch.bmm(queries, keys.transpose(1, 2)) / divisor  # (B, Lq, Lk)
    return torch.bmm(softmax_variant(scores, valid_lens, spec), values)  # (B, Lq, dv)


def split_variant(X: Tensor, num_heads: int, spec: dict[str, str]) -> Tensor:
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


def merge_variant(X: Tensor, num_heads: int, spec: dict[str, str]) -> Tensor:
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


def multihead_variant(ref: MultiHeadAttention, queries, keys, values, valid_lens, spec):
    """The forward pass of ``ref`` (its weights) with the mistakes of ``spec``.

    Settings: those of :func:`attention_variant`, :func:`split_variant`, plus ``lens``
    (``repeat``) and ``W_o`` (``skip``).

    Shapes:
        queries (B, Lq, query_size), keys (B, Lk, key_size), values (B, Lk, value_size)
        -> (B, Lq, D)
    """
    if not spec:
        return ref(queries, keys, values, valid_lens)
    H = ref.num_heads
    q = split_variant(ref.W_q(queries), H, spec)  # (B, Lq, D) -> (B*H, Lq, d)
    k = split_variant(ref.W_k(keys), H, spec)  # (B, Lk, D) -> (B*H, Lk, d)
    v = split_variant(ref.W_v(values), H, spec)  # (B, Lk, D) -> (B*H, Lk, d)
    if valid_lens is not None:
        if spec.get("lens") == "repeat":
            valid_lens = valid_lens.repeat(H, *[1] * (valid_lens.dim() - 1))  # (B*H,) or (B*H, Lq)
        else:
            valid_lens = valid_lens.repeat_interleave(H, dim=0)  # (B*H,) or (B*H, Lq)
    out = attention_variant(q, k, v, valid_lens, spec, num_hiddens=ref.num_hiddens)  # (B*H, Lq, d)
    out = merge_variant(out, H, spec)  # (B*H, Lq, d) -> (B, Lq, D)
    return out if spec.get("W_o") == "skip" else ref.W_o(out)


# --------------------------------------------------------------------------------------------
# The engine: run the cases, compare, name the mistake
# --------------------------------------------------------------------------------------------


class _NotImplemented(Exception):
    pass


class _Crash(Exception):
    pass


@dataclass
class _Case:
    """One case: ``run_student(*inputs)`` gets copies of ``inputs``; ``variant(spec)`` computes
    what an implementation with the mistakes of ``spec`` returns (the reference for ``{}``)."""

    description: str
    run_student: Callable[..., object]
    variant: Callable[[dict], Tensor]
    inputs: tuple = ()
    exact: bool = False  # integer answers: compare exactly, not to a relative tolerance


def _close(a: Tensor, b: Tensor, exact: bool = False) -> bool:
    if exact:
        return a.shape == b.shape and torch.equal(a, b)
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)


def _call(fn, *args, **kwargs):
    """Call student code; turn its exceptions into _NotImplemented / _Crash."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise _NotImplemented from None
    except Exception as err:  # the student's bug, reported rather than raised
        raise _Crash(f"{type(err).__name__}: {err}") from None


def _specs(settings: dict[str, tuple[str, ...]], max_mistakes: int = 2):
    """Every spec with 1 .. max_mistakes wrong settings, fewest mistakes first."""
    names = list(settings)
    for n in range(1, max_mistakes + 1):
        for chosen in itertools.combinations(names, n):
            for values in itertools.product(*(settings[name] for name in chosen)):
                yield dict(zip(chosen, values))


def _diagnose(cases, outputs, settings) -> list[dict]:
    """The specs with the fewest mistakes whose outputs match the student's on every case."""
    found: list[dict] = []
    for spec in _specs(settings):
        if found and len(spec) > len(found[0]):
            break
        if all(_close(outputs[i], case.variant(spec), case.exact)
               for i, case in enumerate(cases) if i in outputs):
            found.append(spec)
    return found


def _describe_spec(spec: dict) -> list[str]:
    lines = []
    for key in spec.items():
        mistake = MISTAKES[key]
        lines.append(f"  * {mistake.title}.")
        lines.append(f"    How to find it: {mistake.hint}")
    return lines


_MATMUL_ERRORS = ("batch2", "cannot be multiplied", "size mismatch", "does not broadcast")


def _matmul_crash_hint(message: str) -> list[str]:
    """A matrix product with mismatched sizes in attention code is usually Q @ K."""
    if not any(pattern in message for pattern in _MATMUL_ERRORS):
        return []
    return ["  A matrix product got sizes that do not fit. If it is the scores:"] + _describe_spec(
        {"scores": "no_transpose"})


def _run_checker(name: str, cases: list[_Case], settings: dict[str, tuple[str, ...]],
                 general_hint: str, shape_hint: Callable[[tuple, tuple], str] | None = None,
                 crash_hint: Callable[[str], list[str]] | None = None) -> bool:
    """Run every case, print the verdict (and the diagnosis), return whether all passed."""
    outputs: dict[int, Tensor] = {}
    problems: list[str] = []
    differ: list[str] = []
    nan_cases: list[int] = []
    in_place = False
    for i, case in enumerate(cases):
        copies = [x.clone() for x in case.inputs]
        try:
            out = case.run_student(*copies)
        except _NotImplemented:
            print(f"{name}: not implemented yet (your code raises NotImplementedError). "
                  "Replace the `raise NotImplementedError` line with your implementation.")
            return False
        except _Crash as err:
            problems.append(f"- on the case '{case.description}' your code raised {err}")
            hint = crash_hint(str(err)) if crash_hint else []
            if hint and not any(line in problems for line in hint):
                problems += hint
            continue
        if any(not torch.equal(x, y) for x, y in zip(copies, case.inputs)) and not in_place:
            in_place = True
            problems.append(f"- on the case '{case.description}' your code modified its input "
                            "in place (e.g. X[~mask] = ... on X or on a view of it). Work on a "
                            "new tensor: masked_fill (without the underscore) returns one.")
        if isinstance(out, tuple) and out and isinstance(out[0], Tensor):
            out = out[0]  # (output, weights): compare the output
        if not isinstance(out, Tensor):
            problems.append(f"- on the case '{case.description}' your code returned "
                            f"{type(out).__name__}, not a tensor (a missing `return`?)")
            continue
        expected = case.variant({})
        if out.shape != expected.shape:
            extra = shape_hint(tuple(out.shape), tuple(expected.shape)) if shape_hint else ""
            problems.append(f"- on the case '{case.description}' the output has shape "
                            f"{tuple(out.shape)}, expected {tuple(expected.shape)}. {extra}".rstrip())
            continue
        out = out.detach().to(expected.dtype)
        outputs[i] = out
        if torch.isnan(out).any() and not torch.isnan(expected).any():
            nan_cases.append(i)
        if not _close(out, expected, case.exact):
            differ.append(case.description)
    if not problems and not differ:
        print(f"{name}: all {len(cases)} cases pass.")
        return True
    lines = [f"{name}: not yet right."] + problems
    if differ:
        lines.append(f"- the output differs from the reference on {len(differ)} of {len(cases)} "
                     "cases: " + "; ".join(f"'{d}'" for d in differ))
        specs = _diagnose(cases, outputs, settings)
        explained = set(outputs)
        if not specs:  # explain at least the first case that differs
            first = next(i for i in outputs if cases[i].description == differ[0])
            specs = _diagnose([cases[first]], {0: outputs[first]}, settings)
            explained = {first}
            if specs:
                lines.append(f"  (what follows explains the case '{differ[0]}'; the other "
                             "cases may hide one more mistake)")
        if specs and not problems and all(MISTAKES[key].convention for spec in specs
                                           for key in spec.items()):
            lines[0] = f"{name}: not a bug, another convention than this book's."
        if specs:
            lines.append("What it looks like" + (" (one of these):" if len(specs) > 1 else ":"))
            for spec in specs:
                lines += _describe_spec(spec)
        else:
            explained = set()
            lines.append(f"  The outputs match none of the classic mistakes. {general_hint}")
        unexplained_nan = [i for i in nan_cases if i not in explained]
        if unexplained_nan:
            lines.append(f"  Your output contains NaN on the case "
                         f"'{cases[unexplained_nan[0]].description}'. NaN comes from 0/0 or "
                         "inf/inf: a row whose scores are all -inf, or exp() of large scores "
                         "without first subtracting the row maximum (torch.softmax does that).")
    print("\n".join(lines))
    return False


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _lens(values) -> Tensor:
    return torch.tensor(values, dtype=torch.long)


# --------------------------------------------------------------------------------------------
# The checkers
# --------------------------------------------------------------------------------------------

_SOFTMAX_SETTINGS = {
    "mask": ("none", "one_more", "one_less", "after_softmax"),
    "axis": ("queries", "batch"),
    "empty": ("nan", "uniform"),
}


def _softmax_cases(call: Callable) -> list[_Case]:
    """Cases for a function ``call(X, valid_lens)`` that should equal ``masked_softmax``."""
    g = _seeded(0)
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
        lens = None if lens is None else _lens(lens)
        cases.append(_Case(
            description,
            run_student=lambda X, lens=lens: call(X, None if lens is None else lens.clone()),
            variant=lambda spec, X=X, lens=lens: softmax_variant(X, lens, spec),
            inputs=(X,),
        ))
    return cases


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
    cases = _softmax_cases(lambda X, lens: _call(fn, X, lens))
    return _run_checker("check_masked_softmax", cases, _SOFTMAX_SETTINGS,
                        "Print your weights next to mha_lib.masked_softmax(X, valid_lens) on a "
                        "tiny example and compare row by row.")


def check_dot_product_attention(fn: Callable) -> bool:
    """Check ``fn(queries, keys, values, valid_lens)``: scaled dot-product attention.

    Shapes:
        queries: (B, Lq, d); keys: (B, Lk, d); values: (B, Lk, dv); valid_lens: None, (B,) or
        (B, Lq); returns (B, Lq, dv).

    Catches the masking mistakes of :func:`check_masked_softmax`, a missing 1/sqrt(d) scaling,
    a scaling by 1/d or by 1/sqrt(Lk), and ``Q @ K`` without the transpose (Lk differs from d).
    """
    g = _seeded(1)
    setups = [
        ("no valid lengths", 2, None),
        ("one valid length per example, shape (B,)", 3, [1, 3, 2]),
        ("one valid length per query, shape (B, Lq)", 2, [[1, 2, 3], [4, 0, 2]]),
    ]
    cases = []
    for description, B, lens in setups:
        q, k, v = (torch.randn(B, 3, 4, generator=g), torch.randn(B, 5, 4, generator=g),
                   torch.randn(B, 5, 3, generator=g))  # Lq=3, Lk=5, d=4, dv=3: all different
        lens = None if lens is None else _lens(lens)
        cases.append(_Case(
            description,
            run_student=lambda q, k, v, lens=lens: _call(
                fn, q, k, v, None if lens is None else lens.clone()),
            variant=lambda spec, q=q, k=k, v=v, lens=lens: attention_variant(q, k, v, lens, spec),
            inputs=(q, k, v),
        ))
    settings = dict(_SOFTMAX_SETTINGS, scale=("none", "d", "sqrt_Lk"))
    return _run_checker("check_dot_product_attention", cases, settings,
                        "Compute scores = Q K^T / sqrt(d), weights = masked_softmax(scores, "
                        "valid_lens), output = weights V, and compare each step with yours.",
                        crash_hint=_matmul_crash_hint)


def _transpose_cases(call: Callable, qkv: bool) -> list[_Case]:
    cases = []
    for B, L, H, d in ((3, 4, 2, 3), (2, 3, 4, 2)):  # B != H so head order is visible
        X = torch.arange(B * L * H * d, dtype=torch.float32)
        X = X.reshape(B, L, H * d) if qkv else X.reshape(B * H, L, d)  # distinct entries
        description = f"B={B}, L={L}, H={H}, d={d}"
        variant = split_variant if qkv else merge_variant
        cases.append(_Case(
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


def check_transpose_qkv(fn: Callable) -> bool:
    """Check ``fn(X, num_heads)`` against :func:`mha_lib.transpose_qkv`.

    Shapes:
        X: (B, L, D) -> (B*H, L, d), row ``b*H + h`` = head ``h`` of example ``b``.

    Catches: a reshape without the permute, ``permute(0, 2, 3, 1)``, head-major order, heads made
    of every H-th feature,
    a wrong output shape.
    """
    cases = _transpose_cases(lambda X, H: _call(fn, X, H), qkv=True)
    return _run_checker("check_transpose_qkv", cases, _TRANSPOSE_SETTINGS,
                        "Follow one number: X[b, i, h*d + j] must land at out[b*H + h, i, j].",
                        _transpose_shape_hint)


def check_transpose_output(fn: Callable) -> bool:
    """Check ``fn(X, num_heads)`` against :func:`mha_lib.transpose_output`.

    Shapes:
        X: (B*H, L, d) -> (B, L, D); it must undo :func:`mha_lib.transpose_qkv`.

    Catches: a reshape without the permute, head-major order, interleaved heads, a wrong shape.
    """
    cases = _transpose_cases(lambda X, H: _call(fn, X, H), qkv=False)
    return _run_checker("check_transpose_output", cases, _TRANSPOSE_SETTINGS,
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

# (key_size, query_size, value_size, num_hiddens, num_heads, bias); every size distinct so a
# swapped constructor argument shows up as a shape error.
_MHA_CONFIGS = ((5, 6, 7, 8, 2, False), (3, 4, 5, 8, 4, True))


def _prepare_module(cls, config, name: str):
    """Build the student's module and the reference, copy the weights. Return (obj, ref) or
    a list of problems (strings)."""
    key_size, query_size, value_size, num_hiddens, num_heads, bias = config
    torch.manual_seed(0)
    ref = MultiHeadAttention(key_size, query_size, value_size, num_hiddens, num_heads, 0.0,
                             bias=bias).eval()
    call = f"{name}({key_size}, {query_size}, {value_size}, {num_hiddens}, {num_heads}, 0.0, bias={bias})"
    obj = _call(cls, key_size, query_size, value_size, num_hiddens, num_heads, 0.0, bias=bias)
    if not isinstance(obj, nn.Module):
        return [f"- {call} built a {type(obj).__name__}, not an nn.Module"]
    problems = []
    sizes = {"W_q": "query_size", "W_k": "key_size", "W_v": "value_size", "W_o": "num_hiddens"}
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
            problems.append(f"- {child} should be nn.Linear({size}, num_hiddens) with weight "
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


def check_multihead_attention(cls: type) -> bool:
    """Check a student's multi-head attention class against :class:`mha_lib.MultiHeadAttention`.

    The class is built as ``cls(key_size, query_size, value_size, num_hiddens, num_heads,
    dropout, bias=...)`` and called as ``obj(queries, keys, values, valid_lens)``; the reference
    weights are copied into its ``W_q``, ``W_k``, ``W_v``, ``W_o`` children.

    Shapes:
        queries (B, Lq, query_size), keys (B, Lk, key_size), values (B, Lk, value_size),
        valid_lens None, (B,) or (B, Lq) -> output (B, Lq, num_hiddens).

    Catches: every masking mistake, a missing or wrong scaling (1/d, 1/sqrt(D), 1/sqrt(Lk)),
    ``Q @ K`` without the transpose, ``repeat`` instead of ``repeat_interleave``, a reshape
    without the permute, ``permute(0, 2, 3, 1)``, ``transpose_output`` as a plain reshape,
    head-major order, interleaved heads, a forgotten ``W_o``, swapped constructor sizes, an
    ignored ``bias``.
    """
    name = getattr(cls, "__name__", "cls")
    cases: list[_Case] = []
    problems: list[str] = []
    for config in _MHA_CONFIGS:
        try:
            built = _prepare_module(cls, config, name)
        except _NotImplemented:
            print("check_multihead_attention: not implemented yet (your class raises "
                  "NotImplementedError). Replace the `raise NotImplementedError` lines.")
            return False
        except _Crash as err:
            problems.append(f"- building {name}{config[:5]} with bias={config[5]} raised {err}")
            continue
        if isinstance(built, list):
            problems += built
            continue
        obj, ref = built
        key_size, query_size, value_size, _, H, _ = config
        g = _seeded(2)
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
            lens = None if lens is None else _lens(lens)

            def run(q, k, v, obj=obj, lens=lens):
                with torch.no_grad():
                    return _call(obj, q, k, v, None if lens is None else lens.clone())

            def variant(spec, ref=ref, q=q, k=k, v=v, lens=lens):
                with torch.no_grad():
                    return multihead_variant(ref, q, k, v, lens, spec)

            cases.append(_Case(f"H={H}, bias={config[5]}: {description}", run, variant, (q, k, v)))
    if problems:
        print("\n".join(["check_multihead_attention: not yet right."] + problems))
        return False
    return _run_checker("check_multihead_attention", cases, _MHA_SETTINGS,
                        "Compare step by step with mha_lib.MultiHeadAttention (same weights): "
                        "the projections, transpose_qkv, the attention, transpose_output, W_o.",
                        crash_hint=_matmul_crash_hint)


def num_parameters_variant(query_size, key_size, value_size, num_hiddens, num_heads, bias,
                           spec) -> int:
    """The parameter count of multi-head attention, with the counting mistakes of ``spec``."""
    D = num_hiddens
    projections = (query_size + key_size + value_size) * D
    if spec.get("params") == "per_head":
        projections *= num_heads
    output = 0 if spec.get("params") == "no_W_o" else D * D
    count_bias = {"ignored": False, "always": True}.get(spec.get("bias", ""), bias)
    biases = (3 + (output > 0)) * D if count_bias else 0
    return projections + output + biases


def check_num_parameters(fn: Callable) -> bool:
    """Check ``fn(query_size, key_size, value_size, num_hiddens, num_heads, bias) -> int``,
    the number of learnable parameters of multi-head attention.

    Catches: a forgotten W_o, a full projection per head, biases ignored or always counted.
    """
    configs = ((6, 5, 7, 8, 2, False), (6, 5, 7, 8, 4, True), (16, 16, 16, 16, 8, True))
    cases = []
    for config in configs:
        query_size, key_size, value_size, num_hiddens, num_heads, bias = config
        module = MultiHeadAttention(key_size, query_size, value_size, num_hiddens, num_heads,
                                    0.0, bias=bias)
        ref = sum(p.numel() for p in module.parameters())
        assert ref == num_parameters_variant(*config, {})

        def run(config=config):
            out = _call(fn, *config)
            return torch.tensor(float(out)) if isinstance(out, (int, float)) else out

        cases.append(_Case(
            "query_size={}, key_size={}, value_size={}, num_hiddens={}, num_heads={}, "
            "bias={}".format(*config),
            run_student=run,
            variant=lambda spec, config=config: torch.tensor(
                float(num_parameters_variant(*config, spec))),
        ))
    settings = {"params": ("no_W_o", "per_head"), "bias": ("ignored", "always")}
    return _run_checker("check_num_parameters", cases, settings,
                        "Compare with sum(p.numel() for p in MultiHeadAttention(...).parameters()).")


# --------------------------------------------------------------------------------------------
# Checkers for the exercises of chapters 4-7
# --------------------------------------------------------------------------------------------

MISTAKES.update({
    ("entropy", "nan"): Mistake(
        "NaN from 0 * log(0) on masked keys",
        "A masked key has weight exactly 0, and w * torch.log(w) is then 0 * (-inf) = NaN. By "
        "convention 0 log 0 = 0: use torch.xlogy(w, w), or torch.special.entr(w).",
    ),
    ("entropy", "log2"): Mistake(
        "entropy in bits (log2) instead of nats (natural log)",
        "The exercise compares with log 6, the natural logarithm: use torch.log (or xlogy), "
        "not torch.log2.",
    ),
    ("entropy", "sign"): Mistake(
        "the minus sign is missing",
        "Entropy is -sum w log w; every log w <= 0, so without the minus the result is negative.",
    ),
    ("entropy", "queries"): Mistake(
        "summed over the queries instead of over the keys",
        "Each row (one query, over the keys) is a distribution: sum over the last axis "
        "(dim=-1), then average the rows of each head (dim=-1 of the result).",
    ),
    ("stiefel", "d_squared"): Mistake(
        "d*d constraints instead of d(d+1)/2",
        "P^T P = I is a symmetric d x d equation: entry (i, j) and entry (j, i) are the same "
        "equation, so only d(d+1)/2 of the d*d entries constrain P.",
    ),
    ("stiefel", "antisymmetric"): Mistake(
        "d(d-1)/2 constraints instead of d(d+1)/2",
        "d(d-1)/2 is the dimension of the orthogonal group (the off-diagonal equations only). "
        "The diagonal equations |p_i| = 1 constrain P too: d(d+1)/2 in all.",
    ),
    ("stiefel", "free"): Mistake(
        "no constraint counted: N*d",
        "N*d is the size of an unconstrained N x d matrix. The rank of the Jacobian of the "
        "parametrization is smaller, because the map lands on the manifold P^T P = I.",
    ),
    ("crossover", "half"): Mistake(
        "L = D: only two of the four projections counted",
        "Self-attention has four D x D projections (W_q, W_k, W_v on L tokens each, W_o on the "
        "L outputs), 8 L D^2 FLOPs in all, against 4 L^2 D for the scores and the weighted sum.",
    ),
    ("crossover", "double"): Mistake(
        "L = 4D: only the scores counted, not the weighted sum",
        "The attention part is two matrix products of the same size, the scores Q K^T and the "
        "weighted sum of the values: 2 L^2 D FLOPs each, 4 L^2 D together.",
    ),
    ("crossover", "strict"): Mistake(
        "one too many: attention must *reach* the projections, not exceed them",
        "The smallest L with 4 L^2 D >= 8 L D^2 is L = 2D itself (equality counts).",
    ),
    ("memory", "no_bytes"): Mistake(
        "counted weights, not bytes",
        "Each float32 weight takes 4 bytes: B * H * L * L * 4 <= budget.",
    ),
    ("memory", "float64"): Mistake(
        "8 bytes per weight: float64 instead of float32",
        "The weights are float32: 4 bytes each.",
    ),
    ("memory", "float_sqrt"): Mistake(
        "int(math.sqrt(...)) rounds up for large numbers",
        "A float has 53 bits of mantissa: for budgets around 10^16 math.sqrt can return the "
        "next integer. math.isqrt computes the exact floor of the square root.",
    ),
    ("prune", "kept_listed"): Mistake(
        "kept the listed heads instead of removing them",
        "`heads` lists the heads to remove: keep every head h that is *not* in the list.",
    ),
    ("prune", "interleaved"): Mistake(
        "head h's rows taken as h, h + H, h + 2H, ... instead of the block h*d .. h*d + d - 1",
        "transpose_qkv gives head h the d consecutive features h*d, ..., h*d + d - 1: keep "
        "those rows of W_q, W_k, W_v and those columns of W_o.",
    ),
})


def _int_output(fn: Callable, *args) -> Tensor:
    out = _call(fn, *args)
    return torch.tensor(float(out), dtype=torch.float64) if isinstance(out, (int, float)) else out


def _scalar_cases(fn: Callable, configs, describe: str, variant: Callable) -> list[_Case]:
    return [_Case(describe.format(*config),
                  run_student=lambda config=config: _int_output(fn, *config),
                  variant=lambda spec, config=config: torch.tensor(float(variant(*config, spec)),
                                                                   dtype=torch.float64),
                  exact=True)
            for config in configs]


def mean_entropy_variant(w: Tensor, spec: dict[str, str]) -> Tensor:
    """Mean row entropy per head of weights (H, Lq, Lk) -> (H,), with the mistakes of ``spec``."""
    log = {"nan": torch.log(w), "log2": torch.log2(w)}.get(spec.get("entropy"))
    terms = torch.xlogy(w, w) if log is None else w * log  # (H, Lq, Lk)
    if spec.get("entropy") == "queries":
        rows = terms.sum(-2)  # (H, Lk): the wrong axis
    else:
        rows = terms.sum(-1)  # (H, Lq)
    return (rows.mean(-1) if spec.get("entropy") == "sign" else -rows.mean(-1))  # (H,)


def check_mean_entropy(fn: Callable) -> bool:
    """Check ``fn(w)``: the mean row entropy of each head, for weights (H, Lq, Lk) -> (H,).

    Chapter 4's exercise ``ex-04-entropy``. Masked keys have weight 0 and count 0 log 0 = 0.

    Catches: NaN from 0 log 0, log2 instead of the natural log, a missing minus sign, the sum
    over the queries instead of the keys.
    """
    g = _seeded(4)
    cases = []
    for description, H, Lq, Lk, lens in (("3 heads, no masked key", 3, 4, 5, [5, 5, 5, 5]),
                                         ("2 heads, masked keys (weight 0)", 2, 3, 6, [6, 2, 4])):
        scores = torch.randn(1, H * Lq, Lk, generator=g)
        lens = torch.tensor(lens).repeat(H)[None]  # (1, H*Lq): one valid length per query
        w = masked_softmax(scores, lens).reshape(H, Lq, Lk)  # (H, Lq, Lk)
        cases.append(_Case(description, run_student=lambda w: _call(fn, w),
                           variant=lambda spec, w=w: mean_entropy_variant(w, spec), inputs=(w,)))
    return _run_checker("check_mean_entropy", cases,
                        {"entropy": ("nan", "log2", "sign", "queries")},
                        "Compute -(torch.xlogy(w, w)).sum(-1).mean(-1) by hand on one head.")


def stiefel_dimension_variant(N: int, d: int, spec: dict[str, str]) -> int:
    """N*d minus the number of independent equations of P^T P = I (with ``spec``'s mistake)."""
    constraints = {"d_squared": d * d, "antisymmetric": d * (d - 1) // 2, "free": 0}
    return N * d - constraints.get(spec.get("stiefel"), d * (d + 1) // 2)


def check_stiefel_dimension(fn: Callable) -> bool:
    """Check ``fn(N, d) -> int``, the dimension of the Stiefel manifold St(d, N).

    Chapter 5's exercise ``ex-05-stiefel-dimension``: the answer is N d - d(d+1)/2.

    Catches: d*d or d(d-1)/2 constraints instead of d(d+1)/2, no constraint at all.
    """
    cases = _scalar_cases(fn, ((6, 2), (5, 1), (4, 4), (6, 3)), "N={}, d={}",
                          stiefel_dimension_variant)
    return _run_checker("check_stiefel_dimension", cases,
                        {"stiefel": ("d_squared", "antisymmetric", "free")},
                        "Count the entries of P (N*d) and the independent equations of P^T P = I.")


def crossover_length_variant(D: int, spec: dict[str, str]) -> int:
    """Smallest L with 4 L^2 D >= 8 L D^2 (self-attention), i.e. 2D, or ``spec``'s mistake."""
    return {"half": D, "double": 4 * D, "strict": 2 * D + 1}.get(spec.get("crossover"), 2 * D)


def check_crossover_length(fn: Callable) -> bool:
    """Check ``fn(D) -> int``: the smallest self-attention length L at which the scores and the
    weighted sum cost as many FLOPs as the four projections (chapter 6, ``ex-06-crossover``).

    Catches: two projections instead of four, the weighted sum forgotten, a strict inequality.
    """
    cases = _scalar_cases(fn, ((1,), (8,), (64,), (100,)), "D={}", crossover_length_variant)
    return _run_checker("check_crossover_length", cases,
                        {"crossover": ("half", "double", "strict")},
                        "Write both FLOP counts for L = Lq = Lk and solve 4 L^2 D >= 8 L D^2.")


def longest_sequence_variant(budget: int, B: int, H: int, spec: dict[str, str]) -> int:
    """Largest L with B*H*L*L*4 <= budget (float32 weights), or ``spec``'s mistake."""
    mistake = spec.get("memory")
    if mistake == "float_sqrt":
        return int(math.sqrt(budget / (4 * B * H)))
    per_weight = {"no_bytes": 1, "float64": 8}.get(mistake, 4)
    return math.isqrt(budget // (per_weight * B * H))


def check_longest_sequence(fn: Callable) -> bool:
    """Check ``fn(budget, B, H) -> int``: the longest self-attention length whose float32
    weights (B, H, L, L) fit in ``budget`` bytes (chapter 6, ``ex-06-budget``).

    Catches: weights counted instead of bytes, 8 bytes per weight, float rounding of the
    square root for large budgets.
    """
    big = 4 * ((10**8 + 1) ** 2 - 1)  # the exact answer is 10**8; a float sqrt says 10**8 + 1
    configs = ((2**30, 16, 8), (10**9, 3, 5), (4 * 7 * 9, 7, 1), (1, 1, 1), (big, 1, 1))
    cases = _scalar_cases(fn, configs, "budget={}, B={}, H={}", longest_sequence_variant)
    return _run_checker("check_longest_sequence", cases,
                        {"memory": ("no_bytes", "float64", "float_sqrt")},
                        "Solve B * H * L * L * 4 <= budget for the largest integer L.")


def _pruned_by_rows(mha: MultiHeadAttention, rows: list[int], num_heads: int) -> nn.Module:
    """A copy of ``mha`` (no biases) keeping the given feature rows: (H'*d) rows, H' heads."""
    new = MultiHeadAttention(mha.W_k.in_features, mha.W_q.in_features, mha.W_v.in_features,
                             num_hiddens=len(rows), num_heads=num_heads, dropout=0.0).eval()
    new.W_o = nn.Linear(len(rows), mha.W_o.out_features, bias=False)
    with torch.no_grad():
        for name in ("W_q", "W_k", "W_v"):
            getattr(new, name).weight.copy_(getattr(mha, name).weight[rows])  # (H'*d, in)
        new.W_o.weight.copy_(mha.W_o.weight[:, rows])  # (D, H'*d)
    return new


def prune_heads_variant(mha, heads, x, lens, spec: dict[str, str]) -> Tensor:
    """Output on ``x`` of ``mha`` without ``heads`` (gated to 0), or with ``spec``'s mistake."""
    H, d = mha.num_heads, mha.head_size
    removed = [h for h in range(H) if h not in heads] if spec.get("prune") == "kept_listed" else heads
    with torch.no_grad():
        if spec.get("prune") == "interleaved":
            kept = [h for h in range(H) if h not in heads]
            rows = [i * H + h for h in kept for i in range(d)]  # every H-th feature
            return _pruned_by_rows(mha, rows, len(kept))(x, x, x, lens)
        gates = torch.ones(H)
        gates[list(removed)] = 0.0
        return mha(x, x, x, lens, head_mask=gates)  # (B, L, D)


def check_prune_heads(fn: Callable) -> bool:
    """Check ``fn(mha, heads)``: a smaller ``MultiHeadAttention`` without the listed heads,
    equal to ``mha`` with those heads gated to 0 (chapter 7, ``ex-07-prune``; no biases).

    Catches: keeping the listed heads instead of removing them, rows of every H-th feature
    instead of a block of d, W_o's rows instead of its columns (a shape error), a wrong
    number of heads.
    """
    torch.manual_seed(5)
    mha = MultiHeadAttention(6, 6, 6, num_hiddens=12, num_heads=4, dropout=0.0).eval()
    x, lens = torch.randn(2, 5, 6, generator=_seeded(5)), _lens([5, 3])
    cases = []
    for heads in ([0], [1, 3], [0, 1, 2]):
        def run(heads=heads):
            pruned = _call(fn, mha, list(heads))
            if not isinstance(pruned, nn.Module):
                return pruned
            expected = mha.num_heads - len(heads)
            if getattr(pruned, "num_heads", expected) != expected:
                raise _Crash(f"no error, but the result has num_heads = {pruned.num_heads}; "
                             f"removing {len(heads)} of {mha.num_heads} heads leaves {expected}")
            with torch.no_grad():
                return _call(pruned.eval(), x, x, x, lens)

        cases.append(_Case(f"removing heads {heads}", run_student=run,
                           variant=lambda spec, heads=heads: prune_heads_variant(
                               mha, heads, x, lens, spec)))

    def crash_hint(message: str) -> list[str]:
        if any(pattern in message for pattern in _MATMUL_ERRORS + ("size of tensor", "shape")):
            return ["  The heads are W_o's *input* features: keep its columns, "
                    "W_o.weight[:, rows], since nn.Linear stores (out_features, in_features)."]
        return []

    return _run_checker("check_prune_heads", cases, {"prune": ("kept_listed", "interleaved")},
                        "Compare with mha(x, x, x, valid_lens, head_mask=gates), the gates 0 at "
                        "the removed heads.", crash_hint=crash_hint)
