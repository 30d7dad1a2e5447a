"""Multi-head attention: H scaled dot-product attentions on learned projections, concatenated.

Shape legend
    B   batch size
    H   number of heads
    Lq  number of queries
    Lk  number of key-value pairs
    d   head size, D / H
    D   num_hiddens, the width of the projections and of the output
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib._checks import (
    check_bool,
    check_positive_int,
    check_probability,
    quiet_when_traced,
    tracing,
)
from mha_lib.attention import FiniteDotProductAttention, check_qkv
from mha_lib.heads import merge_heads, split_heads, transpose_output, transpose_qkv
from mha_lib.masking import check_valid_lens


class MultiHeadAttention(nn.Module):
    """Multi-head attention with the d2l.ai chapter's signature (PyTorch edition).

    Each head ``h`` attends with its own slice of the projections ``W_q``, ``W_k``, ``W_v``;
    the H head outputs are concatenated and mixed by ``W_o``.

    Shapes:
        queries: (B, Lq, query_size)
        keys: (B, Lk, key_size)
        values: (B, Lk, value_size)
        valid_lens: None, (B,) or (B, Lq)
        head_mask: None, (H,) or (B, H)
        output: (B, Lq, D); weights: (B, H, Lq, Lk)

    Args:
        key_size: feature size of the keys.
        query_size: feature size of the queries.
        value_size: feature size of the values.
        num_hiddens: D, the projection width; must be divisible by ``num_heads``.
        num_heads: H.
        dropout: dropout rate on the attention weights, in [0, 1).
        bias: whether the four projections have a bias.
    """

    def __init__(
        self,
        key_size: int,
        query_size: int,
        value_size: int,
        num_hiddens: int,
        num_heads: int,
        dropout: float,
        bias: bool = False,
    ) -> None:
        super().__init__()
        sizes = {"key_size": key_size, "query_size": query_size, "value_size": value_size}
        for name, size in sizes.items():
            check_positive_int(size, name)
        check_positive_int(num_hiddens, "num_hiddens")
        if not isinstance(bias, bool):
            raise ValueError(f"bias must be True or False, got {bias!r}")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        if num_hiddens % num_heads:
            raise ValueError(
                f"num_hiddens ({num_hiddens}) must be divisible by num_heads ({num_heads})"
            )
        # DotProductAttention in fewer passes: the inputs that reach it are finite (forward)
        self.attention = FiniteDotProductAttention(check_probability(dropout, "dropout"))
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    @property
    def num_hiddens(self) -> int:
        """H*d, the width of the query/key/value projections (D, unless heads were pruned)."""
        return self.W_q.out_features

    @property
    def head_size(self) -> int:
        """d = D / H."""
        return self.num_hiddens // self.num_heads

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | Sequence[float] | None = None,
        *,
        need_weights: bool = False,
        head_mask: Tensor | None = None,
        cache=None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from every query to the valid keys, in every head.

        ``need_weights=True`` takes the clear path and also returns the weights; otherwise the
        fast path (PyTorch's fused ``scaled_dot_product_attention``) computes the same output.
        ``head_mask`` multiplies each head's output before ``W_o`` (1 keeps a head, 0 removes it).
        ``cache`` (a ``mha_lib.decoding.KVCache``, or one layer of it) decodes step by step: the
        queries are new positions that attend causally to the cached ones and to themselves.

        Returns:
            output (B, Lq, D), or ``(output, weights)`` with weights (B, H, Lq, Lk).
        """
        if cache is not None:  # decoding step by step: mha_lib.decoding does the work
            self._check_forward(queries, keys, values, None, need_weights, head_mask)
            if not callable(getattr(cache, "attend", None)):
                raise ValueError(f"cache must be a mha_lib.decoding.KVCache, got {type(cache).__name__}")
            return cache.attend(self, queries, keys, values, valid_lens,
                                need_weights=need_weights, head_mask=head_mask)
        valid_lens, gates = self._check_forward(queries, keys, values, valid_lens, need_weights, head_mask)
        queries, keys, values, broken = _nonfinite_rows(queries, keys, values, valid_lens)
        if need_weights:
            output, weights = self._forward_clear(queries, keys, values, valid_lens, gates)
            return _nan_rows(output, broken), _nan_rows(weights, broken, heads=True)
        return _nan_rows(self._forward_fast(queries, keys, values, valid_lens, gates), broken)

    def _forward_clear(self, queries, keys, values, valid_lens, gates):
        """The d2l.ai path: fold heads into the batch, attend, unfold, project."""
        H = self.num_heads
        queries = transpose_qkv(self.W_q(queries), H)  # (B, Lq, D) -> (B*H, Lq, d)
        keys = transpose_qkv(self.W_k(keys), H)  # (B, Lk, D) -> (B*H, Lk, d)
        values = transpose_qkv(self.W_v(values), H)  # (B, Lk, D) -> (B*H, Lk, d)
        if valid_lens is not None:
            # Row b*H + h of the folded batch is head h of example b: repeat each example's
            # lengths H times in a row, (B,) -> (B*H,) or (B, Lq) -> (B*H, Lq).
            valid_lens = valid_lens.repeat_interleave(H, dim=0)
        output, weights = self.attention(queries, keys, values, valid_lens, need_weights=True)
        # output: (B*H, Lq, d); weights: (B*H, Lq, Lk)
        if gates is not None:
            output = output * gates.reshape(-1, 1, 1)  # (B, H) -> (B*H, 1, 1)
        output = self.W_o(transpose_output(output, H))  # (B*H, Lq, d) -> (B, Lq, D)
        B, Lq, Lk = output.shape[0], weights.shape[1], weights.shape[2]
        return output, weights.reshape(B, H, Lq, Lk)  # (B*H, Lq, Lk) -> (B, H, Lq, Lk)

    def _forward_fast(self, queries, keys, values, valid_lens, gates):
        """Same output through the fused ``F.scaled_dot_product_attention``."""
        H = self.num_heads
        q = split_heads(self.W_q(queries), H)  # (B, Lq, D) -> (B, H, Lq, d)
        k = split_heads(self.W_k(keys), H)  # (B, Lk, D) -> (B, H, Lk, d)
        v = split_heads(self.W_v(values), H)  # (B, Lk, D) -> (B, H, Lk, d)
        keep, empty = _sdpa_mask(valid_lens, k.shape[2])
        dropout_p = self.attention.dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p)
        # out: (B, H, Lq, d)
        if empty is not None:
            out = out.masked_fill(empty, 0.0)  # a query with nothing to attend to gives zeros
        if gates is not None:
            out = out * gates[:, :, None, None]  # (B, H) -> (B, H, 1, 1)
        return self.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)

    @quiet_when_traced
    def _check_forward(self, queries, keys, values, valid_lens, need_weights, head_mask):
        """The checks of :meth:`forward`; returns the valid lengths (long, on the inputs'
        device) and the head gates as (B, H), each or None."""
        self.check_inputs(queries, keys, values)
        check_bool(need_weights, "need_weights")
        B, Lq, _ = queries.shape
        valid_lens = check_valid_lens(valid_lens, B, Lq, keys.shape[1])
        if valid_lens is not None:
            valid_lens = valid_lens.to(queries.device)
        return valid_lens, self._check_head_mask(head_mask, B, queries)

    def check_inputs(self, queries: Tensor, keys: Tensor, values: Tensor) -> None:
        """Raise a ``ValueError`` unless the inputs fit this module.

        They must be 3-D floating-point tensors with one batch size, as many keys as values,
        the configured feature sizes, and the dtype and device of the module's weights.
        """
        check_qkv(queries, keys, values)
        weight = self.W_q.weight
        expected = (
            ("queries", queries, self.W_q.in_features, "query_size"),
            ("keys", keys, self.W_k.in_features, "key_size"),
            ("values", values, self.W_v.in_features, "value_size"),
        )
        for name, x, size, setting in expected:
            if x.shape[-1] != size:
                raise ValueError(
                    f"{name} must have feature size {setting} = {size}, "
                    f"got {x.shape[-1]} (shape {tuple(x.shape)})"
                )
            if x.dtype != weight.dtype or x.device != weight.device:
                raise ValueError(
                    f"{name} are {x.dtype} on {x.device} but the module's weights are "
                    f"{weight.dtype} on {weight.device}: convert one with .to(...)"
                )

    def _check_head_mask(self, head_mask: Tensor | None, batch_size: int, like: Tensor):
        """Return the gates as a (B, H) tensor, or None."""
        if head_mask is None:
            return None
        H = self.num_heads
        try:
            head_mask = torch.as_tensor(head_mask)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(
                f"head_mask must be a tensor of gates (numbers), got {type(head_mask).__name__}"
            ) from None
        if head_mask.dtype == torch.bool or head_mask.is_complex():
            raise ValueError(f"head_mask must hold real numbers, got dtype {head_mask.dtype}")
        head_mask = head_mask.to(dtype=like.dtype, device=like.device)  # keeps its gradient
        if not tracing() and not torch.isfinite(head_mask).all():
            raise ValueError(f"head_mask must be finite, got {head_mask.tolist()}")
        if head_mask.shape == (H,):
            return head_mask.expand(batch_size, H)  # (H,) -> (B, H)
        if head_mask.shape == (batch_size, H):
            return head_mask
        raise ValueError(
            f"head_mask must have shape (H,) = ({H},) or (B, H) = ({batch_size}, {H}), "
            f"got {tuple(head_mask.shape)}"
        )


def _sdpa_mask(valid_lens: Tensor | None, Lk: int) -> tuple[Tensor | None, Tensor | None]:
    """The keep mask of ``F.scaled_dot_product_attention`` and the queries with nothing to keep.

    One length per example gives a (B, 1, 1, Lk) mask that broadcasts over heads and queries;
    per-query lengths need (B, 1, Lq, Lk). A query whose valid length is 0 keeps nothing:
    torch 2.13's SDPA returns zeros there, older releases NaN. Rather than depend on either, such
    a query may attend anywhere and the caller zeroes its output (``empty``: (B, 1, Lq or 1, 1)).
    No branch depends on the lengths' values, so compiled and traced graphs hold for any lengths.
    """
    if valid_lens is None:
        return None, None
    if valid_lens.dim() == 2:
        lens = valid_lens[:, None, :, None]  # (B, Lq) -> (B, 1, Lq, 1)
    else:
        lens = valid_lens[:, None, None, None]  # (B,) -> (B, 1, 1, 1)
    positions = torch.arange(Lk, device=valid_lens.device)  # (Lk,)
    empty = lens == 0  # (B, 1, Lq or 1, 1)
    keep = (positions < lens) | empty  # (B, 1, Lq or 1, Lk)
    return keep, empty


def _nonfinite_rows(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None):
    """The rule for NaN and inf inputs, the same on both paths.

    A query's output row is NaN when the query itself, or a key or value it may attend to, holds
    a NaN or an infinity (and the query attends to something); an infinity or NaN in a key or
    value that the query may *not* attend to does not reach it. For that, non-finite entries are
    replaced by 0 before the computation and the broken rows are set to NaN after it.

    Returns:
        queries, keys, values (copies when needed) and ``broken``: None when every input is
        finite (eager mode only), else (B, Lq) bool.
    """
    # The common case, in eager mode: a finite sum (one fast read per input) means every entry
    # is finite (an inf or NaN entry makes the sum inf or NaN; an overflow only sends us on).
    if not tracing() and math.isfinite((queries.sum() + keys.sum() + values.sum()).item()):
        return queries, keys, values, None
    finite_q = torch.isfinite(queries).all(-1)  # (B, Lq)
    finite_kv = torch.isfinite(keys).all(-1) & torch.isfinite(values).all(-1)  # (B, Lk)
    if valid_lens is None:
        lens = torch.full((queries.shape[0], 1), keys.shape[1], device=queries.device)  # (B, 1)
    else:
        lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens  # (B, 1) or (B, Lq)
    first_bad = finite_kv.long().cumprod(-1).sum(-1, keepdim=True)  # (B, 1): finite prefix
    broken = (lens > first_bad) | (~finite_q & (lens > 0))  # (B, Lq)
    clean = lambda x, ok: torch.where(ok[..., None], x, 0.0)  # noqa: E731
    return clean(queries, finite_q), clean(keys, finite_kv), clean(values, finite_kv), broken


def _nan_rows(x: Tensor, broken: Tensor | None, heads: bool = False) -> Tensor:
    """Set the rows of ``x`` (B, Lq, ...) or, with ``heads``, (B, H, Lq, ...) where ``broken``
    (B, Lq) is True to NaN."""
    if broken is None:
        return x
    rows = broken[:, None] if heads else broken  # (B, 1, Lq) or (B, Lq)
    return x.masked_fill(rows[..., None], float("nan"))
