"""Tests of mha_lib.block.TransformerBlock: same numbers as nn.TransformerEncoderLayer (both
norm_first, several valid lengths, PyTorch's fast path included), and clear errors."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_lib import padding_mask_from_valid_lens
from mha_lib.block import TransformerBlock
from mha_lib.interop import to_torch_mha


def _layer(norm_first, seed=0, D=16, H=4, d_ff=24, **kwargs):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.1, batch_first=True,
                                       norm_first=norm_first, **kwargs)
    with torch.no_grad():  # LayerNorms start at (1, 0): make them matter in the comparison
        for norm in (layer.norm1, layer.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return layer.eval()


@pytest.mark.parametrize("norm_first", [True, False])
def test_from_torch_copies_every_weight(norm_first):
    layer = _layer(norm_first)
    block = TransformerBlock.from_torch(layer)
    assert block.norm_first is norm_first and not block.training
    theirs = layer.self_attn.state_dict()
    ours = to_torch_mha(block.attention).state_dict()  # interop's mapping, the other way round
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), name
    assert torch.equal(block.feed_forward[0].weight, layer.linear1.weight)
    assert torch.equal(block.feed_forward[3].bias, layer.linear2.bias)
    assert torch.equal(block.norm2.bias, layer.norm2.bias)
    assert sum(p.numel() for p in block.parameters()) == sum(p.numel() for p in layer.parameters())


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("fast_path", [False, True])
def test_from_torch_matches_the_encoder_layer(norm_first, fast_path):
    layer = _layer(norm_first)
    block = TransformerBlock.from_torch(layer)
    torch.manual_seed(1)
    x = torch.randn(4, 7, 16)
    valid_lens = torch.tensor([7, 5, 2, 1])  # a full-length row and padded ones
    mask = padding_mask_from_valid_lens(valid_lens, num_keys=7)
    with torch.set_grad_enabled(not fast_path):  # no grad: PyTorch takes its fused fast path
        theirs = layer(x, src_key_padding_mask=mask)
        ours = block(x, valid_lens)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(block(x), layer(x), atol=1e-5, rtol=1e-5)


@given(B=st.integers(1, 3), L=st.integers(1, 6), H=st.sampled_from([1, 2, 4]),
       norm_first=st.booleans(), seed=st.integers(0, 2**16), data=st.data())
@settings(max_examples=25, deadline=None)
def test_from_torch_property(B, L, H, norm_first, seed, data):
    lens = data.draw(st.lists(st.integers(1, L), min_size=B, max_size=B))
    layer = _layer(norm_first, seed=seed, D=8, H=H, d_ff=12)
    block = TransformerBlock.from_torch(layer)
    x = torch.randn(B, L, 8)
    valid_lens = torch.tensor(lens)
    theirs = layer(x, src_key_padding_mask=padding_mask_from_valid_lens(valid_lens, L))
    torch.testing.assert_close(block(x, valid_lens), theirs, atol=1e-5, rtol=1e-5)


def test_from_torch_keeps_dtype_and_training_mode():
    layer = _layer(True).double().train()
    block = TransformerBlock.from_torch(layer)
    assert block.training and block.norm1.weight.dtype == torch.float64
    block.eval(), layer.eval()
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    torch.testing.assert_close(block(x), layer(x))


def test_dropout_only_in_training_mode():
    torch.manual_seed(0)
    block = TransformerBlock(8, 2, 16, dropout=0.5)
    x = torch.randn(2, 5, 8)
    assert not torch.equal(block(x), block(x))
    block.eval()
    assert torch.equal(block(x), block(x))


def test_per_query_valid_lens_give_a_causal_block():
    torch.manual_seed(0)
    block = TransformerBlock(8, 2, 16, dropout=0.0, norm_first=False).eval()
    x = torch.randn(1, 5, 8)
    causal = torch.arange(1, 6)[None]  # (B, L): query i sees keys 0..i
    out = block(x, causal)
    y = x.clone()
    y[:, 3:] = torch.randn(1, 2, 8)  # change the future
    torch.testing.assert_close(block(y, causal)[:, :3], out[:, :3])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_first=False), "batch_first=False"),
        (dict(activation="gelu"), "activation"),
        (dict(bias=False), "bias=False"),
    ],
)
def test_from_torch_rejects_unsupported_layers(kwargs, match):
    settings_ = dict(batch_first=True) | kwargs
    layer = nn.TransformerEncoderLayer(8, 2, 16, 0.1, **settings_)
    with pytest.raises(ValueError, match=match):
        TransformerBlock.from_torch(layer)


def test_from_torch_rejects_mixed_dropout_and_other_modules():
    layer = nn.TransformerEncoderLayer(8, 2, 16, 0.1, batch_first=True)
    layer.dropout2.p = 0.3
    with pytest.raises(ValueError, match="different dropout rates"):
        TransformerBlock.from_torch(layer)
    with pytest.raises(ValueError, match="TransformerEncoderLayer"):
        TransformerBlock.from_torch(nn.Linear(8, 8))


@pytest.mark.parametrize(
    "args, match",
    [((8, 3, 16, 0.1), "divisible"), ((8, 2, 0, 0.1), "d_ff"), ((8, 2, 16, 1.0), "dropout"),
     ((8, 2, 16, 0.1, "yes"), "norm_first"), ((0, 2, 16, 0.1), "d_model must be"),
     ((8, 0, 16, 0.1), "num_heads must be")],
)
def test_constructor_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        TransformerBlock(*args)


def test_forward_rejects_bad_input():
    block = TransformerBlock(8, 2, 16, 0.0)
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        block(torch.randn(5, 8))
    with pytest.raises(ValueError, match="feature size"):
        block(torch.randn(1, 5, 6))
    with pytest.raises(ValueError, match="valid_lens"):
        block(torch.randn(1, 5, 8), torch.tensor([6]))
