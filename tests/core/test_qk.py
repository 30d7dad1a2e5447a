"""Queries and keys through one pipeline (``layer.qk``): QK-norm, then a position spec.

Each position kind (plain RoPE and its base, position interpolation, NTK-aware, YaRN, partial
rotation, none) against a float64 rotation written here pair by pair, and against the papers'
formulas; each QK-norm (per head, over the width) with non-trivial norm weights, in a layer,
against a float64 attention written here, on every path (the fused kernel, the weights path,
a cache, step by step).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib.block import TransformerBlock
from mha_lib.decoding import KVCache
from mha_lib.gqa import GroupedQueryAttention, gqa_from_mha
from mha_lib.importance import head_gates, prune_heads
from mha_lib.latent import LatentAttention
from mha_lib.masks import causal
from mha_lib.positions import Rope, frequencies, rotary

KINDS = {
    "plain": Rope(),
    "base": Rope(base=500000.0),
    "interpolation": Rope(scale=0.25),
    "ntk": Rope(ntk=4.0),
    "yarn": Rope(yarn=4.0, original_length=16),
    "yarn, its own factor": Rope(yarn=8.0, original_length=32, attention_factor=1.3, beta_fast=8.0),
    "partial": Rope(partial=0.5),
    "none": None,
}


def reference_frequencies(spec: Rope, r: int) -> list[float]:
    """The r/2 frequencies of each kind, from the papers, one pair at a time (float64)."""
    freqs = []
    for i in range(r // 2):
        theta = spec.base ** (-2 * i / r)
        if spec.ntk != 1:  # NTK-aware: the base times s^(r / (r - 2))
            theta = (spec.base * spec.ntk ** (r / (r - 2))) ** (-2 * i / r)
        if spec.yarn != 1:  # YaRN: keep fast pairs, interpolate slow ones, ramp in between
            # the pair index at which the trained length holds `turns` rotations of pair i:
            # L / (2 pi base^(2i/r)) = turns  <=>  i = r ln(L / (2 pi turns)) / (2 ln base)
            at = lambda turns: r * math.log(spec.original_length / (2 * math.pi * turns)) / (2 * math.log(spec.base))
            low, high = max(math.floor(at(spec.beta_fast)), 0), min(math.ceil(at(spec.beta_slow)), r - 1)
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)
            theta = theta * (1 - ramp) + theta / spec.yarn * ramp
        freqs.append(theta)
    return freqs


def reference_rotate(spec: Rope, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate pair (2i, 2i+1) of the first r features of x (B, H, L, d) by p * scale * freq_i,
    cos and sin times the attention factor; float64, loops."""
    x = x.double()
    out = x.clone()
    d = x.shape[-1]
    r = int(d * spec.partial)
    factor = spec.attention_factor or (0.1 * math.log(spec.yarn) + 1 if spec.yarn > 1 else 1.0)
    for i, freq in enumerate(reference_frequencies(spec, r)):
        angle = positions.double()[:, None, :] * freq * spec.scale  # (B, 1, L)
        cos, sin = torch.cos(angle) * factor, torch.sin(angle) * factor
        a, b = x[..., 2 * i], x[..., 2 * i + 1]
        out[..., 2 * i], out[..., 2 * i + 1] = a * cos - b * sin, a * sin + b * cos
    return out


@pytest.mark.parametrize("kind", [k for k in KINDS if KINDS[k] is not None])
def test_each_position_kind_is_its_formula(kind):
    spec = KINDS[kind]
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    positions = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(spec(x, positions), reference_rotate(spec, x, positions))


def test_plain_rope_and_interpolation_are_rotary_bit_for_bit():
    x = torch.randn(2, 2, 5, 8)
    p = torch.arange(5)
    assert torch.equal(Rope()(x, p), rotary(x, p))
    assert torch.equal(Rope(scale=0.3)(x, p), rotary(x, p, scale=0.3))
    assert torch.equal(Rope(base=500.0)(x, p), rotary(x, p, 500.0))


def test_ntk_interpolates_the_slowest_pair_and_keeps_the_fastest():
    """NTK-aware scaling (bloc97, 2023): base * s^(r/(r-2)) divides the slowest frequency by
    exactly s (position interpolation there) and leaves the fastest (pair 0) as it was."""
    r, s = 16, 4.0
    plain, ntk = frequencies(r), Rope(ntk=s).frequencies(r)
    assert ntk[0] == plain[0]
    torch.testing.assert_close(ntk[-1], plain[-1] / s)
    assert (ntk <= plain).all()


def test_yarn_keeps_fast_pairs_interpolates_slow_ones_and_scales_the_scores():
    """YaRN (Peng et al., 2023): a pair that turns more than beta_fast times in the trained
    length keeps its frequency, one that turns less than beta_slow times is divided by s; the
    scores are multiplied by the attention factor squared, (0.1 ln s + 1)^2."""
    spec = Rope(yarn=8.0, original_length=1024)
    r = 32
    plain, yarn = frequencies(r), spec.frequencies(r)
    turns = 1024 * plain / (2 * math.pi)
    fast, slow = turns > spec.beta_fast, turns < spec.beta_slow
    assert fast.any() and slow.any()
    assert torch.equal(yarn[fast], plain[fast])
    torch.testing.assert_close(yarn[slow], plain[slow] / 8.0)
    q, k = torch.randn(1, 1, 5, r, dtype=torch.float64), torch.randn(1, 1, 5, r, dtype=torch.float64)
    p = torch.arange(5)
    flat = Rope(yarn=8.0, original_length=1024, attention_factor=1.0)
    scores, flat_scores = spec(q, p) @ spec(k, p).mT, flat(q, p) @ flat(k, p).mT
    torch.testing.assert_close(scores, flat_scores * (0.1 * math.log(8.0) + 1) ** 2)


def test_partial_rotation_leaves_the_other_features():
    x = torch.randn(1, 2, 4, 8)
    out = Rope(partial=0.5)(x, torch.arange(4))
    assert torch.equal(out[..., 4:], x[..., 4:])
    assert torch.equal(out[..., :4], rotary(x[..., :4], torch.arange(4)))


@pytest.mark.parametrize("bad, name", [
    (dict(base=1.0), "base"), (dict(scale=0.0), "rope.scale"), (dict(ntk=2.0, yarn=2.0), "one way"),
    (dict(yarn=2.0), "original_length"), (dict(partial=1.5), "partial"),
    (dict(attention_factor=-1.0), "attention_factor"),
])
def test_a_bad_spec_is_named(bad, name):
    with pytest.raises(ValueError, match=name):
        Rope(**bad)


def test_a_spec_that_does_not_fit_the_head_size_is_named():
    with pytest.raises(ValueError, match="rope"):
        GroupedQueryAttention(8, 4, 2, 0.0, rope=Rope(partial=0.5))  # d = 2: one feature
    with pytest.raises(ValueError, match="rope_scale"):
        GroupedQueryAttention(8, 2, 2, 0.0, rope=Rope(), rope_scale=0.5)  # (say Rope(scale=...))
    with pytest.raises(ValueError, match="qk_norm"):
        MultiHeadAttention(8, 8, 8, 8, 2, 0.0, qk_norm="layer")


# --- in a layer: one pipeline on every path --------------------------------------------------


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def reference_layer(layer, x: torch.Tensor, spec: Rope | None) -> torch.Tensor:
    """A causal self-attention with QK-norm and positions 0, 1, ..., in float64, written out."""
    x = x.double()
    H, Hkv, d = layer.num_heads, layer.num_kv_heads, layer.head_size
    B, L, _ = x.shape
    w = {k: v.double() for k, v in layer.state_dict().items()}
    q = x @ w["W_q.weight"].T + w.get("W_q.bias", 0)
    k = x @ w["W_k.weight"].T + w.get("W_k.bias", 0)
    v = x @ w["W_v.weight"].T + w.get("W_v.bias", 0)
    if layer.qk.qk_norm == "width":
        q, k = _rms(q, w["qk.q_norm.weight"]), _rms(k, w["qk.k_norm.weight"])
    q = q.reshape(B, L, H, d).transpose(1, 2)
    k = k.reshape(B, L, Hkv, d).transpose(1, 2)
    v = v.reshape(B, L, Hkv, d).transpose(1, 2)
    if layer.qk.qk_norm == "head":
        q, k = _rms(q, w["qk.q_norm.weight"]), _rms(k, w["qk.k_norm.weight"])
    if layer.qk.qk_norm == "l2":  # (Llama 4: no weight)
        q, k = _rms(q, 1.0), _rms(k, 1.0)
    if spec is not None:
        p = torch.arange(L).expand(B, L)
        q, k = reference_rotate(spec, q, p), reference_rotate(spec, k, p)
    k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    scores = q @ k.mT / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -math.inf)
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H * d)
    return out @ w["W_o.weight"].T + w.get("W_o.bias", 0)


def _perturbed(layer):
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.rand(p.shape, generator=gen) - 0.5)
    return layer.eval()


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(sorted(KINDS)), qk_norm=st.sampled_from([None, "head", "width", "l2"]),
       Hkv=st.integers(1, 2), g=st.integers(1, 2), bias=st.booleans(), L=st.integers(1, 6),
       split=st.integers(1, 5))
def test_every_path_applies_the_one_pipeline(kind, qk_norm, Hkv, g, bias, L, split):
    spec = KINDS[kind]
    H = Hkv * g
    torch.manual_seed(0)
    layer = _perturbed(GroupedQueryAttention(H * 8, H, Hkv, 0.0, bias, rope=spec or False,
                                             qk_norm=qk_norm))
    x = torch.randn(2, L, H * 8)
    expected = reference_layer(layer, x, spec).float()
    with torch.no_grad():
        fused = layer(x, x, x, mask=causal())
        weighted, _ = layer(x, x, x, mask=causal(), need_weights=True)
        cache, n = KVCache(), min(split, L)  # a prompt of n tokens, then one token a step
        steps = [layer(x[:, :n], x[:, :n], x[:, :n], cache=cache)]
        steps += [layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache) for t in range(n, L)]
    for out in (fused, weighted, torch.cat(steps, 1)):
        torch.testing.assert_close(out, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("qk_norm", ["head", "width", "l2"])
def test_qk_norm_in_multihead_attention_and_the_block(qk_norm):
    torch.manual_seed(0)
    mha = _perturbed(MultiHeadAttention(16, 16, 16, 16, 2, 0.0, bias=True, qk_norm=qk_norm))
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(mha(x, x, x, mask=causal()), reference_layer(mha, x, None).float(),
                                   atol=2e-5, rtol=2e-5)
    for rope in (False, True):  # the block passes qk_norm on, to either layer
        block = TransformerBlock(16, 2, 8, 0.0, rope=rope, qk_norm=qk_norm)
        assert block.attention.settings.qk_norm == qk_norm
        assert (block.attention.qk.q_norm is None) == (qk_norm == "l2")


def test_the_l2_norm_is_one_file_and_pruning_and_conversion_take_it():
    """Llama 4's L2 norm of queries and keys (no weight), the feature added after the
    redesign in mha_lib/qk.py alone: pruning and GQA conversion carry it unchanged."""
    torch.manual_seed(0)
    mha = _perturbed(MultiHeadAttention(16, 16, 16, 16, 4, 0.0, qk_norm="l2"))
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(prune_heads(mha, [0])(x, x, x), mha(x, x, x, head_mask=head_gates(4, [0])))
        torch.testing.assert_close(gqa_from_mha(mha, 4).eval()(x, x, x), mha(x, x, x))


def test_pruning_and_gqa_from_mha_carry_the_norms_weights():
    """Non-trivial norm weights (fresh ones are all ones and would hide a forgotten copy)."""
    torch.manual_seed(0)
    mha = _perturbed(MultiHeadAttention(16, 16, 16, 16, 4, 0.0, qk_norm="head"))
    x = torch.randn(2, 5, 16)
    pruned = prune_heads(mha, [1, 2])
    assert torch.equal(pruned.qk.q_norm.weight, mha.qk.q_norm.weight)
    with torch.no_grad():
        torch.testing.assert_close(pruned(x, x, x), mha(x, x, x, head_mask=head_gates(4, [1, 2])))
    for qk_norm in ("head", "width"):
        mha = _perturbed(MultiHeadAttention(16, 16, 16, 16, 4, 0.0, qk_norm=qk_norm))
        with torch.no_grad():
            torch.testing.assert_close(gqa_from_mha(mha, 4).eval()(x, x, x), mha(x, x, x))
        grouped = gqa_from_mha(mha, 2)  # the key norm over the width: averaged like W_k
        assert grouped.qk.k_norm.weight.shape == ((4,) if qk_norm == "head" else (8,))  # d or Hkv*d
        assert torch.equal(grouped.qk.q_norm.weight, mha.qk.q_norm.weight)
    with pytest.raises(ValueError, match="qk_norm"):
        prune_heads(mha, [0])  # (qk_norm="width": a norm over every head)


def test_latent_attention_takes_a_position_spec():
    """LatentAttention rotates through the same pipeline: a YaRN spec reaches it."""
    torch.manual_seed(0)
    spec = KINDS["yarn"]
    mla = LatentAttention(16, 16, 16, 16, 2, 0.0, rank=16, rope=spec).eval()
    with torch.no_grad():
        mla.W_dkv.weight.copy_(torch.eye(16))
    gqa = GroupedQueryAttention(16, 2, 2, 0.0, rope=spec).eval()
    with torch.no_grad():
        for mine, theirs in (("W_q", "W_q"), ("W_uk", "W_k"), ("W_uv", "W_v"), ("W_o", "W_o")):
            getattr(gqa, theirs).load_state_dict(getattr(mla, mine).state_dict())
        x = torch.randn(2, 6, 16)
        torch.testing.assert_close(mla(x, x, x, mask=causal()), gqa(x, x, x, mask=causal()))
