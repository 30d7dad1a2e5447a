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
into the queries: the absorbed form is refused. DeepSeek-V2 keeps it by **decoupled RoPE**
(``rope_dim=``, d_r): the heads' keys from the latent are not rotated; positions ride on a
second, small part of each query and of one key shared by the heads, which are rotated and
concatenated to them:

    q_h = [W_q,h x ; RoPE(W_qr,h x)]    (B, H, Lq, d + d_r)
    k_h = [W_uk,h c ; RoPE(W_kr x)]     (B, H, Lk, d + d_r)   the second part shared by all heads
    score = q_h . k_h / sqrt(d + d_r)

The cache keeps ``[c ; RoPE(W_kr x)]``, r + d_r numbers a token (DeepSeek-V2: 512 + 64), and
the absorbed form works again: ``W_uk`` folds into the first part of the queries.
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
from mha_lib.attend import attend_heads
from mha_lib.multihead import AttentionLayer, MultiHeadAttention
from mha_lib.options import RopeOptions
from mha_lib.positions import Rope
from mha_lib.qk import QKTransform

__all__ = ["LatentAttention", "LatentCache", "mla_from_mha"]


class LatentCache:
    """The cache of one :class:`LatentAttention` layer: the latents of the tokens seen,
    ``latent`` (B, L, r), r numbers a token where multi-head attention keeps 2 * H * d (with
    decoupled RoPE, each followed by its rotated key part: (B, L, r + d_r))."""

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
            ...), as for ``GroupedQueryAttention``; rules out the absorbed form (see the module),
            unless ``rope_dim`` is given.
        rope_dim: d_r, the size of the rotated part of decoupled RoPE (see the module), or
            None (the heads' own keys rotate). Needs ``rope``; ``W_qr`` (query_size -> H * d_r)
            and ``W_kr`` (key_size -> d_r, shared by the heads) project it.

    The call is ``MultiHeadAttention``'s, plus ``cache=`` (a :class:`LatentCache`: the queries
    are new tokens that attend causally to the cached ones and themselves), ``positions``
    (with RoPE, without a cache: (Lq,) or (B, Lq), the queries' and keys' positions) and
    ``absorbed=`` (the absorbed form; the same numbers).
    """

    Options = RopeOptions  # (what _init_options builds from: rope here, the others their defaults)

    def __init__(self, key_size: int, query_size: int, value_size: int, d_model: int,
                 num_heads: int, dropout: float, bias: bool = False, *, rank: int,
                 rope: bool | Rope = False, rope_dim: int | None = None) -> None:
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
        if rope_dim is None:
            self.rope_dim = None
            self._init_options(query_size, {"rope": rope})  # (positions only: see AttentionOptions)
            return
        self.rope_dim = check_positive_int(rope_dim, "rope_dim")
        if isinstance(rope, bool) and not rope:
            raise ValueError("rope_dim: decoupled RoPE rotates a part of its own, it needs rope=True "
                             "or a Rope, got rope=False")
        self.W_qr = nn.Linear(query_size, num_heads * rope_dim, bias=bias)  # each head's rotated part
        self.W_kr = nn.Linear(key_size, rope_dim, bias=bias)  # one rotated key part for all heads
        self._init_options(query_size, {})  # (no score_mod, sink logits, gate; positions below)
        spec = rope if isinstance(rope, Rope) else Rope() if check_bool(rope, "rope") else None
        self.qk, self.rope = QKTransform(None, spec, num_heads, 1, rope_dim), True  # on d_r features

    _input_sizes = ("query_size", "key_size", "value_size")

    def _input_features(self) -> tuple[int, int, int]:
        """Keys and values both enter through ``W_dkv``."""
        return self.W_q.in_features, self.W_dkv.in_features, self.W_dkv.in_features

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor, valid_lens=None, mask=None,
                need_weights: bool = False, head_mask=None, *, cache: LatentCache | None = None,
                positions=None, absorbed: bool = False):
        """Attend through the latent; see the class. Returns output (B, Lq, D), or
        ``(output, weights)`` with weights (B, H, Lq, Lk)."""
        mask, gates, positions = self._check_latent(queries, keys, values, valid_lens, mask,
                                                    need_weights, head_mask, cache, positions, absorbed)
        B, Lq = queries.shape[:2]
        L = 0 if cache is None else len(cache)  # the queries follow the cached positions
        if self.rope and positions is None:  # (given: a self-attention's, checked)
            positions = torch.arange(L, L + Lq, device=queries.device)  # (Lq,)
        c = self.W_dkv(keys)  # (B, Lk, r): the latent, all the cache keeps of a token
        q_r, k_r = self._decoupled(queries, keys, positions)  # (decoupled RoPE's parts, or None)
        if k_r is not None:
            c = torch.cat([c, k_r[:, 0]], -1)  # (B, Lk, r + d_r): the cache keeps both
        if cache is not None:  # the new tokens see the cached ones and themselves
            c = cache.update(c)  # (B, L + n, r (+ d_r))
            seen = visible(causal(), B, Lq, L + Lq, q_offset=L, device=queries.device)
        else:
            seen = visible(mask, B, Lq, keys.shape[1], device=queries.device)
        c, k_r = c[..., :self.rank], c[..., self.rank:][:, None]  # (B, Lk, r), (B, 1, Lk, d_r or 0)
        c_v = c if cache is not None or values is keys else self.W_dkv(values)  # (B, Lk, r)
        q = split_heads(self.W_q(queries), self.num_heads)  # (B, Lq, D) -> (B, H, Lq, d)
        if absorbed:
            out = self._absorbed(q, c, c_v, seen, gates, q_r, k_r)  # (B, H, Lq, d)
            return self.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)
        k = split_heads(self.W_uk(c), self.num_heads)  # (B, Lk, r) -> (B, Lk, D) -> (B, H, Lk, d)
        if self.rope_dim:  # (B, H, L, d) and (B, H or 1, L, d_r) -> (B, H, L, d + d_r)
            q, k = torch.cat([q, q_r], -1), torch.cat([k, k_r.expand(-1, self.num_heads, -1, -1)], -1)
        elif self.rope:
            k_at = positions if cache is None and keys.shape[1] == Lq else torch.arange(
                k.shape[2], device=k.device)  # (Lk,): every key's own position
            q, k = self.qk(q, k, positions, k_at)  # the layer's RoPE
        v = split_heads(self.W_uv(c_v), self.num_heads)  # (B, Lk, r) -> (B, Lk, D) -> (B, H, Lk, d)
        out, weights = attend_heads(q, k, _padded(v, k), seen, self.attention,
                                    need_weights=need_weights, gates=gates)
        out = out[..., :self.head_size]  # (B, H, Lq, d + d_r) -> (B, H, Lq, d)
        output = self.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)
        return (output, weights) if need_weights else output

    def _check_latent(self, queries, keys, values, valid_lens, mask, need_weights, head_mask,
                      cache, positions, absorbed):
        """The checks of :meth:`forward`; returns the mask, the head gates and the positions."""
        if cache is not None and not isinstance(cache, LatentCache):
            raise ValueError(f"cache must be a mha_lib.latent.LatentCache, got {type(cache).__name__}")
        if cache is not None and (keys is not queries or values is not queries):
            raise ValueError("with a cache, pass the new tokens as queries, keys and values alike")
        if check_bool(absorbed, "absorbed") and (need_weights or (self.rope and not self.rope_dim)):
            raise ValueError("absorbed=True computes no weights and cannot fold W_uk past RoPE "
                             f"(decoupled RoPE, rope_dim=, can): got need_weights={need_weights}, "
                             f"rope={self.rope}")
        if cache is not None and positions is not None:
            raise ValueError("positions: a LatentCache only appends; leave positions=None")
        mask, gates, _, positions = self._check_forward(queries, keys, values, valid_lens, mask,
                                                        need_weights, head_mask, None, positions)
        if cache is not None and mask is not None:
            raise ValueError("with a cache the mask is causal: pass valid_lens=None, mask=None")
        return mask, gates, positions

    def _decoupled(self, queries: Tensor, keys: Tensor, positions) -> tuple[Tensor | None, Tensor | None]:
        """Decoupled RoPE's rotated parts of the new tokens: each head's query part
        (B, H, Lq, d_r) and the key part all heads share (B, 1, Lk, d_r); None without it."""
        if not self.rope_dim:
            return None, None
        q_r = split_heads(self.W_qr(queries), self.num_heads)  # (B, Lq, H*d_r) -> (B, H, Lq, d_r)
        k_r = self.W_kr(keys)[:, None]  # (B, Lk, d_r) -> (B, 1, Lk, d_r)
        Lk = keys.shape[1]
        k_at = positions if Lk == queries.shape[1] else torch.arange(Lk, device=keys.device)
        return self.qk(q_r, k_r, positions, k_at)

    def _absorbed(self, q: Tensor, c: Tensor, c_v: Tensor, seen, gates, q_r: Tensor | None,
                  k_r: Tensor) -> Tensor:
        """The absorbed form: W_uk folded into the queries, W_uv applied after the weighted sum;
        the heads attend to the latent itself (one shared key/value head of size r + 1), and
        with decoupled RoPE to its rotated part too (q_r: (B, H, Lq, d_r), k_r: (B, 1, Lk, d_r))."""
        H, d, r, d_r = self.num_heads, self.head_size, self.rank, self.rope_dim or 0
        W_uk, W_uv = self._homogeneous(self.W_uk), self._homogeneous(self.W_uv)  # (H, d, r + 1)
        q_lat = q @ W_uk  # (B, H, Lq, d) @ (H, d, r + 1) -> (B, H, Lq, r + 1)
        if q_r is not None:
            q_lat = torch.cat([q_lat, q_r], -1)  # (B, H, Lq, r + 1 + d_r)
        q_lat = q_lat * math.sqrt((r + 1 + d_r) / (d + d_r))  # the kernel divides by sqrt(r + 1 + d_r)
        ones = c.new_ones(*c.shape[:2], 1)  # (B, Lk, 1): the coordinate the biases ride on
        k_lat = torch.cat([c, ones, k_r[:, 0]], -1)[:, None]  # (B, Lk, r + 1 + d_r) -> (B, 1, Lk, ...)
        v_lat = torch.cat([c_v, ones], -1)[:, None]  # (B, Lk, r + 1) -> (B, 1, Lk, r + 1)
        out_lat, _ = attend_heads(q_lat, k_lat, _padded(v_lat, k_lat), seen, self.attention, gates=gates)
        out_lat = out_lat[..., :r + 1]  # (B, H, Lq, r + 1 + d_r) -> (B, H, Lq, r + 1)
        return out_lat @ W_uv.transpose(1, 2)  # (B, H, Lq, r + 1) @ (H, r + 1, d) -> (B, H, Lq, d)

    def _homogeneous(self, up: nn.Linear) -> Tensor:
        """An up-projection's weight with its bias as one more column, per head: (H, d, r + 1)."""
        bias = up.weight.new_zeros(up.out_features) if up.bias is None else up.bias
        W = torch.cat([up.weight, bias[:, None]], dim=1)  # (H*d, r) -> (H*d, r + 1)
        return W.reshape(self.num_heads, self.head_size, self.rank + 1)  # -> (H, d, r + 1)


def _padded(v: Tensor, k: Tensor) -> Tensor:
    """``v`` with zero features up to ``k``'s size: heads attend with keys and values of one
    size, and decoupled RoPE's keys are d_r longer; the weighted sum leaves the zeros zero."""
    return torch.nn.functional.pad(v, (0, k.shape[-1] - v.shape[-1]))  # (..., d_v) -> (..., d_k)


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
