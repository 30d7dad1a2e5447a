"""gpt-oss (sink logits), Gemma 2 (soft-capping, its own scale), BLOOM (ALiBi), Qwen 3
(QK-norm per head, RoPE base 1000000), OLMo 2 (QK-norm over the width) and Gemma 3 (QK-norm
per head, its own scale, a RoPE base per kind of layer) and Llama 4 (a chunked layer with
RoPE and an L2 norm, a NoPE layer with a temperature) from
``transformers``, both ways, against ``transformers``' own eager attention.

Each model is built from a tiny config (random weights, seeded, nothing downloaded) and runs
as a whole: hooks record what every attention layer received from the model (hidden states,
rotary table, the model's own mask with padding and sliding windows, BLOOM's ALiBi tensor)
and what it returned. The book's layer, converted, gets the same hidden states and the
book's mask; the layer converted back gets the recorded inputs.
"""

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_lib._settings import build
from mha_lib.decoding import KVCache
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.interop import (
    from_bloom_attention,
    from_gemma2_attention,
    from_gemma3_attention,
    from_llama4_attention,
    from_gpt_oss_attention,
    from_olmo2_attention,
    from_qwen3_attention,
    layer_mask,
    to_bloom_attention,
    to_gemma2_attention,
    to_gemma3_attention,
    to_llama4_attention,
    to_gpt_oss_attention,
    to_olmo2_attention,
    to_qwen3_attention,
)
from mha_lib.interop._bloom import _bloom_slopes
from mha_lib.masks import causal, document, padding
from mha_lib.multihead import MultiHeadAttention
from mha_lib.patterns import LayerKind
from mha_lib.scores import alibi, softcap

WINDOW = 3
FAMILIES = ["gpt_oss", "gemma2", "bloom", "qwen3", "olmo2", "gemma3", "llama4"]


def _model(family, seed=0, dtype=torch.float32):
    """A two-layer model of ``family`` (eval mode) and its attention layers."""
    import transformers

    torch.manual_seed(seed)
    if family == "bloom":  # 6 heads: not a power of two (BLOOM's own slopes)
        config = transformers.BloomConfig(hidden_size=24, n_head=6, n_layer=2, vocab_size=50,
                                          attn_implementation="eager")
        model = transformers.BloomForCausalLM(config)
        attns = [block.self_attention for block in model.transformer.h]
    else:
        sizes = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     num_hidden_layers=2, intermediate_size=16, vocab_size=50, sliding_window=WINDOW,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                     attention_bias=True, attn_implementation="eager")
        if family == "olmo2":  # no window; norms over the width
            config = transformers.Olmo2Config(**{k: v for k, v in sizes.items() if k != "sliding_window"},
                                              rms_norm_eps=1e-6)
            model = transformers.Olmo2ForCausalLM(config)
        elif family == "qwen3":  # its norms (weights drawn below, not ones) and a base of its own
            config = transformers.Qwen3Config(
                **{**sizes, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
                use_sliding_window=True, layer_types=["sliding_attention", "full_attention"])
            model = transformers.Qwen3ForCausalLM(config)
        elif family == "gemma3":  # a scale of its own, two bases (local 10000, global 1000000)
            bases = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                     "full_attention": {"rope_type": "default", "rope_theta": 1e6}}
            config = transformers.Gemma3TextConfig(
                **{**sizes, "rope_parameters": bases}, query_pre_attn_scalar=5, rms_norm_eps=1e-6,
                layer_types=["sliding_attention", "full_attention"])
            model = transformers.Gemma3ForCausalLM(config)
        elif family == "llama4":  # a chunk of 3 with RoPE, then NoPE with a temperature from position 1
            config = transformers.Llama4TextConfig(
                **{k: v for k, v in sizes.items() if k != "sliding_window"}, attention_chunk_size=WINDOW,
                no_rope_layers=[1, 0], rms_norm_eps=1e-6, floor_scale=2, attn_scale=0.5,
                moe_layers=[], intermediate_size_mlp=16)
            model = transformers.Llama4ForCausalLM(config)
        elif family == "gpt_oss":
            config = transformers.GptOssConfig(**sizes, num_local_experts=2, num_experts_per_tok=1,
                                               experts_implementation="eager")  # (float64 too)
            model = transformers.GptOssForCausalLM(config)
        else:  # a scale of its own (not d = 8) and a cap the scores reach
            config = transformers.Gemma2Config(**sizes, query_pre_attn_scalar=5,
                                               attn_logit_softcapping=0.5)
            model = transformers.Gemma2ForCausalLM(config)
        attns = [layer.self_attn for layer in model.model.layers]
    model = model.to(dtype).eval()
    with torch.no_grad():  # (gpt-oss's sinks and the biases start at 0: make them matter)
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model, attns


FROM = {"gpt_oss": from_gpt_oss_attention, "gemma2": from_gemma2_attention,
        "bloom": from_bloom_attention, "qwen3": from_qwen3_attention, "olmo2": from_olmo2_attention,
        "gemma3": from_gemma3_attention, "llama4": from_llama4_attention}


def _to(family, layer, attn):
    """The book's ``layer`` back as ``family``'s layer, shaped as ``attn`` (window, scale)."""
    if family == "bloom":
        return to_bloom_attention(layer)
    if family == "olmo2":
        return to_olmo2_attention(layer)
    if family == "llama4":
        return to_llama4_attention(layer, chunk_size=getattr(layer_mask(attn), "chunk_size", None))
    if family in ("gpt_oss", "qwen3"):
        to = to_gpt_oss_attention if family == "gpt_oss" else to_qwen3_attention
        return to(layer, sliding_window=attn.sliding_window)
    to = to_gemma2_attention if family == "gemma2" else to_gemma3_attention
    return to(layer, sliding_window=attn.sliding_window,
              query_pre_attn_scalar=attn.config.query_pre_attn_scalar)


def _record(model, attns, ids, **kwargs):
    """Run ``model``; for every attention call, (module, args, kwargs, attention output)."""
    calls = []

    def hook(module, args, kw, output):
        out = output[0]
        if "residual" in kw or len(args) > 1:  # BLOOM adds the residual inside the layer
            out = out - (args[1] if len(args) > 1 else kw["residual"])
        calls.append((module, args, kw, out))

    handles = [a.register_forward_hook(hook, with_kwargs=True) for a in attns]
    try:
        with torch.no_grad():
            model(ids, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return calls


def _hidden(args, kw):
    return args[0] if args else kw["hidden_states"]


def _padded(B, L, side, seed):
    """Token ids (B, L) and an attention mask (1 = a real token): example b has ``L - b``
    real tokens, padding on the right or on the left."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 50, (B, L), generator=g)
    real = torch.arange(L)[None] < (L - torch.arange(B))[:, None]  # (B, L)
    if side == "left":
        real = real.flip(-1)
    return ids, real.long()


def _chunks_from_the_first_token(real, c):
    """(B, L) chunk ids as ``transformers`` counts them on left-padded rows: from each
    example's first real token (``chunked_overlay`` shifts by the left padding); the padding
    in a chunk of its own. (The book's ``chunked(c)`` counts from position 0, the same
    without left padding.)"""
    L = real.shape[1]
    first = L - real.sum(-1, keepdim=True)  # (B, 1): the left padding
    return torch.where(real.bool(), (torch.arange(L) - first) // c, L)


@pytest.mark.parametrize("side, dtype", [("right", torch.float32), ("left", torch.float32),
                                         ("right", torch.float64)])
@pytest.mark.parametrize("family", FAMILIES)
def test_both_ways_equal_eager_attention(family, side, dtype):
    """Every layer of the model (a sliding one and a full one; BLOOM: ALiBi with key positions
    counted from the first real token), padded examples, the real tokens' rows compared.

    float64 agrees to float32's accuracy only: ``transformers``' eager attention computes its
    rotary table (and ALiBi slopes) in float32, and Gemma 2's and BLOOM's softmax too. (Left
    padding in float64: there a padded row's float64 lowest number becomes -inf in that float32
    softmax, the row NaN, and the next layer spreads the NaN to every row.)"""
    model, attns = _model(family, dtype=dtype)
    B, L = 3, 8
    ids, real = _padded(B, L, side, seed=1)
    calls = _record(model, attns, ids, attention_mask=real, use_cache=False)
    assert len(calls) == 2
    kinds = []
    for attn, args, kw, theirs in calls:
        x = _hidden(args, kw)
        ours = FROM[family](attn)
        mask = layer_mask(attn) & (padding(real.sum(-1)) if side == "right" else document(real))
        if side == "left" and repr(layer_mask(attn)).startswith("chunked"):  # (Llama 4)
            mask = causal() & document(_chunks_from_the_first_token(real, WINDOW))
        kinds.append(repr(layer_mask(attn)))
        back = _to(family, ours, attn)
        with torch.no_grad():
            got = ours(x, x, x, mask=mask)
            again = back(*args, **kw)[0]
        if family == "bloom":
            again = again - (args[1] if len(args) > 1 else kw["residual"])
        rows = real.bool()  # (B, L): the queries of real tokens
        torch.testing.assert_close(got[rows], theirs[rows], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(again, theirs, rtol=1e-5, atol=1e-5)
    expected = ["causal()"] * 2 if family in ("bloom", "olmo2") else [f"sliding_window({WINDOW})", "causal()"]
    expected[0] = f"chunked({WINDOW})" if family == "llama4" else expected[0]
    assert kinds == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_the_scores_matter(family):
    """Without what the converter maps (sinks, cap and scale, ALiBi, QK-norm) the outputs differ."""
    model, attns = _model(family)
    ids, real = _padded(2, 8, "right", seed=2)
    attn, args, kw, theirs = _record(model, attns, ids, use_cache=False)[0]
    x = _hidden(args, kw)
    ours = FROM[family](attn)
    plain = GroupedQueryAttention if family != "bloom" else MultiHeadAttention
    s = ours.settings
    bare = plain(**{**vars(s), **MultiHeadAttention.OPTIONS}).eval()  # every option at its default
    bare.load_state_dict({k: v for k, v in ours.state_dict().items() if k in bare.state_dict()})
    with torch.no_grad():
        torch.testing.assert_close(ours(x, x, x, mask=layer_mask(attn)), theirs, rtol=1e-5, atol=1e-5)
        assert (bare(x, x, x, mask=layer_mask(attn)) - theirs).abs().max() > 1e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_decoding_with_a_cache_equals_eager(family):
    """Prefill 5 tokens, then 4 steps of one token (past the window of 3): the book's cache
    (rolling on a sliding layer) against the model's own cache, layer by layer."""
    model, attns = _model(family, seed=3)
    ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(4))
    recorded = [_record(model, attns, ids[:, :5], use_cache=True)]
    with torch.no_grad():
        past = model(ids[:, :5], use_cache=True).cache
    for t in range(5, 9):
        step = torch.ones(2, t + 1, dtype=torch.long)
        recorded.append(_record(model, attns, ids[:, t:t + 1], cache=past, use_cache=True,
                                attention_mask=step))
    layers = [FROM[family](a) for a in attns]
    caches = [KVCache(window=a.sliding_window) if getattr(a, "sliding_window", None) else KVCache()
              for a in attns]
    if family == "llama4":  # its chunked layer: a cache of the current chunk (mha_lib.patterns)
        caches[0] = KVCache.of_layers([LayerKind("chunk", WINDOW).cache()])
    assert [len(calls) for calls in recorded] == [2] * 5
    for calls in recorded:
        for layer, cache, (_, args, kw, theirs) in zip(layers, caches, calls):
            x = _hidden(args, kw)
            with torch.no_grad():
                got = layer(x, x, x, cache=cache)
            torch.testing.assert_close(got, theirs, rtol=1e-5, atol=1e-5)


def test_bloom_slopes_are_transformers():
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    for H in (1, 2, 3, 5, 6, 8, 12, 16, 112):
        expected = _get_alibi_slopes(H, torch.device("cpu")).double()
        torch.testing.assert_close(_bloom_slopes(H), expected, rtol=1e-6, atol=0)
    torch.testing.assert_close(_bloom_slopes(8), alibi(8).slopes.double())  # a power of 2: the default


def test_gemma2_round_trip_keeps_the_weights():
    """The scale folded into W_q on the way in is unfolded on the way out."""
    model, attns = _model("gemma2")
    attn = attns[0]
    back = _to("gemma2", from_gemma2_attention(attn), attn)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        torch.testing.assert_close(getattr(back, name).weight, getattr(attn, name).weight)
        torch.testing.assert_close(getattr(back, name).bias, getattr(attn, name).bias)
    assert back.config.attn_logit_softcapping == attn.config.attn_logit_softcapping
    ours = from_gemma2_attention(attn)
    assert ours.score_mod == softcap(0.5)
    torch.testing.assert_close(ours.W_q.weight, attn.q_proj.weight[_halves_to_interleaved(attn)] * math.sqrt(8 / 5))


def test_gemma2_without_a_cap():
    """``attn_logit_softcapping=None``: no score modification, both ways."""
    from transformers import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention

    config = Gemma2Config(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                          num_hidden_layers=2, attn_logit_softcapping=None)
    ours = from_gemma2_attention(Gemma2Attention(config, 0))
    assert ours.score_mod is None
    assert to_gemma2_attention(ours).config.attn_logit_softcapping is None


def _halves_to_interleaved(attn):
    from mha_lib.positions import rope_permutation

    return rope_permutation(attn.head_dim, attn.config.num_attention_heads).argsort()


def test_book_layer_swapped_into_the_model():
    """The other way first: a book layer (random sink logits) becomes layer 0 of a gpt-oss,
    and the model's own forward through it equals the book's layer."""
    model, attns = _model("gpt_oss", seed=5)
    torch.manual_seed(6)
    ours = GroupedQueryAttention(32, 4, 2, 0.0, bias=True, rope=True, sink_logits=True).eval()
    with torch.no_grad():
        ours.sink_logits.normal_()
    model.model.layers[0].self_attn = swapped = to_gpt_oss_attention(ours, sliding_window=WINDOW)
    ids, real = _padded(2, 8, "right", seed=7)
    _, args, kw, theirs = _record(model, [swapped], ids, attention_mask=real, use_cache=False)[0]
    x = _hidden(args, kw)
    with torch.no_grad():
        got = ours(x, x, x, mask=layer_mask(swapped) & padding(real.sum(-1)))
    torch.testing.assert_close(got, theirs, rtol=1e-5, atol=1e-5)


def test_bad_input():
    import transformers
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    for convert in FROM.values():
        with pytest.raises(ValueError, match="attn"):
            convert(nn.Linear(2, 2))
    yarn = transformers.GptOssConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=1,
                                     head_dim=8, num_hidden_layers=2)  # the released RoPE: YaRN
    with pytest.raises(ValueError, match="rope_parameters"):
        from_gpt_oss_attention(GptOssAttention(yarn, 0))
    wide = transformers.Gemma2Config(hidden_size=16, num_attention_heads=2, num_key_value_heads=1,
                                     head_dim=16, num_hidden_layers=2)  # H * head_dim != D
    with pytest.raises(ValueError, match="head_dim"):
        from_gemma2_attention(Gemma2Attention(wide, 0))
    encoder = transformers.Gemma2Config(hidden_size=16, num_attention_heads=2, num_key_value_heads=1,
                                        head_dim=8, num_hidden_layers=2, use_bidirectional_attention=True)
    with pytest.raises(ValueError, match="use_bidirectional_attention"):
        from_gemma2_attention(Gemma2Attention(encoder, 0))
    sinks = GroupedQueryAttention(8, 2, 1, 0.0, rope=True, sink_logits=True)
    capped = GroupedQueryAttention(8, 2, 1, 0.0, rope=True, score_mod=softcap(5.0))
    with pytest.raises(ValueError, match="gqa"):
        to_gpt_oss_attention(GroupedQueryAttention(8, 2, 1, 0.0, rope=True))  # no sinks
    with pytest.raises(ValueError, match="gqa"):
        to_gpt_oss_attention(GroupedQueryAttention(8, 2, 1, 0.0, sink_logits=True))  # no RoPE
    with pytest.raises(ValueError, match="sliding_window"):
        to_gpt_oss_attention(sinks, sliding_window=0)
    with pytest.raises(ValueError, match="gqa"):
        to_gemma2_attention(sinks)
    with pytest.raises(ValueError, match="gqa"):
        to_gemma2_attention(GroupedQueryAttention(8, 2, 1, 0.0, rope=True, score_mod=alibi(2)))
    with pytest.raises(ValueError, match="query_pre_attn_scalar"):
        to_gemma2_attention(capped, query_pre_attn_scalar=-1)
    with pytest.raises(ValueError, match="mha"):
        to_bloom_attention(MultiHeadAttention(8, 8, 8, 8, 2, 0.0, score_mod=alibi(2, [0.5, 0.1])))
    with pytest.raises(ValueError, match="mha"):
        to_bloom_attention(MultiHeadAttention(8, 8, 8, 8, 2, 0.0))  # no ALiBi
    with pytest.raises(ValueError, match="mha"):
        to_bloom_attention(capped)
    with pytest.raises(ValueError, match="qk_norm"):
        to_qwen3_attention(GroupedQueryAttention(8, 2, 1, 0.0, rope=True))  # no QK-norm
    with pytest.raises(ValueError, match="gqa"):
        to_qwen3_attention(GroupedQueryAttention(8, 2, 1, 0.0, qk_norm="width", rope=True))
    with pytest.raises(ValueError, match="gqa"):
        to_olmo2_attention(GroupedQueryAttention(8, 2, 1, 0.0, qk_norm="head", rope=True))
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention
    with pytest.raises(ValueError, match="rms_norm_eps"):  # (the default, 1e-5: not the book's norm)
        from_olmo2_attention(Olmo2Attention(transformers.Olmo2Config(hidden_size=16, num_attention_heads=2), 0))


def test_layer_mask_of_llama_and_mistral():
    import transformers
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.mistral.modeling_mistral import MistralAttention

    sizes = dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1)
    llama = LlamaAttention(transformers.LlamaConfig(**sizes), 0)
    mistral = MistralAttention(transformers.MistralConfig(**sizes, sliding_window=4), 0)
    assert repr(layer_mask(llama)) == "causal()"
    assert repr(layer_mask(mistral)) == "sliding_window(4)"


@settings(max_examples=12, deadline=None)
@given(family=st.sampled_from(FAMILIES), Hkv=st.integers(1, 2), g=st.integers(1, 3),
       half=st.integers(1, 2), dropout=st.sampled_from([0.0, 0.25]), bias=st.booleans(),
       cap=st.none() | st.just(2.0), window=st.none() | st.integers(1, 9), training=st.booleans())
def test_round_trip_keeps_every_option(family, Hkv, g, half, dropout, bias, cap, window, training):
    """The book's layer -> family -> the book's layer: the same settings (BLOOM: always
    biases), the same mode, the same outputs."""
    H = Hkv * g
    D = H * 2 * half
    if family == "bloom":
        s = MultiHeadAttention.Settings(D, D, D, D, H, dropout, bias, score_mod=alibi(H, _bloom_slopes(H)))
        layer = build(MultiHeadAttention, s).train(training)
        back = from_bloom_attention(to_bloom_attention(layer))
        s = dataclasses.replace(s, bias=True)
    else:
        s = GroupedQueryAttention.Settings(D, H, Hkv, dropout, bias, rope=True,
                                           score_mod=None if family != "gemma2" or cap is None else softcap(cap),
                                           sink_logits=family == "gpt_oss",
                                           qk_norm={"qwen3": "head", "olmo2": "width", "gemma3": "head",
                                                    "llama4": "l2"}.get(family))
        layer = build(GroupedQueryAttention, s).train(training)
        to = {"gpt_oss": to_gpt_oss_attention, "gemma2": to_gemma2_attention,
              "qwen3": to_qwen3_attention, "olmo2": lambda m, sliding_window: to_olmo2_attention(m),
              "gemma3": to_gemma3_attention,
              "llama4": lambda m, sliding_window: to_llama4_attention(m, chunk_size=sliding_window)}[family]
        back = FROM[family](to(layer, sliding_window=window))
    assert back.settings == s and back.training == training
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(x, x, x), layer.eval()(x, x, x))
