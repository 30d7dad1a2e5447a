"""Hugging Face's Gemma 3 attention, both ways: QK-norm per head, its own scale, and two kinds
of layers with a RoPE base each.

``Gemma3Attention`` is ``LlamaAttention`` (RoPE in halves, ``repeat_kv``; see
:mod:`mha_lib.interop._llama`) with three changes:

* **QK-norm per head**, before RoPE, as Qwen 3's (:mod:`mha_lib.interop._qk_norms`): the
  book's ``qk_norm="head"``. Gemma's RMSNorm multiplies by ``1 + weight`` (its weights start
  at 0), the book's by ``weight``: the converter adds 1 on the way in and takes it off on the
  way out.
* **The scale.** The scores are divided by ``sqrt(config.query_pre_attn_scalar)``, not by
  ``sqrt(d)``. The book's layers divide by ``sqrt(d)``, and a factor on the queries does it,
  but not in ``W_q`` as for Gemma 2: the QK-norm would divide it out. The factor
  ``sqrt(d / query_pre_attn_scalar)`` goes into the query norm's weight (RoPE rotates, it does
  not stretch: the factor passes through it).
* **Two kinds of layers** (``config.layer_types``): ``"sliding_attention"`` (a window of
  ``config.sliding_window``, :func:`~mha_lib.interop.layer_mask`) with the RoPE of
  ``config.rope_parameters["sliding_attention"]`` (base 10000, once ``rope_local_base_freq``),
  and ``"full_attention"`` with ``config.rope_parameters["full_attention"]`` (base 1000000,
  once ``rope_theta``; linear scaling of factor 8 in the larger models, which becomes
  ``Rope(base=..., scale=1/8)``). In the book each layer holds its own ``Rope``; a whole
  model's layout is a pattern (:class:`mha_lib.patterns.LayerKind`).

Not supported (a ``ValueError`` says so): a ``head_dim`` other than D / H (the released
models have one: Gemma 3 1B, 4 heads of 256 features on a width of 1152); ``rms_norm_eps``
other than 1e-6 (the book's QK-norm's); ``use_bidirectional_attention``; and
``attn_logit_softcapping``, which Gemma 3 dropped for QK-norm (its config still has the field;
``transformers`` 5's ``Gemma3Attention`` stores it and never applies it, so a config that sets
it is ambiguous).

Shape legend
    D    d_model (hidden_size)
    H    query heads (num_attention_heads); Hkv key/value heads (num_key_value_heads)
    d    head size (head_dim), D / H
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mha_lib._checks import check_positive_int
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop._gemma2 import _check_decoder
from mha_lib.interop._llama import _rope_layer_from, _rope_layer_to, _rope_sizes
from mha_lib.interop._qk_norms import _EPS, _norm_rows

__all__ = ["from_gemma3_attention", "to_gemma3_attention"]

_SCALINGS = ("linear",)
"""The RoPE scalings of Gemma 3's configs that the converters map (its global layers')."""


def from_gemma3_attention(attn: nn.Module) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention(rope=..., qk_norm="head")`` holding the weights of a
    ``Gemma3Attention``: its norms (``1 + weight``; the query's times
    ``sqrt(d / query_pre_attn_scalar)``) and the RoPE of its kind of layer.

    Called on the same inputs with ``mask=layer_mask(attn)``, it computes what ``attn``
    computes with the rotary embedding of its layer type and the model's mask.

    Raises:
        ValueError: not a ``Gemma3Attention``, or a config the book's layer does not have
            (see the module).
    """
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention

    config = _check_decoder(attn, Gemma3Attention)
    if config.attn_logit_softcapping is not None:
        raise ValueError("attn.config.attn_logit_softcapping must be None (Gemma 3's attention "
                         "does not apply it; soft-capped scores are Gemma 2's: "
                         f"from_gemma2_attention), got {config.attn_logit_softcapping}")
    if config.rms_norm_eps != _EPS:
        raise ValueError(f"attn.config.rms_norm_eps must be {_EPS} (the book's QK-norm), got "
                         f"{config.rms_norm_eps}")
    params = (config.rope_parameters or {}).get(attn.layer_type) or {}
    gqa = _rope_layer_from(attn, qk_norm="head", rope_parameters=params, scalings=_SCALINGS)
    q_rows, k_rows = _norm_rows(gqa)
    scale = math.sqrt(gqa.head_size / config.query_pre_attn_scalar)
    with torch.no_grad():  # (1 + w), halves to interleaved; the scale on the queries
        gqa.qk.q_norm.weight.copy_((1 + attn.q_norm.weight[q_rows.argsort()]) * scale)
        gqa.qk.k_norm.weight.copy_(1 + attn.k_norm.weight[k_rows.argsort()])
    return gqa


def to_gemma3_attention(
    gqa: GroupedQueryAttention, *, sliding_window: int | None = None,
    query_pre_attn_scalar: int | None = None,
) -> nn.Module:
    """A ``Gemma3Attention`` holding the weights of ``gqa``: the inverse of
    :func:`from_gemma3_attention` (eager attention).

    With ``sliding_window``, a ``"sliding_attention"`` layer of that window, else a
    ``"full_attention"`` layer; either way with ``gqa``'s RoPE (its base; position
    interpolation as the linear scaling) as the RoPE of its layer type.
    ``query_pre_attn_scalar`` (default d: nothing to unfold) is the scale of the result: the
    query norm's weight is divided by ``sqrt(d / query_pre_attn_scalar)``, so a layer read from
    a Gemma 3 goes back with its own. Call it as ``Gemma3TextModel`` does, with
    ``position_embeddings`` from a ``Gemma3RotaryEmbedding`` of its ``config`` (for its layer
    type) and an additive mask (B, 1, L, L).

    Raises:
        ValueError: ``gqa`` not a ``GroupedQueryAttention`` with RoPE and ``qk_norm="head"``;
            any other option, by name (``check_options``); NTK, YaRN or a partial rotation;
            a ``sliding_window`` or ``query_pre_attn_scalar`` not positive.
    """
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention

    sizes = _rope_sizes(gqa, "Gemma3Attention", maps=("qk_norm",), scalings=_SCALINGS)
    if gqa.settings.qk_norm != "head":
        raise ValueError(f"gqa must have qk_norm='head' (Gemma3Attention's norms), got "
                         f"{gqa.settings.qk_norm!r}")
    if sliding_window is not None:
        check_positive_int(sliding_window, "sliding_window")
    d = sizes["head_dim"]
    scalar = d if query_pre_attn_scalar is None else check_positive_int(
        query_pre_attn_scalar, "query_pre_attn_scalar")
    kind = "full_attention" if sliding_window is None else "sliding_attention"
    rope = {"full_attention": {"rope_type": "default"}, "sliding_attention": {"rope_type": "default"},
            kind: sizes.pop("rope_parameters")}
    config = Gemma3TextConfig(**sizes, rope_parameters=rope, attention_bias=gqa.settings.bias,
                              num_hidden_layers=1, layer_types=[kind], sliding_window=sliding_window,
                              query_pre_attn_scalar=scalar, rms_norm_eps=_EPS)
    attn = _rope_layer_to(gqa, Gemma3Attention(config, layer_idx=0))
    q_rows, k_rows = _norm_rows(gqa)
    scale = math.sqrt(d / scalar)
    with torch.no_grad():
        attn.q_norm.weight.copy_(gqa.qk.q_norm.weight[q_rows] / scale - 1)
        attn.k_norm.weight.copy_(gqa.qk.k_norm.weight[k_rows] - 1)
    return attn
