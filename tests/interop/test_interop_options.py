"""Every converter maps an option or refuses it by name, through one check (``check_options``).

The options are enumerated from the layers' ``OPTIONS``: a new option without an example here
fails the first test, so no converter can drop one silently (as the Gemma 2, gpt-oss and BLOOM
converters once dropped a layer's ``gate``). Also: RoPE's base, per layer, both ways with
Llama, and the YaRN frequencies against ``transformers``'.
"""

import dataclasses

import pytest
import torch

from mha_lib import MultiHeadAttention
from mha_lib._settings import rebuild
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop import (
    copy_to_gpt2_attention,
    from_llama_attention,
    to_bloom_attention,
    to_gemma2_attention,
    to_gemma3_attention,
    to_llama4_attention,
    to_gpt2_attention,
    to_gpt_oss_attention,
    to_llama_attention,
    to_olmo2_attention,
    to_qwen3_attention,
    to_torch_mha,
)
from mha_lib.interop._bloom import _bloom_slopes
from mha_lib.latent import mla_from_mha
from mha_lib.positions import Rope
from mha_lib.scores import alibi, softcap

EXAMPLES = {"score_mod": softcap(5.0), "sink_logits": True, "gate": "head", "qk_norm": "head",
            "backend": "flex", "rope": Rope(ntk=2.0), "rope_scale": 0.5}
"""A value other than the default, for every option of the layers."""

CONVERTERS = {  # name: (convert, a layer it converts, the options it maps)
    "torch": (to_torch_mha, MultiHeadAttention(8, 8, 8, 8, 2, 0.0), ()),
    "gpt2": (to_gpt2_attention, MultiHeadAttention(8, 8, 8, 8, 2, 0.0), ()),
    "gpt2 copy": (lambda m: copy_to_gpt2_attention(m, to_gpt2_attention(MultiHeadAttention(8, 8, 8, 8, 2, 0.0))),
                  MultiHeadAttention(8, 8, 8, 8, 2, 0.0), ()),
    "mla": (mla_from_mha, MultiHeadAttention(8, 8, 8, 8, 2, 0.0), ()),
    "bloom": (to_bloom_attention, MultiHeadAttention(8, 8, 8, 8, 2, 0.0, score_mod=alibi(2, _bloom_slopes(2))),
              ("score_mod",)),
    "llama": (to_llama_attention, GroupedQueryAttention(8, 2, 1, 0.0, rope=True), ("rope", "rope_scale")),
    "gemma2": (to_gemma2_attention, GroupedQueryAttention(8, 2, 1, 0.0, rope=True, score_mod=softcap(5.0)),
               ("rope", "score_mod")),
    "gpt-oss": (to_gpt_oss_attention, GroupedQueryAttention(8, 2, 1, 0.0, rope=True, sink_logits=True),
                ("rope", "sink_logits")),
    "qwen3": (to_qwen3_attention, GroupedQueryAttention(8, 2, 1, 0.0, rope=True, qk_norm="head"),
              ("rope", "qk_norm")),
    "olmo2": (to_olmo2_attention, GroupedQueryAttention(8, 2, 1, 0.0, rope=True, qk_norm="width"),
              ("rope", "qk_norm")),
    "gemma3": (to_gemma3_attention, GroupedQueryAttention(8, 2, 1, 0.0, rope=True, qk_norm="head"),
               ("rope", "rope_scale", "qk_norm")),
    "llama4": (to_llama4_attention, GroupedQueryAttention(8, 2, 1, 0.0, rope=True, qk_norm="l2"),
               ("rope", "qk_norm")),  # (its NoPE layers' temperature: test_interop_llama4.py)
}


def test_every_option_has_an_example():
    assert set(EXAMPLES) == set(GroupedQueryAttention.OPTIONS) >= set(MultiHeadAttention.OPTIONS)
    for cls in (MultiHeadAttention, GroupedQueryAttention):  # the options are the record's fields
        assert list(cls.OPTIONS) == [f.name for f in dataclasses.fields(cls.Options)]
        assert issubclass(cls.Settings, cls.Options)


@pytest.mark.parametrize("name", sorted(CONVERTERS))
def test_each_converter_converts_its_layer_and_refuses_each_option_it_does_not_map(name):
    convert, layer, maps = CONVERTERS[name]
    convert(layer)  # (the layer itself converts: a refusal below is the option's)
    options = dataclasses.fields(type(layer).Options)
    kept = [f.name for f in options if f.metadata.get("same_numbers")]  # (how, not what: backend)
    refused = [f.name for f in options if f.name not in maps and f.name not in kept]
    assert "gate" in refused  # (the one the Gemma 2, gpt-oss and BLOOM converters once dropped)
    for option in refused:
        with pytest.raises(ValueError, match=option):
            convert(rebuild(layer, **{option: EXAMPLES[option]}))
    assert kept == ["backend"]
    for option in kept:  # the same numbers: nothing to refuse
        convert(rebuild(layer, **{option: EXAMPLES[option]}))


_UNMAPPED = [(name, spec) for name in ("llama", "gemma2", "gpt-oss", "qwen3", "olmo2", "gemma3", "llama4")
             for spec in (Rope(ntk=2.0), Rope(yarn=2.0, original_length=8), Rope(partial=0.5))
             if not (name == "llama" and spec.yarn != 1.0)]  # (Llama maps YaRN: test_interop_yarn.py)


@pytest.mark.parametrize("name, spec", _UNMAPPED)
def test_a_rope_family_refuses_a_scaling_it_does_not_map(name, spec):
    convert, layer, _ = CONVERTERS[name]
    with pytest.raises(ValueError, match="rope"):
        convert(rebuild(layer, rope=spec))


def test_a_rope_base_of_its_own_both_ways_with_llama(additive_mask, rope_of):
    """rope_theta 500000 (Llama 3) is ``rope=Rope(base=500000)``: the same outputs both ways."""
    import transformers

    torch.manual_seed(1)
    config = transformers.LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
        intermediate_size=16, vocab_size=20, attn_implementation="eager",
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    attn = transformers.LlamaForCausalLM(config).eval().model.layers[0].self_attn
    ours = from_llama_attention(attn).eval()
    assert ours.settings.rope == Rope(base=500000.0)
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        theirs, _ = attn(x, position_embeddings=rope_of(config, 9, x.dtype),
                         attention_mask=additive_mask(torch.arange(1, 10).expand(2, 9), 9, 9, x.dtype))
        from mha_lib.masks import causal
        torch.testing.assert_close(ours(x, x, x, mask=causal()), theirs, rtol=1e-5, atol=1e-5)
        back = to_llama_attention(ours).eval()
        assert back.config.rope_parameters["rope_theta"] == 500000.0
        again, _ = back(x, position_embeddings=rope_of(back.config, 9, x.dtype),
                        attention_mask=additive_mask(torch.arange(1, 10).expand(2, 9), 9, 9, x.dtype))
        torch.testing.assert_close(again, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("factor, original, beta_fast", [(4.0, 64, 32.0), (8.0, 4096, 32.0), (2.0, 256, 8.0)])
def test_yarn_frequencies_and_factor_are_transformers(factor, original, beta_fast):
    """The released YaRN (the paper's code, and ``transformers``' ``_compute_yarn_parameters``)."""
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=128, num_attention_heads=2, max_position_embeddings=int(original * factor),
        rope_parameters={"rope_type": "yarn", "factor": factor, "rope_theta": 10000.0,
                         "original_max_position_embeddings": original, "beta_fast": beta_fast})
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    spec = Rope(yarn=factor, original_length=original, beta_fast=beta_fast)
    torch.testing.assert_close(spec.frequencies(64), inv_freq.double(), rtol=1e-6, atol=0)
    assert spec.factor() == pytest.approx(attention_factor)
