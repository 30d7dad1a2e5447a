"""nanoGPT's CausalSelfAttention and Hugging Face's GPT2Attention, both ways."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_lib import MultiHeadAttention, causal_valid_lens
from mha_lib.interop import copy_to_gpt2_attention, from_gpt2_attention, to_gpt2_attention


class NanoGPTCausalSelfAttention(nn.Module):
    """nanoGPT's layer (Karpathy, model.py, MIT licence), its computation as written there."""

    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=True)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=True)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.ones(T, T).tril() == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


shapes = dict(B=st.integers(1, 3), L=st.integers(1, 6), H=st.integers(1, 3), d=st.integers(1, 4),
              seed=st.integers(0, 2**16))


@settings(max_examples=25, deadline=None)
@given(**shapes)
def test_nanogpt_both_ways(B, L, H, d, seed):
    torch.manual_seed(seed)
    D = H * d
    ref = NanoGPTCausalSelfAttention(D, H).double()
    ours = from_gpt2_attention(ref)
    x = torch.randn(B, L, D, dtype=torch.float64)
    torch.testing.assert_close(ours(x, x, x, causal_valid_lens(B, L)), ref(x), rtol=1e-10, atol=1e-10)
    fresh = MultiHeadAttention(D, D, D, D, H, 0.0, bias=True).double().eval()
    copy_to_gpt2_attention(fresh, ref)
    torch.testing.assert_close(ref(x), fresh(x, x, x, causal_valid_lens(B, L)), rtol=1e-10, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(**shapes, bias=st.booleans())
def test_gpt2_both_ways(B, L, H, d, seed, bias, additive_mask):
    torch.manual_seed(seed)
    D = H * d
    mha = MultiHeadAttention(D, D, D, D, H, 0.0, bias=bias).eval()
    hf = to_gpt2_attention(mha).eval()
    assert type(hf.c_attn).__name__ == "Conv1D"
    x = torch.randn(B, L, D)
    lens = causal_valid_lens(B, L)
    with torch.no_grad():
        theirs = hf(x, attention_mask=additive_mask(lens, L, L, x.dtype))[0]
        ours = mha(x, x, x, lens)
        again = from_gpt2_attention(hf)(x, x, x, lens)
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again, ours, rtol=1e-6, atol=1e-6)


def test_gpt2_from_a_model_config(additive_mask):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_head=4, n_layer=1, vocab_size=50,
                                       attn_implementation="eager")).eval()
    attn = model.transformer.h[0].attn
    ours = from_gpt2_attention(attn)
    x = torch.randn(2, 7, 32)
    lens = causal_valid_lens(2, 7)
    with torch.no_grad():
        expected = attn(x, attention_mask=additive_mask(lens, 7, 7, x.dtype))[0]
        torch.testing.assert_close(ours(x, x, x, lens), expected, rtol=1e-5, atol=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="attn"):
        from_gpt2_attention(nn.Linear(2, 2))
    bad = NanoGPTCausalSelfAttention(6, 4)  # 4 heads do not divide 6
    with pytest.raises(ValueError, match="c_attn"):
        from_gpt2_attention(bad)
    with pytest.raises(ValueError, match="mha"):
        copy_to_gpt2_attention(nn.Linear(2, 2), NanoGPTCausalSelfAttention(4, 2))
    with pytest.raises(ValueError, match="mha"):
        to_gpt2_attention(MultiHeadAttention(3, 4, 4, 4, 2, 0.0))
    with pytest.raises(ValueError, match="D = 8"):
        copy_to_gpt2_attention(MultiHeadAttention(8, 8, 8, 8, 2, 0.0), NanoGPTCausalSelfAttention(4, 2))
