"""Gemma 3's attention beyond the families' shared tests (test_interop_scores_models.py): its
norms' ``1 + weight`` and its scale both ways, a RoPE base per kind of layer (and the global
layers' linear scaling), and what the converters refuse, by name."""

import math

import pytest
import torch

from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop import from_gemma3_attention, layer_mask, to_gemma3_attention
from mha_lib.positions import Rope, rope_permutation

SIZES = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
             num_hidden_layers=2, rms_norm_eps=1e-6, attn_implementation="eager")
BASES = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
         "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6}}


def _layers(seed=0, dtype=torch.float32, **extra):
    """The two attention layers (sliding, full) of a Gemma 3 config, random weights and norms,
    and the config."""
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention

    config = Gemma3TextConfig(**{**SIZES, "rope_parameters": BASES, "sliding_window": 3,
                                 "query_pre_attn_scalar": 5, **extra},
                              layer_types=["sliding_attention", "full_attention"])
    torch.manual_seed(seed)
    layers = [Gemma3Attention(config, i).to(dtype).eval() for i in range(2)]
    with torch.no_grad():
        for layer in layers:
            for p in layer.parameters():
                p.normal_(0, 0.5)
    return layers, config


def _theirs(attn, config, x):
    """``attn`` on ``x`` as Gemma3TextModel calls it: its layer type's rotary table, a causal
    (and windowed) additive mask."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    L = x.shape[1]
    cos_sin = Gemma3RotaryEmbedding(config)(x, torch.arange(L)[None], attn.layer_type)
    keep = layer_mask(attn).dense(1, L, L, 0)[:, None]  # (1, 1, L, L)
    additive = torch.zeros(keep.shape, dtype=x.dtype).masked_fill(~keep, torch.finfo(x.dtype).min)
    return attn(x, position_embeddings=cos_sin, attention_mask=additive)[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_each_kind_of_layer_with_its_rope(dtype):
    """The local layer: base 10000, a window of 3; the global one: base 1000000 with linear
    scaling 4 (``Rope(base=1e6, scale=0.25)``); both agree with transformers, and back."""
    layers, config = _layers(dtype=dtype)
    x = torch.randn(2, 9, 32, dtype=dtype, generator=torch.Generator().manual_seed(1))
    specs = []
    for attn in layers:
        ours = from_gemma3_attention(attn)
        specs.append(ours.settings.rope)
        back = to_gemma3_attention(ours, sliding_window=attn.sliding_window,
                                   query_pre_attn_scalar=attn.config.query_pre_attn_scalar)
        with torch.no_grad():
            theirs = _theirs(attn, config, x)
            torch.testing.assert_close(ours(x, x, x, mask=layer_mask(attn)), theirs, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(_theirs(back, back.config, x), theirs, rtol=1e-5, atol=1e-5)
    assert specs == [True, Rope(base=1e6, scale=0.25)]


def test_the_norms_and_the_scale_both_ways():
    """``1 + weight``, the query's times sqrt(d / query_pre_attn_scalar); back, the same weights."""
    (attn, _), _ = _layers(seed=2)
    ours = from_gemma3_attention(attn)
    perm = rope_permutation(8).argsort()
    torch.testing.assert_close(ours.qk.q_norm.weight, (1 + attn.q_norm.weight[perm]) * math.sqrt(8 / 5))
    torch.testing.assert_close(ours.qk.k_norm.weight, 1 + attn.k_norm.weight[perm])
    back = to_gemma3_attention(ours, sliding_window=3, query_pre_attn_scalar=5)
    for name in ("q_norm", "k_norm"):
        torch.testing.assert_close(getattr(back, name).weight, getattr(attn, name).weight)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        torch.testing.assert_close(getattr(back, name).weight, getattr(attn, name).weight)
    assert back.layer_type == "sliding_attention" and back.sliding_window == 3


def test_the_bases_and_the_scale_matter():
    """Another base on the local layer, or the scale left out, changes the outputs."""
    layers, config = _layers(seed=3)
    x = torch.randn(1, 9, 32, generator=torch.Generator().manual_seed(4))
    attn = layers[1]  # the global layer
    ours = from_gemma3_attention(attn)
    with torch.no_grad():
        theirs = _theirs(attn, config, x)
        plain = GroupedQueryAttention(32, 4, 2, 0.0, rope=True, qk_norm="head").eval()  # (base 10000)
        plain.load_state_dict(ours.state_dict())
        assert (plain(x, x, x, mask=layer_mask(attn)) - theirs).abs().max() > 1e-3
        unscaled = from_gemma3_attention(attn)
        unscaled.qk.q_norm.weight.div_(math.sqrt(8 / 5))
        assert (unscaled(x, x, x, mask=layer_mask(attn)) - theirs).abs().max() > 1e-3


@pytest.mark.parametrize("extra, name", [
    ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    ({"rms_norm_eps": 1e-5}, "rms_norm_eps"),
    ({"head_dim": 16}, "head_dim"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ({"rope_parameters": {**BASES, "full_attention": {"rope_type": "dynamic", "factor": 2.0,
                                                      "rope_theta": 1e6}}}, "rope_parameters"),
])
def test_from_refuses_what_the_book_does_not_build(extra, name):
    layers, _ = _layers(**extra)
    with pytest.raises(ValueError, match=name):
        for attn in layers:
            from_gemma3_attention(attn)


def test_to_refuses_by_name():
    head = GroupedQueryAttention(8, 2, 1, 0.0, rope=True, qk_norm="head")
    with pytest.raises(ValueError, match="qk_norm"):
        to_gemma3_attention(GroupedQueryAttention(8, 2, 1, 0.0, rope=True))
    with pytest.raises(ValueError, match="qk_norm"):
        to_gemma3_attention(GroupedQueryAttention(8, 2, 1, 0.0, rope=True, qk_norm="width"))
    with pytest.raises(ValueError, match="gqa"):
        to_gemma3_attention(GroupedQueryAttention(8, 2, 1, 0.0, qk_norm="head"))  # no RoPE
    with pytest.raises(ValueError, match="sliding_window"):
        to_gemma3_attention(head, sliding_window=0)
    with pytest.raises(ValueError, match="query_pre_attn_scalar"):
        to_gemma3_attention(head, query_pre_attn_scalar=0)
    with pytest.raises(ValueError, match="attn"):
        from_gemma3_attention(torch.nn.Linear(2, 2))
