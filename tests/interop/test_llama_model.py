"""A whole tiny Llama (and Mistral) built by transformers from a random config, converted into
the book's layers: the same logits. RMSNorm and SwiGLU against their transformers references."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_lib.interop import from_hf_llama
from mha_lib.llama import LlamaConfig, LlamaLM, RMSNorm, SwiGLU


def _tiny(family, **extra):
    import transformers

    Config = getattr(transformers, f"{family}Config")
    Model = getattr(transformers, f"{family}ForCausalLM")
    config = Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=2, intermediate_size=48, vocab_size=61, **extra)
    torch.manual_seed(0)
    return Model(config).eval()


@pytest.mark.parametrize("family, extra", [
    ("Llama", {}),
    ("Llama", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}),
    ("Mistral", {"sliding_window": 16}),
    ("Mistral", {"sliding_window": 5}),
    ("Mistral", {"sliding_window": 5, "attn_implementation": "eager"}),
])
def test_tiny_model_logits(family, extra):
    model = _tiny(family, **extra)
    ours = from_hf_llama(model).eval()
    ids = torch.randint(0, 61, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
        torch.testing.assert_close(ours(ids), expected, rtol=0, atol=1e-5)


@settings(max_examples=12, deadline=None)
@given(window=st.integers(1, 6), L=st.integers(1, 20), B=st.integers(1, 2),
       implementation=st.sampled_from(["eager", "sdpa"]), seed=st.integers(0, 2**16))
def test_mistral_beyond_its_sliding_window(window, L, B, implementation, seed):
    """A query sees the last `window` keys, itself included, at any length (L > window too)."""
    model = _tiny("Mistral", sliding_window=window, attn_implementation=implementation)
    ours = from_hf_llama(model).eval()
    assert ours.config.sliding_window == window
    ids = torch.randint(0, 61, (B, L), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = model(ids).logits
        torch.testing.assert_close(ours(ids), expected, rtol=0, atol=1e-5)
        if L > window + 1:  # the window matters: a causal Llama with the same weights differs
            unwindowed = LlamaLM(dataclasses.replace(ours.config, sliding_window=None))
            unwindowed.load_state_dict(ours.state_dict())
            assert not torch.allclose(unwindowed.eval()(ids), expected, rtol=0, atol=1e-5)


def test_saved_and_loaded_from_disk_offline(tmp_path):
    from transformers import AutoModelForCausalLM

    model = _tiny("Llama")
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True).eval()
    ids = torch.arange(10)[None]
    with torch.no_grad():
        torch.testing.assert_close(from_hf_llama(loaded)(ids), model(ids).logits, rtol=0, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), D=st.integers(1, 9),
       eps=st.sampled_from([1e-6, 1e-5, 0.1]), seed=st.integers(0, 2**16))
def test_rms_norm_against_llama_and_torch(shape, D, eps, seed):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(seed)
    ours, theirs, torchs = RMSNorm(D, eps), LlamaRMSNorm(D, eps), nn.RMSNorm(D, eps)
    weight = torch.randn(D)
    for norm in (ours, theirs, torchs):
        norm.weight.data.copy_(weight)
    x = torch.randn(*shape, D) * 3
    torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours(x), torchs(x))


@settings(max_examples=20, deadline=None)
@given(D=st.sampled_from([2, 4, 6, 8]), Fw=st.integers(1, 9), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_swiglu_against_llama_mlp(D, Fw, bias, seed):
    import transformers
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(seed)
    theirs = LlamaMLP(transformers.LlamaConfig(hidden_size=D, num_attention_heads=1,
                                                 intermediate_size=Fw, mlp_bias=bias))
    ours = SwiGLU(D, Fw, bias=bias)
    ours.load_state_dict({name.replace("gate_proj", "W_gate").replace("up_proj", "W_up")
                          .replace("down_proj", "W_down"): p for name, p in theirs.state_dict().items()})
    x = torch.randn(2, 3, D)
    torch.testing.assert_close(ours(x), theirs(x))


def test_bad_input():
    with pytest.raises(ValueError, match="model"):
        from_hf_llama(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="hidden_act"):
        from_hf_llama(_tiny("Llama", hidden_act="gelu"))
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(4, eps=0)
    with pytest.raises(ValueError, match="x"):
        RMSNorm(4)(torch.randn(2, 3))
    with pytest.raises(ValueError, match="d_ff"):
        SwiGLU(4, 0)
    with pytest.raises(ValueError, match="config.num_heads"):
        LlamaConfig(vocab_size=5, d_model=8, num_heads=0, num_kv_heads=1, num_layers=1, d_ff=4)
    lm = LlamaLM(LlamaConfig(vocab_size=5, d_model=8, num_heads=2, num_kv_heads=1, num_layers=1, d_ff=4))
    for ids in (torch.tensor([[5]]), torch.zeros(2, dtype=torch.long), torch.zeros(1, 2)):
        with pytest.raises(ValueError, match="ids"):
            lm(ids)
