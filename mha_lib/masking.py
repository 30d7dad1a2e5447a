"""Masking: the one builder of an attention call's context that every path uses, and the masked softmax.

Shape legend
    B   batch size (for multi-head attention after folding: B*H)
    H   number of heads (the masks of the head layout (B, H, Lq, Lk) broadcast over it)
    Lq  number of queries
    Lk  number of key-value pairs

A *valid length* says how many key-value pairs a query may look at: with ``valid_lens[b] = 3``
every query of example ``b`` attends to keys 0, 1 and 2 only. It is given per example, shape
(B,), or per query, shape (B, Lq) (a causal mask is ``valid_lens[b, i] = i + 1``,
:func:`causal_valid_lens`). Valid lengths are one kind of mask among others
(:mod:`mha_lib.masks`: causal, sliding window, packed documents, prefix-LM, sinks), and every
attention path turns its mask into tensors in ONE place, :func:`visible`: the keep mask of the
fused kernel, the additive bias of the weights path (:func:`keep_to_bias`), the rows that see
nothing (zeros, never NaN), with or without a cache, and the score modification and sink
logits, all held by a :class:`Visible`. :func:`mask_from_valid_lens` is that builder for valid
lengths alone; :func:`masked_softmax` (d2l's, under valid lengths) and :func:`softmax_over_kept`
(under a keep mask of any layout) are the masked softmax.

The mask conventions (valid lengths, keep masks, padding masks) and the named converters
between them are in :mod:`mha_lib.mask_conventions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import torch
from torch import Tensor

from mha_lib._checks import (check_bool, check_bool_mask, check_compute_dtype, check_not_meta, check_size,
                             check_tensor, quiet_when_traced, tracing)
from mha_lib.lengths import CheckedLens, check_positions, check_valid_lens, read_valid_lens
from mha_lib.masks import Mask, causal, padding
from mha_lib.scores import ScoreMod

__all__ = [
    "CheckedLens",
    "Visible",
    "as_mask",
    "causal_valid_lens",
    "check_positions",
    "check_valid_lens",
    "keep_to_bias",
    "mask_from_valid_lens",
    "masked_softmax",
    "read_valid_lens",
    "softmax_over_kept",
    "visible",
]


# --- THE builder: a mask as the attention paths need it ---------------------------------------


def as_mask(valid_lens: Tensor | Sequence[float] | CheckedLens | None, mask: Mask | None) -> Mask | None:
    """One mask from d2l's valid lengths and a :class:`~mha_lib.masks.Mask`: ``padding(valid_lens)
    & mask`` (either may be None; None when both are).

    Raises:
        ValueError: ``mask`` not a Mask; bad valid lengths (as :func:`check_valid_lens`).
    """
    if mask is not None and not isinstance(mask, Mask):
        raise ValueError(
            "mask must be a mha_lib.masks.Mask (causal(), sliding_window(w), padding(valid_lens), "
            f"...) or None, got {type(mask).__name__}"
        )
    if valid_lens is None:
        return mask
    lens = padding(valid_lens)
    return lens if mask is None else lens & mask


@dataclass(frozen=True, eq=False)
class Visible:
    """THE context of an attention call: its mask, and what else changes its scores.

    Every path computes its scores through it: product -> :meth:`modify` -> mask ->
    :meth:`softmax` (the weights path, the tiles), and :meth:`fused` decides whether the fused
    kernel can take the call.

    Attributes:
        keep: bool (B or 1, Lq or 1, Lk), True = may attend, with every row that sees nothing
            filled with True (a row that keeps nothing gives NaN or zeros depending on the
            fused kernel; a filled row gives neither); None: every query sees every key.
        empty: bool (B or 1, Lq or 1, 1), the rows that see nothing, whose output the path
            sets to zeros; None: no such row.
        score_mod: a :class:`~mha_lib.scores.ScoreMod`, or None.
        sinks: (H,) learned sink logits: one more logit per head joins every query's softmax
            and is dropped after (the weights then sum to less than 1), or None.
        q_positions, k_positions: (B or 1, Lq), (B or 1, Lk) long, the TRUE positions (with a
            cache: absolute) a modification reads; made only with a modification or sinks.
        heads: how many heads the batch axis of 3-D scores holds (B*H, Lq, Lk): the layout a
            path folded its heads into (:meth:`folded`).
        causal: ``keep`` is the causal mask at positions 0, 1, ...: the kernel takes ``is_causal``.
        raw (a property): the keep mask before the filling (what the rule for NaN inputs
            reads), or None; made only when asked for (one mask of the scores' size, not two).
    """

    _keep: Tensor | None
    empty: Tensor | None
    score_mod: ScoreMod | None = None
    sinks: Tensor | None = None
    q_positions: Tensor | None = None
    k_positions: Tensor | None = None
    heads: int = 1
    causal: bool = False
    _build: Callable[[], Tensor] | None = field(default=None, repr=False)

    @property
    def keep(self) -> Tensor | None:
        """The keep mask (see the attributes). A causal one is built when first asked for:
        the fused kernel takes ``is_causal`` and never asks."""
        if self._build is None:
            return self._keep
        if "_built" not in self.__dict__:  # (once: frozen, so set past __setattr__)
            object.__setattr__(self, "_built", self._build())
        return self.__dict__["_built"]

    @property
    def raw(self) -> Tensor | None:
        if self.keep is None or self.empty is None:
            return self.keep
        return self.keep & ~self.empty

    @property
    def plain(self) -> bool:
        """Nothing but a mask: no modification, no sinks."""
        return self.score_mod is None and self.sinks is None

    def _masks(self, change) -> "Visible":
        return replace(self, _keep=change(self.keep) if self.keep is not None else None, _build=None,
                       empty=change(self.empty) if self.empty is not None else None)

    def with_heads(self) -> "Visible":
        """The same with a heads axis, (B or 1, 1, Lq or 1, .), that broadcasts over H heads."""
        return self._masks(lambda t: t[:, None])

    def folded(self, fold, heads: int) -> "Visible":
        """The same for scores whose batch axis holds ``heads`` heads: ``fold`` folds a mask."""
        return replace(self._masks(fold), heads=heads)

    def modify(self, scores: Tensor, rows: slice = slice(None), cols: slice = slice(None)) -> Tensor:
        """The score modification, at the true positions (of the queries ``rows`` and the keys
        ``cols``, for a tile). scores: (B, H, Lq, Lk), or 3-D with the heads folded into
        the batch axis (see ``heads``); returns the same shape."""
        if self.score_mod is None:
            return scores
        q_idx = self.q_positions[:, rows]  # (B or 1, Lq)
        k_idx = self.k_positions[:, cols]  # (B or 1, Lk)
        s = self._unfolded(scores, q_idx.shape[-1])  # (B, H, Lq, Lk)
        s = self.score_mod(s, q_idx[:, None, :, None], k_idx[:, None, None, :])
        return s.reshape(scores.shape)

    def _unfolded(self, scores: Tensor, Lq: int) -> Tensor:  # (B*H, ., Lk) -> (B, H, Lq, Lk), a view
        return scores if scores.dim() == 4 else scores.reshape(-1, self.heads, Lq, scores.shape[-1])

    def softmax(self, scores: Tensor) -> Tensor:
        """The weights from scores, 3-D or 4-D, a fresh product (overwritten unless autograd
        needs it): modify -> mask -> softmax with the sinks (their weight dropped) -> zeros
        for the rows that see nothing."""
        scores = self.modify(scores)
        if self.keep is not None:  # (filled rows keep a key)
            fill = scores.masked_fill if scores.requires_grad else scores.masked_fill_
            scores = fill(~self.keep, float("-inf"))
        if self.sinks is None:
            weights = scores.softmax(-1) if scores.requires_grad else torch.softmax(scores, -1, out=scores)
        else:  # one more logit per head: (B, H, Lq, 1), in the scores' layout
            s4 = self._unfolded(scores, self.q_positions.shape[-1])  # (B, H, Lq, Lk)
            sink = self.sinks.to(scores.dtype)[None, :, None, None].expand(*s4.shape[:3], 1)
            weights = torch.cat([s4, sink], -1).softmax(-1)[..., :-1]  # (B, H, Lq, Lk)
            weights = weights.reshape(scores.shape)
        return weights if self.empty is None else weights.masked_fill(self.empty, 0.0)

    def fused(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor | None, bool] | None:
        """THE decision: what the fused kernel takes for this call, or None (the weights path).

        Without a modification or sinks: the boolean keep mask (with a heads axis), or for the
        causal mask ``is_causal=True`` (the last of the returned values). An additive
        modification: a float mask, its bias plus the mask's -inf. Sinks: one more key of zeros
        (score 0, value 0) whose float mask entry is the sink logit. Other modifications: None.

        Shapes:
            q: (B, H, Lq, d); k, v: (B, Hkv, Lk, d)
            returns: k, v (B, Hkv, Lk or Lk + 1, d), the mask, broadcastable to
                (B, H, Lq, Lk or Lk + 1), and is_causal
        """
        if self.plain:
            return (k, v, None, True) if self.causal else (k, v, self.with_heads().keep, False)
        keep = self.with_heads().keep  # (B or 1, 1, Lq or 1, Lk)
        if self.score_mod is not None and not self.score_mod.additive:
            return None
        B, H, Lq, _ = q.shape
        Lk = k.shape[2]
        bias = torch.zeros(1, 1, 1, Lk, dtype=q.dtype, device=q.device) if keep is None \
            else keep_to_bias(keep, q.dtype)
        if self.score_mod is not None:
            q_idx, k_idx = self.q_positions[:, None, :, None], self.k_positions[:, None, None, :]
            bias = bias + self.score_mod.bias(q_idx, k_idx).to(q.dtype)  # (B or 1, H, Lq, Lk)
        if self.sinks is not None:
            bias = bias.expand(bias.shape[0], H, Lq, Lk)  # (B or 1, H, Lq, Lk)
            sink = self.sinks.to(q.dtype)[None, :, None, None].expand(bias.shape[0], H, Lq, 1)
            bias = torch.cat([bias, sink], -1)  # (B or 1, H, Lq, Lk + 1)
            zero = k.new_zeros(k.shape[0], k.shape[1], 1, k.shape[3])  # (B, Hkv, 1, d)
            k, v = torch.cat([k, zero], 2), torch.cat([v, zero], 2)  # (B, Hkv, Lk + 1, d)
        return k, v, bias, False


def visible(
    mask: Mask | None,
    batch_size: int,
    q_positions: int | Tensor,
    k_positions: int | Tensor,
    *,
    q_offset: int = 0,
    shortcut: bool = True,
    device: torch.device | None = None,
    score_mod: ScoreMod | None = None,
    sinks: Tensor | None = None,
) -> Visible:
    """THE builder: every attention path turns its mask (and score modification) into tensors here.

    Args:
        mask: a :class:`~mha_lib.masks.Mask` (see :func:`as_mask`), or None.
        batch_size: B.
        q_positions: Lq, the queries at positions ``q_offset .. q_offset + Lq - 1``, or their
            positions, (Lq,) or (B, Lq) (decoding with a cache).
        k_positions: Lk, the keys at positions ``0 .. Lk - 1``, or their positions (Lk,) or
            (B, Lk) (a rolling cache keeps keys of later positions).
        q_offset: the position of the first query, when ``q_positions`` is Lq.
        shortcut: with Lq and Lk given as numbers, no mask when it hides nothing that is known
            without a host read (valid lengths that are all Lk).
        device: where the mask is built, with Lq and Lk given as numbers: the queries' device
            (a mask without data has no device of its own; one with data is read there).
        score_mod: a :class:`~mha_lib.scores.ScoreMod`, or None.
        sinks: the layer's sink logits (H,), or None.

    Returns:
        a :class:`Visible` (the values are not read: no host synchronisation for masks
        without data to check, and none for valid lengths that were checked before).

    Raises:
        ValueError: as :meth:`mha_lib.masks.Mask.keep`; score_mod not a ScoreMod.
    """
    batch_size, q_positions, k_positions = (_traced_size(x) for x in (batch_size, q_positions, k_positions))
    scored = _scored(score_mod, sinks, q_positions, k_positions, q_offset, device)
    if mask is None:
        return Visible(None, None, **scored)
    if isinstance(q_positions, int) and isinstance(k_positions, int):
        if shortcut and mask.sees_everything(k_positions):  # e.g. valid lengths that are all Lk
            return Visible(None, None, **scored)
        def dense() -> Tensor:  # (B or 1, Lq or 1, Lk)
            return mask.dense(batch_size, q_positions, k_positions, q_offset, device=device, expand=False)

        if mask._is_causal() and q_offset == 0 and k_positions > 0:  # (no row sees nothing)
            return Visible(None, None, causal=True, _build=dense, **scored)  # (built if asked for)
        raw = dense()
    else:
        raw = mask.keep(q_positions, k_positions, batch_size=batch_size)
    empty = ~raw.any(-1, keepdim=True)  # (B or 1, Lq or 1, 1)
    return Visible(raw | empty, empty, **scored)  # (raw is made again only when asked for: Visible.raw)


def _scored(score_mod, sinks, q_positions, k_positions, q_offset, device) -> dict:
    """The fields of :class:`Visible` beyond the mask (with them, the true positions)."""
    if score_mod is None and sinks is None:
        return {}
    if score_mod is not None and not isinstance(score_mod, ScoreMod):
        raise ValueError("score_mod must be a mha_lib.scores.ScoreMod (alibi(H), softcap(cap), "
                         f"...) or None, got {type(score_mod).__name__}")
    q_idx, k_idx = (torch.arange(offset, offset + p, device=device)[None] if isinstance(p, int)
                    else (p if p.dim() == 2 else p[None]).to(device)  # (B or 1, L)
                    for p, offset in ((q_positions, q_offset), (k_positions, 0)))
    return {"score_mod": score_mod, "sinks": sinks, "q_positions": q_idx, "k_positions": k_idx}


@quiet_when_traced
def _traced_size(x: object) -> object:
    """A size as an int (``torch.jit.trace`` hands sizes over as 0-d tensors; the trace then
    holds for inputs of these shapes, with any values)."""
    return int(x) if isinstance(x, Tensor) and x.dim() == 0 else x


def keep_to_bias(keep: Tensor, dtype: torch.dtype) -> Tensor:
    """The additive form of a keep mask: 0 where a query may attend, -inf elsewhere (added to a
    score, -inf has exp() exactly 0). Same shape as ``keep``."""
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, float("-inf"))


def mask_from_valid_lens(
    valid_lens: Tensor,
    num_keys: int,
    *,
    heads: bool = False,
    fill_empty: bool = False,
    bias_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor | None]:
    """The mask of valid lengths alone: :func:`visible` for ``padding(valid_lens)``.

    Key ``j`` may be attended by query ``i`` of example ``b`` when it lies below the valid
    length ``valid_lens[b]`` (or ``valid_lens[b, i]``). One length per example gives one row of
    keys that broadcasts over the queries (Lq times less to build than a full mask). The values
    are not read (no host synchronisation), so check them first with :func:`check_valid_lens`.

    Shapes:
        valid_lens: (B,) or (B, Lq), integers.
        returns: ``mask`` (B, 1 or Lq, Lk), and ``empty`` (B, 1 or Lq, 1) or None; with
            ``heads`` both get a heads axis, (B, 1, 1 or Lq, Lk) and (B, 1, 1 or Lq, 1), that
            broadcasts over the H heads of (B, H, Lq, Lk) scores.

    Args:
        valid_lens: the lengths.
        num_keys: Lk.
        heads: add the heads axis.
        fill_empty: a query with valid length 0 may then attend to *every* key, and the caller
            zeroes its output with ``empty`` (see :class:`Visible`).
        bias_dtype: return the additive bias of this dtype (:func:`keep_to_bias`) instead of
            the keep mask.

    Returns:
        ``(mask, empty)``: the keep mask (``True`` = may attend) or the bias, and, with
        ``fill_empty``, ``empty``: True for a query whose valid length is 0 (else None).
    """
    _check_mask_args(valid_lens, num_keys, bias_dtype)
    lens = valid_lens if isinstance(valid_lens, CheckedLens) else CheckedLens(valid_lens)
    Lq = lens.lens.shape[1] if lens.lens.dim() == 2 else 1
    seen = visible(padding(lens), lens.lens.shape[0], Lq, num_keys, shortcut=False,
                   device=lens.lens.device)
    seen = seen.with_heads() if heads else seen
    keep, empty = (seen.keep, seen.empty) if fill_empty else (seen.raw, None)
    return (keep if bias_dtype is None else keep_to_bias(keep, bias_dtype)), empty


@quiet_when_traced
def _check_mask_args(valid_lens: object, num_keys: object, bias_dtype: object) -> None:
    """The checks of :func:`mask_from_valid_lens`: types and shapes only (no value is read)."""
    if not isinstance(valid_lens, Tensor) or valid_lens.is_floating_point() or valid_lens.is_complex() \
            or valid_lens.dtype == torch.bool or valid_lens.dim() not in (1, 2):
        raise ValueError(
            "valid_lens must be an integer tensor of shape (B,) or (B, Lq) (checked by "
            f"check_valid_lens), got {getattr(valid_lens, 'dtype', type(valid_lens).__name__)} of "
            f"shape {tuple(getattr(valid_lens, 'shape', ()))}"
        )
    check_not_meta(valid_lens, "valid_lens")
    if not tracing():  # (torch.jit.trace hands sizes over as tensors)
        check_size(num_keys, "num_keys")
    if bias_dtype is not None and not (isinstance(bias_dtype, torch.dtype) and bias_dtype.is_floating_point):
        raise ValueError(f"bias_dtype must be None or a floating-point torch.dtype, got {bias_dtype!r}")


# --- the masked softmax ----------------------------------------------------------------------

def masked_softmax(
    X: Tensor, valid_lens: Tensor | Sequence[float] | None = None, *, inplace: bool = False
) -> Tensor:
    """Softmax over the last axis that ignores the keys past each valid length.

    Masked entries come out exactly 0. A row whose valid length is 0 attends to nothing and
    comes out all zeros (not NaN, not uniform). ``inplace=True`` overwrites the masked scores
    of ``X`` instead of copying it: only for scores the caller owns, such as a fresh product.

    Shapes:
        X: (B, Lq, Lk) scores; valid_lens: None, (B,) or (B, Lq); returns: (B, Lq, Lk).
    """
    valid_lens = _check_masked_softmax(X, valid_lens, inplace)
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    # (B, 1, Lk) for one length per example (broadcasts over the queries), else (B, Lq, Lk)
    keep, _ = mask_from_valid_lens(valid_lens, X.shape[-1])
    return softmax_over_kept(X, keep, inplace=inplace)


@quiet_when_traced
def _check_masked_softmax(X: object, valid_lens: object, inplace: object) -> Tensor | None:
    """The checks of :func:`masked_softmax`; returns the valid lengths on X's device."""
    check_tensor(X, "X", 3)
    check_bool(inplace, "inplace")
    valid_lens = check_valid_lens(valid_lens, *X.shape)
    return None if valid_lens is None else valid_lens.to(X.device)


def softmax_over_kept(X: Tensor, keep: Tensor, inplace: bool = False) -> Tensor:
    """The masked softmax itself: ignore the scores where ``keep`` is False.

    Any layout works (the heads may sit on any leading axis), so this is also the softmax for
    boolean masks that do not come from valid lengths. Masked scores become the most negative
    *finite* number, not ``-inf``: a row with nothing to keep stays finite (uniform) instead of
    0/0 = NaN, and the product with ``keep`` then zeroes it. In a row that keeps a key,
    exp(lowest - max) underflows to exactly 0. Masked entries come out exactly 0, and a row
    with nothing to keep comes out all zeros, never NaN.

    Shapes:
        X: (..., Lk) scores, e.g. (B, Lq, Lk), (B, H, Lq, Lk) or (H, B, Lq, Lk).
        keep: bool, broadcastable to X (True = may attend), e.g. (B, 1, Lq, Lk).
        returns: X's shape.

    Raises:
        ValueError: X not a floating-point tensor, keep not boolean or not broadcastable to X,
            or ``inplace`` on a tensor that may not be overwritten.
    """
    _check_kept(X, keep, inplace)
    lowest = torch.finfo(X.dtype).min
    # torch.where writes new scores in one pass; masked_fill_ overwrites X (inplace=True)
    scores = X.masked_fill_(~keep, lowest) if inplace else torch.where(keep, X, lowest)
    weights = torch.softmax(scores, dim=-1)
    # Rows with nothing to keep -> 0; in place, unless autograd needs the softmax's output.
    return weights * keep if weights.requires_grad else weights.mul_(keep)


@quiet_when_traced
def _check_kept(X: object, keep: object, inplace: object) -> None:
    """The checks of :func:`softmax_over_kept`."""
    if not isinstance(X, Tensor) or not X.is_floating_point():
        raise ValueError(
            f"X must be a floating-point torch.Tensor, got {getattr(X, 'dtype', type(X).__name__)}"
        )
    check_not_meta(X, "X")
    check_compute_dtype(X, "X")
    check_bool_mask(keep, "keep")
    check_bool(inplace, "inplace")
    try:
        fits = torch.broadcast_shapes(keep.shape, X.shape) == X.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"keep must be broadcastable to the scores' shape {tuple(X.shape)}, "
            f"got {tuple(keep.shape)}"
        )
    if keep.device != X.device:
        raise ValueError(f"keep is on {keep.device} but X is on {X.device}")
    if inplace:
        _check_writable(X, "X")


def _check_writable(X: Tensor, name: str) -> None:
    """Raise unless ``X`` may be overwritten in place: no two of its elements share memory
    (an ``expand``-ed view would write one entry through many), and autograd allows it."""
    if any(stride == 0 and size > 1 for stride, size in zip(X.stride(), X.shape)) or (
        not tracing() and torch._debug_has_internal_overlap(X) == 1
    ):
        raise ValueError(
            f"{name} shares memory between its elements (an expanded view, shape "
            f"{tuple(X.shape)}, strides {X.stride()}): inplace=True would write one entry through "
            "many; pass inplace=False or a contiguous copy"
        )
    if X.requires_grad and X.is_leaf:
        raise ValueError(
            f"{name} is a leaf tensor that requires grad: autograd forbids overwriting it, "
            "pass inplace=False"
        )


# --- valid lengths of the causal mask ---------------------------------------------------------

def causal_valid_lens(batch_size: int, num_queries: int) -> Tensor:
    """Valid lengths of a causal mask: query ``i`` may attend to keys ``0 .. i``.

    Returns:
        (B, Lq) long, ``valid_lens[b, i] = i + 1``.
    """
    B = check_size(batch_size, "batch_size")
    Lq = check_size(num_queries, "num_queries")
    return causal().dense(1, Lq, Lq)[0].sum(-1).expand(B, Lq)  # (Lq, Lq) -> (Lq,) -> (B, Lq)
