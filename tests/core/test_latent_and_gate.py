"""Multi-head latent attention (mha_lib.latent) and the output gate of gated attention
(``gate=`` on the attention layers): each equals multi-head attention where it should."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib.block import TransformerBlock
from mha_lib.gqa import GroupedQueryAttention, gqa_from_mha
from mha_lib.importance import head_gates, prune_heads
from mha_lib.latent import LatentAttention, LatentCache, mla_from_mha
from mha_lib.masks import causal, sliding_window
from mha_lib.positions import Rope, rotary

MASKS = [None, causal(), causal() & sliding_window(2)]


def _mha(bias: bool, seed: int, **kwargs) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(6, 5, 6, 8, 4, 0.0, bias=bias, **kwargs).double().eval()


@settings(max_examples=40, deadline=None)
@given(bias=st.booleans(), seed=st.integers(0, 2**16), Lq=st.integers(1, 5), Lk=st.integers(1, 6),
       mask=st.sampled_from(MASKS), lens=st.booleans(), absorbed=st.booleans())
def test_full_rank_latent_attention_is_the_multi_head_attention_it_came_from(
        bias, seed, Lq, Lk, mask, lens, absorbed):
    mha = _mha(bias, seed)
    mla = mla_from_mha(mha)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, Lq, 5, generator=gen, dtype=torch.double)
    kv = torch.randn(2, Lk, 6, generator=gen, dtype=torch.double)
    valid_lens = torch.tensor([Lk, max(1, Lk - 2)]) if lens else None
    expected = mha(q, kv, kv, valid_lens, mask=mask)
    got = mla(q, kv, kv, valid_lens, mask=mask, absorbed=absorbed)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)


@settings(max_examples=40, deadline=None)
@given(bias=st.booleans(), seed=st.integers(0, 2**16), rank=st.integers(1, 7), L=st.integers(1, 6),
       mask=st.sampled_from(MASKS), gated=st.booleans())
def test_the_absorbed_form_equals_the_naive_one_at_any_rank(bias, seed, rank, L, mask, gated):
    torch.manual_seed(seed)
    mla = LatentAttention(6, 6, 6, 8, 4, 0.0, bias=bias, rank=rank).double().eval()
    x = torch.randn(3, L, 6, dtype=torch.double)
    head_mask = torch.tensor([1.0, 0.0, 0.5, 1.0], dtype=torch.double) if gated else None
    naive, weights = mla(x, x, x, mask=mask, head_mask=head_mask, need_weights=True)
    torch.testing.assert_close(mla(x, x, x, mask=mask, head_mask=head_mask, absorbed=True), naive,
                               atol=1e-12, rtol=1e-10)
    assert weights.shape == (3, 4, L, L)


@pytest.mark.parametrize("absorbed", [False, True])
def test_the_cache_keeps_the_latent_and_decoding_equals_the_causal_layer(absorbed):
    torch.manual_seed(0)
    mla = LatentAttention(6, 6, 6, 8, 4, 0.0, bias=True, rank=3).double().eval()
    x = torch.randn(2, 7, 6, dtype=torch.double)
    cache = LatentCache()
    prompt = x[:, :3]
    steps = [mla(prompt, prompt, prompt, cache=cache, absorbed=absorbed)]
    for t in range(3, 7):
        token = x[:, t:t + 1]
        steps.append(mla(token, token, token, cache=cache, absorbed=absorbed))
    torch.testing.assert_close(torch.cat(steps, 1), mla(x, x, x, mask=causal()), atol=1e-12, rtol=1e-10)
    assert cache.latent.shape == (2, 7, 3)  # r = 3 numbers a token, where K and V hold 2 * 8
    assert cache.nbytes == 2 * 7 * 3 * 8


def test_latent_attention_refuses_bad_input_by_name():
    mla = LatentAttention(6, 6, 6, 8, 4, 0.0, rank=3)
    x = torch.randn(1, 2, 6)
    cases = [
        (lambda: LatentAttention(6, 6, 5, 8, 4, 0.0, rank=3), "value_size"),
        (lambda: LatentAttention(6, 6, 6, 8, 4, 0.0, rank=0), "rank"),
        (lambda: LatentAttention(6, 6, 6, 9, 4, 0.0, rank=2), "d_model"),
        (lambda: mla(x, x, x, cache="cache"), "cache"),
        (lambda: mla(x, x.clone(), x, cache=LatentCache()), "cache"),
        (lambda: mla(x, x, x, need_weights=True, absorbed=True), "absorbed"),
        (lambda: mla(x, torch.randn(1, 2, 5), torch.randn(1, 2, 5)), "keys"),
        (lambda: mla(x, x, x, cache=LatentCache(), mask=causal()), "mask"),
        (lambda: mla_from_mha(MultiHeadAttention(6, 6, 6, 8, 4, 0.0, gate="head")), "gate"),
        (lambda: mla_from_mha(torch.nn.Linear(2, 2)), "mha"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()


@pytest.mark.parametrize("gate", ["head", "element"])
def test_a_gate_held_open_is_the_ungated_layer(gate):
    gated = _mha(True, 1, gate=gate)
    plain = _mha(True, 1)
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if not k.startswith("gate.")})
    with torch.no_grad():
        gated.gate.weight.zero_()
        gated.gate.bias.fill_(40.0)  # sigmoid(40) = 1 in float64 to 1e-17
    q, kv = torch.randn(2, 3, 5, dtype=torch.double), torch.randn(2, 4, 6, dtype=torch.double)
    torch.testing.assert_close(gated(q, kv, kv, mask=None), plain(q, kv, kv), atol=1e-15, rtol=0)
    assert gated.gate.weight.shape == ((4, 5) if gate == "head" else (8, 5))


def test_a_head_gate_is_an_element_gate_with_one_logit_per_head():
    head = _mha(False, 2, gate="head")
    element = _mha(False, 2, gate="element")
    element.load_state_dict({k: v for k, v in head.state_dict().items() if not k.startswith("gate.")}
                            | {"gate.weight": head.gate.weight.repeat_interleave(2, 0),
                               "gate.bias": head.gate.bias.repeat_interleave(2, 0)})
    q, kv = torch.randn(2, 3, 5, dtype=torch.double), torch.randn(2, 4, 6, dtype=torch.double)
    torch.testing.assert_close(element(q, kv, kv), head(q, kv, kv))


@pytest.mark.parametrize("gate", ["head", "element"])
def test_gated_layers_prune_convert_and_rebuild_with_their_gates(gate):
    mha = _mha(True, 3, gate=gate)
    q, kv = torch.randn(2, 3, 5, dtype=torch.double), torch.randn(2, 3, 6, dtype=torch.double)
    torch.testing.assert_close(prune_heads(mha, [2])(q, kv, kv), mha(q, kv, kv, head_mask=head_gates(4, [2])))
    torch.manual_seed(4)
    square = MultiHeadAttention(8, 8, 8, 8, 4, 0.0, gate=gate).double().eval()
    x = torch.randn(2, 3, 8, dtype=torch.double)
    torch.testing.assert_close(gqa_from_mha(square, 4)(x, x, x), square(x, x, x))
    block = TransformerBlock(8, 4, 16, 0.0, gate=gate, num_kv_heads=2)
    assert block.attention.settings.gate == gate and block.attention.gate is not None
    with pytest.raises(ValueError, match="gate"):
        GroupedQueryAttention(8, 4, 2, 0.0, gate="channel")


def test_with_rope_the_cache_still_keeps_the_latent_but_nothing_folds():
    torch.manual_seed(5)
    mla = LatentAttention(8, 8, 8, 8, 2, 0.0, bias=True, rank=3, rope=True).double().eval()
    x = torch.randn(2, 6, 8, dtype=torch.double)
    full = mla(x, x, x, mask=causal())
    cache = LatentCache()
    prompt = x[:, :2]
    steps = [mla(prompt, prompt, prompt, cache=cache)]
    for t in range(2, 6):
        token = x[:, t:t + 1]
        steps.append(mla(token, token, token, cache=cache))
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-12, rtol=1e-10)
    shifted = mla(x, x, x, mask=causal(), positions=torch.arange(3, 9))  # RoPE sees only offsets
    torch.testing.assert_close(shifted, full, atol=1e-12, rtol=1e-10)
    assert not torch.allclose(mla(x, x, x, mask=causal(), positions=torch.tensor([0, 2, 1, 3, 4, 5])), full)
    with pytest.raises(ValueError, match="rope"):
        mla(x, x, x, absorbed=True)
    with pytest.raises(ValueError, match="even head size"):
        LatentAttention(6, 6, 6, 6, 2, 0.0, rank=2, rope=True)


def _decoupled_reference(mla: LatentAttention, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V2's decoupled RoPE written out: each head's score is its content part (from the
    latent, not rotated) plus its rotated part against the one rotated key all heads share, over
    sqrt(d + d_r); causal."""
    B, L, _ = x.shape
    H, d, d_r = mla.num_heads, mla.head_size, mla.rope_dim

    def heads(t, n, size):  # (B, L, n * size) -> (B, n, L, size)
        return t.view(B, L, n, size).transpose(1, 2)

    c = mla.W_dkv(x)  # (B, L, r)
    q, k, v = heads(mla.W_q(x), H, d), heads(mla.W_uk(c), H, d), heads(mla.W_uv(c), H, d)
    q_r = rotary(heads(mla.W_qr(x), H, d_r), positions)  # (B, H, L, d_r)
    k_r = rotary(heads(mla.W_kr(x), 1, d_r), positions)  # (B, 1, L, d_r): one for all heads
    scores = (q @ k.transpose(-1, -2) + q_r @ k_r.transpose(-1, -2)) / math.sqrt(d + d_r)
    scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H * d)  # (B, H, L, d) -> (B, L, D)
    return mla.W_o(out)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), bias=st.booleans(), rank=st.integers(1, 6), d_r=st.sampled_from([2, 4]),
       L=st.integers(1, 6), prompt=st.integers(1, 6), absorbed=st.booleans())
def test_decoupled_rope_is_deepseeks_formula_on_every_path_and_the_cache(seed, bias, rank, d_r, L, prompt,
                                                                         absorbed):
    torch.manual_seed(seed)
    mla = LatentAttention(6, 6, 6, 9, 3, 0.0, bias=bias, rank=rank, rope=True, rope_dim=d_r).double().eval()
    x = torch.randn(2, L, 6, dtype=torch.double)
    expected = _decoupled_reference(mla, x, torch.arange(L))
    full, weights = mla(x, x, x, mask=causal(), need_weights=True)  # (odd d = 3: only d_r rotates)
    torch.testing.assert_close(full, expected, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(mla(x, x, x, mask=causal(), absorbed=absorbed), expected, atol=1e-12, rtol=1e-10)
    cache, first = LatentCache(), x[:, :min(prompt, L)]
    steps = [mla(first, first, first, cache=cache, absorbed=absorbed)]
    steps += [mla(t, t, t, cache=cache, absorbed=absorbed) for t in x[:, first.shape[1]:].split(1, 1)]
    torch.testing.assert_close(torch.cat(steps, 1), expected, atol=1e-12, rtol=1e-10)
    assert cache.latent.shape == (2, L, rank + d_r)  # the latent and the rotated key part
    assert cache.nbytes == 2 * L * (rank + d_r) * 8
    assert weights.shape == (2, 3, L, L)


def test_decoupled_rope_sees_only_offsets_takes_a_position_spec_and_needs_rope():
    torch.manual_seed(3)
    mla = LatentAttention(6, 6, 6, 8, 2, 0.0, rank=3, rope=Rope(base=100.0), rope_dim=4).double().eval()
    x = torch.randn(2, 5, 6, dtype=torch.double)
    full = mla(x, x, x, mask=causal())
    torch.testing.assert_close(mla(x, x, x, mask=causal(), positions=torch.arange(7, 12)), full,
                               atol=1e-12, rtol=1e-10)
    assert not torch.allclose(mla(x, x, x, mask=causal(), positions=torch.tensor([0, 2, 1, 3, 4])), full)
    torch.testing.assert_close(full, mla(x, x, x, mask=causal(), absorbed=True), atol=1e-12, rtol=1e-10)
    with pytest.raises(ValueError, match="rope_dim.*rope=True"):
        LatentAttention(6, 6, 6, 8, 2, 0.0, rank=3, rope_dim=4)
    with pytest.raises(ValueError, match="rope_dim"):
        LatentAttention(6, 6, 6, 8, 2, 0.0, rank=3, rope=True, rope_dim=0)
    with pytest.raises(ValueError, match="pairs"):
        LatentAttention(6, 6, 6, 8, 2, 0.0, rank=3, rope=True, rope_dim=3)
