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
through :func:`mha_lib.attend.attend_heads`, the computation every attention layer shares.
With ``rope=True`` it rotates queries and keys by their positions (RoPE, :func:`rotary`), as
the language models that use grouped-query attention do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from mha_lib._checks import (
    check_bool,
    check_not_meta,
    check_positive_int,
    check_probability,
)
from mha_lib._settings import build, record
from mha_lib.attention import FiniteDotProductAttention, score_operands
from mha_lib.masking import softmax_over_kept
from mha_lib.attend import check_head_shapes
from mha_lib.multihead import MultiHeadAttention, AttentionLayer
from mha_lib.options import RopeOptions, option_values, takes_options
from mha_lib.positions import Rope

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


class GroupedQueryAttention(AttentionLayer):
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
        rope, rope_scale, score_mod, sink_logits, gate, qk_norm, backend: the layer's options,
            by name (RoPE: True, a :class:`~mha_lib.positions.Rope` or False, and the factor of
            its angles; the options of :class:`~mha_lib.multihead.MultiHeadAttention`), each
            explained in :class:`mha_lib.options.RopeOptions`, the one record of them.

    The forward is :class:`~mha_lib.multihead.MultiHeadAttention`'s (one forward for both):
    query head h reads key/value head h // (H / Hkv); with a cache, the cache stores Hkv heads
    (the keys after RoPE); ``positions`` (without a cache, with ``rope=True``) place the queries
    and keys of a self-attention, for RoPE, the mask and the score modification alike.

    ``module.settings`` holds these arguments (a :class:`GroupedQueryAttention.Settings`).
    """

    _input_sizes = ("d_model",) * 3  # (queries, keys and values: D features)
    Options = RopeOptions  # (the options, RoPE's first: see AttentionOptions)

    @dataclass(frozen=True)
    class _Sizes:
        """The constructor's arguments beside the options (positional in ``Settings``)."""

        d_model: int
        num_heads: int
        num_kv_heads: int
        dropout: float
        bias: bool = False

    @dataclass(frozen=True)
    class Settings(RopeOptions, _Sizes):
        """The constructor's arguments, by name: the sizes, then the options (see the class)."""

    @takes_options(RopeOptions)
    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, dropout: float,
                 bias: bool = False, rope: bool | Rope = False, **options) -> None:
        super().__init__()
        D = check_positive_int(d_model, "d_model")
        H = check_positive_int(num_heads, "num_heads")
        Hkv = check_positive_int(num_kv_heads, "num_kv_heads")
        if D % H:
            raise ValueError(f"d_model ({D}) must be divisible by num_heads ({H})")
        if H % Hkv:
            raise ValueError(f"num_kv_heads ({Hkv}) must divide num_heads ({H})")
        check_bool(bias, "bias")
        self.num_heads, self.num_kv_heads = H, Hkv
        self.head_size = D // H
        self.attention = FiniteDotProductAttention(check_probability(dropout, "dropout"))
        self.W_q = nn.Linear(D, D, bias=bias)
        self.W_k = nn.Linear(D, Hkv * self.head_size, bias=bias)
        self.W_v = nn.Linear(D, Hkv * self.head_size, bias=bias)
        self.W_o = nn.Linear(D, D, bias=bias)
        options = self._init_options(D, {"rope": rope, **options})  # (AttentionOptions)
        self.settings = record(self.Settings, locals(), dropout=float(dropout),
                               **option_values(RopeOptions, options))

    @property
    def rope_scale(self) -> float:
        """The factor of every RoPE angle (position interpolation; 1 without)."""
        return 1.0 if self.qk.rope is None else self.qk.rope.scale


def gqa_from_mha(mha: MultiHeadAttention, num_kv_heads: int) -> GroupedQueryAttention:
    """Grouped-query attention initialised from multi-head attention by mean-pooling.

    The starting point of *uptraining* (Ainslie et al., 2023): ``W_q``, ``W_o`` and every other
    weight (the gate, the QK-norms, ...) are copied as they are, by state, and the key and
    value heads of each group are averaged (and a key norm over the width,
    ``qk_norm="width"``). Group j is the g = H / Hkv *consecutive* query heads
    ``j*g .. j*g + g - 1`` that share key/value head j
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
    settings = GroupedQueryAttention.Settings(D, H, Hkv, s.dropout, bias=s.bias,  # every option, by name
                                              **option_values(MultiHeadAttention.Options, s))
    gqa = build(GroupedQueryAttention, settings, like=mha)
    state = mha.state_dict()  # every weight as it is (W_q, W_o, the gate, the norms, ...),
    for name, value in state.items():  # but the key and value heads: averaged over each group
        if name.startswith(("W_k.", "W_v.", "qk.k_norm.")) and gqa.state_dict()[name].shape != value.shape:
            # (H*d, ...) -> (Hkv, g, d, ...) -> mean over the group -> (Hkv*d, ...)
            state[name] = value.reshape(Hkv, g, d, *value.shape[1:]).mean(1).flatten(0, 1)
    gqa.load_state_dict(state)  # (strict: a weight that does not fit raises)
    return gqa
