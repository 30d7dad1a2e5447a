"""The Transformer block around the attention layer: residuals, LayerNorm and a feed-forward net.

An upper layer, built on :class:`mha_lib.MultiHeadAttention` (or, for the language models of
today, :class:`mha_lib.gqa.GroupedQueryAttention` with rotary positions).
:meth:`TransformerBlock.from_torch` copies the weights of a ``torch.nn.TransformerEncoderLayer``,
so the two can be compared.

Shape legend
    B   batch size
    L   sequence length (self-attention: Lq = Lk = L; with a cache, the n new positions)
    H   number of (query) heads
    D   d_model, the width of the block's input and output
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib._checks import (
    check_bool,
    check_positive_int,
    check_positive_number,
    check_probability,
    check_tensor,
)
from mha_lib._settings import build, record
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.masks import Mask
from mha_lib.multihead import MultiHeadAttention
from mha_lib.options import (
    RopeOptions,
    changed_options,
    option_values,
    take_options,
    takes_options,
)

__all__ = ["TransformerBlock"]


class TransformerBlock(nn.Module):
    """One block: self-attention and a feed-forward net, each with a residual and a LayerNorm.

    Pre-LN (``norm_first=True``) normalises the input of each sublayer and leaves the residual
    stream untouched; post-LN (``norm_first=False``, the original Transformer) normalises after
    each residual sum. Same parameters, same layout as ``nn.TransformerEncoderLayer``
    (``batch_first=True``, ReLU). With ``num_kv_heads`` or ``rope`` the attention is a
    :class:`~mha_lib.gqa.GroupedQueryAttention` (grouped keys and values, rotary positions),
    otherwise a :class:`~mha_lib.MultiHeadAttention`; all projections have biases.

    Shapes:
        x: (B, L, D)
        valid_lens: None, (B,) or (B, L), as for :class:`mha_lib.MultiHeadAttention`
        head_mask: None, (H,) or (B, H)
        positions: None, (L,) or (B, L) integers
        output: (B, L, D); weights (``need_weights``): (B, H, L, Lk)

    Args:
        d_model: D, the width of the block.
        num_heads: H; must divide ``d_model``.
        d_ff: the hidden width of the feed-forward net.
        dropout: dropout rate on the attention weights and after each sublayer, in [0, 1).
        norm_first: pre-LN if True, post-LN if False.
        layer_norm_eps: the ``eps`` of both LayerNorms.
        num_kv_heads: Hkv key/value heads (dividing ``num_heads``) for grouped-query attention.
        rope, rope_scale, score_mod, sink_logits, gate, qk_norm, backend: the attention
            layer's options, passed on by name (:class:`mha_lib.options.RopeOptions` explains
            each): with ``num_kv_heads`` or an option of RoPE it is a ``GroupedQueryAttention``.

    ``block.settings`` holds these arguments (a :class:`TransformerBlock.Settings`).
    """

    @dataclass(frozen=True)
    class _Sizes:
        """The constructor's arguments beside the options (positional in ``Settings``)."""

        d_model: int
        num_heads: int
        d_ff: int
        dropout: float
        norm_first: bool = True
        layer_norm_eps: float = 1e-5
        num_kv_heads: int | None = None

    @dataclass(frozen=True)
    class Settings(RopeOptions, _Sizes):
        """The constructor's arguments, by name: the sizes, then the options (see the class)."""

    @takes_options(RopeOptions)
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float,
        norm_first: bool = True,
        *,
        layer_norm_eps: float = 1e-5,
        num_kv_heads: int | None = None,
        **options,
    ) -> None:
        super().__init__()
        check_positive_int(d_model, "d_model")  # (the attention layer would name its key_size)
        check_positive_int(num_heads, "num_heads")
        check_positive_int(d_ff, "d_ff")
        check_probability(dropout, "dropout")
        layer_norm_eps = check_positive_number(layer_norm_eps, "layer_norm_eps")
        self.norm_first = check_bool(norm_first, "norm_first")
        given = take_options(RopeOptions, options, "TransformerBlock")  # every option, by name
        grouped = set(changed_options(given)) - set(MultiHeadAttention.OPTIONS)  # RoPE's
        if num_kv_heads is not None or grouped:
            kv_heads = num_heads if num_kv_heads is None else num_kv_heads
            self.attention = GroupedQueryAttention(d_model, num_heads, kv_heads, dropout, bias=True,
                                                   **option_values(GroupedQueryAttention.Options, given))
        else:  # (RoPE's options: their defaults)
            self.attention = MultiHeadAttention(d_model, d_model, d_model, d_model, num_heads, dropout,
                                                bias=True, **option_values(MultiHeadAttention.Options, given))
        # the options as the attention layer keeps them (RoPE's without RoPE: their defaults)
        kept = RopeOptions(**option_values(type(self.attention).Options, self.attention.settings))
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.norm1 = _FittedLayerNorm(d_model, eps=layer_norm_eps)  # (squares that cannot overflow)
        self.norm2 = _FittedLayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.settings = record(self.Settings, locals(), dropout=float(dropout),
                               layer_norm_eps=layer_norm_eps, **option_values(RopeOptions, kept))

    def forward(
        self,
        x: Tensor,
        valid_lens: Tensor | Sequence[int] | None = None,
        *,
        mask: Mask | None = None,
        head_mask: Tensor | None = None,
        cache=None,
        positions: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Apply the block; the keyword arguments go to the attention layer as they are.

        ``valid_lens`` masks padded keys exactly as in multi-head attention, ``mask`` (a
        :class:`mha_lib.masks.Mask`, e.g. ``causal()``) with them; ``cache`` (one
        layer of a ``mha_lib.decoding.KVCache``) and ``positions`` decode step by step, as in
        :meth:`mha_lib.gqa.GroupedQueryAttention.forward`.

        Returns:
            x (B, L, D), or ``(x, weights)`` with the attention weights (B, H, L, Lk).
        """
        self._check_input(x)
        attend = dict(mask=mask, head_mask=head_mask, cache=cache, positions=positions,
                      need_weights=need_weights)
        if self.norm_first:  # pre-LN: x + f(norm(x))
            h, weights = self._self_attention(self.norm1(x), valid_lens, attend)
            x = x + h
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:  # post-LN: norm(x + f(x))
            h, weights = self._self_attention(x, valid_lens, attend)
            x = self.norm1(x + h)
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return (x, weights) if need_weights else x

    def _check_input(self, x: object) -> None:
        check_tensor(x, "x", 3)
        D = self.norm1.normalized_shape[0]
        if x.shape[-1] != D:
            raise ValueError(f"x must have feature size d_model = {D}, got shape {tuple(x.shape)}")
        weight = self.norm1.weight
        if x.dtype != weight.dtype or x.device != weight.device:
            raise ValueError(
                f"x is {x.dtype} on {x.device} but the block's weights are {weight.dtype} on "
                f"{weight.device}: convert one with .to(...)"
            )

    def _self_attention(self, x: Tensor, valid_lens, attend: dict) -> tuple[Tensor, Tensor | None]:
        """dropout(attention(x, x, x)) (B, L, D), and the weights when asked for."""
        out = self.attention(x, x, x, valid_lens, **attend)
        out, weights = out if attend["need_weights"] else (out, None)
        return self.dropout1(out), weights

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> "TransformerBlock":
        """A block holding the weights of ``layer`` (``batch_first=True``, ReLU, with biases).

        Raises:
            ValueError: naming the unsupported setting (``batch_first=False``, another
                activation, ``bias=False``, different dropout rates, ...).
        """
        _check_torch_layer(layer)
        attn = layer.self_attn
        settings = cls.Settings(attn.embed_dim, attn.num_heads, layer.linear1.out_features,
                                layer.dropout.p, layer.norm_first, layer_norm_eps=layer.norm1.eps)
        block = build(cls, settings, like=layer)  # (what _check_torch_layer did not refuse)
        _copy_torch_attention(attn, block.attention)
        block.feed_forward[0].load_state_dict(layer.linear1.state_dict())
        block.feed_forward[3].load_state_dict(layer.linear2.state_dict())
        block.norm1.load_state_dict(layer.norm1.state_dict())
        block.norm2.load_state_dict(layer.norm2.state_dict())
        return block


class _FittedLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` that cannot overflow: a row whose squares could pass the largest float
    (float32 entries near 1e19) is first divided by a power of two (LayerNorm does not change
    when its input is scaled, up to ``eps``, which such rows dwarf). Ordinary rows are
    multiplied by exactly 1: the same bits as ``nn.LayerNorm``."""

    def forward(self, x: Tensor) -> Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)  # (half precision: float32 inside)
        with torch.no_grad():  # (B, L, D) -> (B, L, 1): the largest entry's power of two
            top = torch.where(torch.isfinite(x), x.abs(), 0.0).amax(-1, keepdim=True).to(dtype)
            limit = int(math.log2(torch.finfo(dtype).max)) // 2 - 8  # float32: 2**55
            shift = (torch.frexp(top).exponent - limit).clamp(min=0)
            factor = torch.exp2(-shift.to(dtype)).to(x.dtype)
        return super().forward(x * factor)


def _check_torch_layer(layer: object) -> None:
    """Raise a ``ValueError`` naming what :meth:`TransformerBlock.from_torch` cannot copy."""
    if not isinstance(layer, nn.TransformerEncoderLayer):
        raise ValueError(
            f"layer must be a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}"
        )
    attn = layer.self_attn
    problems = []
    if not attn.batch_first:
        problems.append("batch_first=False (build it with batch_first=True)")
    if not (layer.activation is F.relu or isinstance(layer.activation, nn.ReLU)):
        problems.append(f"activation={layer.activation!r} (only ReLU, the default)")
    if layer.linear1.bias is None or attn.in_proj_bias is None or layer.norm1.bias is None:
        problems.append("bias=False (only bias=True, the default)")
    if not attn._qkv_same_embed_dim:
        problems.append("separate key/value sizes in self_attn")
    if attn.bias_k is not None or attn.add_zero_attn:
        problems.append("add_bias_kv or add_zero_attn in self_attn")
    rates = {layer.dropout.p, layer.dropout1.p, layer.dropout2.p, attn.dropout}
    if len(rates) > 1:
        problems.append(f"different dropout rates {sorted(rates)} (one rate for the block)")
    if layer.norm1.eps != layer.norm2.eps:
        problems.append(f"different LayerNorm eps {layer.norm1.eps} and {layer.norm2.eps}")
    if problems:
        raise ValueError("TransformerBlock.from_torch does not support " + "; ".join(problems))


def _copy_torch_attention(source: nn.MultiheadAttention, target: MultiHeadAttention) -> None:
    """Copy an ``nn.MultiheadAttention`` into ``target``: the inverse of ``interop.to_torch_mha``.

    ``in_proj_weight`` (3D, D) stacks W_q, W_k, W_v by rows; ``out_proj`` is W_o.
    """
    q, k, v = source.in_proj_weight.detach().chunk(3)  # (3D, D) -> 3 x (D, D)
    bq, bk, bv = source.in_proj_bias.detach().chunk(3)  # (3D,) -> 3 x (D,)
    for linear, w, b in ((target.W_q, q, bq), (target.W_k, k, bk), (target.W_v, v, bv)):
        linear.load_state_dict({"weight": w, "bias": b})
    target.W_o.load_state_dict(source.out_proj.state_dict())
