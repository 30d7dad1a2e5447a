"""Every entry point of the teaching class, the circuits and the converters meets bad input
with a ValueError that names the argument (never a bare torch or transformers error)."""

import pytest
import torch
from torch import nn

from mha_lib import MultiHeadAttention
from mha_lib.circuits import (
    circuit_ranks,
    composition_scores,
    head_writes,
    ov_circuits,
    qk_circuits,
    scores_from_circuits,
)
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop import (
    copy_to_gpt2_attention,
    from_bloom_attention,
    from_gemma2_attention,
    from_gemma3_attention,
    from_gpt2_attention,
    from_gpt_oss_attention,
    from_hf_llama,
    from_llama4_attention,
    from_llama_attention,
    from_torch_mha,
    layer_mask,
    to_bloom_attention,
    to_gemma2_attention,
    to_gemma3_attention,
    to_gpt2_attention,
    to_gpt_oss_attention,
    to_llama4_attention,
    to_llama_attention,
    to_torch_mha,
)
from mha_lib.llama import LlamaConfig, LlamaLM, RMSNorm, SwiGLU
from mha_lib.lm_transformers import to_transformers
from mha_lib.teaching import TeachingAttention

JUNK = [None, 3, "attention", [1, 2], torch.zeros(2), nn.Linear(4, 4), float("nan")]


@pytest.mark.parametrize("junk", JUNK, ids=repr)
@pytest.mark.parametrize("convert, name", [
    (from_torch_mha, "torch_mha"), (to_torch_mha, "mha"), (from_gpt2_attention, "attn"),
    (to_gpt2_attention, "mha"), (from_llama_attention, "attn"), (to_llama_attention, "gqa"),
    (from_hf_llama, "model"), (to_transformers, "model"), (qk_circuits, "mha"),
    (ov_circuits, "mha"), (circuit_ranks, "circuits"), (from_gpt_oss_attention, "attn"),
    (to_gpt_oss_attention, "gqa"), (from_gemma2_attention, "attn"), (to_gemma2_attention, "gqa"),
    (from_bloom_attention, "attn"), (to_bloom_attention, "mha"), (layer_mask, "attn"),
    (from_gemma3_attention, "attn"), (to_gemma3_attention, "gqa"), (from_llama4_attention, "attn"),
    (to_llama4_attention, "gqa"),
])
def test_converters_name_their_argument(convert, name, junk):
    with pytest.raises(ValueError, match=name):
        convert(junk)


@pytest.mark.parametrize("junk", JUNK, ids=repr)
def test_layers_name_their_argument(junk):
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0)
    x = torch.randn(1, 3, 4)
    calls = [
        (lambda: TeachingAttention(4, 2)(junk, x, x), "queries"),
        (lambda: TeachingAttention(4, 2)(x, junk, x), "keys"),
        (lambda: scores_from_circuits(mha, junk, x), "queries"),
        (lambda: head_writes(mha, x, x, junk), "values"),
        (lambda: composition_scores(mha, junk), "mha"),
        (lambda: copy_to_gpt2_attention(junk, to_gpt2_attention(mha)), "mha"),
        (lambda: RMSNorm(4)(junk), "x"),
        (lambda: SwiGLU(4, 8)(junk), "x"),
    ]
    if junk is not None:
        calls.append((lambda: TeachingAttention(4, 2)(x, x, x, junk), "keep"))
    for call, name in calls:
        with pytest.raises(ValueError, match=name):
            call()


@pytest.mark.parametrize("ids", [None, "ab", [[1.5]], torch.zeros(1, 2), torch.tensor([[9]]),
                                 torch.tensor([[-1]]), torch.zeros(2, dtype=torch.long)], ids=repr)
def test_llama_lm_names_ids(ids):
    lm = LlamaLM(LlamaConfig(vocab_size=5, d_model=8, num_heads=2, num_kv_heads=1, num_layers=1,
                             d_ff=4))
    with pytest.raises(ValueError, match="ids"):
        lm(ids)


@pytest.mark.parametrize("field, value", [("vocab_size", 0), ("d_model", 2.5), ("eps", -1.0),
                                          ("attention_bias", 1), ("sliding_window", 0)])
def test_llama_config_names_the_field(field, value):
    sizes = dict(vocab_size=5, d_model=8, num_heads=2, num_kv_heads=1, num_layers=1, d_ff=4)
    with pytest.raises(ValueError, match=f"config.{field}"):
        LlamaConfig(**{**sizes, field: value})
    with pytest.raises(ValueError, match="config"):
        LlamaLM(sizes)


def test_gqa_sizes_that_do_not_fit_a_llama():
    with pytest.raises(ValueError, match="gqa"):
        to_llama_attention(MultiHeadAttention(4, 4, 4, 4, 2, 0.0))
    with pytest.raises(ValueError, match="gqa"):
        to_llama_attention(GroupedQueryAttention(8, 2, 1, 0.0, rope=False))


@pytest.mark.parametrize("convert", [to_gemma2_attention, to_gpt_oss_attention])
def test_a_rope_scale_is_not_converted(convert):
    """Position interpolation (rope_scale != 1) has no mapping for these families: refused, by
    name (Llama's linear RoPE scaling: tests/interop/test_interop_llama.py)."""
    gqa = GroupedQueryAttention(8, 2, 1, 0.0, rope=True, rope_scale=0.5, sink_logits=convert is to_gpt_oss_attention)
    with pytest.raises(ValueError, match="rope_scale"):
        convert(gqa)
