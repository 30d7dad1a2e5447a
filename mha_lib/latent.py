"""Multi-head latent attention (MLA, DeepSeek-V2, 2024): keys and values through a small latent.

Shapes in the book's notation (:mod:`mha_lib`), and r, the latent's size (the rank).

Grouped-query attention makes the KV cache smaller by sharing K/V heads; MLA keeps all H heads
but makes every key and value a linear function of one vector per token, the latent
``c = W_dkv x`` of r numbers. The cache keeps ``c`` (r numbers a token) instead of K and V
(2 * H * d):

    c = W_dkv x          (B, Lk, r)      what the cache stores
    k_h = W_uk,h c       (B, H, Lk, d)   keys, up from the latent
    v_h = W_uv,h c       (B, H, Lk, d)   values, up from the latent

**The absorbed form.** ``q_h . k_h = (W_uk,h^T q_h) . c``: fold ``W_uk`` into the queries and
attend to the latent itself, as if it were one key/value head of size r shared by all heads
(multi-query attention over the latent); fold ``W_uv`` in after the weighted sum. Decoding
then never builds K or V. A bias ``b`` of ``W_uk`` / ``W_uv`` rides along as one more latent
coordinate that is always 1 (homogeneous coordinates), so the two forms are equal exactly.

**Positions.** With ``rope=True`` the keys are rotated after ``W_uk`` (and the queries after
``W_q``), as in any RoPE layer; the cache still keeps the latent, but the rotation now sits
between ``q`` and ``W_uk`` and depends on the position, so ``W_uk`` can no longer be folded
into the queries: the absorbed form is refused. DeepSeek-V2 keeps it by rotating a separate,
small key shared by the heads and concatenating it to each head's key ("decoupled RoPE"),
which this module leaves out.
"""

from __future__ import annotations

import math
import torch
from torch import Tensor, nn

from mha_lib._checks import check_bool, check_positive_int, check_probability, check_tensor
from mha_lib.attention import FiniteDotProductAttention
from mha_lib.heads import merge_heads, split_heads
from mha_lib.masking import visible
from mha_lib.masks import causal
from mha_lib.multihead import AttentionLayer, MultiHeadAttention, attend_heads
from mha_lib.positions import Rope

__all__ = ["LatentAttention", "LatentCache", "mla_from_mha"]


class LatentCache:
    """The cache of one :class:`LatentAttention` layer: the latents of the tokens seen,
    ``latent`` (B, L, r), r numbers a token where multi-head attention keeps 2 * H * d."""

    def __init__(self) -> None:
        self.latent: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.latent is None else self.latent.shape[1]

    def update(self, c: Tensor) -> Tensor:
        """Append the latents of n new tokens, (B, n, r); return all of them, (B, L + n, r)."""
        check_tensor(c, "c", 3)
        if self.latent is not None and (c.shape[0], c.shape[2]) != (self.latent.shape[0], self.latent.shape[2]):
            raise ValueError(f"c must have shape (B, n, r) = ({self.latent.shape[0]}, n, "
                             f"{self.latent.shape[2]}) like the cached latents, got {tuple(c.shape)}")
        self.latent = c if self.latent is None else torch.cat([self.latent, c], dim=1)
        return self.latent

    @property
    def nbytes(self) -> int:
        """The bytes the cache holds."""
        return 0 if self.latent is None else self.latent.numel() * self.latent.element_size()


class LatentAttention(AttentionLayer):
    """Multi-head latent attention: ``MultiHeadAttention`` whose keys and values come from a
    rank-r latent of the keys' input, ``c = W_dkv x`` (one down-projection shared by K and V).

    Shapes:
        queries: (B, Lq, query_size); keys, values: (B, Lk, key_size)
        valid_lens: None, (B,) or (B, Lq); head_mask: None, (H,) or (B, H)
        output: (B, Lq, D); weights: (B, H, Lq, Lk)

    Args:
        key_size, query_size, value_size, d_model, num_heads, dropout, bias: as for
            :class:`~mha_lib.multihead.MultiHeadAttention` (``value_size`` must equal
            ``key_size``: keys and values share the down-projection).
        rank: r, the latent's size.
        rope: rotate queries and keys by their positions after the projections: True (RoPE;
            needs an even head size) or a :class:`~mha_lib.positions.Rope` (its base, scaling,
            ...), as for ``GroupedQueryAttention``; rules out the absorbed form (see the module).

    The call is ``MultiHeadAttention``'s, plus ``cache=`` (a :class:`LatentCache`: the queries
    are new tokens that attend causally to the cached ones and themselves), ``positions``
    (with RoPE, without a cache: (Lq,) or (B, Lq), the queries' and keys' positions) and
    ``absorbed=`` (the absorbed form; the same numbers).
    """

    def __init__(self, key_size: int, query_size: int, value_size: int, d_model: int,
                 num_heads: int, dropout: float, bias: bool = False, *, rank: int,
                 rope: bool | Rope = False) -> None:
        super().__init__()
        for name, size in {"key_size": key_size, "query_size": query_size, "d_model": d_model,
                           "rank": rank, "value_size": value_size}.items():
            check_positive_int(size, name)
        if value_size != key_size:
            raise ValueError(f"value_size must equal key_size = {key_size} (keys and values share "
                             f"the latent's down-projection), got {value_size}")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_kv_heads, self.head_size, self.rank = num_heads, d_model // num_heads, rank
        self.attention = FiniteDotProductAttention(check_probability(dropout, "dropout"))
        self.W_q = nn.Linear(query_size, d_model, bias=check_bool(bias, "bias"))
        self.W_dkv = nn.Linear(key_size, rank, bias=False)  # x -> c, the latent
        self.W_uk = nn.Linear(rank, d_model, bias=bias)  # c -> the H heads' keys
        self.W_uv = nn.Linear(rank, d_model, bias=bias)  # c -> the H heads' values
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self._init_options(query_size, rope=rope)  # (positions only: see AttentionOptions)

    _input_sizes = ("query_size", "key_size", "value_size")

    def _input_features(self) -> tuple[int, int, int]:
        """Keys and values both enter through ``W_dkv``."""
        return self.W_q.in_features, self.W_dkv.in_features, self.W_dkv.in_features

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor, valid_lens=None, mask=None,
                need_weights: bool = False, head_mask=None, *, cache: LatentCache | None = None,
                positions=None, absorbed: bool = False):
        """Attend through the latent; see the class. Returns output (B, Lq, D), or
        ``(output, weights)`` with weights (B, H, Lq, Lk)."""
        if cache is not None and not isinstance(cache, LatentCache):
            raise ValueError(f"cache must be a mha_lib.latent.LatentCache, got {type(cache).__name__}")
        if cache is not None and (keys is not queries or values is not queries):
            raise ValueError("with a cache, pass the new tokens as queries, keys and values alike")
        if check_bool(absorbed, "absorbed") and (need_weights or self.rope):
            raise ValueError("absorbed=True computes no weights and cannot fold W_uk past RoPE: "
                             f"got need_weights={need_weights}, rope={self.rope}")
        if cache is not None and positions is not None:
            raise ValueError("positions: a LatentCache only appends; leave positions=None")
        mask, gates, _, positions = self._check_forward(queries, keys, values, valid_lens, mask,
                                                        need_weights, head_mask, None, positions)
        c = self.W_dkv(keys)  # (B, Lk, r): the latent, all the cache keeps of a token
        c_v = c if values is keys else self.W_dkv(values)  # (B, Lk, r)
        B, Lq = queries.shape[:2]
        if cache is not None:  # the new tokens see the cached ones and themselves
            if mask is not None:
                raise ValueError("with a cache the mask is causal: pass valid_lens=None, mask=None")
            L = len(cache)
            c = c_v = cache.update(c)  # (B, L + n, r)
            seen = visible(causal(), B, Lq, L + Lq, q_offset=L, device=queries.device)
        else:
            seen = visible(mask, B, Lq, keys.shape[1], device=queries.device)
        q = split_heads(self.W_q(queries), self.num_heads)  # (B, Lq, D) -> (B, H, Lq, d)
        if absorbed:
            out = self._absorbed(q, c, c_v, seen, gates)  # (B, H, Lq, d)
            return self.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)
        k = split_heads(self.W_uk(c), self.num_heads)  # (B, Lk, r) -> (B, Lk, D) -> (B, H, Lk, d)
        if self.rope:  # (positions given: a self-attention's queries and keys, checked above)
            Lk = k.shape[2]
            first = 0 if cache is None else Lk - Lq  # the queries follow the cached positions
            k_positions = torch.arange(Lk, device=k.device) if positions is None else positions
            if positions is None:
                positions = torch.arange(first, first + Lq, device=q.device)  # (Lq,)
        q, k = self.qk(q, k, positions, k_positions if self.rope else None)  # the layer's RoPE
        v = split_heads(self.W_uv(c_v), self.num_heads)  # (B, Lk, r) -> (B, Lk, D) -> (B, H, Lk, d)
        out, weights = attend_heads(q, k, v, seen, self.attention, need_weights=need_weights,
                                    gates=gates)  # out: (B, H, Lq, d)
        output = self.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)
        return (output, weights) if need_weights else output

    def _absorbed(self, q: Tensor, c: Tensor, c_v: Tensor, seen, gates) -> Tensor:
        """The absorbed form: W_uk folded into the queries, W_uv applied after the weighted sum;
        the heads attend to the latent itself (one shared key/value head of size r + 1)."""
        H, d, r = self.num_heads, self.head_size, self.rank
        W_uk, W_uv = self._homogeneous(self.W_uk), self._homogeneous(self.W_uv)  # (H, d, r + 1)
        q_lat = q @ W_uk  # (B, H, Lq, d) @ (H, d, r + 1) -> (B, H, Lq, r + 1)
        q_lat = q_lat * math.sqrt((r + 1) / d)  # the kernel divides by sqrt(r + 1); we need sqrt(d)
        ones = c.new_ones(*c.shape[:2], 1)  # (B, Lk, 1): the coordinate the biases ride on
        k_lat = torch.cat([c, ones], -1)[:, None]  # (B, Lk, r + 1) -> (B, 1, Lk, r + 1)
        v_lat = torch.cat([c_v, ones], -1)[:, None]  # (B, Lk, r + 1) -> (B, 1, Lk, r + 1)
        out_lat, _ = attend_heads(q_lat, k_lat, v_lat, seen, self.attention,
                                  gates=gates)  # (B, H, Lq, r + 1)
        return out_lat @ W_uv.transpose(1, 2)  # (B, H, Lq, r + 1) @ (H, r + 1, d) -> (B, H, Lq, d)

    def _homogeneous(self, up: nn.Linear) -> Tensor:
        """An up-projection's weight with its bias as one more column, per head: (H, d, r + 1)."""
        bias = up.weight.new_zeros(up.out_features) if up.bias is None else up.bias
        W = torch.cat([up.weight, bias[:, None]], dim=1)  # (H*d, r) -> (H*d, r + 1)
        return W.reshape(self.num_heads, self.head_size, self.rank + 1)  # -> (H, d, r + 1)


def mla_from_mha(mha: MultiHeadAttention) -> LatentAttention:
    """A :class:`LatentAttention` of full rank (r = key_size) that computes what ``mha`` does:
    ``W_dkv`` is the identity, ``W_uk`` / ``W_uv`` are ``mha``'s ``W_k`` / ``W_v``.

    Args:
        mha: a :class:`~mha_lib.multihead.MultiHeadAttention` with ``key_size == value_size``,
            its full width (no pruned heads) and no score modification, sink logits or gate.

    Returns:
        the layer, on ``mha``'s dtype and device and in its train/eval mode.
    """
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    mha.check_options("LatentAttention")
    s = mha.settings
    if s.output_size is not None:
        raise ValueError(f"mha must have its full width (output_size None), got {s.output_size}")
    mla = LatentAttention(s.key_size, s.query_size, s.value_size, s.d_model, s.num_heads,
                          s.dropout, s.bias, rank=s.key_size)
    mla = mla.to(dtype=mha.W_q.weight.dtype, device=mha.W_q.weight.device).train(mha.training)
    with torch.no_grad():
        mla.W_dkv.weight.copy_(torch.eye(s.key_size))  # c = x: full rank
        for mine, theirs in (("W_q", "W_q"), ("W_uk", "W_k"), ("W_uv", "W_v"), ("W_o", "W_o")):
            getattr(mla, mine).load_state_dict(getattr(mha, theirs).state_dict())
    return mla
