"""Hugging Face's gpt-oss attention, both ways: learned sink logits and a window on every
other layer.

``GptOssAttention`` is ``LlamaAttention`` (RoPE in halves, ``repeat_kv``, biases on the four
projections; see :mod:`mha_lib.interop._llama`) with one more parameter, ``sinks`` (H,): one
logit per head that joins every query's softmax and is dropped after it (``s_aux`` in
``transformers``' attention functions), so the weights of a row sum to less than 1 and a head
can attend to *nothing*. That is the book's ``sink_logits=True``: ``module.sink_logits`` (H,),
copied as is. (Not :func:`mha_lib.masks.sinks`, which keeps the first *tokens* visible.)

Its layers alternate (``config.layer_types``): ``"sliding_attention"`` layers see the last
``config.sliding_window`` positions, itself included, ``"full_attention"`` layers see every
earlier position. In ``transformers`` the model builds that mask; in the book it is the mask
of the call, :func:`~mha_lib.interop.layer_mask` (``causal()`` or ``sliding_window(w)``).

Not supported (a ``ValueError`` says so): the RoPE of the released checkpoints. They use YaRN
(``rope_type="yarn"``, factor 32, ``rope_theta`` 150000), which stretches the low frequencies
and multiplies cos and sin by an attention factor; the book's layers have it
(:class:`mha_lib.positions.Rope`, ``yarn=``), but this converter maps only the default RoPE
(any ``rope_theta``) so far. And their sizes: gpt-oss-20b has 64 heads of 64 features on a width
of 2880, but the book's layer splits D into H heads of D / H features.

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

__all__ = ["from_gpt_oss_attention", "to_gpt_oss_attention"]

def from_gpt_oss_attention(attn: nn.Module) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention(rope=True, sink_logits=True)`` holding the weights of a
    ``GptOssAttention`` (its ``sinks`` become ``sink_logits``).

    Called on the same inputs with ``mask=layer_mask(attn)`` (``causal()``, or
    ``sliding_window(attn.sliding_window)`` on a sliding layer), it computes what ``attn``
    computes with the rotary embedding of its config and the model's mask.

    Raises:
        ValueError: not a ``GptOssAttention``, or a config the book's layer does not have
            (YaRN or another RoPE, a ``head_dim`` other than D / H; see the module).
    """
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    if not isinstance(attn, GptOssAttention):
        raise ValueError(f"attn must be a GptOssAttention, got {type(attn).__name__}")
    gqa = _rope_layer_from(attn, sink_logits=True)
    with torch.no_grad():
        gqa.sink_logits.copy_(attn.sinks)
    return gqa


def to_gpt_oss_attention(gqa: GroupedQueryAttention, *, sliding_window: int | None = None) -> nn.Module:
    """A ``GptOssAttention`` holding the weights of ``gqa`` (its ``sink_logits`` become
    ``sinks``): the inverse of :func:`from_gpt_oss_attention` (eager attention, the default
    RoPE at base 10000).

    With ``sliding_window``, the layer is a ``"sliding_attention"`` layer of that window;
    without, a ``"full_attention"`` one. Call it as ``GptOssModel`` does: with
    ``position_embeddings`` from a ``GptOssRotaryEmbedding`` of the module's ``config`` and an
    additive mask (B, 1, L, L), causal, and windowed on a sliding layer.

    Raises:
        ValueError: ``gqa`` not a ``GroupedQueryAttention`` with ``rope=True`` and
            ``sink_logits=True``, or with a ``score_mod`` (gpt-oss has none); a
            ``sliding_window`` not a positive int.
    """
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    sizes = _rope_sizes(gqa, "GptOssAttention", maps=("sink_logits",))
    if gqa.sink_logits is None:
        raise ValueError("gqa must have sink_logits=True (gpt-oss's scores), got sink_logits=False")
    if sliding_window is not None:
        check_positive_int(sliding_window, "sliding_window")
    kind = "full_attention" if sliding_window is None else "sliding_attention"
    config = GptOssConfig(**sizes, attention_bias=gqa.settings.bias, num_hidden_layers=1,
                          layer_types=[kind], sliding_window=sliding_window)
    attn = _rope_layer_to(gqa, GptOssAttention(config, layer_idx=0))
    with torch.no_grad():
        attn.sinks.copy_(gqa.sink_logits)
    return attn
