"""The converters keep every option (``module.settings``) or refuse it by name.

A round trip through PyTorch's ``nn.MultiheadAttention``, GPT-2's attention or Llama's and
Mistral's gives back a module with the same settings (GPT-2 always has biases: a layer without
them comes back with zero biases) and the same output.
"""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib._settings import build
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.scores import alibi, softcap
from mha_lib.interop import (
    from_gpt2_attention,
    from_llama_attention,
    from_torch_mha,
    to_gpt2_attention,
    to_llama_attention,
    to_torch_mha,
)

OPTIONS = {"key_size", "query_size", "value_size", "d_model", "num_heads", "dropout", "bias",
           "output_size", "score_mod", "sink_logits", "gate", "qk_norm",
           "backend"}  # (backend: how the layer computes, not what: "auto" here, no converter maps it)


@st.composite
def mha_settings(draw):
    H, d = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    D = H * d
    size = st.just(D) | st.integers(1, 5)
    s = MultiHeadAttention.Settings(draw(size), draw(size), draw(size), D, H,
                                    draw(st.sampled_from([0.0, 0.25])), draw(st.booleans()),
                                    draw(st.none() | st.just(D) | st.integers(1, 5)),
                                    score_mod=draw(st.sampled_from([None, None, alibi(H), softcap(2.0)])),
                                    sink_logits=draw(st.sampled_from([False, False, True])),
                                    gate=draw(st.sampled_from([None, None, "head", "element"])),
                                    qk_norm=draw(st.sampled_from([None, None, "head", "width", "l2"])))
    assert {f.name for f in dataclasses.fields(s)} == OPTIONS  # a new option: test it here
    return s


def _refused_scores(s, convert) -> bool:
    """A layer with a score modification, sink logits, a gate or QK-norm: the converter refuses
    it by name."""
    name = ("score_mod" if s.score_mod is not None else "sink_logits" if s.sink_logits
            else "gate" if s.gate is not None else "qk_norm" if s.qk_norm is not None else None)
    if name is not None and s.query_size == s.d_model == (s.output_size or s.d_model) == s.key_size == s.value_size:
        with pytest.raises(ValueError, match=f"has no {name}"):
            convert()
    return name is not None


def _outputs(a, b, s, x_width):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, x_width, generator=gen)
    k = torch.randn(2, 5, s.key_size, generator=gen)
    v = torch.randn(2, 5, s.value_size, generator=gen)
    with torch.no_grad():
        return a.eval()(x, k, v), b.eval()(x, k, v)


@settings(max_examples=40, deadline=None)
@given(s=mha_settings(), training=st.booleans())
def test_torch_round_trip_keeps_every_option_or_names_it(s, training):
    mha = build(MultiHeadAttention, s).train(training)
    D = s.d_model
    if _refused_scores(s, lambda: to_torch_mha(mha)):
        return
    if s.query_size != D or (s.output_size or D) != D:
        with pytest.raises(ValueError, match="query_size == d_model == output_size"):
            to_torch_mha(mha)
        return
    torch_mha = to_torch_mha(mha)
    assert (torch_mha.dropout, torch_mha.training) == (s.dropout, training)
    back = from_torch_mha(torch_mha)
    assert back.settings == s and back.training == training
    torch.testing.assert_close(*_outputs(back, mha, s, D))


@settings(max_examples=15, deadline=None)
@given(s=mha_settings(), training=st.booleans())
def test_gpt2_round_trip_keeps_every_option_or_names_it(s, training):
    mha = build(MultiHeadAttention, s).train(training)
    D = s.d_model
    if _refused_scores(s, lambda: to_gpt2_attention(mha)):
        return
    if {s.query_size, s.key_size, s.value_size, s.output_size or D} != {D}:
        with pytest.raises(ValueError, match="self-attention"):
            to_gpt2_attention(mha)
        return
    back = from_gpt2_attention(to_gpt2_attention(mha))
    assert back.settings == dataclasses.replace(s, bias=True, output_size=None)
    assert back.training == training
    torch.testing.assert_close(*_outputs(back, mha, s, D))


@settings(max_examples=15, deadline=None)
@given(Hkv=st.integers(1, 2), g=st.integers(1, 2), half=st.integers(1, 2),
       dropout=st.sampled_from([0.0, 0.25]), bias=st.booleans(), window=st.none() | st.integers(1, 9),
       training=st.booleans())
def test_llama_and_mistral_round_trip_keeps_every_option(Hkv, g, half, dropout, bias, window, training):
    H = Hkv * g
    s = GroupedQueryAttention.Settings(H * 2 * half, H, Hkv, dropout, bias, rope=True)
    gqa = build(GroupedQueryAttention, s).train(training)
    if window is not None and bias:
        with pytest.raises(ValueError, match="biases"):
            to_llama_attention(gqa, sliding_window=window)
        return
    back = from_llama_attention(to_llama_attention(gqa, sliding_window=window))
    assert back.settings == s and back.training == training
    x = torch.randn(2, 4, s.d_model)
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(x, x, x), gqa.eval()(x, x, x))


@pytest.mark.parametrize("scores", [{"score_mod": alibi(2)}, {"sink_logits": True}])
def test_llama_refuses_a_score_modification_and_sinks_by_name(scores):
    gqa = GroupedQueryAttention(8, 2, 1, 0.0, rope=True, **scores)
    with pytest.raises(ValueError, match=f"LlamaAttention has no {next(iter(scores))}"):
        to_llama_attention(gqa)


def test_llama_refuses_a_layer_without_rope():
    gqa = GroupedQueryAttention(8, 2, 1, 0.0)
    with pytest.raises(ValueError, match="rope=True"):
        to_llama_attention(gqa)
