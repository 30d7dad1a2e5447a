"""nn.MultiheadAttention, both ways, on random shapes, sizes, biases and masks."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_lib import MultiHeadAttention
from mha_lib.interop import _torch_attn_mask, from_torch_mha, to_torch_mha


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), Lq=st.integers(1, 5), Lk=st.integers(1, 5), H=st.integers(1, 3),
       d=st.integers(1, 3), kv=st.tuples(st.integers(1, 7), st.integers(1, 7)) | st.none(),
       bias=st.booleans(), data=st.data(), seed=st.integers(0, 2**16))
def test_from_torch_and_back(B, Lq, Lk, H, d, kv, bias, data, seed):
    torch.manual_seed(seed)
    D = H * d
    kdim, vdim = kv or (D, D)
    ref = nn.MultiheadAttention(D, H, bias=bias, batch_first=True, kdim=kdim, vdim=vdim).double().eval()
    ours = from_torch_mha(ref)
    q = torch.randn(B, Lq, D, dtype=torch.float64)
    k, v = torch.randn(B, Lk, kdim, dtype=torch.float64), torch.randn(B, Lk, vdim, dtype=torch.float64)
    lens = torch.tensor(data.draw(st.lists(st.integers(1, Lk), min_size=B * Lq, max_size=B * Lq)))
    lens = lens.reshape(B, Lq)
    expected, _ = ref(q, k, v, attn_mask=_torch_attn_mask(lens, H, Lq, Lk))
    torch.testing.assert_close(ours(q, k, v, lens), expected, rtol=1e-10, atol=1e-10)
    back = to_torch_mha(ours)
    for name, p in ref.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], p, rtol=0, atol=0)


def test_keeps_mode_and_dropout():
    ref = nn.MultiheadAttention(4, 2, dropout=0.25, batch_first=True)
    ours = from_torch_mha(ref)
    assert ours.training and ours.attention.dropout.p == 0.25


@pytest.mark.parametrize("make, match", [
    (lambda: nn.Linear(2, 2), "torch_mha"),
    (lambda: nn.MultiheadAttention(4, 2, add_bias_kv=True), "add_bias_kv"),
    (lambda: nn.MultiheadAttention(4, 2, add_zero_attn=True), "add_zero_attn"),
])
def test_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        from_torch_mha(make())
    with pytest.raises(ValueError, match="mha"):
        to_torch_mha(nn.Linear(2, 2))
