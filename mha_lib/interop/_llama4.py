"""Hugging Face's Llama 4 text attention, both ways: chunked layers with RoPE and an L2 norm,
global layers without positions (NoPE) and with a temperature.

``Llama4TextAttention`` is ``LlamaAttention`` (``repeat_kv``; see
:mod:`mha_lib.interop._llama`) with a layer of one of two kinds (``config.no_rope_layers[i]``:
1 rotates, 0 does not; by default every fourth layer is NoPE):

* **a RoPE layer**: queries and keys rotated in the *interleaved* convention (a complex number
  per pair, as Meta's code: the book's own, so the rows of ``W_q`` and ``W_k`` stay), then,
  with ``config.use_qk_norm``, divided by their root mean square per head without a weight
  (``Llama4TextL2Norm``): the book's ``qk_norm="l2"``. The book normalises *before* rotating;
  a rotation keeps the length, so the order does not matter. Its mask is
  ``chunked(config.attention_chunk_size)`` (``"chunked_attention"`` in
  ``config.layer_types``; :func:`~mha_lib.interop.layer_mask`). On a left-padded batch
  ``transformers`` counts each example's chunks from its first real token, ``chunked(c)``
  from position 0 (the same without left padding): there the book's mask is
  ``causal() & document(ids)`` with ``ids[b, j] = (j - padding_b) // c``.
* **a NoPE layer**: no positions (``rope=False``), a causal mask over every key, and, with
  ``config.attn_temperature_tuning``, the queries of position i multiplied by
  ``1 + attn_scale * log(floor((i + 1) / floor_scale) + 1)``: the book's
  ``score_mod=temperature(floor_scale, attn_scale)`` (:func:`mha_lib.scores.temperature`).

A whole model's layout is a pattern in the book: ``LayerKind("chunk", c)`` three times, then
``LayerKind(rope_base=None)`` (:mod:`mha_lib.patterns`).

Not supported (a ``ValueError`` says so): a ``head_dim`` other than D / H (the released
models: 40 heads of 128 on a width of 5120); ``rms_norm_eps`` other than 1e-6 with
``use_qk_norm`` (the book's L2 norm's eps); a RoPE other than the default with any base (the
released ``"llama3"`` scaling is not a :class:`~mha_lib.positions.Rope`).

Shape legend
    D    d_model (hidden_size)
    H    query heads (num_attention_heads); Hkv key/value heads (num_key_value_heads)
    d    head size (head_dim), D / H
"""

from __future__ import annotations

from torch import nn

from mha_lib._checks import check_positive_int
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop._llama import _rope_layer_from, _rope_layer_to, _rope_sizes
from mha_lib.interop._qk_norms import _EPS
from mha_lib.scores import temperature

__all__ = ["from_llama4_attention", "to_llama4_attention"]


def from_llama4_attention(attn: nn.Module) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention`` holding the weights of a ``Llama4TextAttention``: on a RoPE
    layer ``rope=...`` and (``use_qk_norm``) ``qk_norm="l2"``; on a NoPE layer ``rope=False``
    and (``attn_temperature_tuning``) ``score_mod=temperature(floor_scale, attn_scale)``.

    Called on the same inputs with ``mask=layer_mask(attn)`` (``chunked(c)`` or ``causal()``),
    it computes what ``attn`` computes with the model's rotary table and mask.

    Raises:
        ValueError: not a ``Llama4TextAttention``, or a config the book's layer does not have
            (see the module).
    """
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    if not isinstance(attn, Llama4TextAttention):
        raise ValueError(f"attn must be a Llama4TextAttention, got {type(attn).__name__}")
    config, positions = attn.config, bool(attn.use_rope)
    normed = hasattr(attn, "qk_norm")  # (transformers builds it on RoPE layers only)
    if normed and config.rms_norm_eps != _EPS:
        raise ValueError(f"attn.config.rms_norm_eps must be {_EPS} (the book's L2 QK-norm) with "
                         f"use_qk_norm, got {config.rms_norm_eps}")
    warm = config.attn_temperature_tuning and not positions
    return _rope_layer_from(
        attn, qk_norm="l2" if normed else None, positions=positions, pairs="interleaved",
        score_mod=temperature(config.floor_scale, config.attn_scale) if warm else None,
        rope_parameters=None if positions else {})  # (a NoPE layer reads no RoPE)


def to_llama4_attention(gqa: GroupedQueryAttention, *, chunk_size: int | None = None) -> nn.Module:
    """A ``Llama4TextAttention`` holding the weights of ``gqa``: the inverse of
    :func:`from_llama4_attention` (eager attention).

    ``gqa`` with RoPE (any base) becomes a RoPE layer (``qk_norm="l2"``: ``use_qk_norm``; with
    ``chunk_size``, a ``"chunked_attention"`` layer of that chunk); without, a NoPE layer
    (``score_mod=temperature(f, s)``: ``attn_temperature_tuning`` with ``floor_scale=f``,
    ``attn_scale=s``). Call it as ``Llama4TextModel`` does, with ``position_embeddings`` from a
    ``Llama4TextRotaryEmbedding`` of its ``config`` and an additive mask (B, 1, L, L).

    Raises:
        ValueError: ``gqa`` not a ``GroupedQueryAttention``; on a RoPE layer a ``score_mod``
            or ``qk_norm`` other than ``"l2"``, NTK, YaRN, interpolation or a partial rotation;
            on a NoPE layer a ``qk_norm``, a ``score_mod`` other than ``temperature`` (with
            an integer ``floor_scale``), or a ``chunk_size``; any other option, by name
            (``check_options``); a ``chunk_size`` not positive.
    """
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    sizes = _rope_sizes(gqa, "Llama4TextAttention", maps=("qk_norm", "score_mod"), positions=False)
    s, positions = gqa.settings, gqa.rope
    if s.qk_norm not in ((None, "l2") if positions else (None,)):
        raise ValueError(f"gqa must have qk_norm='l2' or None (Llama 4's RoPE layers; None on its "
                         f"NoPE layers), got qk_norm={s.qk_norm!r} with rope={s.rope!r}")
    fs, scale = getattr(s.score_mod, "floor_scale", None), getattr(s.score_mod, "scale", None)
    warm = fs is not None and float(fs).is_integer() and s.score_mod == temperature(fs, scale)
    if s.score_mod is not None and (positions or not warm):
        raise ValueError("gqa must have score_mod=None on a RoPE layer, temperature(f, s) (an "
                         "integer f) or None without RoPE (Llama 4's NoPE layers), got "
                         f"score_mod={s.score_mod!r} with rope={s.rope!r}")
    if chunk_size is not None:
        check_positive_int(chunk_size, "chunk_size")
        if not positions:
            raise ValueError(f"chunk_size must be None for a NoPE layer (Llama 4's are global), got {chunk_size}")
    kind = "full_attention" if chunk_size is None else "chunked_attention"
    config = Llama4TextConfig(
        **sizes, attention_bias=s.bias, num_hidden_layers=1, no_rope_layers=[int(positions)],
        layer_types=[kind], attention_chunk_size=chunk_size, use_qk_norm=s.qk_norm == "l2",
        rms_norm_eps=_EPS, attn_temperature_tuning=warm,
        **({"floor_scale": int(fs), "attn_scale": scale} if warm else {}))
    return _rope_layer_to(gqa, Llama4TextAttention(config, layer_idx=0), pairs="interleaved")
