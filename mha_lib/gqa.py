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
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_probability, check_tensor
from mha_lib.attention import check_qkv
from mha_lib.decoding import causal_keep_mask, layer_cache
from mha_lib.heads import merge_heads, split_heads
from mha_lib.masking import check_valid_lens, keep_mask_from_valid_lens, masked_softmax_keep
from mha_lib.multihead import MultiHeadAttention

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
    check_tensor(q, "q", 4)
    check_tensor(k, "k", 4)
    check_tensor(v, "v", 4)
    B, H, Lq, d = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != d or H % Hkv:
        raise ValueError(
            "k and v must both have shape (B, Hkv, Lk, d) with the queries' B and d and Hkv "
            f"dividing H: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    g = H // Hkv
    q = q.reshape(B, Hkv, g, Lq, d)  # (B, H, Lq, d) -> (B, Hkv, g, Lq, d)
    k, v = k[:, :, None], v[:, :, None]  # (B, Hkv, Lk, d) -> (B, Hkv, 1, Lk, d)
    scores = (q / math.sqrt(d)) @ k.transpose(-1, -2)  # (B, Hkv, g, Lq, Lk)
    if keep is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        keep = keep.expand(B, H, Lq, Lk).reshape(B, Hkv, g, Lq, Lk)  # (B, H, ..) -> (B, Hkv, g, ..)
        weights = masked_softmax_keep(scores, keep)
    out = (weights if dropout is None else dropout(weights)) @ v  # (B, Hkv, g, Lq, Lk) @ (B, Hkv, 1, Lk, d) -> (B, Hkv, g, Lq, d)
    # (B, Hkv, g, Lq, .) -> (B, H, Lq, .)
    return out.reshape(B, H, Lq, d), weights.reshape(B, H, Lq, Lk)


class GroupedQueryAttention(nn.Module):
    """Multi-head attention whose ``num_heads`` query heads share ``num_kv_heads`` K/V heads.

    Shapes:
        queries: (B, Lq, D)
        keys, values: (B, Lk, D)
        valid_lens: None, (B,) or (B, Lq)
        output: (B, Lq, D); weights: (B, H, Lq, Lk)

    Args:
        d_model: D, the width of inputs and output; divisible by ``num_heads``.
        num_heads: H, the query heads.
        num_kv_heads: Hkv, the key/value heads; must divide ``num_heads``.
        dropout: dropout rate on the attention weights, in [0, 1).
        bias: whether the four projections have a bias.
    """

    def __init__(
        self, d_model: int, num_heads: int, num_kv_heads: int, dropout: float, bias: bool = False
    ) -> None:
        super().__init__()
        D = check_positive_int(d_model, "d_model")
        H = check_positive_int(num_heads, "num_heads")
        Hkv = check_positive_int(num_kv_heads, "num_kv_heads")
        if D % H:
            raise ValueError(f"d_model ({D}) must be divisible by num_heads ({H})")
        if H % Hkv:
            raise ValueError(f"num_kv_heads ({Hkv}) must divide num_heads ({H})")
        if not isinstance(bias, bool):
            raise ValueError(f"bias must be True or False, got {bias!r}")
        self.num_heads, self.num_kv_heads = H, Hkv
        self.head_size = D // H
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))
        self.W_q = nn.Linear(D, D, bias=bias)
        self.W_k = nn.Linear(D, Hkv * self.head_size, bias=bias)
        self.W_v = nn.Linear(D, Hkv * self.head_size, bias=bias)
        self.W_o = nn.Linear(D, D, bias=bias)

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | Sequence[float] | None = None,
        *,
        need_weights: bool = False,
        cache=None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from every query to the valid keys, each query head through its group's K/V head.

        Args:
            queries, keys, values: see the shape legend.
            valid_lens: how many key-value pairs each example (B,) or query (B, Lq) may use.
            need_weights: also return the weights (B, H, Lq, Lk).
            cache: a ``mha_lib.decoding.KVCache`` (or one layer of it): the queries are new
                positions of a self-attention, attending causally to the cached ones and to
                themselves. The cache stores Hkv heads, not H.

        Returns:
            output (B, Lq, D), or ``(output, weights)``.
        """
        check_qkv(queries, keys, values)
        if not isinstance(need_weights, bool):
            raise ValueError(f"need_weights must be True or False, got {need_weights!r}")
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
        Lk = keys.shape[1]
        H, Hkv = self.num_heads, self.num_kv_heads
        q = split_heads(self.W_q(queries), H)  # (B, Lq, D) -> (B, H, Lq, d)
        k = split_heads(self.W_k(keys), Hkv)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
        v = split_heads(self.W_v(values), Hkv)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
        if cache is not None:
            keep = self._append_to_cache(cache, k, v, valid_lens, Lq, Lk)
            k, v = layer_cache(cache).keys, layer_cache(cache).values  # (B, Hkv, L + Lq, d)
        else:
            valid_lens = check_valid_lens(valid_lens, B, Lq, Lk)
            keep = None
            if valid_lens is not None:
                valid_lens = valid_lens.to(queries.device)
                per_query = valid_lens.dim() == 2
                keep = keep_mask_from_valid_lens(valid_lens, Lq if per_query else 1, Lk)[:, None]
                # keep: (B, 1, Lq or 1, Lk)
        out, weights = grouped_attention(q, k, v, keep, self.dropout)
        # out: (B, H, Lq, d); weights: (B, H, Lq, Lk)
        output = self.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)
        return (output, weights) if need_weights else output

    def _append_to_cache(self, cache, k, v, valid_lens, Lq, Lk) -> Tensor | None:
        """Append the new keys and values; return the causal keep mask of the new queries."""
        layer = layer_cache(cache)
        if Lk != Lq:
            raise ValueError(
                "with a cache, keys and values must be the new positions themselves "
                f"(self-attention): {Lq} queries but {Lk} keys"
            )
        if valid_lens is not None:
            raise ValueError("valid_lens cannot be combined with cache: the cache makes the "
                             "attention causal")
        L = len(layer)
        layer.append(k, v)
        return causal_keep_mask(L, Lq, device=k.device)  # (Lq, L + Lq)


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
    H, D = mha.num_heads, mha.W_q.out_features
    sizes = {"query_size": mha.W_q.in_features, "key_size": mha.W_k.in_features,
             "value_size": mha.W_v.in_features, "W_o's input size": mha.W_o.in_features,
             "W_o's output size": mha.W_o.out_features}
    for name, size in sizes.items():
        if size != D:
            raise ValueError(f"mha must have every size equal to its width D = {D} (grouped-"
                             f"query attention maps D features to D), got {name} = {size}")
    Hkv = max(kv_head_of(H, num_kv_heads)) + 1  # checks that num_kv_heads divides H
    d, g = D // H, H // Hkv
    weight = mha.W_q.weight
    gqa = GroupedQueryAttention(D, H, Hkv, mha.attention.dropout.p, bias=mha.W_q.bias is not None)
    gqa = gqa.to(device=weight.device, dtype=weight.dtype).train(mha.training)
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
