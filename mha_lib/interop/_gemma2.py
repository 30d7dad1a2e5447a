"""Hugging Face's Gemma 2 attention, both ways: soft-capped scores, its own scale, and a
window on every other layer.

``Gemma2Attention`` is ``LlamaAttention`` (RoPE in halves, ``repeat_kv``; see
:mod:`mha_lib.interop._llama`) with two changes to the scores, made before the mask:

* **Soft-capping.** ``config.attn_logit_softcapping`` (50 in the released models): every
  score becomes ``cap * tanh(score / cap)``, inside (-cap, cap). The book's
  ``score_mod=softcap(cap)`` (:func:`mha_lib.scores.softcap`), applied at the same place:
  after the scaling, before the mask.
* **The scale.** Gemma 2 divides the scores by ``sqrt(config.query_pre_attn_scalar)``, not by
  ``sqrt(d)`` (Gemma 2 27B: 144 = D / H, not d = 128). The book's layers always divide by
  ``sqrt(d)``; a scale is a factor on the queries, so the converter folds the ratio
  ``sqrt(d / query_pre_attn_scalar)`` into ``W_q`` and its bias (RoPE rotates, it does not
  stretch: the factor passes through it). :func:`to_gemma2_attention` unfolds it.

Its layers alternate like gpt-oss's (``config.layer_types``): the book's mask of a layer is
:func:`~mha_lib.interop.layer_mask`.

Not supported (a ``ValueError`` says so): a ``head_dim`` other than D / H, which the released
models have (Gemma 2 2B: 8 heads of 256 features on a width of 2304); the book's layer splits
D into H heads. And ``use_bidirectional_attention`` (an encoder's mask, not a decoder's).

Shape legend
    D    d_model (hidden_size)
    H    query heads (num_attention_heads); Hkv key/value heads (num_key_value_heads)
    d    head size (head_dim), D / H
"""

from __future__ import annotations

import math

from torch import nn

from mha_lib._checks import check_positive_int
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop._llama import _rope_layer_from, _rope_layer_to, _rope_sizes
from mha_lib.scores import softcap

__all__ = ["from_gemma2_attention", "to_gemma2_attention"]


def from_gemma2_attention(attn: nn.Module) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention(rope=True, score_mod=softcap(cap))`` holding the weights of
    a ``Gemma2Attention``, its scale folded into ``W_q`` (see the module).

    Called on the same inputs with ``mask=layer_mask(attn)``, it computes what ``attn``
    computes with the rotary embedding of its config and the model's mask. Without
    soft-capping (``attn_logit_softcapping=None``) the layer has ``score_mod=None``.

    Raises:
        ValueError: not a ``Gemma2Attention``, or a config the book's layer does not have
            (see the module, and :func:`~mha_lib.interop.from_llama_attention` for RoPE).
    """
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention

    config = _check_decoder(attn, Gemma2Attention)
    cap = config.attn_logit_softcapping
    score_mod = None if cap is None else softcap(cap)
    d = attn.head_dim
    return _rope_layer_from(attn, score_mod=score_mod,
                            query_scale=math.sqrt(d / config.query_pre_attn_scalar))


def _check_decoder(attn: object, cls: type) -> object:
    """``attn.config``, once ``attn`` is checked to be a ``cls`` of a decoder (Gemma's configs
    can also describe an encoder: ``use_bidirectional_attention``)."""
    if not isinstance(attn, cls):
        raise ValueError(f"attn must be a {cls.__name__}, got {type(attn).__name__}")
    if getattr(attn.config, "use_bidirectional_attention", False):
        raise ValueError("attn.config.use_bidirectional_attention must be False or None (a "
                         "decoder's causal mask), got True")
    return attn.config


def to_gemma2_attention(
    gqa: GroupedQueryAttention, *, sliding_window: int | None = None,
    query_pre_attn_scalar: int | None = None,
) -> nn.Module:
    """A ``Gemma2Attention`` holding the weights of ``gqa``: the inverse of
    :func:`from_gemma2_attention` (eager attention).

    Its ``attn_logit_softcapping`` is the cap of ``gqa.score_mod`` (``softcap(cap)``, or
    None). ``query_pre_attn_scalar`` (default d: nothing to unfold) is the scale of the
    result: ``W_q`` is multiplied by ``sqrt(query_pre_attn_scalar / d)``, so a layer read
    from a Gemma 2 goes back with its own ``query_pre_attn_scalar`` and its own weights. With
    ``sliding_window``, a ``"sliding_attention"`` layer of that window. Call it as
    ``Gemma2Model`` does, with ``position_embeddings`` from a ``Gemma2RotaryEmbedding`` of the
    module's ``config`` and an additive mask (B, 1, L, L).

    Raises:
        ValueError: ``gqa`` not a ``GroupedQueryAttention`` with ``rope=True``; a
            ``score_mod`` other than ``softcap(cap)``, or ``sink_logits``; a
            ``sliding_window`` or ``query_pre_attn_scalar`` not positive.
    """
    from transformers import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention

    sizes = _rope_sizes(gqa, "Gemma2Attention", maps=("score_mod",))
    d = sizes["head_dim"]
    cap = getattr(gqa.score_mod, "cap", None)
    capped = isinstance(cap, float) and gqa.score_mod == softcap(cap)
    if gqa.score_mod is not None and not capped:
        raise ValueError("gqa must have score_mod=softcap(cap) or None (Gemma 2's scores), got "
                         f"score_mod={gqa.score_mod!r}")
    if sliding_window is not None:
        check_positive_int(sliding_window, "sliding_window")
    scalar = d if query_pre_attn_scalar is None else check_positive_int(
        query_pre_attn_scalar, "query_pre_attn_scalar")
    kind = "full_attention" if sliding_window is None else "sliding_attention"
    config = Gemma2Config(**sizes, attention_bias=gqa.settings.bias, num_hidden_layers=1,
                          layer_types=[kind], sliding_window=sliding_window,
                          query_pre_attn_scalar=scalar, attn_logit_softcapping=cap)
    return _rope_layer_to(gqa, Gemma2Attention(config, layer_idx=0), math.sqrt(scalar / d))
