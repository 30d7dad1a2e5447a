"""Llama 4's text attention beyond the families' shared tests (test_interop_scores_models.py):
a NoPE layer's temperature both ways, a model's layout as a pattern, and what the converters
refuse, by name."""

import pytest
import torch

from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop import from_llama4_attention, layer_mask, to_llama4_attention
from mha_lib.positions import Rope
from mha_lib.masks import causal
from mha_lib.scores import softcap, temperature

SIZES = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
             num_hidden_layers=4, rms_norm_eps=1e-6, attention_chunk_size=5,
             attn_implementation="eager")


def _layers(**extra):
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    config = Llama4TextConfig(**{**SIZES, **extra})
    return [Llama4TextAttention(config, i) for i in range(config.num_hidden_layers)]


def test_every_fourth_layer_is_nope_with_a_temperature():
    """The default layout: three chunked RoPE layers with the L2 norm, then a global NoPE layer
    with the temperature (``LayerKind("chunk", 5)`` three times, ``LayerKind(rope_base=None)``)."""
    layers = [from_llama4_attention(a) for a in _layers(floor_scale=4, attn_scale=0.2)]
    assert [m.settings.rope for m in layers] == [Rope(base=500000.0)] * 3 + [False]  # (its default base)
    assert [m.settings.qk_norm for m in layers] == ["l2", "l2", "l2", None]
    assert [m.settings.score_mod for m in layers] == [None] * 3 + [temperature(4.0, 0.2)]
    assert [repr(layer_mask(a)) for a in _layers()] == ["chunked(5)"] * 3 + ["causal()"]
    assert from_llama4_attention(_layers(attn_temperature_tuning=False)[3]).score_mod is None
    assert from_llama4_attention(_layers(use_qk_norm=False)[0]).settings.qk_norm is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_nope_layer_with_its_temperature_both_ways(dtype):
    """The book's NoPE layer with ``temperature(2, 0.5)`` -> Llama 4 -> back: the same layer;
    Llama 4's own forward on it (queries of position i times the temperature) equals the book's."""
    torch.manual_seed(0)
    ours = GroupedQueryAttention(32, 4, 2, 0.0, bias=True, score_mod=temperature(2.0, 0.5)).to(dtype).eval()
    theirs = to_llama4_attention(ours)
    assert not theirs.use_rope and theirs.config.attn_temperature_tuning
    assert from_llama4_attention(theirs).settings == ours.settings
    x = torch.randn(2, 9, 32, dtype=dtype)
    keep = torch.ones(9, 9, dtype=torch.bool).tril()
    additive = torch.zeros(1, 1, 9, 9, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
    with torch.no_grad():
        expected = theirs(x, position_embeddings=None, attention_mask=additive)[0]
        got = ours(x, x, x, mask=causal())
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        cold = GroupedQueryAttention(32, 4, 2, 0.0, bias=True).to(dtype).eval()
        cold.load_state_dict(ours.state_dict())
        assert (cold(x, x, x, mask=causal()) - expected).abs().max() > 1e-3  # (it matters)


@pytest.mark.parametrize("extra, name", [
    ({"rms_norm_eps": 1e-5}, "rms_norm_eps"),
    ({"head_dim": 16}, "head_dim"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                          "rope_theta": 500000.0}}, "rope_parameters"),
])
def test_from_refuses_what_the_book_does_not_build(extra, name):
    with pytest.raises(ValueError, match=name):
        from_llama4_attention(_layers(**extra)[0])  # (a RoPE layer)


def test_to_refuses_by_name():
    rope = GroupedQueryAttention(8, 2, 1, 0.0, rope=True, qk_norm="l2")
    nope = GroupedQueryAttention(8, 2, 1, 0.0, score_mod=temperature(8.0, 0.1))
    to_llama4_attention(rope, chunk_size=4), to_llama4_attention(nope)  # (both convert)
    for layer, name in [
        (GroupedQueryAttention(8, 2, 1, 0.0, rope=True, qk_norm="head"), "qk_norm"),
        (GroupedQueryAttention(8, 2, 1, 0.0, qk_norm="l2"), "qk_norm"),  # (no norm on NoPE layers)
        (GroupedQueryAttention(8, 2, 1, 0.0, rope=True, score_mod=temperature(8.0, 0.1)), "score_mod"),
        (GroupedQueryAttention(8, 2, 1, 0.0, score_mod=temperature(2.5, 0.1)), "score_mod"),
        (GroupedQueryAttention(8, 2, 1, 0.0, score_mod=softcap(5.0)), "score_mod"),
        (GroupedQueryAttention(8, 2, 1, 0.0, rope=True, sink_logits=True), "sink_logits"),
    ]:
        with pytest.raises(ValueError, match=name):
            to_llama4_attention(layer)
    with pytest.raises(ValueError, match="chunk_size"):
        to_llama4_attention(nope, chunk_size=4)  # (Llama 4's NoPE layers are global)
    with pytest.raises(ValueError, match="chunk_size"):
        to_llama4_attention(rope, chunk_size=0)
    with pytest.raises(ValueError, match="attn"):
        from_llama4_attention(torch.nn.Linear(2, 2))
