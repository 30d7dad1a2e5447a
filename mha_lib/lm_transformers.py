"""The chapter 12 story model as a Hugging Face ``transformers`` model that ``generate`` runs.

:class:`mha_lib.lm.StoryLM` is, block for block, a GPT-NeoX model (``transformers``'
``GPTNeoXForCausalLM``, the architecture of EleutherAI's Pythia models) with sequential
residuals (``use_parallel_residual=False``), LayerNorms with biases, biased projections, a
ReLU feed-forward net and RoPE on every feature. The conversion is a copy of weights, with:

* **one fused projection per head**: GPT-NeoX's ``query_key_value`` (3D, D) holds, head after
  head, the d rows of the head's queries, then of its keys, then of its values (it reshapes
  its output to (B, L, H, 3d) and splits the last axis in three), not three blocks of D rows
  as GPT-2's ``c_attn`` does;
* **RoPE's pairs**: GPT-NeoX rotates feature ``i`` with ``i + d/2`` (``rotate_half``): the rows
  of W_q and W_k are permuted head by head with :func:`mha_lib.positions.rope_permutation`;
* **grouped keys and values**: GPT-NeoX has one key/value head per query head, so a story
  model with Hkv < H gives each query head a copy of its group's key/value head
  (``repeat_interleave``, what ``repeat_kv`` does at run time);
* **the output layer's bias**: GPT-NeoX's ``lm_head`` has none, the story model's has one, so
  the exported class, :class:`StoryGPTNeoXForCausalLM`, is ``GPTNeoXForCausalLM`` with a
  biased ``lm_head`` and nothing else. Load a saved copy with this class
  (``StoryGPTNeoXForCausalLM.from_pretrained(path, local_files_only=True)``): ``AutoModel``
  would build a plain GPT-NeoX and drop the bias.

Shape legend
    D   d_model;  H query heads, Hkv key/value heads, d = D / H
    V   vocabulary size
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from mha_lib.lm import StoryLM, check_plain_layers
from mha_lib.positions import rope_permutation
from mha_lib.stories import Tokenizer

__all__ = ["StoryGPTNeoXForCausalLM", "to_transformers"]


class StoryGPTNeoXForCausalLM(GPTNeoXForCausalLM):
    """``GPTNeoXForCausalLM`` whose output layer ``lm_head`` has a bias (as the story model's)."""

    def __init__(self, config: GPTNeoXConfig) -> None:
        super().__init__(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=True)
        self.post_init()


def to_transformers(model: StoryLM) -> StoryGPTNeoXForCausalLM:
    """A ``transformers`` model computing ``model``'s logits (eval mode, float32, eager attention).

    Its ``generate(ids, max_new_tokens=n, do_sample=False)`` continues a prompt with the
    tokens of ``model.generate([prompt], n)`` (greedy).

    Raises:
        ValueError: ``model`` not a :class:`mha_lib.lm.StoryLM`, or one with a
            ``config.pattern`` (GPT-NeoX has no per-layer windows, chunks, RoPE bases or NoPE).
    """
    if not isinstance(model, StoryLM):
        raise ValueError(f"model must be an mha_lib.lm.StoryLM, got {type(model).__name__}")
    check_plain_layers(model, "to_transformers (GPT-NeoX: every layer global, one RoPE base)")
    cfg = model.config
    D, H, Hkv = cfg.d_model, cfg.num_heads, cfg.num_kv_heads
    d, g = D // H, H // Hkv
    config = GPTNeoXConfig(
        vocab_size=cfg.vocab_size, hidden_size=D, num_hidden_layers=cfg.num_layers,
        num_attention_heads=H, intermediate_size=cfg.d_ff, hidden_act="relu",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
        max_position_embeddings=4096, layer_norm_eps=model.norm.eps, use_parallel_residual=False,
        attention_bias=True, attention_dropout=0.0, hidden_dropout=0.0, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=Tokenizer.pad_id,
        attn_implementation="eager",
    )
    hf = StoryGPTNeoXForCausalLM(config).to(model.unembedding.weight.device).eval()
    perm = rope_permutation(d)  # (d,): interleaved pairs -> halves, within one head
    with torch.no_grad():
        hf.gpt_neox.embed_in.weight.copy_(model.token_embedding.weight)
        for block, layer in zip(model.blocks, hf.gpt_neox.layers):
            attn = block.attention
            _copy(layer.input_layernorm, block.norm1)
            _copy(layer.post_attention_layernorm, block.norm2)
            _copy(layer.mlp.dense_h_to_4h, block.feed_forward[0])
            _copy(layer.mlp.dense_4h_to_h, block.feed_forward[3])
            _copy(layer.attention.dense, attn.W_o)
            q = attn.W_q.weight.reshape(H, d, D)[:, perm]  # (D, D) -> (H, d, D), RoPE rows permuted
            k = attn.W_k.weight.reshape(Hkv, d, D)[:, perm].repeat_interleave(g, 0)  # -> (H, d, D)
            v = attn.W_v.weight.reshape(Hkv, d, D).repeat_interleave(g, 0)  # (Hkv*d, D) -> (H, d, D)
            bq = attn.W_q.bias.reshape(H, d)[:, perm]  # (D,) -> (H, d)
            bk = attn.W_k.bias.reshape(Hkv, d)[:, perm].repeat_interleave(g, 0)  # -> (H, d)
            bv = attn.W_v.bias.reshape(Hkv, d).repeat_interleave(g, 0)  # -> (H, d)
            fused = layer.attention.query_key_value
            fused.weight.copy_(torch.cat([q, k, v], dim=1).reshape(3 * D, D))  # (H, 3d, D) -> (3D, D)
            fused.bias.copy_(torch.cat([bq, bk, bv], dim=1).reshape(3 * D))  # (H, 3d) -> (3D,)
        _copy(hf.gpt_neox.final_layer_norm, model.norm)
        _copy(hf.lm_head, model.unembedding)
    return hf


def _copy(target: nn.Module, source: nn.Module) -> None:
    """Weight and bias of a Linear or LayerNorm, same shapes."""
    target.weight.copy_(source.weight)
    target.bias.copy_(source.bias)
