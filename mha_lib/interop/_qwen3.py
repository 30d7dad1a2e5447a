"""Hugging Face's Qwen 3 attention, both ways: QK-norm per head, and RoPE with a base of its own.

``Qwen3Attention`` is ``LlamaAttention`` (RoPE in halves, ``repeat_kv``; see
:mod:`mha_lib.interop._llama`) with one change: each query and key head goes through an
RMSNorm over its d features, ``q_norm`` and ``k_norm`` (weights (d,), shared by the heads),
after the projections and before RoPE. That is the book's ``qk_norm="head"``
(:mod:`mha_lib.qk`), applied at the same place. RMSNorm does not care in which order a head's
features come, so the converter permutes the norms' weights like the rows of ``W_q`` and
``W_k`` (halves to interleaved, :func:`mha_lib.positions.rope_permutation`).

RoPE's base is ``rope_theta`` (1000000 in the released models): ``rope=Rope(base=...)``.

Not supported (a ``ValueError`` says so): ``rms_norm_eps`` other than 1e-6 (the book's
QK-norm's), another RoPE than the default, a ``head_dim`` other than D / H.

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

__all__ = ["from_qwen3_attention", "to_qwen3_attention"]

_EPS = 1e-6
"""The eps of the book's QK-norm (:class:`mha_lib.qk.QKTransform`)."""


def from_qwen3_attention(attn: nn.Module) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention(rope=..., qk_norm="head")`` holding the weights of a
    ``Qwen3Attention`` (its ``q_norm``, ``k_norm`` become ``qk.q_norm``, ``qk.k_norm``).

    Called on the same inputs with ``mask=layer_mask(attn)``, it computes what ``attn``
    computes with the rotary embedding of its config and the model's mask.

    Raises:
        ValueError: not a ``Qwen3Attention``, or a config the book's layer does not have (see
            the module).
    """
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    if not isinstance(attn, Qwen3Attention):
        raise ValueError(f"attn must be a Qwen3Attention, got {type(attn).__name__}")
    if attn.config.rms_norm_eps != _EPS:
        raise ValueError(f"attn.config.rms_norm_eps must be {_EPS} (the book's QK-norm), got "
                         f"{attn.config.rms_norm_eps}")
    gqa = _rope_layer_from(attn, qk_norm="head")
    halves_to_interleaved = rope_permutation(gqa.head_size).argsort()  # (d,), within a head
    with torch.no_grad():
        gqa.qk.q_norm.weight.copy_(attn.q_norm.weight[halves_to_interleaved])
        gqa.qk.k_norm.weight.copy_(attn.k_norm.weight[halves_to_interleaved])
    return gqa


def to_qwen3_attention(gqa: GroupedQueryAttention, *, sliding_window: int | None = None) -> nn.Module:
    """A ``Qwen3Attention`` holding the weights of ``gqa``: the inverse of
    :func:`from_qwen3_attention` (eager attention; with ``sliding_window``, a
    ``"sliding_attention"`` layer of that window). Call it as ``Qwen3Model`` does, with
    ``position_embeddings`` from a ``Qwen3RotaryEmbedding`` of the module's ``config`` and an
    additive mask (B, 1, L, L).

    Raises:
        ValueError: ``gqa`` not a ``GroupedQueryAttention`` with RoPE and ``qk_norm="head"``;
            any other option, by name (``check_options``); a ``sliding_window`` not positive.
    """
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    sizes = _rope_sizes(gqa, "Qwen3Attention", maps=("qk_norm",))
    if gqa.settings.qk_norm != "head":
        raise ValueError(f'gqa must have qk_norm="head" (Qwen 3\'s norms), got {gqa.settings.qk_norm!r}')
    if sliding_window is not None:
        check_positive_int(sliding_window, "sliding_window")
    kind = "full_attention" if sliding_window is None else "sliding_attention"
    config = Qwen3Config(**sizes, attention_bias=gqa.settings.bias, num_hidden_layers=1,
                         rms_norm_eps=_EPS, layer_types=[kind], sliding_window=sliding_window,
                         use_sliding_window=sliding_window is not None)
    attn = _rope_layer_to(gqa, Qwen3Attention(config, layer_idx=0))
    interleaved_to_halves = rope_permutation(gqa.head_size)  # (d,)
    with torch.no_grad():
        attn.q_norm.weight.copy_(gqa.qk.q_norm.weight[interleaved_to_halves])
        attn.k_norm.weight.copy_(gqa.qk.k_norm.weight[interleaved_to_halves])
    return attn
