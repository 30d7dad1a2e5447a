"""Hugging Face's LlamaAttention and MistralAttention, both ways: RoPE's halves, repeat_kv."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_lib import causal_valid_lens
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop import from_llama_attention, to_llama_attention
from mha_lib.masks import padding, sliding_window


@st.composite
def sizes(draw):
    Hkv, g, half = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return dict(B=draw(st.integers(1, 2)), L=draw(st.integers(1, 12)), H=Hkv * g, Hkv=Hkv,
                d=2 * half, bias=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


def _padded_causal(B, L, data):
    """Causal valid lengths, each example also cut at a length of its own (right padding)."""
    ends = torch.tensor(data.draw(st.lists(st.integers(1, L), min_size=B, max_size=B)))
    return torch.minimum(causal_valid_lens(B, L), ends[:, None])  # (B, L)


@settings(max_examples=30, deadline=None)
@given(c=sizes(), window=st.none() | st.integers(1, 9), data=st.data())
def test_book_to_hf_and_back(c, window, data, rope_of):
    """Also Mistral's window shorter than the sequence: the same mask on both sides."""
    torch.manual_seed(c["seed"])
    B, L, H, Hkv, d = c["B"], c["L"], c["H"], c["Hkv"], c["d"]
    bias = c["bias"] and window is None  # MistralAttention has no biases
    gqa = GroupedQueryAttention(H * d, H, Hkv, 0.0, bias=bias, rope=True).eval()
    hf = to_llama_attention(gqa, sliding_window=window).eval()
    assert type(hf).__name__ == ("LlamaAttention" if window is None else "MistralAttention")
    x = torch.randn(B, L, H * d)
    mask = padding(_padded_causal(B, L, data))
    if window is not None:
        mask = mask & sliding_window(window)
    keep = mask.dense(B, L, L)[:, None]  # (B, 1, L, L), True = may attend
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(x.dtype).min)
    with torch.no_grad():
        theirs, _ = hf(x, position_embeddings=rope_of(hf.config, L, x.dtype), attention_mask=additive)
        ours = gqa(x, x, x, mask=mask)
        back = from_llama_attention(hf)(x, x, x, mask=mask)
    # a query that sees no key (a window past the padding): zeros here, an average of every
    # value in transformers (its mask adds the lowest float everywhere on that row)
    sees = keep[:, 0].any(-1)  # (B, L)
    torch.testing.assert_close(theirs[sees], ours[sees], rtol=1e-5, atol=1e-5)
    assert not ours[~sees].any()
    torch.testing.assert_close(back, ours, rtol=0, atol=0)


@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_from_a_model_built_from_config(family, additive_mask, rope_of):
    import transformers

    Config = transformers.LlamaConfig if family == "llama" else transformers.MistralConfig
    Model = transformers.LlamaForCausalLM if family == "llama" else transformers.MistralForCausalLM
    torch.manual_seed(0)
    config = Config(hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                    num_hidden_layers=1, intermediate_size=64, vocab_size=40,
                    attn_implementation="eager")
    attn = Model(config).eval().model.layers[0].self_attn
    ours = from_llama_attention(attn)
    x = torch.randn(2, 9, 48)
    lens = causal_valid_lens(2, 9)
    with torch.no_grad():
        theirs, _ = attn(x, position_embeddings=rope_of(config, 9, x.dtype),
                         attention_mask=additive_mask(lens, 9, 9, x.dtype))
        torch.testing.assert_close(ours(x, x, x, lens), theirs, rtol=1e-5, atol=1e-5)


def test_bad_input():
    import transformers
    from transformers.models.llama.modeling_llama import LlamaAttention

    with pytest.raises(ValueError, match="attn"):
        from_llama_attention(nn.Linear(2, 2))
    partial = transformers.LlamaConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=1,
                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                        "partial_rotary_factor": 0.5})
    with pytest.raises(ValueError, match="rope_parameters"):
        from_llama_attention(LlamaAttention(partial, 0))
    wide = transformers.LlamaConfig(hidden_size=16, num_attention_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="head_dim"):
        from_llama_attention(LlamaAttention(wide, 0))
    with pytest.raises(ValueError, match="gqa"):
        to_llama_attention(GroupedQueryAttention(8, 2, 1, 0.0))  # rope=False
    with pytest.raises(ValueError, match="sliding_window"):
        to_llama_attention(GroupedQueryAttention(8, 2, 1, 0.0, rope=True), sliding_window=0)
    with pytest.raises(ValueError, match="biases"):
        to_llama_attention(GroupedQueryAttention(8, 2, 1, 0.0, bias=True, rope=True), sliding_window=4)


@pytest.mark.parametrize("factor", [4.0, 2.5, 0.5])
def test_linear_rope_scaling_is_position_interpolation_both_ways(factor, additive_mask, rope_of):
    """Llama's rope_parameters {"rope_type": "linear", "factor": f} is rope_scale = 1/f: a model
    built from such a config (eager, random weights) and the book's layer agree, both ways."""
    import transformers

    torch.manual_seed(1)
    config = transformers.LlamaConfig(
        hidden_size=48, num_attention_heads=6, num_key_value_heads=2, num_hidden_layers=1,
        intermediate_size=64, vocab_size=40, attn_implementation="eager",
        rope_parameters={"rope_type": "linear", "factor": factor, "rope_theta": 10000.0})
    attn = transformers.LlamaForCausalLM(config).eval().model.layers[0].self_attn
    ours = from_llama_attention(attn)
    assert ours.settings.rope_scale == pytest.approx(1 / factor)
    x = torch.randn(2, 11, 48)
    lens = causal_valid_lens(2, 11)
    with torch.no_grad():
        theirs, _ = attn(x, position_embeddings=rope_of(config, 11, x.dtype),
                         attention_mask=additive_mask(lens, 11, 11, x.dtype))
        mine = ours(x, x, x, lens)
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)
        plain = GroupedQueryAttention(48, 6, 2, 0.0, rope=True).eval()
        plain.load_state_dict(ours.state_dict())
        missed = (plain(x, x, x, lens) - theirs).abs().max()  # the scale matters
        assert missed > 1e-5 and missed > 100 * (mine - theirs).abs().max()
        back = to_llama_attention(ours).eval()
        assert back.config.rope_parameters["rope_type"] == "linear"
        assert back.config.rope_parameters["factor"] == pytest.approx(factor)
        again, _ = back(x, position_embeddings=rope_of(back.config, 11, x.dtype),
                        attention_mask=additive_mask(lens, 11, 11, x.dtype))
        torch.testing.assert_close(again, theirs, rtol=1e-5, atol=1e-5)


def test_other_families_and_the_whole_model_refuse_linear_scaling():
    import transformers

    config = transformers.LlamaConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=1,
                                      num_hidden_layers=1, intermediate_size=8, vocab_size=10,
                                      rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                       "rope_theta": 10000.0})
    from mha_lib.interop import from_hf_llama

    with pytest.raises(ValueError, match="rope_parameters"):
        from_hf_llama(transformers.LlamaForCausalLM(config))  # (the book's LlamaLM has no scale)
