"""Hugging Face's Qwen 3 and OLMo 2 attention, both ways: QK-norm, per head or over the width.

``Qwen3Attention`` and ``Olmo2Attention`` are ``LlamaAttention`` (RoPE in halves, ``repeat_kv``;
see :mod:`mha_lib.interop._llama`) with one change: queries and keys go through an RMSNorm,
``q_norm`` and ``k_norm``, after the projections and before RoPE (:mod:`mha_lib.qk`):

* **Qwen 3** normalises each head over its d features (weights (d,), shared by the heads):
  the book's ``qk_norm="head"``. Its RoPE base, ``rope_theta``, is 1000000 in the released
  models: ``rope=Rope(base=...)``.
* **OLMo 2** normalises the whole projection, H*d features for the queries and Hkv*d for the
  keys (weights (H*d,) and (Hkv*d,)): the book's ``qk_norm="width"``.

RMSNorm does not care in which order the features come, so the converters permute the norms'
weights like the rows of ``W_q`` and ``W_k`` (halves to interleaved, head by head,
:func:`mha_lib.positions.rope_permutation`).

Not supported (a ``ValueError`` says so): ``rms_norm_eps`` other than 1e-6 (the book's
QK-norm's), another RoPE than the default (any ``rope_theta``), a ``head_dim`` other than D / H.

Shape legend
    D    d_model (hidden_size)
    H    query heads (num_attention_heads); Hkv key/value heads (num_key_value_heads)
    d    head size (head_dim), D / H
"""

from __future__ import annotations

import torch
from torch import nn

from mha_lib._checks import check_positive_int
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop._llama import _rope_layer_from, _rope_layer_to, _rope_sizes
from mha_lib.positions import rope_permutation

__all__ = ["from_olmo2_attention", "from_qwen3_attention", "to_olmo2_attention", "to_qwen3_attention"]

_EPS = 1e-6
"""The eps of the book's QK-norm (:class:`mha_lib.qk.QKTransform`)."""


def from_qwen3_attention(attn: nn.Module) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention(rope=..., qk_norm="head")`` holding the weights of a
    ``Qwen3Attention`` (its ``q_norm``, ``k_norm`` become ``qk.q_norm``, ``qk.k_norm``).
    Called on the same inputs with ``mask=layer_mask(attn)``, it computes what ``attn``
    computes with the rotary embedding of its config and the model's mask.

    Raises:
        ValueError: not a ``Qwen3Attention``, or a config the book's layer does not have.
    """
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    return _from_normed(attn, Qwen3Attention, "head")


def from_olmo2_attention(attn: nn.Module) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention(rope=..., qk_norm="width")`` holding the weights of an
    ``Olmo2Attention``; called with ``mask=causal()``, it computes what ``attn`` computes.

    Raises:
        ValueError: not an ``Olmo2Attention``, or a config the book's layer does not have.
    """
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention

    return _from_normed(attn, Olmo2Attention, "width")


def to_qwen3_attention(gqa: GroupedQueryAttention, *, sliding_window: int | None = None) -> nn.Module:
    """A ``Qwen3Attention`` holding the weights of ``gqa``: the inverse of
    :func:`from_qwen3_attention` (eager attention; with ``sliding_window``, a
    ``"sliding_attention"`` layer of that window). Call it as ``Qwen3Model`` does, with
    ``position_embeddings`` from a ``Qwen3RotaryEmbedding`` of its ``config`` and an additive
    mask (B, 1, L, L).

    Raises:
        ValueError: ``gqa`` not a ``GroupedQueryAttention`` with RoPE and ``qk_norm="head"``;
            any other option, by name (``check_options``); a ``sliding_window`` not positive.
    """
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    sizes = _normed_sizes(gqa, "Qwen3Attention", "head")
    if sliding_window is not None:
        check_positive_int(sliding_window, "sliding_window")
    kind = "full_attention" if sliding_window is None else "sliding_attention"
    config = Qwen3Config(**sizes, layer_types=[kind], sliding_window=sliding_window,
                         use_sliding_window=sliding_window is not None)
    return _to_normed(gqa, Qwen3Attention(config, layer_idx=0))


def to_olmo2_attention(gqa: GroupedQueryAttention) -> nn.Module:
    """An ``Olmo2Attention`` holding the weights of ``gqa``: the inverse of
    :func:`from_olmo2_attention` (eager attention). Call it as ``Olmo2Model`` does.

    Raises:
        ValueError: ``gqa`` not a ``GroupedQueryAttention`` with RoPE and ``qk_norm="width"``;
            any other option, by name (``check_options``).
    """
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention

    config = Olmo2Config(**_normed_sizes(gqa, "Olmo2Attention", "width"))
    return _to_normed(gqa, Olmo2Attention(config, layer_idx=0))


def _from_normed(attn: nn.Module, cls: type, qk_norm: str) -> GroupedQueryAttention:
    """The book's layer of a Llama-like ``attn`` of class ``cls`` with QK-norm ``qk_norm``."""
    if not isinstance(attn, cls):
        raise ValueError(f"attn must be a {cls.__name__}, got {type(attn).__name__}")
    if attn.config.rms_norm_eps != _EPS:
        raise ValueError(f"attn.config.rms_norm_eps must be {_EPS} (the book's QK-norm), got "
                         f"{attn.config.rms_norm_eps}")
    gqa = _rope_layer_from(attn, qk_norm=qk_norm)
    q_rows, k_rows = _norm_rows(gqa)
    with torch.no_grad():  # halves to interleaved
        gqa.qk.q_norm.weight.copy_(attn.q_norm.weight[q_rows.argsort()])
        gqa.qk.k_norm.weight.copy_(attn.k_norm.weight[k_rows.argsort()])
    return gqa


def _normed_sizes(gqa: object, target: str, qk_norm: str) -> dict:
    """The config arguments of ``target`` for ``gqa`` (checked; its QK-norm must be ``qk_norm``)."""
    sizes = _rope_sizes(gqa, target, maps=("qk_norm",))
    if gqa.settings.qk_norm != qk_norm:
        raise ValueError(f"gqa must have qk_norm={qk_norm!r} ({target}'s norms), got "
                         f"{gqa.settings.qk_norm!r}")
    return dict(sizes, attention_bias=gqa.settings.bias, num_hidden_layers=1, rms_norm_eps=_EPS)


def _to_normed(gqa: GroupedQueryAttention, attn: nn.Module) -> nn.Module:
    """``gqa``'s weights and norms copied into ``attn`` (interleaved to halves)."""
    attn = _rope_layer_to(gqa, attn)
    q_rows, k_rows = _norm_rows(gqa)
    with torch.no_grad():
        attn.q_norm.weight.copy_(gqa.qk.q_norm.weight[q_rows])
        attn.k_norm.weight.copy_(gqa.qk.k_norm.weight[k_rows])
    return attn


def _norm_rows(gqa: GroupedQueryAttention):
    """The permutations (interleaved to halves) of the query and key norms' weights: within a
    head (d,) per head, over every head (H*d,) and (Hkv*d,) over the width."""
    d = gqa.head_size
    if gqa.settings.qk_norm == "head":
        return rope_permutation(d), rope_permutation(d)
    return rope_permutation(d, gqa.num_heads), rope_permutation(d, gqa.num_kv_heads)
