"""Hugging Face's Llama and Mistral, both ways: the attention layer, and a whole model.

Three things separate ``LlamaAttention`` from the book's
:class:`~mha_lib.gqa.GroupedQueryAttention` (``rope=True``), and none changes the numbers:

* **RoPE's pairs.** ``transformers`` rotates feature ``i`` with ``i + d/2`` (``rotate_half``);
  the book rotates ``2i`` with ``2i+1``. Permuting the rows of ``W_q`` and ``W_k`` head by head
  with :func:`mha_lib.positions.rope_permutation` converts one into the other (the rows of
  ``W_v`` and ``W_o`` stay).
* **Sharing keys and values.** ``repeat_kv`` copies each key/value head ``g = H / Hkv`` times
  *next to itself* (``repeat_interleave``): query head ``h`` reads key/value head ``h // g``,
  the book's rule (:func:`mha_lib.gqa.kv_head_of`); the book broadcasts instead of copying.
* **Names.** ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` are ``W_q``, ``W_k``, ``W_v``,
  ``W_o``, stored the same way, (out, in).

``MistralAttention`` is ``LlamaAttention``; Mistral's sliding window lives in the mask that
``MistralModel`` builds (query i sees keys i - window < j <= i), and so it does in the book:
the converted layer attends with ``mask=mha_lib.masks.sliding_window(window)``, and a converted
Mistral model (:class:`mha_lib.llama.LlamaLM` with ``sliding_window``) masks every layer so, at
any length. :func:`layer_mask` gives the mask of any such layer.

gpt-oss and Gemma 2 keep this layout and change the scores; their converters
(:mod:`mha_lib.interop._gpt_oss`, :mod:`mha_lib.interop._gemma2`) copy the weights with the
helpers here (``_rope_layer_from``, ``_rope_layer_to``) and add what they change.

Shape legend
    D    d_model (hidden_size)
    H    query heads (num_attention_heads); Hkv key/value heads (num_key_value_heads)
    d    head size (head_dim), D / H
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int
from mha_lib._settings import build
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.llama import LlamaConfig, LlamaLM
from mha_lib.masks import Mask, causal, chunked, sliding_window
from mha_lib.positions import Rope, rope_permutation
from mha_lib.scores import ScoreMod

__all__ = ["from_hf_llama", "from_llama_attention", "layer_mask", "to_llama_attention"]

_BOOK_ROPE_BASE = 10000.0
"""The base of :func:`mha_lib.positions.rotary` (the book's layers use its default)."""

_LLAMA_SCALINGS = ("linear", "yarn")
"""The RoPE scalings of a Llama config (``rope_type``) that :class:`~mha_lib.positions.Rope` has."""


def from_llama_attention(attn: nn.Module) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention(rope=True)`` holding the weights of a ``LlamaAttention`` or
    ``MistralAttention``.

    Called on the same inputs with ``mask=causal()`` (positions 0, 1, ...), it computes what
    ``attn`` computes with the rotary embedding of its config and a causal mask; a Mistral
    layer's window is a mask too: ``mask=sliding_window(attn.config.sliding_window)``.

    Llama's linear RoPE scaling, ``rope_parameters={"rope_type": "linear", "factor": f}``,
    becomes ``rope_scale=1/f`` (position interpolation); its YaRN, ``{"rope_type": "yarn",
    "factor": s, "original_max_position_embeddings": L, ...}``, becomes
    ``rope=Rope(yarn=s, original_length=L, ...)`` (its ``beta_fast``, ``beta_slow``,
    ``attention_factor`` too).

    Raises:
        ValueError: not a Llama or Mistral attention layer, or a config the book's layer does
            not have: another RoPE (``rope_type`` ``"dynamic"``, ``"llama3"``, ``"longrope"``,
            a partial rotation), or a ``head_dim`` other than D / H. A ``rope_theta`` other
            than 10000 becomes ``rope=Rope(base=rope_theta)``.
    """
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.mistral.modeling_mistral import MistralAttention

    if not isinstance(attn, (LlamaAttention, MistralAttention)):
        raise ValueError(f"attn must be a LlamaAttention or MistralAttention, got {type(attn).__name__}")
    return _rope_layer_from(attn, scalings=_LLAMA_SCALINGS)


def to_llama_attention(gqa: GroupedQueryAttention, *, sliding_window: int | None = None) -> nn.Module:
    """A ``LlamaAttention`` (or, with ``sliding_window``, a ``MistralAttention``) holding the
    weights of ``gqa``: the inverse of :func:`from_llama_attention` (eager attention).

    Call it as ``LlamaModel`` does: with ``position_embeddings`` from a
    ``LlamaRotaryEmbedding`` of the module's ``config`` and an additive causal mask
    (B, 1, L, L). A ``rope_scale`` s other than 1 becomes Llama's linear RoPE scaling,
    ``rope_parameters={"rope_type": "linear", "factor": 1/s}``, and ``Rope(yarn=...)`` its
    ``"yarn"``.

    Raises:
        ValueError: ``gqa`` not a ``GroupedQueryAttention`` with ``rope=True``; its RoPE with
            NTK or a partial rotation, or any other option, by name.
    """
    from transformers import LlamaConfig as HFLlamaConfig
    from transformers import MistralConfig
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.mistral.modeling_mistral import MistralAttention

    sizes = _rope_sizes(gqa, "LlamaAttention", scalings=_LLAMA_SCALINGS)
    sizes["attention_bias"] = gqa.settings.bias
    if sliding_window is None:
        attn = LlamaAttention(HFLlamaConfig(**sizes), layer_idx=0)
    else:
        check_positive_int(sliding_window, "sliding_window")
        if sizes["attention_bias"]:
            raise ValueError("gqa has biases, which MistralAttention does not have: pass "
                             "sliding_window=None for a LlamaAttention (attention_bias=True)")
        del sizes["attention_bias"]
        attn = MistralAttention(MistralConfig(sliding_window=sliding_window, **sizes), layer_idx=0)
    return _rope_layer_to(gqa, attn)


def layer_mask(attn: nn.Module) -> Mask:
    """The book's mask for a Hugging Face decoder's attention layer at positions 0, 1, ...:
    ``causal()``, or ``sliding_window(w)`` (query i sees keys i - w < j <= i, as
    ``transformers``' ``sliding_window_overlay``: ``kv_idx > q_idx - w``) on a layer with a
    window: Mistral's every layer, every other layer of Gemma 2 and gpt-oss, five layers in six
    of Gemma 3 (``config.layer_types``, ``"sliding_attention"``; ``attn.sliding_window`` is
    then set); ``chunked(c)`` on Llama 4's ``"chunked_attention"`` layers
    (``config.attention_chunk_size``).

    Raises:
        ValueError: ``attn`` not a Hugging Face attention layer.
    """
    if not isinstance(attn, nn.Module) or not type(attn).__name__.endswith("Attention"):
        raise ValueError("attn must be a Hugging Face attention layer (a class named "
                         f"...Attention), got {type(attn).__name__}")
    window = getattr(attn, "sliding_window", None)
    if window is None and type(attn).__name__ == "MistralAttention":  # (its config holds it)
        window = getattr(attn.config, "sliding_window", None)
    types, i = getattr(getattr(attn, "config", None), "layer_types", None), getattr(attn, "layer_idx", None)
    if types and isinstance(i, int) and i < len(types) and types[i] == "chunked_attention":
        return chunked(attn.config.attention_chunk_size)  # (Llama 4's RoPE layers)
    return causal() if window is None else sliding_window(window)


def from_hf_llama(model: nn.Module) -> LlamaLM:
    """A :class:`mha_lib.llama.LlamaLM` holding the weights of a Hugging Face
    ``LlamaForCausalLM`` or ``MistralForCausalLM`` (not modified).

    Its logits on token ids (B, L) are the model's logits on the same ids, without padding
    (a Mistral model's layers see the last ``sliding_window`` positions, at any length).

    Raises:
        ValueError: another model, or a config the book's layers do not have (see
            :func:`from_llama_attention`; also an activation other than SiLU).
    """
    from transformers import LlamaForCausalLM, MistralForCausalLM

    if not isinstance(model, (LlamaForCausalLM, MistralForCausalLM)):
        raise ValueError(f"model must be a LlamaForCausalLM or MistralForCausalLM, got {type(model).__name__}")
    cfg = model.config
    D, H, Hkv, _ = _check_config(cfg, "model.config")
    if cfg.hidden_act != "silu":
        raise ValueError(f"model.config.hidden_act must be 'silu' (SwiGLU), got {cfg.hidden_act!r}")
    mlp_bias = model.model.layers[0].mlp.gate_proj.bias is not None if cfg.num_hidden_layers else False
    hf_attention_bias = getattr(cfg, "attention_bias", False)  # (Mistral has none)
    window = getattr(cfg, "sliding_window", None) if isinstance(model, MistralForCausalLM) else None
    config = LlamaConfig(vocab_size=cfg.vocab_size, d_model=D, num_heads=H, num_kv_heads=Hkv,
                         num_layers=cfg.num_hidden_layers, d_ff=cfg.intermediate_size,
                         eps=cfg.rms_norm_eps,
                         attention_bias=hf_attention_bias,
                         mlp_bias=mlp_bias, sliding_window=window)
    weight = model.lm_head.weight
    lm = LlamaLM(config).to(dtype=weight.dtype, device=weight.device)
    hf = model.model
    with torch.no_grad():
        lm.token_embedding.weight.copy_(hf.embed_tokens.weight)
        for block, layer in zip(lm.blocks, hf.layers):
            block.attention = from_llama_attention(layer.self_attn)
            block.norm1.weight.copy_(layer.input_layernorm.weight)
            block.norm2.weight.copy_(layer.post_attention_layernorm.weight)
            for ours, theirs in (("W_gate", "gate_proj"), ("W_up", "up_proj"), ("W_down", "down_proj")):
                _copy_linear(getattr(block.feed_forward, ours), getattr(layer.mlp, theirs))
        lm.norm.weight.copy_(hf.norm.weight)
        lm.unembedding.weight.copy_(model.lm_head.weight)
    return lm.train(model.training)


def _rope_layer_from(attn: nn.Module, *, score_mod: ScoreMod | None = None, sink_logits: bool = False,
                     query_scale: float = 1.0, scalings: tuple[str, ...] = (),
                     qk_norm: str | None = None, rope_parameters: dict | None = None,
                     positions: bool = True, pairs: str = "halves") -> GroupedQueryAttention:
    """A ``GroupedQueryAttention(rope=True)`` holding the ``q_proj``, ``k_proj``, ``v_proj``,
    ``o_proj`` of a Hugging Face attention layer in Llama's layout (RoPE in halves,
    ``repeat_kv``): Llama, Mistral, Gemma 2, gpt-oss. ``W_q`` (and its bias) is multiplied by
    ``query_scale``; the caller copies whatever else the family has (gpt-oss's sinks, Qwen 3's
    norms). Its RoPE is that of ``rope_parameters`` (default: the config's), whose
    ``rope_type`` may be ``"default"`` or one of ``scalings`` (:func:`_rope_spec`); without
    ``positions``, none (NoPE); with ``pairs="interleaved"`` (Llama 4) the rows stay."""
    params = _rope_parameters(attn.config) if rope_parameters is None else dict(rope_parameters)
    D, H, Hkv, d = _check_config(attn.config, "attn.config", scalings=scalings, params=params)
    spec = _rope_spec(params, "attn.config.rope_parameters", scalings)
    if not positions:
        rope = {"rope": False}
    elif spec == Rope(scale=spec.scale):  # (the book's base: rope=True, as the layers' default)
        rope = {"rope": True, "rope_scale": spec.scale}
    else:
        rope = {"rope": spec}
    settings = GroupedQueryAttention.Settings(
        D, H, Hkv, float(attn.config.attention_dropout), bias=attn.q_proj.bias is not None,
        score_mod=score_mod, sink_logits=sink_logits, qk_norm=qk_norm, **rope)
    gqa = build(GroupedQueryAttention, settings, like=attn)
    halves_to_interleaved = {} if pairs == "interleaved" else {
        "W_q": rope_permutation(d, H).argsort(), "W_k": rope_permutation(d, Hkv).argsort()}
    with torch.no_grad():
        for ours, theirs in (("W_q", attn.q_proj), ("W_k", attn.k_proj), ("W_v", attn.v_proj),
                             ("W_o", attn.o_proj)):
            rows = halves_to_interleaved.get(ours, slice(None))
            _copy_linear(getattr(gqa, ours), theirs, rows)
        _scale_linear(gqa.W_q, query_scale)
    return gqa


def _rope_sizes(gqa: object, target: str, maps: tuple[str, ...] = (), *,
                scalings: tuple[str, ...] = (), positions: bool = True) -> dict:
    """The config sizes of a Llama-like Hugging Face layer ``target`` with ``gqa``'s heads
    (eager attention), once ``gqa`` is checked: a ``GroupedQueryAttention`` with RoPE (or,
    without ``positions``, with or without), every other option refused by name unless the
    caller ``maps`` it (``check_options``), its RoPE plain (any base) or one of ``scalings``
    (``"linear"``: position interpolation; ``"yarn"``), in ``sizes["rope_parameters"]``."""
    if not isinstance(gqa, GroupedQueryAttention) or (positions and not gqa.rope):
        got = type(gqa).__name__ + (" with rope=False" if isinstance(gqa, GroupedQueryAttention) else "")
        raise ValueError(f"gqa must be an mha_lib.gqa.GroupedQueryAttention with rope=True, got {got}")
    gqa.check_options(target, maps=("rope", "rope_scale", *maps), name="gqa")
    s = gqa.settings
    H = s.num_heads
    sizes = dict(hidden_size=s.d_model, num_attention_heads=H, num_key_value_heads=s.num_kv_heads,
                 head_dim=s.d_model // H, attention_dropout=s.dropout, attn_implementation="eager")
    # (said always: the families' configs have defaults of their own, gpt-oss's is YaRN)
    sizes["rope_parameters"] = _rope_parameters_of(gqa.qk.rope or Rope(), target, scalings)
    return sizes


def _rope_parameters_of(spec: Rope, target: str, scalings: tuple[str, ...]) -> dict:
    """The ``rope_parameters`` of a ``Rope`` (the inverse of :func:`_rope_spec`)."""
    plain = Rope(base=spec.base, scale=spec.scale)
    if spec.scale != 1.0 and "linear" not in scalings:
        raise ValueError(f"gqa must have rope_scale = 1 (the default RoPE; {target} has no "
                         f"position interpolation here), got rope_scale={spec.scale!r}")
    yarn = spec.yarn != 1.0 and spec == Rope(base=spec.base, yarn=spec.yarn, original_length=spec.original_length,
                                            attention_factor=spec.attention_factor,
                                            beta_fast=spec.beta_fast, beta_slow=spec.beta_slow)
    if spec != plain and not (yarn and "yarn" in scalings):
        can = "position interpolation" + (" or YaRN" if "yarn" in scalings else "")
        raise ValueError(f"gqa.rope must be plain RoPE (a base and {can}): {target} here has "
                         f"no {'NTK or partial rotation' if 'yarn' in scalings else 'NTK, YaRN or partial rotation'}, got {spec}")
    params = {"rope_type": "default", "rope_theta": spec.base}
    if spec.scale != 1.0:  # position interpolation: Llama's linear scaling, factor 1 / scale
        params.update(rope_type="linear", factor=1.0 / spec.scale)
    if yarn:
        params.update(rope_type="yarn", factor=spec.yarn, original_max_position_embeddings=spec.original_length,
                      beta_fast=spec.beta_fast, beta_slow=spec.beta_slow)
        if spec.attention_factor is not None:
            params["attention_factor"] = spec.attention_factor
    return params


def _rope_layer_to(gqa: GroupedQueryAttention, attn: nn.Module, query_scale: float = 1.0,
                   pairs: str = "halves") -> nn.Module:
    """Copy ``gqa``'s weights into ``attn`` (Llama's layout, on ``gqa``'s dtype and device, in
    its mode), ``q_proj`` (and its bias) multiplied by ``query_scale``: the inverse of
    :func:`_rope_layer_from` (``pairs="interleaved"``: the rows stay)."""
    weight = gqa.W_q.weight
    attn = attn.to(dtype=weight.dtype, device=weight.device)
    d, H, Hkv = gqa.head_size, gqa.num_heads, gqa.num_kv_heads
    interleaved_to_halves = {} if pairs == "interleaved" else {
        "q_proj": rope_permutation(d, H), "k_proj": rope_permutation(d, Hkv)}
    with torch.no_grad():
        for theirs, ours in (("q_proj", gqa.W_q), ("k_proj", gqa.W_k), ("v_proj", gqa.W_v),
                             ("o_proj", gqa.W_o)):
            _copy_linear(getattr(attn, theirs), ours, interleaved_to_halves.get(theirs, slice(None)))
        _scale_linear(attn.q_proj, query_scale)
    return attn.train(gqa.training)


def _scale_linear(linear: nn.Linear, factor: float) -> None:
    """Multiply the weight and the bias of ``linear`` by ``factor`` (in place, no grad)."""
    if factor != 1.0:
        linear.weight.mul_(factor)
        if linear.bias is not None:
            linear.bias.mul_(factor)


def _check_config(cfg: object, name: str, *, scalings: tuple[str, ...] = (),
                  params: dict | None = None) -> tuple[int, int, int, int]:
    """D, H, Hkv, d of a Llama-like config the book's layers can compute, else raise: its
    RoPE (``params``, default the config's ``rope_parameters``) plain or one of ``scalings``
    (:func:`_rope_spec`)."""
    D, H = cfg.hidden_size, cfg.num_attention_heads
    Hkv = getattr(cfg, "num_key_value_heads", None) or H
    d = getattr(cfg, "head_dim", None) or D // H
    if d * H != D:
        raise ValueError(f"{name}.head_dim must be hidden_size / num_attention_heads = {D // H} "
                         f"(the book's layers split D into H heads), got {d}")
    _rope_spec(_rope_parameters(cfg) if params is None else params, f"{name}.rope_parameters", scalings)
    return D, H, Hkv, d


def _rope_parameters(cfg: object) -> dict:
    """A config's ``rope_parameters`` (a dict; empty when it says none)."""
    return dict(getattr(cfg, "rope_parameters", None) or {})


def _rope_spec(params: dict, name: str, scalings: tuple[str, ...] = ()) -> Rope:
    """The :class:`~mha_lib.positions.Rope` of Hugging Face's ``rope_parameters`` (``name``):
    its ``rope_theta`` (10000 when it says none), and with ``rope_type`` in ``scalings``:
    ``"linear"`` of ``factor`` f is ``Rope(scale=1/f)`` (position interpolation); ``"yarn"``
    is ``Rope(yarn=factor, original_length=original_max_position_embeddings, beta_fast,
    beta_slow, attention_factor)`` (its ``mscale`` / ``mscale_all_dim`` give the attention
    factor as ``transformers`` computes it). Any other ``rope_type`` (``"dynamic"``,
    ``"llama3"``, ``"longrope"``), a partial rotation, or YaRN without truncation is refused
    by name."""
    rope_type = params.get("rope_type", "default")
    partial = float(params.get("partial_rotary_factor", 1.0))
    types = ("default", *scalings)
    if rope_type not in types or partial != 1.0:
        raise ValueError(f"{name} must be the rope_type {' or '.join(types)} on every feature "
                         f"(mha_lib.positions.Rope), got {params}")
    base = float(params.get("rope_theta", _BOOK_ROPE_BASE))
    if rope_type == "default":
        return Rope(base=base)
    factor = params.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < float("inf"):
        raise ValueError(f"{name}'s factor must be a finite number > 0, got {factor!r}")
    if rope_type == "linear":
        return Rope(base=base, scale=1.0 / float(factor))
    if params.get("truncate", True) is not True:
        raise ValueError(f"{name}'s truncate must be True (YaRN's correction range rounded, as "
                         f"mha_lib.positions.Rope does), got {params.get('truncate')!r}")
    attention_factor = params.get("attention_factor")
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if attention_factor is None and mscale and mscale_all_dim:  # (DeepSeek's: transformers' rule)
        def get_mscale(m: float) -> float:
            return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0

        attention_factor = get_mscale(mscale) / get_mscale(mscale_all_dim)
    return Rope(base=base, yarn=float(factor), original_length=params.get("original_max_position_embeddings"),
                beta_fast=params.get("beta_fast") or 32.0, beta_slow=params.get("beta_slow") or 1.0,
                attention_factor=attention_factor)


def _copy_linear(target: nn.Linear, source: nn.Linear, rows: Tensor | slice = slice(None)) -> None:
    """``target.weight = source.weight[rows]`` (and the bias), shapes checked by ``copy_``."""
    target.weight.copy_(source.weight[rows])
    if (target.bias is None) != (source.bias is None):
        raise ValueError("both layers must have a bias, or neither")
    if target.bias is not None:
        target.bias.copy_(source.bias[rows])
