"""Score modifications and sink logits on every path, against a float64 reference written here.

Every path (the fused kernel, ``need_weights=True``, ``tiled_attention``, decoding with a plain
and a rolling ``KVCache``) computes ``Q K^T / sqrt(d) -> modification -> mask -> softmax``
(with one learned sink logit per head joining the softmax, then dropped). The reference below
does the same in float64, with its own ALiBi and soft-capping; the mask's keep matrix is the
mask's own (``Mask.dense``, tested in test_masks.py).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib.block import TransformerBlock
from mha_lib.decoding import KVCache
from mha_lib.flash import tiled_attention
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.masks import causal, chunked, document, padding, prefix_lm, sinks, sliding_window
from mha_lib.positions import rotary
from mha_lib.scores import ScoreMod, alibi, softcap, temperature

CAP = 1.5

# --- the reference ------------------------------------------------------------------------------


def ref_alibi(H, slopes=None):
    slopes = torch.tensor([2.0 ** (-8 * h / H) for h in range(1, H + 1)] if slopes is None else slopes,
                          dtype=torch.float64)
    return lambda s, i, j: s - slopes.view(1, H, 1, 1) * (i - j).double()


def ref_softcap(cap):
    return lambda s, i, j: cap * torch.tanh(s / cap)


def ref_temperature(floor_scale, scale):
    return lambda s, i, j: s * (1 + scale * torch.log(torch.floor((i.double() + 1) / floor_scale) + 1))


#: name -> (the library's modification, the reference's), for H heads
MODS = {
    "none": lambda H: (None, lambda s, i, j: s),
    "alibi": lambda H: (alibi(H), ref_alibi(H)),
    "alibi_slopes": lambda H: (alibi(H, [0.5 * (h + 1) for h in range(H)]),
                               ref_alibi(H, [0.5 * (h + 1) for h in range(H)])),
    "softcap": lambda H: (softcap(CAP), ref_softcap(CAP)),
    "alibi_then_softcap": lambda H: (alibi(H) >> softcap(CAP),
                                     lambda s, i, j: ref_softcap(CAP)(ref_alibi(H)(s, i, j), i, j)),
    "softcap_then_alibi": lambda H: (softcap(CAP) >> alibi(H),
                                     lambda s, i, j: ref_alibi(H)(ref_softcap(CAP)(s, i, j), i, j)),
    "temperature": lambda H: (temperature(2.0, 0.5), ref_temperature(2.0, 0.5)),
}

#: name -> a mask for B examples of L positions
MASKS = {
    "none": lambda B, L: None,
    "causal": lambda B, L: causal(),
    "sliding_window": lambda B, L: sliding_window(2),
    "window_or_sinks": lambda B, L: sliding_window(2) | sinks(1),
    "causal_and_document": lambda B, L: causal() & document(
        (torch.arange(L) >= L // 2).long().expand(B, L)),
    "prefix_lm": lambda B, L: prefix_lm(2),
    "chunked": lambda B, L: chunked(2),
    "padding": lambda B, L: padding(torch.tensor([L, max(L - 2, 0)] * B)[:B]),
}


def reference_attention(q, k, v, keep, mod, sink, q_pos, k_pos):
    """float64 attention: q (B, H, Lq, d), k, v (B, H, Lk, d), keep bool (B, Lq, Lk) or None,
    mod(s, i, j), sink (H,) or None, q_pos (B or 1, Lq), k_pos (B or 1, Lk). Returns the output
    (B, H, Lq, d) and the weights (B, H, Lq, Lk)."""
    B, H, Lq, d = q.shape
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d)  # (B, H, Lq, Lk)
    s = mod(s, q_pos[:, None, :, None], k_pos[:, None, None, :])
    if keep is not None:
        s = s.masked_fill(~keep[:, None], float("-inf"))
    if sink is not None:
        s = torch.cat([s, sink.double().view(1, H, 1, 1).expand(B, H, Lq, 1)], -1)
    w = torch.nan_to_num(s.softmax(-1), nan=0.0)  # (a row that sees nothing: zeros)
    w = w[..., :k.shape[2]]
    return w @ v.double(), w


def reference_layer(layer, x, keep, mod, q_pos, k_pos, x_kv=None):
    """The layer in float64 on self-attention inputs x (B, L, D) (keys and values x_kv)."""
    x_kv = x if x_kv is None else x_kv
    H, Hkv = layer.num_heads, layer.num_kv_heads
    split = lambda t, n: t.reshape(*t.shape[:2], n, -1).transpose(1, 2)  # (B, L, n*d) -> (B, n, L, d)
    q = split(layer.W_q(x), H)
    k = split(layer.W_k(x_kv), Hkv).repeat_interleave(H // Hkv, 1)  # (B, H, Lk, d)
    v = split(layer.W_v(x_kv), Hkv).repeat_interleave(H // Hkv, 1)
    if layer.rope:
        q, k = rotary(q, q_pos.expand(x.shape[0], -1)), rotary(k, k_pos.expand(x.shape[0], -1))
    out, w = reference_attention(q, k, v, keep, mod, layer.sink_logits, q_pos, k_pos)
    return layer.W_o(out.transpose(1, 2).reshape(*x.shape[:2], -1)), w  # (B, H, L, d) -> (B, L, D)


def make_layer(kind, H, d, mod, sink, seed=0):
    torch.manual_seed(seed)
    D = H * d
    if kind == "mha":
        layer = MultiHeadAttention(D, D, D, D, H, 0.0, bias=True, score_mod=mod, sink_logits=sink)
    elif kind == "gqa":
        layer = GroupedQueryAttention(D, H, 1, 0.0, bias=True, score_mod=mod, sink_logits=sink)
    else:  # rotary positions, H/2 key-value heads
        layer = GroupedQueryAttention(D, H, H // 2 if H % 2 == 0 else H, 0.0, rope=True,
                                      score_mod=mod, sink_logits=sink)
    layer = layer.double().eval()
    if sink:
        with torch.no_grad():
            layer.sink_logits.normal_()
    return layer


def _keep(mask, B, Lq, Lk, q_offset=0):
    return None if mask is None else mask.dense(B, Lq, Lk, q_offset).expand(B, Lq, Lk)


# --- every modification, alone and with every mask kind, on every path ---------------------------


@settings(max_examples=60, deadline=None)
@given(B=st.integers(1, 2), H=st.sampled_from([1, 2, 4]), d=st.sampled_from([2, 4]),
       L=st.integers(1, 7), mod_name=st.sampled_from(list(MODS)), mask_name=st.sampled_from(list(MASKS)),
       sink=st.booleans(), kind=st.sampled_from(["mha", "gqa", "gqa_rope"]), seed=st.integers(0, 99))
def test_the_fused_and_the_weights_path_equal_the_reference(B, H, d, L, mod_name, mask_name, sink, kind, seed):
    mod, ref_mod = MODS[mod_name](H)
    layer = make_layer(kind, H, d, mod, sink, seed)
    x = torch.randn(B, L, H * d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    mask = MASKS[mask_name](B, L)
    positions = torch.arange(L)[None]
    with torch.no_grad():
        want, want_w = reference_layer(layer, x, _keep(mask, B, L, L), ref_mod, positions, positions)
        fast = layer(x, x, x, mask=mask)
        slow, weights = layer(x, x, x, mask=mask, need_weights=True)
    torch.testing.assert_close(fast, want)
    torch.testing.assert_close(slow, want)
    torch.testing.assert_close(weights, want_w)
    assert torch.isfinite(fast).all() and torch.isfinite(weights).all()
    if sink:  # the sink takes a share: every row's weights sum to less than 1
        assert (weights.sum(-1) < 1).all()


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 2), H=st.sampled_from([1, 2, 3]), Lq=st.integers(1, 9), Lk=st.integers(1, 9),
       block=st.integers(1, 5), mod_name=st.sampled_from(list(MODS)),
       mask_name=st.sampled_from(list(MASKS)), seed=st.integers(0, 99))
def test_tiled_attention_equals_the_reference(B, H, Lq, Lk, block, mod_name, mask_name, seed):
    mod, ref_mod = MODS[mod_name](H)
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, 3, dtype=torch.float64, generator=g) for n in (Lq, Lk, Lk))
    mask = MASKS[mask_name](B * H, max(Lq, Lk))
    if mask_name in ("causal_and_document", "padding"):  # (data of B*H rows, Lk columns)
        mask = causal() & document(torch.zeros(B * H, max(Lq, Lk), dtype=torch.long)) \
            if mask_name != "padding" else padding(torch.tensor([Lk, Lk // 2] * B * H)[:B * H])
    keep = _keep(mask, B * H, Lq, Lk)  # (B*H, Lq, Lk): each head its own rows
    keep = None if keep is None else keep.reshape(B, H, Lq, Lk)
    fold = lambda t: t.reshape(B * H, *t.shape[2:])  # (B, H, L, d) -> (B*H, L, d)
    out = tiled_attention(fold(q), fold(k), fold(v), mask=mask, score_mod=mod, block_size=block)
    want = torch.cat([reference_attention(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1],
                                          None if keep is None else keep[:, h], _one_head(ref_mod, H, h),
                                          None, torch.arange(Lq)[None], torch.arange(Lk)[None])[0]
                      for h in range(H)], 1)  # H x (B, 1, Lq, d) -> (B, H, Lq, d)
    torch.testing.assert_close(out, fold(want))


def _one_head(ref_mod, H, h):
    """The reference modification of head h alone, on (B, 1, Lq, Lk) scores."""
    def mod(s, i, j):
        full = s.expand(s.shape[0], H, *s.shape[2:])
        return ref_mod(full, i, j)[:, h:h + 1]
    return mod


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 2), H=st.sampled_from([2, 4]), prompt=st.integers(1, 4), steps=st.integers(1, 4),
       window=st.sampled_from([None, 2, 3]), mod_name=st.sampled_from(list(MODS)), sink=st.booleans(),
       kind=st.sampled_from(["mha", "gqa_rope"]), with_mask=st.booleans(), seed=st.integers(0, 99))
def test_decoding_with_a_cache_equals_the_reference_at_absolute_positions(
        B, H, prompt, steps, window, mod_name, sink, kind, with_mask, seed):
    mod, ref_mod = MODS[mod_name](H)
    layer = make_layer(kind, H, 2, mod, sink, seed)
    L = prompt + steps
    x = torch.randn(B, L, H * 2, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    extra = chunked(3) if with_mask else None  # a mask of its own, on top of the cache's
    rule = causal() if window is None else causal() & sliding_window(window)
    rule = rule if extra is None else rule & extra
    positions = torch.arange(L)[None]
    with torch.no_grad():
        want, _ = reference_layer(layer, x, _keep(rule, B, L, L), ref_mod, positions, positions)
        cache = KVCache(1, window=window)
        outs = [layer(x[:, :prompt], x[:, :prompt], x[:, :prompt], mask=extra, cache=cache[0])]
        for t in range(prompt, L):
            step = x[:, t:t + 1]
            outs.append(layer(step, step, step, mask=extra, cache=cache[0], need_weights=t % 2 == 0)
                        if t % 2 else layer(step, step, step, mask=extra, cache=cache[0]))
    outs = [o[0] if isinstance(o, tuple) else o for o in outs]
    torch.testing.assert_close(torch.cat(outs, 1), want)


# --- the degenerate cases equal plain attention ----------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("mask", [None, causal(), sliding_window(2) | sinks(1)], ids=["none", "causal", "window"])
def test_degenerate_modifications_equal_plain_attention(need_weights, mask):
    H, d, B, L = 2, 4, 2, 6
    x = torch.randn(B, L, H * d, generator=torch.Generator().manual_seed(0))
    plain = make_layer("mha", H, d, None, False).float()
    cases = {"slope 0": alibi(H, [0.0] * H), "cap 1e6": softcap(1e6), "sink -inf": None}
    with torch.no_grad():
        want = plain(x, x, x, mask=mask, need_weights=need_weights)
        for name, mod in cases.items():
            layer = make_layer("mha", H, d, mod, name == "sink -inf").float()
            if layer.sink_logits is not None:
                layer.sink_logits.fill_(float("-inf"))
            got = layer(x, x, x, mask=mask, need_weights=need_weights)
            torch.testing.assert_close(got, want, msg=name)


def test_tiled_attention_with_a_degenerate_modification_equals_plain():
    q, k, v = (torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(i)) for i in range(3))
    want = tiled_attention(q, k, v, mask=causal(), block_size=2)
    for mod in (alibi(2, [0.0, 0.0]), softcap(1e6)):
        torch.testing.assert_close(tiled_attention(q, k, v, mask=causal(), score_mod=mod, block_size=2), want)


# --- true positions: what catches a wrong cache offset ---------------------------------------------


class _Absolute(ScoreMod):
    """Reads the absolute positions: a bias that is not constant along a row, and changes
    when the query's position does (a wrong offset changes the softmax)."""

    additive = True

    def bias(self, q_idx, kv_idx):
        return 0.7 * torch.cos(0.9 * q_idx * kv_idx).float()


def _ref_absolute(s, i, j):
    return s + 0.7 * torch.cos(0.9 * i * j).double()


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("mod_name", ["absolute", "alibi", "temperature"])
def test_only_a_modification_of_absolute_positions_reveals_a_wrong_cache_offset(mod_name, window):
    H, B, prompt, L = 2, 2, 4, 7
    mod, ref_mod = (_Absolute(), _ref_absolute) if mod_name == "absolute" else MODS[mod_name](H)
    layer = make_layer("mha", H, 2, mod, False)
    x = torch.randn(B, L, 2 * H, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rule = causal() if window is None else causal() & sliding_window(window)
    positions = torch.arange(L)[None]
    with torch.no_grad():
        right, _ = reference_layer(layer, x, _keep(rule, B, L, L), ref_mod, positions, positions)
        # the queries one position off, the keys where they are: what a wrong offset computes
        wrong, _ = reference_layer(layer, x, _keep(rule, B, L, L), ref_mod, positions + 1, positions)
        cache = KVCache(1, window=window)
        outs = [layer(x[:, :prompt], x[:, :prompt], x[:, :prompt], cache=cache[0])]
        outs += [layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache[0]) for t in range(prompt, L)]
    torch.testing.assert_close(torch.cat(outs, 1), right)
    if mod_name == "alibi":  # a constant per row: the softmax cannot tell
        torch.testing.assert_close(wrong, right)
    else:
        assert not torch.allclose(wrong, right)


def test_a_position_reading_modification_takes_the_fused_path_and_the_weights_path():
    H, B, L = 2, 2, 5
    layer = make_layer("gqa_rope", H, 2, _Absolute(), True)
    x = torch.randn(B, L, 2 * H, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    positions = torch.tensor([[3, 4, 5, 6, 7], [0, 1, 2, 3, 4]])  # RoPE and the modification read them
    with torch.no_grad():
        want, _ = reference_layer(layer, x, _keep(causal(), B, L, L), _ref_absolute, positions, positions)
        for need_weights in (False, True):
            out = layer(x, x, x, mask=causal(), positions=positions, need_weights=need_weights)
            torch.testing.assert_close(out[0] if need_weights else out, want)


# --- the block, gradients, the arguments -------------------------------------------------------------


def test_the_block_passes_its_modification_and_sinks_on():
    block = TransformerBlock(8, 2, 16, 0.0, score_mod=alibi(2) >> softcap(5.0), sink_logits=True).eval()
    assert block.attention.score_mod == alibi(2) >> softcap(5.0)
    assert block.attention.sink_logits.shape == (2,)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        out, w = block(x, mask=causal(), need_weights=True)
    torch.testing.assert_close(block(x, mask=causal()), out)
    assert (w.sum(-1) < 1).all()


@pytest.mark.parametrize("mod", [None, alibi(2), softcap(2.0)], ids=["none", "alibi", "softcap"])
def test_sink_logits_learn_on_both_paths(mod):
    layer = MultiHeadAttention(4, 4, 4, 4, 2, 0.0, score_mod=mod, sink_logits=True)
    x = torch.randn(2, 3, 4)
    grads = []
    for need_weights in (False, True):
        layer.zero_grad()
        out = layer(x, x, x, mask=causal(), need_weights=need_weights)
        (out[0] if need_weights else out).square().sum().backward()
        grads.append(layer.sink_logits.grad.clone())
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[0], grads[1])


def test_bad_arguments_name_themselves():
    cases = [
        (lambda: alibi(0), "num_heads must be an integer >= 1"),
        (lambda: alibi(2, [1.0]), r"slopes must be H = 2 finite numbers, got \[1.0\]"),
        (lambda: alibi(2, [1.0, float("nan")]), "slopes must be H = 2 finite numbers"),
        (lambda: alibi(2, "steep"), "slopes must be H = 2 numbers"),
        (lambda: softcap(0), "cap must be a finite number > 0, got 0"),
        (lambda: softcap(float("inf")), "cap must be a finite number > 0"),
        (lambda: alibi(2) >> (lambda s: s), "a ScoreMod composes with a ScoreMod"),
        (lambda: alibi(2) >> alibi(3), r"disagree on the number of heads: \[2, 3\]"),
        (lambda: MultiHeadAttention(4, 4, 4, 4, 2, 0.0, score_mod=alibi(4)),
         "score_mod is for 4 heads, the layer has num_heads = 2"),
        (lambda: GroupedQueryAttention(4, 2, 1, 0.0, score_mod=lambda s: s), "score_mod must be a mha_lib.scores.ScoreMod"),
        (lambda: MultiHeadAttention(4, 4, 4, 4, 2, 0.0, sink_logits=1), "sink_logits must be"),
        (lambda: tiled_attention(*(torch.randn(3, 2, 2),) * 3, score_mod=alibi(2)),
         r"score_mod is for H = 2 heads: queries must be \(B\*H, Lq, d\), got batch size 3"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_the_fused_kernel_takes_additive_modifications_and_sinks_not_softcapping():
    from mha_lib.masking import visible

    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    for mod, sink, fused in ((None, None, True), (alibi(2), None, True), (None, torch.zeros(2), True),
                             (softcap(2.0), None, False), (alibi(2) >> softcap(2.0), None, False)):
        ctx = visible(causal(), 1, 3, 5, q_offset=2, score_mod=mod, sinks=sink)
        operands = ctx.fused(q, k, k)
        assert (operands is not None) == fused
        if operands is not None and sink is not None:  # one more key, of zeros
            assert operands[0].shape == (1, 2, 6, 4) and operands[2].shape[-1] == 6
