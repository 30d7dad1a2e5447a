"""RoPE scalings in the Llama converters: YaRN (``rope_parameters={"rope_type": "yarn", ...}``)
is ``rope=Rope(yarn=...)`` both ways, against ``transformers``' eager attention; the scalings
``Rope`` does not have (dynamic NTK, Llama 3's, LongRoPE, a partial rotation) are refused by
name, and so is the static NTK-aware ``Rope(ntk=...)``, which Llama's configs do not have."""

import pytest
import torch

from mha_lib import causal_valid_lens
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop import from_llama_attention, to_llama_attention
from mha_lib.positions import Rope

SIZES = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
             intermediate_size=64, vocab_size=40, attn_implementation="eager")


def _attn(rope_parameters, dtype=torch.float32, **extra):
    import transformers

    config = transformers.LlamaConfig(**SIZES, rope_parameters=rope_parameters, **extra)
    torch.manual_seed(1)
    return transformers.LlamaForCausalLM(config).to(dtype).eval().model.layers[0].self_attn


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("params, spec", [
    ({"factor": 4.0, "original_max_position_embeddings": 8},
     Rope(yarn=4.0, original_length=8)),
    ({"factor": 2.0, "original_max_position_embeddings": 16, "beta_fast": 8.0, "beta_slow": 2.0,
      "attention_factor": 1.3, "rope_theta": 500000.0},
     Rope(base=500000.0, yarn=2.0, original_length=16, beta_fast=8.0, beta_slow=2.0, attention_factor=1.3)),
    ({"factor": 4.0, "original_max_position_embeddings": 8, "mscale": 1.0, "mscale_all_dim": 0.5},
     Rope(yarn=4.0, original_length=8, attention_factor=(0.1 * 1.3862943611198906 + 1) / (0.05 * 1.3862943611198906 + 1))),
])
def test_yarn_both_ways(params, spec, dtype, additive_mask, rope_of):
    """The book's layer of a Llama with YaRN equals it past the trained length, and back."""
    attn = _attn({"rope_type": "yarn", "rope_theta": 10000.0, **params}, dtype,
                 max_position_embeddings=64)
    ours = from_llama_attention(attn)
    assert ours.settings.rope.base == spec.base and ours.settings.rope.yarn == spec.yarn
    assert ours.settings.rope.factor() == pytest.approx(spec.factor())
    L = 24  # (past original_max_position_embeddings)
    x = torch.randn(2, L, 64, dtype=dtype, generator=torch.Generator().manual_seed(2))
    lens = causal_valid_lens(2, L)
    with torch.no_grad():
        theirs, _ = attn(x, position_embeddings=rope_of(attn.config, L, dtype),
                         attention_mask=additive_mask(lens, L, L, dtype))
        mine = ours(x, x, x, lens)
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)
        plain = GroupedQueryAttention(64, 4, 2, 0.0, rope=Rope(base=spec.base)).to(dtype).eval()
        plain.load_state_dict(ours.state_dict())
        assert (plain(x, x, x, lens) - theirs).abs().max() > 100 * (mine - theirs).abs().max()
        back = to_llama_attention(ours).eval()
        assert back.config.rope_parameters["rope_type"] == "yarn"
        again, _ = back(x, position_embeddings=rope_of(back.config, L, dtype),
                        attention_mask=additive_mask(lens, L, L, dtype))
        torch.testing.assert_close(again, theirs, rtol=1e-5, atol=1e-5)
    assert from_llama_attention(back).settings == ours.settings


@pytest.mark.parametrize("params", [
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8},
    {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8, "truncate": False},
    {"rope_type": "default", "partial_rotary_factor": 0.5},
])
def test_scalings_rope_does_not_have_are_refused_by_name(params):
    name = "truncate" if "truncate" in params else "rope_parameters"
    with pytest.raises(ValueError, match=name):
        from_llama_attention(_attn({"rope_theta": 10000.0, **params}, max_position_embeddings=64))


def test_ntk_and_partial_are_refused_on_the_way_out():
    for spec in (Rope(ntk=2.0), Rope(partial=0.5)):
        with pytest.raises(ValueError, match="rope"):
            to_llama_attention(GroupedQueryAttention(16, 2, 1, 0.0, rope=spec))
