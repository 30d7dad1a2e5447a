"""Linear attention, DeltaNet and Gated DeltaNet (mha_lib.linear): the recurrent form equals the
parallel/chunked one (float64), decoding with the state equals the full forward, the delta rule
stores and retrieves exactly, and what the layers cannot do is refused by name."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.block import TransformerBlock
from mha_lib.linear import (
    DeltaNet,
    GatedDeltaNet,
    LinearAttention,
    StateCache,
    delta_chunked,
    delta_recurrent,
    state_bytes,
)
from mha_lib.masks import causal, sliding_window

SETTINGS = settings(max_examples=25, deadline=None)
LAYERS = (LinearAttention, DeltaNet, GatedDeltaNet)


@st.composite
def calls(draw):
    B, L, H, d = draw(st.integers(1, 3)), draw(st.integers(1, 40)), draw(st.integers(1, 3)), draw(st.integers(1, 5))
    lens = draw(st.lists(st.integers(1, L), min_size=B, max_size=B))
    return dict(B=B, L=L, H=H, D=H * d, lens=torch.tensor(lens), chunk=draw(st.integers(1, 17)),
                seed=draw(st.integers(0, 2**16)), layer=draw(st.sampled_from(LAYERS)))


def _layer(c, **kwargs):
    torch.manual_seed(c["seed"])
    layer = c["layer"](c["D"], c["H"], chunk_size=c["chunk"], **kwargs).double()
    x = torch.randn(c["B"], c["L"], c["D"], dtype=torch.double)
    return layer, x


@SETTINGS
@given(calls())
def test_the_recurrent_form_equals_the_parallel_or_chunked_one_in_float64(c):
    layer, x = _layer(c)
    fast = layer(x, x, x, c["lens"])
    layer.form = "recurrent"
    slow = layer(x, x, x, c["lens"])
    real = torch.arange(c["L"]) < c["lens"][:, None]  # (B, L)
    torch.testing.assert_close(fast[real], slow[real], rtol=1e-10, atol=1e-10)


@SETTINGS
@given(calls())
def test_decoding_token_by_token_with_the_state_equals_the_full_forward(c):
    layer, x = _layer(c)
    cache = StateCache()
    steps = [layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache) for t in range(c["L"])]  # L x (B, 1, D)
    torch.testing.assert_close(torch.cat(steps, dim=1), layer(x, x, x), rtol=1e-10, atol=1e-10)


@SETTINGS
@given(calls())
def test_padding_on_the_right_changes_nothing_at_the_real_tokens(c):
    layer, x = _layer(c)
    out = layer(x, x, x, c["lens"])
    causal_lens = torch.minimum(torch.arange(1, c["L"] + 1), c["lens"][:, None])  # (B, L): the story model's call
    torch.testing.assert_close(layer(x, x, x, causal_lens), out)
    for b, n in enumerate(c["lens"].tolist()):
        alone = layer(x[b:b + 1, :n], x[b:b + 1, :n], x[b:b + 1, :n])  # (1, n, D)
        torch.testing.assert_close(out[b:b + 1, :n], alone, rtol=1e-10, atol=1e-10)


def test_the_chunked_form_continues_from_a_state_like_the_recurrent_one():
    torch.manual_seed(0)
    B, H, L, d = 2, 3, 23, 4
    q, k, v = (torch.randn(B, H, L, d, dtype=torch.double) for _ in range(3))
    k = torch.nn.functional.normalize(k, dim=-1)
    beta, log_alpha = torch.rand(B, H, L, dtype=torch.double), -torch.rand(B, H, L, dtype=torch.double)
    S = torch.randn(B, H, d, d, dtype=torch.double)
    out, last = delta_chunked(q, k, v, beta, log_alpha, S, chunk_size=5)
    out_r, last_r = delta_recurrent(q, k, v, beta, log_alpha, S)
    torch.testing.assert_close(out, out_r)
    torch.testing.assert_close(last, last_r)


@pytest.mark.parametrize("d", [1, 4, 16])
def test_the_delta_rule_with_beta_one_and_orthonormal_keys_stores_and_retrieves_exactly(d):
    # d orthonormal keys, each written twice with beta = 1: the second write replaces the first
    # value (the correction v - k S cancels what was stored), and reading a key gives its last
    # value exactly; linear attention's running sum would return the sum of both.
    torch.manual_seed(d)
    keys = torch.linalg.qr(torch.randn(d, d, dtype=torch.double))[0].T  # (d, d): rows orthonormal
    values = torch.randn(d, d, dtype=torch.double)
    order = torch.cat([torch.arange(d), torch.arange(d)])  # every key twice: the second write overwrites
    new_values = torch.cat([torch.randn(d, d, dtype=torch.double), values])  # (2d, d): the last values win
    k = keys[order][None, None]  # (1, 1, 2d, d)
    v = new_values[None, None]  # (1, 1, 2d, d)
    ones, zeros = torch.ones(1, 1, 2 * d, dtype=torch.double), torch.zeros(1, 1, 2 * d, dtype=torch.double)
    _, S = delta_recurrent(k, k, v, ones, zeros)  # S: (1, 1, d, d)
    torch.testing.assert_close(keys @ S[0, 0], values)  # k_i S = v_i for every key


def test_linear_attention_in_its_parallel_form_returns_causal_weights_that_sum_to_one():
    torch.manual_seed(0)
    layer = LinearAttention(8, 2).double()
    x = torch.randn(2, 6, 8, dtype=torch.double)
    _, weights = layer(x, x, x, need_weights=True)  # (B, H, L, L)
    assert weights.shape == (2, 2, 6, 6)
    assert bool((weights.triu(1) == 0).all()) and bool((weights >= 0).all())
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 6, dtype=torch.double))


def test_a_layer_drops_into_a_transformer_block_and_a_head_mask_removes_heads():
    torch.manual_seed(0)
    block = TransformerBlock(16, 4, 32, 0.0, norm_first=True)
    block.attention = GatedDeltaNet(16, 4)
    x = torch.randn(2, 9, 16)
    lens = torch.minimum(torch.arange(1, 10), torch.tensor([9, 4])[:, None])  # (B, L), as StoryLM passes them
    assert block(x, lens).shape == (2, 9, 16)
    layer = block.attention
    none = layer(x, x, x, head_mask=torch.zeros(4))
    torch.testing.assert_close(none, layer.W_o.bias.expand(2, 9, 16))


def test_the_state_does_not_grow_with_the_text_and_the_kv_cache_does():
    from mha_lib.lm import Config, StoryLM
    model = StoryLM(Config())
    D, H, N = 64, 4, 2
    softmax = state_bytes(model, 100)
    assert softmax == {"state": 0, "kv_cache": N * 2 * D * 100 * 4, "total": N * 2 * D * 100 * 4,
                       "all_softmax": N * 2 * D * 100 * 4}
    model.blocks[0].attention = GatedDeltaNet(D, H)
    model.blocks[1].attention = LinearAttention(D, H)
    for length in (10, 1000):
        hybrid = state_bytes(model, length, dtype=torch.float64)
        assert hybrid["state"] == H * 16 * 16 * 8 + H * (16 * 16 + 16) * 8 and hybrid["kv_cache"] == 0


@pytest.mark.parametrize("layer_class", LAYERS)
def test_bad_calls_are_refused_by_name(layer_class):
    layer = layer_class(8, 2)
    x = torch.randn(2, 5, 8)
    cases = [
        (dict(mask=sliding_window(2)), "mask"),
        (dict(valid_lens=torch.full((2, 5), 5)), "valid_lens"),  # every key: not causal
        (dict(valid_lens=torch.tensor([0, 5])), "valid_lens"),
        (dict(valid_lens=torch.tensor([6, 5])), "valid_lens"),
        (dict(valid_lens=torch.tensor(5)), "valid_lens"),
        (dict(valid_lens=torch.tensor([5.0, 5.0])), "valid_lens"),
        (dict(positions=torch.arange(5)), "positions"),
        (dict(head_mask=torch.ones(3)), "head_mask"),
        (dict(cache=object()), "cache"),
        (dict(cache=StateCache(), valid_lens=torch.tensor([5, 5])), "valid_lens"),
    ]
    if layer_class is not LinearAttention:
        cases.append((dict(need_weights=True), "need_weights"))
    for kwargs, name in cases:
        with pytest.raises(ValueError, match=name):
            layer(x, x, x, **kwargs)
    with pytest.raises(ValueError, match="keys"):
        layer(x, x[:, :3], x[:, :3])
    with pytest.raises(ValueError, match="queries"):
        layer(x.double(), x, x)
    with pytest.raises(ValueError, match="form"):
        layer_class(8, 2, form="sideways")
    with pytest.raises(ValueError, match="d_model"):
        layer_class(6, 4)
    assert layer(x, x, x, mask=causal()).shape == (2, 5, 8)  # the one mask it takes


def test_state_bytes_refuses_a_bad_length():
    with pytest.raises(ValueError, match="length"):
        state_bytes(DeltaNet(8, 2), -1)
