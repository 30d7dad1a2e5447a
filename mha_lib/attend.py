"""The attention of every head at once: the one computation every attention layer shares.

Shape legend
    B    batch size
    H    number of (query) heads
    Hkv  number of key/value heads, dividing H (H: multi-head attention)
    Lq   number of queries
    Lk   number of key-value pairs
    d    head size

The layers (:mod:`mha_lib.multihead`, :mod:`mha_lib.gqa`, decoding with a cache) project and
split their inputs, then call :func:`attend_heads`, which takes one of two paths with the same
numbers:

* the fast path, PyTorch's fused ``F.scaled_dot_product_attention`` (:func:`_attend_fused`,
  chapter 6), when the weights are not wanted;
* the weights path, :class:`~mha_lib.attention.DotProductAttention` on the heads folded into
  the batch (:func:`_attend_folded`, chapter 5), which returns them.

Around them, the guards against NaN, infinite inputs and scores that overflow, and where a
layer reads them first (:func:`_read_first`, chapter 6); and the checks of a layer call's head
gates and valid lengths, which read values from the device at most once
(:func:`check_head_mask`, :func:`read_lens_and_finite`).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib._checks import (as_tensor, check_bool, check_positive_int, check_size, check_tensor,
                             quiet_when_traced, tracing)
from mha_lib.attention import (
    DotProductAttention,
    NonFiniteRule,
    all_finite,
    fit_queries,
    guards_change_nothing,
)
from mha_lib.masking import CheckedLens, Visible, as_mask, read_valid_lens, visible
from mha_lib.masks import Mask

__all__ = ["attend_heads", "check_head_mask", "check_head_shapes", "read_lens_and_finite",
           "read_lens_and_gates"]

def attend_heads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Visible | Mask | CheckedLens | Tensor | None,
    attention: DotProductAttention,
    *,
    need_weights: bool = False,
    gates: Tensor | None = None,
    nonfinite: NonFiniteRule | Callable[[], NonFiniteRule | None] | None = None,
    fresh_q: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The attention of every head at once: the one computation all attention layers share.

    ``MultiHeadAttention``, ``GroupedQueryAttention`` and decoding with a KV cache project and
    split their inputs, then call this. Query head ``h`` reads key/value head ``h // g`` with
    ``g = H / Hkv`` (``g = 1``: multi-head attention). Two paths compute the same numbers:

    * ``need_weights=False``: PyTorch's fused ``F.scaled_dot_product_attention``, which never
      materialises the (B, H, Lq, Lk) weights (chapter 6);
    * ``need_weights=True``: ``attention`` (a :class:`~mha_lib.DotProductAttention`) on the
      heads folded into the batch (chapter 2), which returns the weights.

    A query that may attend to nothing (valid length 0, a mask that hides every key) gets a
    zero output (and zero weights).

    Shapes:
        q: (B, H, Lq, d)
        k, v: (B, Hkv, Lk, d), Hkv dividing H
        mask: the mask built by :func:`mha_lib.masking.visible` (the layers build theirs once),
            a :class:`~mha_lib.masks.Mask` (queries and keys at positions 0, 1, ...), or valid
            lengths, None, (B,) or (B, Lq) (a :class:`~mha_lib.masking.CheckedLens` is not read
            again)
        gates: None or (B, H), multiplying each head's output
        returns: out (B, H, Lq, d) and weights (B, H, Lq, Lk) (None without ``need_weights``)

    Args:
        attention: gives the dropout rate (in training mode), and computes the weights path.
        nonfinite: ``MultiHeadAttention``'s rule for NaN and infinite inputs (or a function
            that works it out, called only when needed: see :func:`_read_first`), or None.
        fresh_q: q is the caller's own new tensor (its projection): outside autograd the
            guards divide it in place.

    Raises:
        ValueError: tensors of other shapes, dtypes or devices, ``attention`` not a
            ``DotProductAttention``, bad valid lengths or gates.
    """
    seen = _check_heads(q, k, v, mask, attention, need_weights, gates)
    if _read_first(q) and guards_change_nothing(q, k, v).item():  # (see _read_first)
        nonfinite = None
    else:  # the guards: NaN and inf reach only the rows that may attend to them; no overflow
        nonfinite = nonfinite() if callable(nonfinite) else nonfinite
        if nonfinite is not None:
            k, v = nonfinite.usable(k), nonfinite.usable(v)
        # query rows whose scores could overflow: divided down (see there)
        q = fit_queries(q, k, finite_keys=nonfinite is not None,
                        in_place=fresh_q)
    fast = None if need_weights else _attend_fused(q, k, v, seen, attention, nonfinite)
    out, weights = fast if fast is not None else _attend_folded(q, k, v, seen, attention, nonfinite)
    weights = weights if need_weights else None
    if gates is not None:
        out = out * gates[:, :, None, None]  # (B, H) -> (B, H, 1, 1)
    return out, weights


def _read_first(q: Tensor) -> bool:
    """Where the layer first asks whether its guards would change anything: on the CPU.

    The guards (:func:`~mha_lib.attention.fit_queries` against scores that overflow, the rule
    for NaN and infinite inputs) cost passes over the queries, keys and values: a third of a
    fast-path forward on a CPU. For finite inputs of ordinary size they change nothing
    (factors of exactly 1, zeros added): :func:`~mha_lib.attention.guards_change_nothing`
    tells in three reductions, and on the CPU its answer is read at no cost (nothing to wait
    for), so the guards run only when needed, with the same numbers either way. On a GPU
    reading it would wait for the device (a host synchronisation), and a graph being recorded
    cannot branch on a value: there the guards always run, on the device.
    """
    return q.device.type == "cpu" and not tracing()


def check_head_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise a ``ValueError`` unless q is (B, H, Lq, d) and k, v are (B, Hkv, Lk, d) with the
    queries' B and d and Hkv dividing H (Hkv = H for multi-head attention)."""
    check_tensor(q, "q", 4)
    check_tensor(k, "k", 4)
    check_tensor(v, "v", 4)
    B, H, _, d = q.shape
    Hkv = k.shape[1]
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != d or H % Hkv:
        raise ValueError(
            "k and v must both have shape (B, Hkv, Lk, d) with the queries' B and d and Hkv "
            f"dividing H: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )


@quiet_when_traced
def _check_heads(q, k, v, mask, attention, need_weights, gates) -> Visible:
    """The checks of :func:`attend_heads`; returns the mask as the paths use it."""
    check_head_shapes(q, k, v)
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype or x.device != q.device:
            raise ValueError(f"{name} is {x.dtype} on {x.device}, q is {q.dtype} on {q.device}")
    if not isinstance(attention, DotProductAttention):
        raise ValueError(
            f"attention must be a mha_lib.DotProductAttention, got {type(attention).__name__}"
        )
    check_bool(need_weights, "need_weights")
    if gates is not None and (not isinstance(gates, Tensor) or gates.shape != (B, H)):
        raise ValueError(f"gates must be a tensor of shape (B, H) = ({B}, {H}), got {gates!r}")
    if isinstance(mask, Visible):
        return mask
    if not isinstance(mask, Mask):  # valid lengths: checked here (one host read), or None
        mask, _ = read_valid_lens(mask, B, Lq, Lk, device=q.device)
        mask = as_mask(mask, None)
    return visible(mask, B, Lq, Lk, device=q.device)


def _attend_fused(q, k, v, seen, attention, nonfinite) -> tuple[Tensor, None] | None:
    """The fast path: ``F.scaled_dot_product_attention``, (B, H, Lq, d) -> (B, H, Lq, d), no
    weights; None when the kernel cannot take the call (:meth:`~mha_lib.masking.Visible.fused`)."""
    if _size(k, 2) == 0:  # no keys: nothing to attend to (the kernel would spread a NaN query)
        return q.new_zeros(*q.shape[:3], v.shape[-1]), None
    operands = seen.fused(q, k, v)  # k, v (a key more for sinks) and the kernel's mask
    if operands is None:
        return None
    k, v, attn_mask, is_causal = operands
    dropout_p = attention.dropout.p if attention.training else 0.0
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                         is_causal=is_causal, enable_gqa=_grouped(q, k))  # (B, H, Lq, d)
    # Write over the kernel's output, unless autograd keeps it (or a graph is being recorded)
    mine = not (out.requires_grad or tracing())
    if seen.empty is not None:  # a query that sees nothing attended anywhere: zero it
        empty = seen.empty[:, None]  # (B or 1, Lq or 1, 1) -> (B or 1, 1, Lq or 1, 1)
        out = out.masked_fill_(empty, 0.0) if mine else out.masked_fill(empty, 0.0)
    return (out if nonfinite is None else nonfinite.spoil(out, inplace=mine)), None


@quiet_when_traced
def _grouped(q: Tensor, k: Tensor) -> bool:
    """Fewer key/value heads than query heads (a constant of the layer, also in a traced graph)."""
    return bool(k.shape[1] != q.shape[1])


@quiet_when_traced
def _size(x: Tensor, dim: int) -> int:
    """``x.shape[dim]`` as an int (a traced graph records the size of its example inputs)."""
    return int(x.shape[dim])


def _attend_folded(q, k, v, seen, attention, nonfinite) -> tuple[Tensor, Tensor]:
    """The weights path: ``attention`` on the heads folded into the batch axis (chapter 2).

    The g query heads of a group share one key/value head: they are laid one after another
    along the queries, (B*Hkv, g*Lq, d), so that they meet that head's keys without copying
    them. With g = 1 this is chapter 2's folding, (B*H, Lq, d).
    """
    if nonfinite is not None:  # a NaN query gives NaN scores, weights and output
        q = nonfinite.spoil(q)
    B, H, Lq, d = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = H // Hkv
    q = q.reshape(B * Hkv, g * Lq, d)  # (B, H, Lq, d) -> (B*Hkv, g*Lq, d)
    k = k.reshape(B * Hkv, Lk, d)  # (B, Hkv, Lk, d) -> (B*Hkv, Lk, d)
    v = v.reshape(B * Hkv, Lk, v.shape[-1])  # (B, Hkv, Lk, d) -> (B*Hkv, Lk, d)
    # row b*Hkv + j of the folded batch belongs to example b; its rows hold g heads' queries
    seen = seen.folded(lambda t: _fold_mask(t, B, Hkv, g), H)
    out, weights = attention(q, k, v, mask=seen, need_weights=True)
    # out: (B*Hkv, g*Lq, d) -> (B, H, Lq, d); weights: (B*Hkv, g*Lq, Lk) -> (B, H, Lq, Lk)
    return out.reshape(B, H, Lq, v.shape[-1]), weights.reshape(B, H, Lq, Lk)


def _fold_mask(t: Tensor, B: int, Hkv: int, g: int) -> Tensor:
    """A mask of the head layout folded like the queries: (B or 1, Lq or 1, n) -> (B*Hkv, g*Lq or 1, n)."""
    t = t.expand(B, *t.shape[1:])  # (B or 1, Lq or 1, n) -> (B, Lq or 1, n)
    if t.shape[1] == 1:
        return t.repeat_interleave(Hkv, dim=0)  # (B, 1, n) -> (B*Hkv, 1, n)
    Lq, n = t.shape[1], t.shape[2]
    # (B, Lq, n) -> (B, 1, 1, Lq, n) -> (B, Hkv, g, Lq, n) -> (B*Hkv, g*Lq, n)
    return t[:, None, None].expand(B, Hkv, g, Lq, n).reshape(B * Hkv, g * Lq, n)


def check_head_mask(
    head_mask: object, num_heads: int, batch_size: int, like: Tensor
) -> Tensor | None:
    """Return the head gates as a (B, H) tensor of ``like``'s dtype and device, or None.

    Only type and shape are checked here; :func:`read_lens_and_gates` checks that the gates are
    finite (reading them with the valid lengths, in one host read).

    Args:
        head_mask: None, or real numbers of shape (H,) or (B, H) (1 keeps a head, 0 removes it).

    Raises:
        ValueError: not numbers, booleans, on the meta device, or another shape.
    """
    H = num_heads
    if not tracing():  # (torch.jit.trace hands sizes over as tensors)
        check_positive_int(num_heads, "num_heads")
        check_size(batch_size, "batch_size")
    if not isinstance(like, Tensor) or not like.is_floating_point():
        raise ValueError(f"like must be a floating-point torch.Tensor, got {getattr(like, 'dtype', type(like).__name__)}")
    if head_mask is None:
        return None
    head_mask = as_tensor(head_mask, "head_mask", "a tensor of gates (numbers)")
    if head_mask.dtype == torch.bool or head_mask.is_complex():
        raise ValueError(f"head_mask must hold real numbers, got dtype {head_mask.dtype}")
    head_mask = head_mask.to(dtype=like.dtype, device=like.device)  # keeps its gradient
    if head_mask.shape not in ((H,), (batch_size, H)):
        raise ValueError(
            f"head_mask must have shape (H,) = ({H},) or (B, H) = ({batch_size}, {H}), "
            f"got {tuple(head_mask.shape)}"
        )
    return head_mask.expand(batch_size, H)  # (H,) or (B, H) -> (B, H)


def read_lens_and_gates(
    valid_lens: object,
    batch_size: int,
    num_queries: int,
    num_keys: int,
    gates: Tensor | None,
    *also: Tensor,
    device: torch.device | None = None,
) -> tuple[CheckedLens | None, list[float | None]]:
    """Check the valid lengths' values and that the head gates are finite, in ONE host read.

    :func:`mha_lib.masking.read_valid_lens` with the gates of :func:`check_head_mask`: an
    attention layer's forward reads values from the device at most once (not at all without
    valid lengths and head gates).

    Returns:
        The checked valid lengths (moved to ``device``) and the values of ``also``.

    Raises:
        ValueError: as :func:`mha_lib.masking.check_valid_lens`; gates that are not finite.
    """
    flags = () if gates is None else (torch.isfinite(gates).all(),)
    valid_lens, values = read_valid_lens(valid_lens, batch_size, num_queries, num_keys, *flags,
                                         *also, device=device)
    if flags and values[0] is not None and not values[0]:
        raise ValueError(f"head_mask must be finite, got {gates.tolist()}")
    return valid_lens, values[len(flags):]


def read_lens_and_finite(
    queries: Tensor, keys: Tensor, values: Tensor, valid_lens: object, gates: Tensor | None
) -> tuple[CheckedLens | None, bool | None]:
    """:func:`read_lens_and_gates` for an attention layer without a cache, and whether its
    inputs are finite (read together with the valid lengths: one host read; without valid
    lengths nothing is read and this is None: the rule for NaN and infinite inputs,
    :class:`NonFiniteRule`, is then worked out on the device).

    Shapes:
        queries: (B, Lq, .); keys, values: (B, Lk, .), the layer's inputs.
    """
    B, Lq, Lk = queries.shape[0], queries.shape[1], keys.shape[1]
    if valid_lens is None or _read_first(queries):  # (the CPU asks later, in attend_heads)
        valid_lens, _ = read_lens_and_gates(valid_lens, B, Lq, Lk, gates, device=queries.device)
        return valid_lens, None
    valid_lens, (finite,) = read_lens_and_gates(valid_lens, B, Lq, Lk, gates,
                                                all_finite(queries, keys, values),
                                                device=queries.device)
    return valid_lens, None if finite is None else bool(finite)
