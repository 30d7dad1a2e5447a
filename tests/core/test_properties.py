"""Property tests: MultiHeadAttention against PyTorch's nn.MultiheadAttention and against an
independent einsum reference written here from the formula, for random shapes and lengths."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention, padding_mask_from_valid_lens
from mha_lib.interop import to_torch_mha

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def configurations(draw, query_size_is_width=False):
    B, Lq, Lk = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    H, d = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    D = H * d
    query_size = D if query_size_is_width else draw(st.integers(1, 7))
    key_size, value_size = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    bias = draw(st.booleans())
    per_query = draw(st.booleans())
    shape = (B, Lq) if per_query else (B,)
    valid_lens = torch.tensor(draw(st.lists(st.integers(0, Lk), min_size=math.prod(shape),
                                            max_size=math.prod(shape)))).reshape(shape)
    seed = draw(st.integers(0, 2**16))
    return dict(B=B, Lq=Lq, Lk=Lk, H=H, D=D, sizes=(key_size, query_size, value_size),
                bias=bias, valid_lens=valid_lens, seed=seed)


def _build(c, dtype):
    torch.manual_seed(c["seed"])
    key_size, query_size, value_size = c["sizes"]
    mha = MultiHeadAttention(key_size, query_size, value_size, c["D"], c["H"], 0.0, bias=c["bias"])
    mha = mha.to(dtype).eval()
    q = torch.randn(c["B"], c["Lq"], query_size, dtype=dtype)
    k = torch.randn(c["B"], c["Lk"], key_size, dtype=dtype)
    v = torch.randn(c["B"], c["Lk"], value_size, dtype=dtype)
    return mha, q, k, v


def einsum_reference(mha, q, k, v, valid_lens):
    """Multi-head attention from the formula, heads as an explicit axis (no folding)."""
    H, D = mha.num_heads, mha.d_model
    d = D // H
    lin = lambda layer, x: x @ layer.weight.T + (0 if layer.bias is None else layer.bias)  # noqa: E731
    Q = lin(mha.W_q, q).unflatten(-1, (H, d))  # (B, Lq, H, d)
    K = lin(mha.W_k, k).unflatten(-1, (H, d))  # (B, Lk, H, d)
    V = lin(mha.W_v, v).unflatten(-1, (H, d))  # (B, Lk, H, d)
    scores = torch.einsum("bqhd,bkhd->bhqk", Q, K) / math.sqrt(d)
    lens = valid_lens if valid_lens.dim() == 2 else valid_lens[:, None].expand(-1, q.shape[1])
    keep = torch.arange(k.shape[1])[None, None, None, :] < lens[:, None, :, None]  # (B, 1, Lq, Lk)
    weights = torch.where(keep, torch.exp(scores - scores.amax(-1, keepdim=True)), 0.0)
    total = weights.sum(-1, keepdim=True)
    weights = torch.where(total > 0, weights / torch.where(total > 0, total, 1.0), 0.0)
    heads = torch.einsum("bhqk,bkhd->bqhd", weights, V).flatten(2)  # (B, Lq, D)
    return lin(mha.W_o, heads), weights


@SETTINGS
@given(configurations(), st.sampled_from([torch.float32, torch.float64]))
def test_matches_einsum_reference(c, dtype):
    mha, q, k, v = _build(c, dtype)
    ref_out, ref_weights = einsum_reference(mha, q, k, v, c["valid_lens"])
    out, weights = mha(q, k, v, c["valid_lens"], need_weights=True)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(mha(q, k, v, c["valid_lens"]), ref_out, atol=1e-5, rtol=1e-4)


@SETTINGS
@given(configurations(query_size_is_width=True))
def test_matches_torch_multihead_attention(c):
    mha, q, k, v = _build(c, torch.float32)
    valid_lens = c["valid_lens"]
    if valid_lens.dim() == 2:
        valid_lens = valid_lens[:, 0]
    valid_lens = valid_lens.clamp(min=1)  # PyTorch gives NaN for a fully masked row
    out, weights = mha(q, k, v, valid_lens, need_weights=True)
    ref_out, ref_weights = to_torch_mha(mha)(
        q, k, v, key_padding_mask=padding_mask_from_valid_lens(valid_lens, c["Lk"]),
        need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights, ref_weights, atol=1e-5, rtol=1e-4)
