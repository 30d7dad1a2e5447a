"""Scaled dot-product attention, the function every head computes.

``DotProductAttention`` is the version the book teaches (``masked_softmax``);
``FiniteDotProductAttention`` computes the same numbers for finite inputs in fewer passes over
the scores, and is the one ``MultiHeadAttention`` attends with when it returns the weights.

Shape legend
    B   batch size (for multi-head attention after folding the heads in: B*H)
    Lq  number of queries
    Lk  number of key-value pairs
    d   query/key size
    dv  value size
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from mha_lib._checks import check_bool, check_probability, check_tensor, quiet_when_traced, tracing
from mha_lib.masking import (
    CheckedLens,
    Visible,
    as_mask,
    keep_to_bias,
    masked_softmax,
    read_valid_lens,
    softmax_over_kept,
    visible,
)
from mha_lib.masks import Mask

__all__ = ["DotProductAttention", "FiniteDotProductAttention", "NonFiniteRule", "all_finite",
           "check_qkv", "fit_queries", "guards_change_nothing", "score_operands"]


def check_qkv(queries: Tensor, keys: Tensor, values: Tensor, *, dot: bool = False) -> None:
    """Check that queries, keys and values are 3-D and agree on batch size and length.

    With ``dot`` the queries and keys also meet in a dot product: one feature size d >= 1.

    Raises:
        ValueError: naming the argument that does not fit.
    """
    check_tensor(queries, "queries", 3)
    check_tensor(keys, "keys", 3)
    check_tensor(values, "values", 3)
    if not queries.shape[0] == keys.shape[0] == values.shape[0]:
        raise ValueError(
            "queries, keys and values must have the same batch size, got "
            f"{queries.shape[0]}, {keys.shape[0]} and {values.shape[0]}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            "keys and values must have the same length Lk, got "
            f"{keys.shape[1]} keys and {values.shape[1]} values"
        )
    for name, x in (("keys", keys), ("values", values)):
        if x.dtype != queries.dtype or x.device != queries.device:
            raise ValueError(
                f"{name} must have the dtype and device of the queries ({queries.dtype} on "
                f"{queries.device}), got {x.dtype} on {x.device}: convert one with .to(...)"
            )
    if dot and queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            "queries and keys must have the same feature size d, got "
            f"{queries.shape[-1]} and {keys.shape[-1]}"
        )
    if dot and queries.shape[-1] == 0:
        raise ValueError("queries and keys must have at least one feature (d >= 1), got d = 0")


# --- scores that cannot overflow: the policy of every attention path ---------------------------

#: Scores are kept below 2**(log2(largest float) - _HEADROOM) of the dtype they are computed in
#: (float32: 2**100, float64: 2**996), far from the largest float, so that the softmax's
#: max-subtraction cannot overflow either.
_HEADROOM = 27


def _score_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype scores are computed in: float32 for half precision (a score past 65504 would
    overflow float16 to inf, and the softmax to NaN), else the inputs' own."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def fit_queries(queries: Tensor, keys: Tensor, *, finite_keys: bool = False,
                in_place: bool = False) -> Tensor:
    """The queries, each row divided down where its scores could overflow.

    A dot product of finite vectors can pass the largest float (float32 inputs near 1e20) and
    become inf, and the softmax then gives NaN. Every term ``|q_i| |k_i|`` of a score of query
    row q is at most ``|q_i| M_i`` with ``M_i`` the largest ``|k_i|`` of the keys, so a score is
    at most ``d max_i |q_i| M_i``: where that bound passes 2**100 in float32 (2**996 in
    float64; the dtype of the scores, :func:`_score_dtype`), the row is divided by the bound
    over 2**100, which brings it down to the limit. Everywhere else the divisor is exactly 1
    and nothing changes: ordinary inputs give the same bits. A divided row's softmax has a
    higher temperature, which changes only score differences far below the rounding error of
    such large dot products (2**100 / d is 2**76 times more than the 1/eps = 2**24 that
    float32 could resolve).

    Five operations on the device, without reading a value (no host synchronisation): M, one
    reduction over the keys; the terms ``|q_i| M_i d / 2**100``, in float64, where no product of
    two float32 overflows (M itself cannot); their largest; the divisor, at least 1; the
    division. (float64 inputs are fitted while each ``|q_i| M_i`` stays below 2**2014.) A row
    with a NaN or inf gets a NaN or inf bound and stays broken: the rule of its layer makes it
    NaN.

    Shapes:
        queries: (..., Lq, d); keys: (..., Lk, d) with leading axes that broadcast to the
            queries', or (B, Hkv, Lk, d) for queries (B, H, Lq, d) (query head h meets key head
            h // (H / Hkv), as in grouped-query attention).
        returns: queries' shape and dtype.

    Args:
        finite_keys: the keys are finite, or every row that may meet a NaN or inf key is made
            NaN by the rule of its layer (:class:`NonFiniteRule`): M is taken over the keys as
            they are. Otherwise (False) NaN and inf keys are left out of M (one operation more).
        in_place: ``queries`` is the caller's own new tensor (a projection): outside autograd
            and tracing it is divided in place (one operation less, and no float64 copy of it).
    """
    _check_operands(queries=queries, keys=keys)
    _check_leading_axes(queries, keys)
    if keys.shape[-2] == 0 or queries.shape[-1] == 0:
        return queries  # no score at all
    limit = int(math.log2(torch.finfo(_score_dtype(queries.dtype)).max)) - _HEADROOM
    with torch.no_grad():  # (few operations: each is a kernel launch on a GPU)
        q, k = queries.detach(), keys.detach()
        if not finite_keys:  # NaN and inf keys: left to the rule of their layer
            k = torch.nan_to_num(k, nan=0.0, posinf=0.0, neginf=0.0)
        largest = torch.linalg.vector_norm(k, math.inf, dim=-2, keepdim=True)  # M: (..., 1, d)
        grouped = q.dim() == 4 and largest.shape[1] not in (1, q.shape[1])
        if grouped:  # query head h meets key head h // g
            q = q.unflatten(1, (largest.shape[1], -1))  # (B, H, Lq, d) -> (B, Hkv, g, Lq, d)
            largest = largest[:, :, None]  # (B, Hkv, 1, d) -> (B, Hkv, 1, 1, d)
        # q_i M_i d / 2**limit (the norm takes |.|): 0 + value * q * M in one pass, in float64
        # (the zero's dtype: a tensor of one entry takes part in the type promotion)
        terms = torch.addcmul(_zero(q.device), q, largest, value=q.shape[-1] * 2.0**-limit)
        bound = torch.linalg.vector_norm(terms, math.inf, dim=-1, keepdim=True)  # (..., Lq, 1)
        divisor = bound.clamp(min=1.0)  # 1 below the limit: the same bits
        if grouped:
            divisor = divisor.flatten(1, 2)  # (B, Hkv, g, Lq, 1) -> (B, H, Lq, 1)
    if in_place and not (queries.requires_grad and torch.is_grad_enabled() or tracing()):
        return queries.div_(divisor)  # (float64 divisor: computed wide, written in the queries' dtype)
    return (queries / divisor).to(queries.dtype)


_ZEROS: dict[torch.device, Tensor] = {torch.device("cpu"): torch.zeros(1, dtype=torch.float64)}


def _zero(device: torch.device) -> Tensor:
    """A float64 zero (shape (1,)) on ``device``, made once (a constant, not an allocation per
    call; a graph being compiled makes its own)."""
    if torch.compiler.is_compiling():
        return torch.zeros(1, dtype=torch.float64, device=device)
    if device not in _ZEROS:
        _ZEROS[device] = torch.zeros(1, dtype=torch.float64, device=device)
    return _ZEROS[device]


def guards_change_nothing(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """0-d bool, True when the guards of the layers would change nothing: every entry of q, k
    and v is finite (the rule for NaN and inf, :class:`NonFiniteRule`, then adds zeros), and no
    score can overflow (:func:`fit_queries` then multiplies every row by exactly 1).

    A bound for all rows at once, ``d * max|q| * max|k|`` below the limit of
    :func:`fit_queries` (which bounds each row, more tightly): three reductions, not a pass per
    guard, and a few operations on six numbers. Not a value is read here (the caller decides
    where reading it costs nothing).

    Shapes:
        q: (..., Lq, d); k, v: (..., Lk, d), as :func:`fit_queries` takes them.
    """
    if 0 in (q.numel(), k.numel()):
        return torch.ones((), dtype=torch.bool, device=q.device)  # no score at all
    with torch.no_grad():  # min and max of each (NaN and inf pass through; aminmax: one pass)
        extremes = torch.stack([m for x in (q, k, v) for m in torch.aminmax(_in_memory_order(x))]).float()
        largest = extremes.abs().view(3, 2).amax(-1)  # max |x| of q, k and v
    limit = 2.0 ** (int(math.log2(torch.finfo(_score_dtype(q.dtype)).max)) - _HEADROOM)
    # the bound, + 0 for finite values (NaN for others: then False, as for a bound too large)
    return largest[0] * largest[1] * q.shape[-1] + largest[2] * 0 <= limit


def _in_memory_order(x: Tensor) -> Tensor:
    """x with its axes in the order of its memory (a view; contiguous for a head split, which
    transposes a contiguous projection): a reduction over every entry then reads the memory in
    one sweep, where ``aminmax`` would first copy a transposed tensor."""
    return x.permute(sorted(range(x.dim()), key=lambda i: -x.stride(i)))


@quiet_when_traced
def _check_operands(**tensors: object) -> None:
    """Raise unless the named tensors are floating point, 2- to 5-D, of one dtype and device,
    with one feature size (the last axis), as queries and keys that meet in a dot product."""
    first = None
    for name, x in tensors.items():
        check_tensor(x, name, (2, 3, 4, 5))
        if first is None:
            first = (name, x)
        elif (x.dtype, x.device, x.shape[-1]) != (first[1].dtype, first[1].device, first[1].shape[-1]):
            raise ValueError(
                f"{name} must have the dtype, device and feature size of the {first[0]} "
                f"({first[1].dtype} on {first[1].device}, {first[1].shape[-1]}), got {x.dtype} on "
                f"{x.device}, {x.shape[-1]}"
            )


@quiet_when_traced
def _check_leading_axes(queries: Tensor, keys: Tensor) -> None:
    """Raise unless the keys' leading axes broadcast to the queries' (or group their heads)."""
    lead_q, lead_k = tuple(queries.shape[:-2]), tuple(keys.shape[:-2])
    grouped = len(lead_q) == len(lead_k) == 2 and lead_q[0] == lead_k[0] and lead_k[1] >= 1 \
        and lead_q[1] % lead_k[1] == 0
    try:
        fits = grouped or torch.broadcast_shapes(lead_q, lead_k) == lead_q
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"keys of shape {tuple(keys.shape)} do not fit queries of shape {tuple(queries.shape)}: "
            "their leading axes must broadcast to the queries' (or be (B, Hkv) for (B, H))"
        )


def score_operands(queries: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
    """``Q / sqrt(d)`` and ``K``, ready to meet in ``Q K^T``: in :func:`_score_dtype`, the
    queries scaled by :func:`fit_queries` (scores that cannot overflow).

    The queries are scaled rather than the scores: the same numbers, Lk/d times less work.

    Shapes:
        queries: (..., Lq, d); keys: (..., Lk, d); returns: the same shapes.
    """
    _check_operands(queries=queries, keys=keys)
    dtype = _score_dtype(queries.dtype)
    queries, keys = queries.to(dtype), keys.to(dtype)
    return fit_queries(queries / math.sqrt(queries.shape[-1]), keys, in_place=True), keys


class DotProductAttention(nn.Module):
    """Scaled dot-product attention ``softmax(Q K^T / sqrt(d)) V`` with dropout on the weights.

    Shapes:
        queries: (B, Lq, d)
        keys: (B, Lk, d)
        values: (B, Lk, dv)
        valid_lens: None, (B,) or (B, Lq)
        output: (B, Lq, dv); weights: (B, Lq, Lk)

    Args:
        dropout: probability of zeroing an attention weight in training mode.
    """

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        *,
        need_weights: bool = False,
        mask: Mask | Visible | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from every query to the valid keys.

        ``mask`` (a :class:`mha_lib.masks.Mask`, queries and keys at positions 0, 1, ...) hides
        more keys, on top of the valid lengths (or a :class:`mha_lib.masking.Visible`, the mask
        as ``attend_heads`` built it).

        Returns:
            output (B, Lq, dv), or ``(output, weights)`` with weights (B, Lq, Lk) when
            ``need_weights`` is true. The weights are those before dropout.
        """
        _check_attention(queries, keys, values, need_weights)
        q, k = score_operands(queries, keys)  # Q / sqrt(d) and K (scores that cannot overflow)
        scores = torch.bmm(q, k.transpose(1, 2))  # (B, Lq, Lk)
        if isinstance(mask, Visible) and not mask.plain:  # a score modification or sinks
            weights = mask.softmax(scores)
        elif mask is None:
            weights = masked_softmax(scores, valid_lens, inplace=True)  # the scores are ours
        else:  # any mask: its keep mask (B or 1, Lq or 1, Lk)
            keep = (mask if isinstance(mask, Visible) else
                    visible(as_mask(valid_lens, mask), *scores.shape, device=scores.device)).raw
            weights = scores.softmax(-1) if keep is None else softmax_over_kept(scores, keep, inplace=True)
        weights = weights.to(values.dtype)
        output = torch.bmm(self.dropout(weights), values)  # (B, Lq, dv)
        return (output, weights) if need_weights else output


@quiet_when_traced
def _check_attention(queries: Tensor, keys: Tensor, values: Tensor, need_weights: object) -> None:
    """The checks of :meth:`DotProductAttention.forward` (valid_lens: in masked_softmax)."""
    check_qkv(queries, keys, values, dot=True)
    check_bool(need_weights, "need_weights")


class FiniteDotProductAttention(DotProductAttention):
    """:class:`DotProductAttention` for finite inputs, in fewer passes over the (B, Lq, Lk) scores.

    ``MultiHeadAttention`` attends with it when it returns the weights: its inputs are finite by
    then (its rule for NaN and inf replaces the others). For finite scores the numbers are those
    of ``masked_softmax`` (``tests/core/test_fast_path.py`` proves it), computed with less
    traffic through memory:

    * the mask enters the score product as a bias, ``baddbmm(bias, Q, K^T)``: 0 where a query
      may attend, -inf elsewhere (x - inf = -inf, whose exponential is exactly 0, as is that
      of ``masked_softmax``'s most negative float), instead of overwriting the scores;
    * a query with valid length 0 may attend anywhere, and its weights are zeroed after the
      softmax (only when some valid length may be 0);
    * the softmax writes over the scores when autograd does not need them.

    The scores come from :func:`score_operands` (in float32 for float16 and bfloat16, query
    rows that could overflow scaled down), as those of :class:`DotProductAttention`.

    Unlike :class:`DotProductAttention` it does not shield a query from an infinite or NaN
    score of a key it may not attend to (such a query's row becomes NaN).

    Shapes and arguments: as :class:`DotProductAttention`; ``valid_lens`` may also be a
    :class:`mha_lib.masking.CheckedLens` (then its values are not read again).
    """

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | CheckedLens | None = None,
        *,
        need_weights: bool = False,
        mask: Mask | Visible | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        seen = _check_finite_attention(queries, keys, values, valid_lens, need_weights, mask)
        dtype = queries.dtype
        queries, keys = score_operands(queries, keys)  # Q / sqrt(d), K (float32 for half)
        if not seen.plain:  # a modification or sinks: the one pipeline (Visible.softmax)
            weights = seen.softmax(torch.bmm(queries, keys.transpose(1, 2)))  # (B, Lq, Lk)
            return self._mix(weights.to(dtype), values, need_weights)
        if seen.keep is None:
            scores = torch.bmm(queries, keys.transpose(1, 2))  # (B, Lq, Lk)
        else:  # bias: (B or 1, Lq or 1, Lk), 0 = may attend, -inf = masked
            bias = keep_to_bias(seen.keep, queries.dtype)
            scores = torch.baddbmm(bias, queries, keys.transpose(1, 2))  # (B, Lq, Lk)
        if scores.requires_grad:
            weights = torch.softmax(scores, dim=-1)
        else:  # nothing needs the scores again: the weights overwrite them
            weights = torch.softmax(scores, dim=-1, out=scores)
        if seen.empty is not None:  # a query that sees nothing: zeros
            fill = weights.masked_fill if weights.requires_grad else weights.masked_fill_
            weights = fill(seen.empty, 0.0)
        return self._mix(weights.to(dtype), values, need_weights)

    def _mix(self, weights: Tensor, values: Tensor, need_weights: bool):
        """The values mixed by the weights (after dropout), and the weights when asked for."""
        output = torch.bmm(self.dropout(weights), values)  # (B, Lq, dv)
        return (output, weights) if need_weights else output


@quiet_when_traced
def _check_finite_attention(queries, keys, values, valid_lens, need_weights, mask) -> Visible:
    """The checks of :meth:`FiniteDotProductAttention.forward`; returns the mask as the path
    uses it (valid lengths checked and read once; a :class:`Visible` is taken as built)."""
    _check_attention(queries, keys, values, need_weights)
    B, Lq, Lk = queries.shape[0], queries.shape[1], keys.shape[1]
    if isinstance(mask, Visible):
        return mask
    valid_lens, _ = read_valid_lens(valid_lens, B, Lq, Lk, device=queries.device)
    return visible(as_mask(valid_lens, mask), B, Lq, Lk, device=queries.device)


# --- the rule for NaN and infinite inputs ----------------------------------------------------------


def _sum(x: Tensor, dim: int | tuple[int, ...] | None = None) -> Tensor:
    """Sum of ``x * 0`` (over ``dim``): 0, or NaN exactly when an entry is inf or NaN (a finite
    entry times 0 is 0, and a sum of zeros cannot overflow, whatever the dtype)."""
    x = x * 0
    return x.sum() if dim is None else x.sum(dim)


def all_finite(queries: Tensor, keys: Tensor, values: Tensor) -> Tensor:
    """0-d bool: every input entry is finite (a fast sum per distinct tensor, see :func:`_sum`)."""
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        check_tensor(x, name, (3, 4))
    total = _sum(queries)
    for x in {id(x): x for x in (keys, values) if x is not queries}.values():  # (self-attention)
        total = total + _sum(x)
    return total == 0  # (NaN == 0 is False)


def _broken(queries: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """0 for each query (B, Lq) and key-value pair (B, Lk) whose entries are all finite, NaN
    for the others (:func:`_sum` of each row), one pass per distinct tensor (a self-attention
    passes one tensor three times)."""
    rows = _sum(queries, -1)
    if keys is queries and values is queries:
        return rows, rows
    return rows, _sum(keys, -1) if values is keys else _sum(keys, -1) + _sum(values, -1)


def _wide(x: Tensor) -> Tensor:
    """x, whose sums in float64 cannot overflow (a float64 x: times 0, NaN for inf and NaN)."""
    return x * 0 if x.dtype == torch.float64 else x


def _total(x: Tensor) -> Tensor:
    """(B, L, .) -> (B,): the sum in float64, finite exactly when every entry is (float32
    values, at most 2**128 each, cannot add up past float64's range)."""
    return _wide(x).sum((1, 2), dtype=torch.float64)


def _running(x: Tensor) -> Tensor:
    """(B, L, .) -> (B, L): the running sum over the rows 0..l, in float64, finite exactly when
    they are (one pass: the entries laid end to end, each row read at its last entry)."""
    B, L, n = x.shape
    flat = _wide(x).reshape(B, L * n).cumsum(-1, dtype=torch.float64)  # (B, L*n)
    return flat[:, n - 1::n]  # (B, L*n) -> (B, L): the running sum at each row's last entry


def _pairs(keys: Tensor, values: Tensor, total) -> Tensor:
    """``total`` of the keys and of the values, once for one tensor passed twice."""
    return total(keys) if values is keys else total(keys) + total(values)


class NonFiniteRule(NamedTuple):
    """The rule for NaN and inf inputs, the same on every path of ``MultiHeadAttention``.

    A query's output row (and its weights) is NaN when the query itself, or a key or value it
    may attend to, holds a NaN or an infinity (and the query attends to something); an infinity
    or NaN in a key or value that the query may *not* attend to does not reach it.

    :meth:`of` works the rule out on the device, without reading a value (no host
    synchronisation): ``rows`` holds, for each query, a number that is finite exactly when
    the row is intact; ``spoil`` adds ``0 * rows`` (0, or NaN: 0 * inf is NaN), and ``usable``
    zeroes the keys' and values' NaN and inf entries, which a masked query would otherwise
    meet in the kernels (x - inf is NaN for x = inf; 0 * inf is NaN).

    Attributes:
        rows: (B, Lq), or (B, 1) when a row's fate is its example's: finite for an intact
            row, inf or NaN for a broken one.
        zero_kv: whether ``usable`` zeroes: False without a mask (every query that may attend
            to a broken pair is broken by it anyway).
    """

    rows: Tensor
    zero_kv: bool

    @classmethod
    def of(cls, queries: Tensor, keys: Tensor, values: Tensor, keep: Tensor | Visible | None):
        """The rule for these inputs (None when no key could break a row: Lk = 0).

        One operation for a self-attention's one input: without a mask its sum over each
        example (any inf or NaN breaks every row); causal, its running sum (:func:`_running`).
        Other masks: a pass per row and pair, and the mask.

        Args:
            keep: the keep mask (B or 1, Lq or 1, Lk) (``Visible.raw``), or None when every
                query may attend to every key of its example; or the :class:`Visible` of
                the call (a causal one is not made dense: query i sees keys 0..i).
        """
        if keys.shape[1] == 0:
            return None  # every query attends to nothing: zeros
        causal = isinstance(keep, Visible) and keep.causal and queries.shape[1] == keys.shape[1]
        keep = keep.raw if isinstance(keep, Visible) and not causal else keep
        self_attention = keys is queries and values is queries
        with torch.no_grad():  # (no gradient)
            if keep is None or causal:  # every key of the example, or keys 0..i
                pairs = _pairs(keys, values, _running if causal else lambda x: _total(x)[:, None])
                if self_attention:  # (a row's own entries are among its pairs')
                    return cls(pairs, causal)  # (B, 1 or Lk)
                return cls(_wide(queries).sum(-1, dtype=torch.float64) + pairs, causal)  # (B, Lq)
            rows, pairs = _broken(queries, keys, values)  # (B, Lq), (B, Lk): 0 or NaN
            bad_kv = pairs != 0  # (B, Lk) bool (NaN != 0)
            bad_q = bad_kv if rows is pairs else rows != 0  # (B, Lq) bool
            # a query that attends to something broken, or that is broken and attends at all
            broken = (keep & (bad_q[:, :, None] | bad_kv[:, None, :])).any(-1)  # (B, Lq)
            nan_rows = torch.zeros(broken.shape, dtype=queries.dtype, device=queries.device)
            return cls(nan_rows.masked_fill(broken, float("nan")), True)

    def spoil(self, x: Tensor, inplace: bool = False) -> Tensor:
        """x + 0 * rows: NaN on the broken rows, x (B, H, Lq, ...) elsewhere."""
        rows = self.rows[:, None, :, None]  # (B, Lq or 1) -> (B, 1, Lq or 1, 1)
        return x.add_(rows, alpha=0) if inplace else torch.add(x, rows, alpha=0).to(x.dtype)

    def usable(self, x: Tensor) -> Tensor:
        """Keys or values (B, Hkv, Lk, d) with their NaN and inf entries zeroed (with a mask)."""
        return torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) if self.zero_kv else x
