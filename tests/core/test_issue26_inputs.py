"""The bad inputs an independent fuzz found in the core and the layers above it (issue 26), one
test each: every one used to be accepted silently, escape as a bare error, or name the wrong
argument; each now gives a ValueError naming the argument, or a finite answer."""

import math

import pytest
import torch

from mha_lib.block import TransformerBlock
from mha_lib.decoding import LayerCache
from mha_lib.flash import tiled_attention
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.importance import attention_entropy
from mha_lib.positions import frequencies, rotary
from mha_lib.checkpoints import load_checkpoint
from mha_lib.training import warmup_cosine


@pytest.mark.parametrize("eps", [math.nan, math.inf, 0.0, -1e-5])
def test_transformer_block_refuses_a_layer_norm_eps_that_is_not_a_positive_number(eps):
    with pytest.raises(ValueError, match="layer_norm_eps"):
        TransformerBlock(8, 2, 16, 0.0, layer_norm_eps=eps)


def test_transformer_block_names_its_own_arguments():
    with pytest.raises(ValueError, match="d_model"):
        TransformerBlock(0, 2, 16, 0.0)
    with pytest.raises(ValueError, match="num_heads"):
        TransformerBlock(8, 0, 16, 0.0)


def test_layer_cache_refuses_values_of_another_dtype_instead_of_casting_them():
    cache = LayerCache()
    k = torch.zeros(1, 2, 3, 4)
    cache.update(k, k)
    with pytest.raises(ValueError, match="keys are torch.float64 on cpu, the cache holds torch.float32"):
        cache.update(k.double(), k.double())
    with pytest.raises(ValueError, match="values"):
        cache.update(k, k.double())


def test_tiled_attention_refuses_a_head_size_of_zero():
    q = torch.zeros(1, 4, 0)
    with pytest.raises(ValueError):
        tiled_attention(q, q, torch.zeros(1, 4, 3), 2)


def test_attention_entropy_refuses_rows_that_are_not_distributions():
    weights = torch.full((1, 1, 2, 2), 0.9)  # rows sum to 1.8: the "entropy" came out negative
    with pytest.raises(ValueError, match="weights"):
        attention_entropy(weights)
    assert attention_entropy(torch.full((1, 1, 2, 2), 0.5)).item() == pytest.approx(math.log(2))


def test_warmup_cosine_refuses_steps_past_the_end_instead_of_climbing_back():
    assert warmup_cosine(10, warmup=2, steps=10) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="step"):
        warmup_cosine(11, warmup=2, steps=10)


@pytest.mark.parametrize("base", [0, 1, -2.0, math.inf, math.nan])
def test_frequencies_refuses_a_base_that_gives_no_frequencies(base):
    with pytest.raises(ValueError, match="base"):
        frequencies(8, base=base)


def test_rotary_refuses_meta_positions_with_a_value_error():
    x = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="positions"):
        rotary(x, torch.arange(3, device="meta"))


def test_checkpoint_loader_names_its_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match="path"):
        load_checkpoint(tmp_path / "missing.pt", kind="digits")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="^path "):
        load_checkpoint(tmp_path / "junk.pt", kind="digits")


@pytest.mark.parametrize("need_weights", [False, True])
def test_grouped_query_attention_meets_a_nan_query_alike_on_both_paths(need_weights):
    """The fused path turned a NaN query into a zero row while the weights path gave NaN."""
    torch.manual_seed(0)
    layer = GroupedQueryAttention(8, 4, 2, 0.0).eval()
    x = torch.randn(1, 3, 8)
    q = x.clone()
    q[0, 1, 0] = math.nan
    fused = layer(q, x, x)
    both = layer(q, x, x, need_weights=True)[0]
    torch.testing.assert_close(fused, both, equal_nan=True)
    assert torch.isnan(fused[0, 1]).all() and torch.isfinite(fused[0, [0, 2]]).all()


def test_the_other_libraries_conventions_give_finite_outputs_for_scores_that_overflow():
    """Chapter 5's dialects: float32 inputs x 1e20 made their scores inf and their outputs NaN."""
    from mha_lib.variants import ColumnMajorMultiHeadAttention, EinsumMultiHeadAttention, scaled_dot_product

    torch.manual_seed(0)
    x = torch.randn(2, 5, 8) * 1e20
    out, _ = scaled_dot_product(x, x, x)
    assert torch.isfinite(out).all()
    einsum = EinsumMultiHeadAttention(2, 8, 4, 4, dropout=0.0).eval()
    assert torch.isfinite(einsum(x, x, x)[1]).all()  # its weights; its output ends in nn.LayerNorm,
    assert torch.isfinite(einsum(x / 100, x / 100, x / 100)[0]).all()  # whose squares overflow past 1e19
    column = ColumnMajorMultiHeadAttention(8, 2).eval()
    assert torch.isfinite(column(x[0].T)).all()
