"""The attention code readers will meet, converted into the book's layers and back.

Each converter copies weights, never computes: the result gives the same outputs as the source
module on the same inputs (the tests check every direction on random inputs and shapes).

* PyTorch's ``nn.MultiheadAttention`` (a packed ``in_proj_weight``): :func:`to_torch_mha`,
  :func:`from_torch_mha`;
* nanoGPT's ``CausalSelfAttention`` and Hugging Face's ``GPT2Attention`` (one fused
  ``c_attn`` for queries, keys and values; GPT-2's ``Conv1D`` stores weights transposed):
  :func:`from_gpt2_attention`, :func:`copy_to_gpt2_attention`, :func:`to_gpt2_attention`;
* Hugging Face's ``LlamaAttention`` and ``MistralAttention`` (RoPE in the halves convention,
  grouped-query attention with ``repeat_kv``): :func:`from_llama_attention`,
  :func:`to_llama_attention`; a whole ``LlamaForCausalLM`` or ``MistralForCausalLM``:
  :func:`from_hf_llama`;
* the scores of today's models (:mod:`mha_lib.scores`): gpt-oss's learned sink logits
  (:func:`from_gpt_oss_attention`, :func:`to_gpt_oss_attention`), Gemma 2's soft-capping and
  scale (:func:`from_gemma2_attention`, :func:`to_gemma2_attention`) and BLOOM's ALiBi with a
  fused ``query_key_value`` (:func:`from_bloom_attention`, :func:`to_bloom_attention`); the
  mask of a layer, a sliding window on every other layer of gpt-oss and Gemma 2:
  :func:`layer_mask`;
* the queries and keys of today's models (:mod:`mha_lib.qk`): Qwen 3's QK-norm per head and
  its RoPE base (:func:`from_qwen3_attention`, :func:`to_qwen3_attention`), OLMo 2's over
  the width (:func:`from_olmo2_attention`, :func:`to_olmo2_attention`), Gemma 3's per head
  with its own scale and a RoPE base per kind of layer, local or global
  (:func:`from_gemma3_attention`, :func:`to_gemma3_attention`), Llama 4's chunked RoPE
  layers with an L2 norm and its NoPE layers with a temperature
  (:func:`from_llama4_attention`, :func:`to_llama4_attention`).

``transformers`` is imported only by the functions that need it, so the PyTorch converters
cost nothing more. Nothing is downloaded: models come from a config (random weights) or from
files on disk (``from_pretrained(path, local_files_only=True)``).
"""

from mha_lib.interop._bloom import from_bloom_attention, to_bloom_attention
from mha_lib.interop._gemma2 import from_gemma2_attention, to_gemma2_attention
from mha_lib.interop._gemma3 import from_gemma3_attention, to_gemma3_attention
from mha_lib.interop._gpt2 import copy_to_gpt2_attention, from_gpt2_attention, to_gpt2_attention
from mha_lib.interop._gpt_oss import from_gpt_oss_attention, to_gpt_oss_attention
from mha_lib.interop._qk_norms import (from_olmo2_attention, from_qwen3_attention,
                                       to_olmo2_attention, to_qwen3_attention)
from mha_lib.interop._llama import from_hf_llama, from_llama_attention, layer_mask, to_llama_attention
from mha_lib.interop._llama4 import from_llama4_attention, to_llama4_attention
from mha_lib.interop._torch import _torch_attn_mask, from_torch_mha, to_torch_mha

__all__ = [
    "copy_to_gpt2_attention",
    "from_bloom_attention",
    "from_gemma2_attention",
    "from_gemma3_attention",
    "from_gpt2_attention",
    "from_gpt_oss_attention",
    "from_hf_llama",
    "from_llama4_attention",
    "from_llama_attention",
    "from_olmo2_attention",
    "from_qwen3_attention",
    "from_torch_mha",
    "layer_mask",
    "to_bloom_attention",
    "to_gemma2_attention",
    "to_gemma3_attention",
    "to_gpt2_attention",
    "to_gpt_oss_attention",
    "to_llama4_attention",
    "to_llama_attention",
    "to_olmo2_attention",
    "to_qwen3_attention",
    "to_torch_mha",
]
