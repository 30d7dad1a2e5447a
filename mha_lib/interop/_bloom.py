"""Hugging Face's BLOOM attention, both ways: ALiBi and a fused ``query_key_value``, head by
head.

``BloomAttention`` has no positional embedding at all: each head h adds a bias that grows
with the distance between query and key, ALiBi (Press et al., 2022). The book's layer is a
``MultiHeadAttention`` with biases and ``score_mod=alibi(H, slopes)``
(:func:`mha_lib.scores.alibi`). Three things to read:

* **The fused layout.** ``query_key_value`` is one ``nn.Linear`` of 3D outputs, grouped *head
  by head*: head h's queries, keys, values are outputs ``(3h + 0) d .. (3h + 1) d - 1``,
  ``(3h + 1) d ..``, ``(3h + 2) d ..`` (``view(B, L, H, 3, d)``), unlike GPT-2's ``c_attn``
  (all queries, then all keys, then all values). The converter views the weight (3D, D) as
  (H, 3, d, D) and takes ``[:, 0]``, ``[:, 1]``, ``[:, 2]``. ``dense`` is ``W_o``.
* **The slopes.** For H a power of two they are the book's default, ``2^(-8h/H)``,
  h = 1..H. For another H, BLOOM (like the ALiBi paper's code) takes the slopes of the power
  of two P just below H, ``2^(-8h/P)``, and then every other slope of 2P,
  ``2^(-4(2k - 1)/P)``, k = 1..H-P: its heads keep a geometric spread. The converter passes
  them to ``alibi(H, slopes=...)`` (:func:`_bloom_slopes`).
* **The formula.** The book adds ``-slope_h * (i - j)`` to the score of query i and key j;
  BLOOM adds ``slope_h * j`` (its ``build_alibi_tensor``: the key position alone, no query
  position). The two differ by ``-slope_h * i``, the same number for every key of a row, and a
  softmax does not change when a row is shifted by a constant: the weights are the same. That
  also makes BLOOM's way with left padding (key positions counted from the first real token)
  the same attention as counting from 0.

``BloomAttention.forward`` adds its input ``residual`` to its output (the block's residual
connection lives inside the layer): pass ``residual=0`` (zeros) to compare it with the book's
layer.

Shape legend
    D    d_model (hidden_size)
    H    heads (n_head)
    d    head size, D / H
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from mha_lib._settings import build
from mha_lib.interop._gpt2 import _bias, _check_self_attention
from mha_lib.multihead import MultiHeadAttention
from mha_lib.scores import alibi

__all__ = ["from_bloom_attention", "to_bloom_attention"]


def from_bloom_attention(attn: nn.Module) -> MultiHeadAttention:
    """A ``MultiHeadAttention(D, D, D, D, H, dropout, bias=True, score_mod=alibi(H, slopes))``
    holding the weights of a ``BloomAttention``, with BLOOM's slopes (see the module).

    Called with ``mask=causal()`` on the same inputs, it computes what ``attn`` computes with
    the model's ALiBi tensor and causal mask (and ``residual`` zeros).

    Raises:
        ValueError: not a ``BloomAttention``.
    """
    from transformers.models.bloom.modeling_bloom import BloomAttention

    if not isinstance(attn, BloomAttention):
        raise ValueError(f"attn must be a BloomAttention, got {type(attn).__name__}")
    D, H = attn.hidden_size, attn.num_heads
    d = D // H
    settings = MultiHeadAttention.Settings(D, D, D, D, H, float(attn.attention_dropout.p), bias=True,
                                           score_mod=alibi(H, _bloom_slopes(H)))
    mha = build(MultiHeadAttention, settings, like=attn)
    fused = attn.query_key_value
    weight = fused.weight.detach().reshape(H, 3, d, D)  # (3D, D) -> (H, q/k/v, d, D)
    bias = fused.bias.detach().reshape(H, 3, d)  # (3D,) -> (H, q/k/v, d)
    with torch.no_grad():
        for i, linear in enumerate((mha.W_q, mha.W_k, mha.W_v)):
            linear.weight.copy_(weight[:, i].reshape(D, D))  # (H, d, D) -> (D, D)
            linear.bias.copy_(bias[:, i].reshape(D))  # (H, d) -> (D,)
        mha.W_o.weight.copy_(attn.dense.weight)
        mha.W_o.bias.copy_(attn.dense.bias)
    return mha


def to_bloom_attention(mha: MultiHeadAttention) -> nn.Module:
    """A ``BloomAttention`` holding the weights of ``mha``: the inverse of
    :func:`from_bloom_attention` (a layer without biases gives zero biases; BLOOM always has
    them). Call it as ``BloomModel`` does: with the ALiBi tensor of ``build_alibi_tensor``, an
    additive causal mask (B, 1, L, L) and ``residual`` (zeros: the attention alone).

    Raises:
        ValueError: ``mha`` not a self-attention ``MultiHeadAttention`` whose ``score_mod`` is
            BLOOM's ALiBi, ``alibi(H, slopes)`` with the slopes of :func:`_bloom_slopes`; any
            other option (``sink_logits``, ``gate``, ``qk_norm``: BLOOM has none), by name.
    """
    from transformers import BloomConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention

    _check_self_attention(mha, "mha")
    mha.check_options("BloomAttention", maps=("score_mod",), name="mha")
    s = mha.settings
    D, H = s.d_model, s.num_heads
    if s.score_mod != alibi(H, _bloom_slopes(H)):
        raise ValueError(f"mha must have score_mod=alibi({H}, slopes) with BLOOM's slopes "
                         f"{_bloom_slopes(H)}, got score_mod={s.score_mod!r}")
    config = BloomConfig(hidden_size=D, n_head=H, n_layer=1, attention_dropout=s.dropout,
                         hidden_dropout=0.0, attn_implementation="eager")
    weight = mha.W_q.weight
    attn = BloomAttention(config, layer_idx=0).to(dtype=weight.dtype, device=weight.device)
    d = D // H
    with torch.no_grad():
        # 3 x (D, D) -> 3 x (H, d, D) -> (H, 3, d, D) -> (3D, D): head by head
        fused = torch.stack([w.reshape(H, d, D) for w in (mha.W_q.weight, mha.W_k.weight, mha.W_v.weight)], 1)
        attn.query_key_value.weight.copy_(fused.reshape(3 * D, D))
        # 3 x (D,) -> (H, 3, d) -> (3D,)
        fused_bias = torch.stack([_bias(lin).reshape(H, d) for lin in (mha.W_q, mha.W_k, mha.W_v)], 1)
        attn.query_key_value.bias.copy_(fused_bias.reshape(3 * D))
        attn.dense.weight.copy_(mha.W_o.weight)
        attn.dense.bias.copy_(_bias(mha.W_o))
    return attn.train(mha.training)


def _bloom_slopes(num_heads: int) -> Tensor:
    """BLOOM's ALiBi slopes (H,): ``2^(-8h/P)``, h = 1..P, for P the largest power of two
    <= H, then ``2^(-4(2k - 1)/P)``, k = 1..H - P (every other slope of 2P)."""
    H = num_heads
    P = 2 ** int(math.floor(math.log2(H)))
    first = torch.exp2(-8.0 * torch.arange(1, P + 1, dtype=torch.float64) / P)
    extra = torch.exp2(-4.0 * torch.arange(1, 2 * (H - P) + 1, 2, dtype=torch.float64) / P)
    return torch.cat([first, extra])
