"""RoPE's angle scale (position interpolation): ``rotary(..., scale=)`` and ``rope_scale`` of
GroupedQueryAttention and TransformerBlock."""

import math

import pytest
import torch

from mha_lib.block import TransformerBlock
from mha_lib.decoding import KVCache
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.masking import causal_valid_lens
from mha_lib.positions import rotary


@pytest.mark.parametrize("pairs", ["interleaved", "halves"])
def test_scale_one_is_plain_rope_bit_for_bit(pairs):
    torch.manual_seed(0)
    x, p = torch.randn(2, 3, 9, 8), torch.arange(9)
    assert torch.equal(rotary(x, p, pairs=pairs, scale=1.0), rotary(x, p, pairs=pairs))
    assert torch.equal(rotary(x, p, pairs=pairs, scale=1), rotary(x, p, pairs=pairs))


@pytest.mark.parametrize("scale, factor", [(0.5, 2), (0.25, 4), (2.0, 1)])
def test_a_scaled_position_is_rotated_like_the_position_it_lands_on(scale, factor):
    """Position interpolation: with scale L / L', position p gets the angles of p * L / L'."""
    torch.manual_seed(1)
    x = torch.randn(2, 2, 16, 8, dtype=torch.float64)
    p = torch.arange(16) * factor  # p * scale is an integer
    landed = (p * scale).round().long()
    torch.testing.assert_close(rotary(x, p, scale=scale), rotary(x, landed), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(rotary(x, p, scale=scale), rotary(x, p))


@pytest.mark.parametrize("bad", [0, -0.5, math.inf, math.nan, True, "2", None])
def test_a_bad_scale_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match="scale"):
        rotary(torch.randn(1, 1, 4, 8), torch.arange(4), scale=bad)


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, False])
def test_the_layers_refuse_a_bad_rope_scale(bad):
    with pytest.raises(ValueError, match="rope_scale"):
        GroupedQueryAttention(16, 4, 2, 0.0, rope=True, rope_scale=bad)
    with pytest.raises(ValueError, match="rope_scale"):
        TransformerBlock(16, 4, 32, 0.0, rope=True, rope_scale=bad)


def test_a_rope_scale_without_rope_is_refused():
    with pytest.raises(ValueError, match="rope_scale"):
        GroupedQueryAttention(16, 4, 2, 0.0, rope_scale=0.5)
    with pytest.raises(ValueError, match="rope_scale"):
        TransformerBlock(16, 4, 32, 0.0, rope_scale=0.5)
    assert GroupedQueryAttention(16, 4, 2, 0.0, rope_scale=1.0).settings.rope_scale == 1.0


def _pair(cls_args, scale):
    """A layer built with ``scale`` and one with the default, holding the same weights."""
    cls, args, kwargs = cls_args
    torch.manual_seed(0)
    plain = cls(*args, rope=True, **kwargs).eval()
    scaled = cls(*args, rope=True, rope_scale=scale, **kwargs).eval()
    scaled.load_state_dict(plain.state_dict())
    return plain, scaled


LAYERS = [(GroupedQueryAttention, (16, 4, 2, 0.0), {"bias": True}),
          (TransformerBlock, (16, 4, 32, 0.0), {"num_kv_heads": 2})]


def _call(layer, x, **kwargs):
    if isinstance(layer, TransformerBlock):
        return layer(x, causal_valid_lens(x.shape[0], x.shape[1]), **kwargs)
    return layer(x, x, x, causal_valid_lens(x.shape[0], x.shape[1]), **kwargs)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda c: c[0].__name__)
def test_rope_scale_one_changes_nothing_and_a_scale_is_interpolation(layer):
    plain, one = _pair(layer, 1.0)
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        assert torch.equal(_call(one, x), _call(plain, x))
        _, half = _pair(layer, 0.5)
        # scale 1/2 at positions 0, 2, 4, ... is the plain layer at positions 0, 1, 2, ...
        even = _call(half, x, positions=torch.arange(8) * 2)
        torch.testing.assert_close(even, _call(plain, x), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(_call(half, x), _call(plain, x), atol=1e-4)
    assert half.settings.rope_scale == 0.5
    if isinstance(half, TransformerBlock):
        assert half.attention.settings.rope_scale == 0.5


def test_a_scaled_layer_decodes_with_a_cache_as_without():
    _, gqa = _pair(LAYERS[0], 0.25)
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        full = _call(gqa, x)
        cache = KVCache()
        steps = [gqa(x[:, :3], x[:, :3], x[:, :3], cache=cache)]
        steps += [gqa(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
