"""Grouped-query attention: fewer key/value heads than query heads (Ainslie et al., 2023).

Shape legend
    B    batch size
    H    number of query heads
    Hkv  number of key/value heads; divides H
    g    H / Hkv, query heads per key/value head (the group size)
    Lq   number of queries
    Lk   number of key-value pairs
    d    head size, D / H
    D    d_model

Query head ``h`` uses key/value head ``h // g``: heads ``0 .. g-1`` share the first one, and so
on (the convention of ``F.scaled_dot_product_attention(..., enable_gqa=True)``). With
``Hkv = H`` this is multi-head attention; with ``Hkv = 1`` it is multi-query attention
(Shazeer, 2019). ``W_k`` and ``W_v`` shrink from (D, D) to (D, Hkv*d), and so does a KV cache.

:func:`grouped_attention` shows the sharing by broadcasting (chapter 10); the layer attends
through :func:`mha_lib.multihead.attend_heads`, the computation every attention layer shares.
With ``rope=True`` it rotates queries and keys by their positions (RoPE, :func:`rotary`), as
the language models that use grouped-query attention do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor, nn

from mha_lib._checks import (
    check_bool,
    check_not_meta,
    check_positive_int,
    check_probability,
    quiet_when_traced,
)
from mha_lib._settings import build
from mha_lib.attention import FiniteDotProductAttention, NonFiniteRule, check_qkv, score_operands
from mha_lib.cached import query_positions
from mha_lib.heads import merge_heads, split_heads
from mha_lib.masking import as_mask, check_positions, softmax_over_kept, visible
from mha_lib.masks import Mask
from mha_lib.multihead import (
    MultiHeadAttention,
    attend_heads,
    cached_keys_values,
    check_cached_attention,
    check_head_mask,
    check_head_shapes,
    read_lens_and_gates,
    read_lens_and_finite,
)
from mha_lib.positions import rotary

__all__ = ["GroupedQueryAttention", "gqa_from_mha", "grouped_attention", "kv_head_of"]


def kv_head_of(num_heads: int, num_kv_heads: int) -> list[int]:
    """For each query head ``h``, the key/value head it reads: ``h // (H / Hkv)``."""
    H = check_positive_int(num_heads, "num_heads")
    Hkv = check_positive_int(num_kv_heads, "num_kv_heads")
    if H % Hkv:
        raise ValueError(f"num_kv_heads ({Hkv}) must divide num_heads ({H})")
    return [h // (H // Hkv) for h in range(H)]


def grouped_attention(
    q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None = None, dropout: nn.Module | None = None
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention where groups of query heads share a key/value head.

    The query heads are reshaped into (Hkv, g) so that the g heads of a group meet *the same*
    key/value tensor by broadcasting: nothing is copied H / Hkv times.

    Shapes:
        q: (B, H, Lq, d)
        k, v: (B, Hkv, Lk, d) with Hkv dividing H
        keep: None or bool broadcastable to (B, H, Lq, Lk), True = may attend
        dropout: None, or a module applied to the weights before they mix the values.
        returns: output (B, H, Lq, d) and weights (B, H, Lq, Lk) (before dropout); a query
            row that may attend to nothing gets zero weights and a zero output.
    """
    check_head_shapes(q, k, v)
    B, H, Lq, d = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    _check_grouped_extras(keep, dropout, (B, H, Lq, Lk))
    g = H // Hkv
    q = q.reshape(B, Hkv, g, Lq, d)  # (B, H, Lq, d) -> (B, Hkv, g, Lq, d)
    k, v = k[:, :, None], v[:, :, None]  # (B, Hkv, Lk, d) -> (B, Hkv, 1, Lk, d)
    q_s, k_s = score_operands(q, k)  # q / sqrt(d) and k (scores that cannot overflow)
    scores = q_s @ k_s.transpose(-1, -2)  # (B, Hkv, g, Lq, Lk)
    if keep is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        keep = keep.expand(B, H, Lq, Lk).reshape(B, Hkv, g, Lq, Lk)  # (B, H, ..) -> (B, Hkv, g, ..)
        weights = softmax_over_kept(scores, keep)
    weights = weights.to(v.dtype)
    out = (weights if dropout is None else dropout(weights)) @ v  # (B, Hkv, g, Lq, Lk) @ (B, Hkv, 1, Lk, d) -> (B, Hkv, g, Lq, d)
    # (B, Hkv, g, Lq, .) -> (B, H, Lq, .)
    return out.reshape(B, H, Lq, d), weights.reshape(B, H, Lq, Lk)


def _check_grouped_extras(keep: object, dropout: object, shape: tuple[int, ...]) -> None:
    """The checks of :func:`grouped_attention`'s ``keep`` (bool, broadcastable to (B, H, Lq, Lk))
    and ``dropout`` (None or callable)."""
    if keep is not None:
        if not isinstance(keep, Tensor) or keep.dtype != torch.bool:
            raise ValueError(
                f"keep must be a boolean torch.Tensor, got {getattr(keep, 'dtype', type(keep).__name__)}"
            )
        check_not_meta(keep, "keep")
        try:
            fits = keep.dim() <= 4 and torch.broadcast_shapes(keep.shape, shape) == shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"keep must broadcast to (B, H, Lq, Lk) = {shape}, got {tuple(keep.shape)}")
    if dropout is not None and not callable(dropout):
        raise ValueError(f"dropout must be None or a module, got {type(dropout).__name__}")


class GroupedQueryAttention(nn.Module):
    """Multi-head attention whose ``num_heads`` query heads share ``num_kv_heads`` K/V heads.

    Shapes:
        queries: (B, Lq, D)
        keys, values: (B, Lk, D)
        valid_lens: None, (B,) or (B, Lq)
        head_mask: None, (H,) or (B, H)
        positions: None, (Lq,) or (B, Lq) integers
        output: (B, Lq, D); weights: (B, H, Lq, Lk)

    Args:
        d_model: D, the width of inputs and output; divisible by ``num_heads``.
        num_heads: H, the query heads.
        num_kv_heads: Hkv, the key/value heads; must divide ``num_heads``.
        dropout: dropout rate on the attention weights, in [0, 1).
        bias: whether the four projections have a bias.
        rope: rotate queries and keys by their positions (RoPE, :func:`mha_lib.positions.rotary`)
            after the projections; needs an even head size d.

    ``module.settings`` holds these arguments (a :class:`GroupedQueryAttention.Settings`).
    """

    @dataclass(frozen=True)
    class Settings:
        """The constructor's arguments, by name (see the class)."""

        d_model: int
        num_heads: int
        num_kv_heads: int
        dropout: float
        bias: bool = False
        rope: bool = False

    def __init__(
        self, d_model: int, num_heads: int, num_kv_heads: int, dropout: float, bias: bool = False,
        rope: bool = False,
    ) -> None:
        super().__init__()
        D = check_positive_int(d_model, "d_model")
        H = check_positive_int(num_heads, "num_heads")
        Hkv = check_positive_int(num_kv_heads, "num_kv_heads")
        if D % H:
            raise ValueError(f"d_model ({D}) must be divisible by num_heads ({H})")
        if H % Hkv:
            raise ValueError(f"num_kv_heads ({Hkv}) must divide num_heads ({H})")
        check_bool(bias, "bias")
        self.rope = check_bool(rope, "rope")
        if rope and (D // H) % 2:
            raise ValueError(
                f"rope=True rotates pairs of features: the head size d = d_model / num_heads "
                f"must be even, got {D // H}"
            )
        self.num_heads, self.num_kv_heads = H, Hkv
        self.head_size = D // H
        self.attention = FiniteDotProductAttention(check_probability(dropout, "dropout"))
        self.W_q = nn.Linear(D, D, bias=bias)
        self.W_k = nn.Linear(D, Hkv * self.head_size, bias=bias)
        self.W_v = nn.Linear(D, Hkv * self.head_size, bias=bias)
        self.W_o = nn.Linear(D, D, bias=bias)
        self.settings = self.Settings(D, H, Hkv, float(dropout), bias, rope)

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | Sequence[float] | None = None,
        *,
        mask: Mask | None = None,
        need_weights: bool = False,
        head_mask: Tensor | None = None,
        cache=None,
        positions: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from every query to the valid keys, each query head through its group's K/V head.

        Args:
            queries, keys, values: see the shape legend.
            valid_lens: how many key-value pairs each example (B,) or query (B, Lq) may use;
                with a cache, counted from the first cached position (at most L + Lq).
            mask: a :class:`mha_lib.masks.Mask` (with valid lengths: both apply), at the
                positions of the queries and keys (with a cache, as ``positions`` places them).
            need_weights: also return the weights (B, H, Lq, Lk).
            head_mask: gates of the query heads, (H,) or (B, H), multiplying each head's
                output before ``W_o`` (as in ``MultiHeadAttention``).
            cache: a ``mha_lib.decoding.KVCache`` (or one layer of it): the queries are new
                positions of a self-attention, attending causally to the cached ones and to
                themselves. The cache stores Hkv heads, not H (and the keys after RoPE).
            positions: the positions of the queries (and, in self-attention, of the keys):
                for RoPE, and with a cache for the causal rule (a query at position p sees
                keys 0 .. p) and where the new keys are stored. Default: L .. L + Lq - 1, with
                L the cached positions (0 without a cache); without a cache and with Lk != Lq
                the keys sit at 0 .. Lk - 1. Prompts of different lengths decode as one batch
                when each example gets its own positions (B, Lq): see ``mha_lib.decoding``.

        Returns:
            output (B, Lq, D), or ``(output, weights)``.

        Raises:
            ValueError: inputs that do not fit (sizes, dtype, device), bad valid lengths, head
                mask, cache or positions.
        """
        mask, gates, finite = self._check_forward(
            queries, keys, values, valid_lens, mask, need_weights, head_mask, cache, positions)
        H, Hkv = self.num_heads, self.num_kv_heads
        q = split_heads(self.W_q(queries), H)  # (B, Lq, D) -> (B, H, Lq, d)
        k = split_heads(self.W_k(keys), Hkv)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
        v = split_heads(self.W_v(values), Hkv)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
        if self.rope:
            q, k = self._rotate(q, k, cache, positions)
        if cache is not None:  # decoding: the cached positions are keys too
            k, v, seen = cached_keys_values(cache, k, v, mask, positions)
        else:
            seen = visible(mask, *queries.shape[:2], keys.shape[1], device=queries.device)
        nonfinite = None if finite else lambda: NonFiniteRule.of(queries, keys, values, seen.raw)
        out, weights = attend_heads(q, k, v, seen, self.attention, need_weights=need_weights,
                                    gates=gates, nonfinite=nonfinite)  # out: (B, H, Lq, d)
        output = self.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)
        return (output, weights) if need_weights else output

    def _rotate(self, q: Tensor, k: Tensor, cache, positions) -> tuple[Tensor, Tensor]:
        """RoPE: rotate queries (B, H, Lq, d) and keys (B, Hkv, Lk, d) by their positions."""
        B, _, Lq, _ = q.shape
        Lk = k.shape[2]
        if cache is not None:  # the positions the mask of the step reads too
            positions = query_positions(cache, positions, B, Lq, q.device)  # (1 or B, Lq)
        elif positions is None:
            positions = torch.arange(Lq, device=q.device)[None]  # (1, Lq)
        else:
            positions = check_positions(positions, B, Lq).to(q.device)  # (B, Lq)
        positions = positions.expand(B, Lq)  # (1 or B, Lq) -> (B, Lq)
        key_positions = positions if Lk == Lq else torch.arange(Lk, device=k.device)
        return rotary(q, positions), rotary(k, key_positions)

    @quiet_when_traced
    def _check_forward(self, queries, keys, values, valid_lens, mask, need_weights, head_mask,
                       cache, positions):
        """The checks of :meth:`forward` (at most one host read: valid lengths, head gates,
        whether the inputs are finite); returns the mask (valid lengths included, or None), the
        head gates (B, H) (or None) and whether the inputs are finite (as MultiHeadAttention's)."""
        check_qkv(queries, keys, values)
        check_bool(need_weights, "need_weights")
        D, weight = self.W_q.in_features, self.W_q.weight
        for name, x in (("queries", queries), ("keys", keys), ("values", values)):
            if x.shape[-1] != D:
                raise ValueError(f"{name} must have feature size d_model = {D}, got {x.shape[-1]}")
            if x.dtype != weight.dtype or x.device != weight.device:
                raise ValueError(
                    f"{name} are {x.dtype} on {x.device} but the module's weights are "
                    f"{weight.dtype} on {weight.device}: convert one with .to(...)"
                )
        B, Lq, _ = queries.shape
        gates = check_head_mask(head_mask, self.num_heads, B, queries)
        if cache is not None:  # (no rule for non-finite inputs with a cache)
            num_keys = check_cached_attention(cache, queries, keys, positions)
            valid_lens, _ = read_lens_and_gates(valid_lens, B, Lq, num_keys, gates,
                                                device=queries.device)
            return as_mask(valid_lens, mask), gates, True
        if positions is not None:
            if not self.rope:
                raise ValueError("positions are used with rope=True or with a cache, got neither")
            check_positions(positions, B, Lq)
            if keys.shape[1] != Lq:
                raise ValueError(
                    "positions place the queries and, in self-attention, the keys: with "
                    f"{Lq} queries but {keys.shape[1]} keys, leave positions=None"
                )
        valid_lens, finite = read_lens_and_finite(queries, keys, values, valid_lens, gates)
        return as_mask(valid_lens, mask), gates, finite


def gqa_from_mha(mha: MultiHeadAttention, num_kv_heads: int) -> GroupedQueryAttention:
    """Grouped-query attention initialised from multi-head attention by mean-pooling.

    The starting point of *uptraining* (Ainslie et al., 2023): ``W_q`` and ``W_o`` (weights and
    biases) are copied, and the key and value heads of each group are averaged. Group j is the
    g = H / Hkv *consecutive* query heads ``j*g .. j*g + g - 1`` that share key/value head j
    (:func:`kv_head_of`), so key head j of the result is the mean of ``mha``'s key heads
    ``j*g .. j*g + g - 1`` (their rows of ``W_k``), and likewise for the values. With
    ``num_kv_heads = H`` the result computes exactly what ``mha`` computes; with fewer it is an
    approximation that a short fine-tune then repairs.

    Shapes:
        mha.W_k.weight, mha.W_v.weight: (H*d, D) -> W_k.weight, W_v.weight: (Hkv*d, D)

    Args:
        mha: a :class:`~mha_lib.multihead.MultiHeadAttention` whose query, key and value sizes
            equal its width D (self-attention shapes), not modified.
        num_kv_heads: Hkv, the key/value heads of the result; must divide H.

    Returns:
        a :class:`GroupedQueryAttention` with ``mha``'s H, D, dropout rate, bias, dtype, device
        and training mode.
    """
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    s = mha.settings
    H, D = s.num_heads, s.d_model
    sizes = {"query_size": s.query_size, "key_size": s.key_size, "value_size": s.value_size,
             "output_size": s.output_size or D}
    for name, size in sizes.items():
        if size != D:
            raise ValueError(f"mha must have every size equal to its width D = {D} (grouped-"
                             f"query attention maps D features to D), got {name} = {size}")
    Hkv = max(kv_head_of(H, num_kv_heads)) + 1  # checks that num_kv_heads divides H
    d, g = D // H, H // Hkv
    # mha's settings, less the sizes checked above, and Hkv
    settings = GroupedQueryAttention.Settings(D, H, Hkv, s.dropout, bias=s.bias)
    gqa = build(GroupedQueryAttention, settings, like=mha)
    with torch.no_grad():
        gqa.W_q.load_state_dict(mha.W_q.state_dict())
        gqa.W_o.load_state_dict(mha.W_o.state_dict())
        for name in ("W_k", "W_v"):
            source, target = getattr(mha, name), getattr(gqa, name)
            # (H*d, D) -> (Hkv, g, d, D) -> mean over the group -> (Hkv*d, D)
            target.weight.copy_(source.weight.reshape(Hkv, g, d, D).mean(1).reshape(Hkv * d, D))
            if source.bias is not None:
                # (H*d,) -> (Hkv, g, d) -> mean over the group -> (Hkv*d,)
                target.bias.copy_(source.bias.reshape(Hkv, g, d).mean(1).reshape(Hkv * d))
    return gqa
