"""mha_lib.masks: every kind and every combination against its definition written out by hand,
and the tile rule against the dense mask (never wrong; exact for one kind on its own)."""

import operator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.masks import causal, chunked, document, padding, prefix_lm, sinks, sliding_window

# --- the definitions, one pair (b, row, i, j) at a time: row = the query's index, i its position --


def _atom(draw, B, Lq, Lk, L):
    """One mask kind with random data, and its definition as a Python function."""
    kind = draw(st.sampled_from(["causal", "window", "lens", "query_lens", "document", "prefix",
                                 "prefix_b", "sinks", "chunked"]))
    if kind == "causal":
        return causal(), lambda b, r, i, j: j <= i
    if kind == "window":
        w = draw(st.integers(1, 6))
        return sliding_window(w), lambda b, r, i, j: i - w < j <= i
    if kind == "lens":
        lens = draw(st.lists(st.integers(0, Lk), min_size=B, max_size=B))
        return padding(torch.tensor(lens)), lambda b, r, i, j: j < lens[b]
    if kind == "query_lens":
        lens = [draw(st.lists(st.integers(0, Lk), min_size=Lq, max_size=Lq)) for _ in range(B)]
        return padding(torch.tensor(lens).reshape(B, Lq)), lambda b, r, i, j: j < lens[b][r]
    if kind == "document":  # packed documents: sorted ids, as a packer writes them
        ids = [sorted(draw(st.lists(st.integers(0, 3), min_size=L, max_size=L))) for _ in range(B)]
        return document(torch.tensor(ids).reshape(B, L)), lambda b, r, i, j: ids[b][i] == ids[b][j]
    if kind == "prefix":
        p = draw(st.integers(0, 8))
        return prefix_lm(p), lambda b, r, i, j: j <= i or j < p
    if kind == "prefix_b":
        ps = draw(st.lists(st.integers(0, 8), min_size=B, max_size=B))
        return prefix_lm(torch.tensor(ps)), lambda b, r, i, j: j <= i or j < ps[b]
    if kind == "chunked":
        c = draw(st.integers(1, 5))
        return chunked(c), lambda b, r, i, j: j <= i and j // c == i // c
    n = draw(st.integers(0, 4))
    return sinks(n), lambda b, r, i, j: j < n and j <= i


@st.composite
def problems(draw, depth=2, combine=True):
    """Sizes, a mask (one kind, or kinds joined by & and |) and its definition."""
    B, Lq, Lk = draw(st.integers(1, 3)), draw(st.integers(0, 9)), draw(st.integers(0, 12))
    q_offset = draw(st.integers(0, 5))
    L = max(q_offset + Lq, Lk, 1)  # the positions doc_ids must cover

    def tree(level):
        if not combine or level == 0 or draw(st.booleans()):
            return _atom(draw, B, Lq, Lk, L)
        (m1, f1), (m2, f2) = tree(level - 1), tree(level - 1)
        if draw(st.booleans()):
            return m1 & m2, lambda *a: f1(*a) and f2(*a)
        return m1 | m2, lambda *a: f1(*a) or f2(*a)

    mask, rule = tree(depth)
    return B, Lq, Lk, q_offset, mask, rule


def _by_hand(rule, B, Lq, Lk, q_offset):
    return torch.tensor([[[bool(rule(b, r, q_offset + r, j)) for j in range(Lk)] for r in range(Lq)]
                         for b in range(B)], dtype=torch.bool).reshape(B, Lq, Lk)


@settings(max_examples=150, deadline=None)
@given(problems(depth=3))
def test_dense_equals_the_definition(problem):
    B, Lq, Lk, q_offset, mask, rule = problem
    keep = mask.dense(B, Lq, Lk, q_offset)
    assert keep.dtype == torch.bool and keep.shape == (B, Lq, Lk)
    assert torch.equal(keep, _by_hand(rule, B, Lq, Lk, q_offset)), repr(mask)


@settings(max_examples=60, deadline=None)
@given(problems(depth=2), st.data())
def test_keep_at_any_positions_is_the_dense_mask_there(problem, data):
    """keep() with positions per example: the rows of a cache that holds keys of any positions."""
    B, Lq, Lk, q_offset, mask, rule = problem
    qpos = data.draw(st.lists(st.lists(st.integers(q_offset, q_offset + Lq - 1) if Lq else st.nothing(),
                                       min_size=Lq, max_size=Lq), min_size=B, max_size=B))
    kpos = data.draw(st.lists(st.integers(0, Lk - 1) if Lk else st.nothing(), min_size=Lk, max_size=Lk))
    keep = mask.keep(torch.tensor(qpos, dtype=torch.long).reshape(B, Lq),
                     torch.tensor(kpos, dtype=torch.long).reshape(1, Lk), batch_size=B)
    expected = torch.tensor([[[bool(rule(b, r, qpos[b][r], j)) for j in kpos] for r in range(Lq)]
                             for b in range(B)], dtype=torch.bool).reshape(B, Lq, Lk)
    assert torch.equal(keep.expand(B, Lq, Lk), expected), repr(mask)


def _tiles_of_dense(keep, block):
    """Per tile of the dense mask: nothing kept, everything kept. (B, nQ, nK) each."""
    B, Lq, Lk = keep.shape
    nQ, nK = -(-Lq // block), -(-Lk // block)
    none = torch.zeros(B, nQ, nK, dtype=torch.bool)
    every = torch.zeros(B, nQ, nK, dtype=torch.bool)
    for r in range(nQ):
        for c in range(nK):
            tile = keep[:, r * block:(r + 1) * block, c * block:(c + 1) * block]
            none[:, r, c] = ~tile.flatten(1).any(1)
            every[:, r, c] = tile.flatten(1).all(1)
    return none, every


@settings(max_examples=150, deadline=None)
@given(problems(depth=3), st.integers(1, 5))
def test_the_tile_rule_is_never_wrong(problem, block):
    """A tile called hidden keeps nothing; a tile called full keeps everything."""
    B, Lq, Lk, q_offset, mask, _ = problem
    tiles = mask.tiles(B, Lq, Lk, block, q_offset)
    none, every = _tiles_of_dense(mask.dense(B, Lq, Lk, q_offset), block)
    assert tiles.hidden.shape == none.shape
    assert not (tiles.hidden & ~none).any(), repr(mask)
    assert not (tiles.full & ~every).any(), repr(mask)
    assert tiles.total == none.shape[1] * none.shape[2]
    assert tiles.computed == int((~tiles.hidden.all(0)).sum())


@settings(max_examples=150, deadline=None)
@given(problems(combine=False), st.integers(1, 5))
def test_the_tile_rule_of_one_kind_is_exact(problem, block):
    B, Lq, Lk, q_offset, mask, _ = problem
    tiles = mask.tiles(B, Lq, Lk, block, q_offset)
    none, every = _tiles_of_dense(mask.dense(B, Lq, Lk, q_offset), block)
    assert torch.equal(tiles.hidden, none), repr(mask)
    assert torch.equal(tiles.full, every), repr(mask)


def test_causal_tiles_are_about_half():
    tiles = causal().tiles(1, 1024, 1024, 64)
    assert tiles.computed == 16 * 17 // 2 and tiles.total == 256  # the diagonal and below
    assert int(tiles.full.sum()) == 16 * 15 // 2  # below the diagonal: no mask needed
    assert torch.equal(tiles.states.diagonal(), torch.ones(16, dtype=torch.long))


def test_window_tiles_grow_like_the_window_not_the_length():
    tiles = sliding_window(256).tiles(1, 8192, 8192, 64)
    assert tiles.computed <= 128 * (256 // 64 + 2)  # a band of tiles along the diagonal
    assert tiles.total == 128 * 128


def test_the_examples_of_the_docstring():
    streaming = sliding_window(3) | sinks(2)
    keep = streaming.dense(1, 8, 8)[0]
    assert keep[7].tolist() == [True, True, False, False, False, True, True, True]
    assert not keep.triu(1).any()  # never a key in the future
    packed = causal() & document([[0, 0, 1, 1, 1]])
    assert packed.dense(1, 5, 5)[0, 3].tolist() == [False, False, True, True, False]
    assert repr(causal() & (sliding_window(2) | sinks(1))) == "causal() & (sliding_window(2) | sinks(1))"


def test_q_offset_places_the_queries_after_cached_keys():
    keep = causal().dense(2, 3, 7, q_offset=4)
    assert keep.shape == (2, 3, 7)
    assert keep[0].sum(-1).tolist() == [5, 6, 7]  # query at position 4 sees keys 0..4


def test_padding_is_d2ls_valid_lengths():
    keep = padding(torch.tensor([2, 4])).dense(2, 3, 5)
    assert keep[0].sum(-1).tolist() == [2, 2, 2] and keep[1].sum(-1).tolist() == [4, 4, 4]
    keep = padding([[1, 3]]).dense(1, 2, 4)
    assert keep[0].tolist() == [[True, False, False, False], [True, True, True, False]]


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: sliding_window(0), "window"),
        (lambda: sliding_window(2.5), "window"),
        (lambda: sinks(-1), "num_sinks"),
        (lambda: chunked(0), "chunk_size"),
        (lambda: prefix_lm(-1), "prefix_len"),
        (lambda: prefix_lm(torch.tensor([1.5])), "prefix_len"),
        (lambda: prefix_lm(torch.tensor([[1]])), "prefix_len"),
        (lambda: padding(torch.ones(2, 2, 2)), "valid_lens"),
        (lambda: padding(torch.tensor([-1])), "valid_lens"),
        (lambda: padding("ab"), "valid_lens"),
        (lambda: padding(torch.tensor([True])), "valid_lens"),
        (lambda: document(torch.ones(3, dtype=torch.long)), "doc_ids"),
        (lambda: document(torch.ones(1, 3)), "doc_ids"),
        (lambda: causal() & 3, "right side of &"),
        (lambda: causal() | None, "right side of |"),
        (lambda: padding([1, 1]).dense(3, 1, 4), "valid_lens"),
        (lambda: padding([[1, 1]]).dense(1, 3, 4), "valid_lens"),
        (lambda: document([[0, 0, 1]]).dense(1, 4, 4), "doc_ids"),
        (lambda: document([[0, 0, 1]]).dense(2, 3, 3), "doc_ids"),
        (lambda: prefix_lm([1, 2]).dense(3, 2, 2), "prefix_len"),
        (lambda: causal().dense(-1, 2, 2), "batch_size"),
        (lambda: causal().dense(1, 2.0, 2), "num_queries"),
        (lambda: causal().dense(1, 2, -2), "num_keys"),
        (lambda: causal().dense(1, 2, 2, q_offset=-1), "q_offset"),
        (lambda: causal().tiles(1, 2, 2, 0), "block_size"),
        (lambda: causal().keep(torch.zeros(2, 2, 2, dtype=torch.long), [0], batch_size=2), "q_positions"),
        (lambda: causal().keep([0], [0.5], batch_size=1), "k_positions"),
    ],
)
def test_bad_input_names_the_argument(build, name):
    with pytest.raises(ValueError, match=name.replace("|", r"\|").replace("&", r"\&")):
        build()


def test_combining_flattens_and_keeps_the_order():
    a, b, c = causal(), sliding_window(2), sinks(1)
    assert repr((a & b) & c) == "causal() & sliding_window(2) & sinks(1)"
    assert repr(a | (b | c)) == "causal() | sliding_window(2) | sinks(1)"
    assert operator.and_(a, b).dense(1, 3, 3).sum() == 5


# --- every path obeys the mask: against F.scaled_dot_product_attention with the dense mask ------

import torch.nn.functional as F  # noqa: E402

from mha_lib import DotProductAttention, MultiHeadAttention  # noqa: E402
from mha_lib.attention import FiniteDotProductAttention  # noqa: E402
from mha_lib.block import TransformerBlock  # noqa: E402
from mha_lib.decoding import KVCache  # noqa: E402
from mha_lib.flash import tiled_attention  # noqa: E402
from mha_lib.gqa import GroupedQueryAttention  # noqa: E402
from mha_lib.heads import merge_heads, split_heads  # noqa: E402


def _sdpa(q, k, v, keep):
    """The reference: SDPA with the dense boolean mask; a query that sees nothing gets zeros.
    q (B, H, Lq, d), k and v (B, Hkv, Lk, d), keep (B, Lq, Lk)."""
    if k.shape[2] == 0:
        return q.new_zeros(*q.shape[:3], v.shape[-1])
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None])
    return torch.where(keep.any(-1)[:, None, :, None], out, 0.0)


def _layer_reference(layer, x_q, x_kv, keep, q_positions=None):
    """What a layer must compute under ``keep``: its projections, SDPA, W_o (no rope)."""
    Hkv = getattr(layer, "num_kv_heads", layer.num_heads)
    q = split_heads(layer.W_q(x_q), layer.num_heads)  # (B, Lq, D) -> (B, H, Lq, d)
    k = split_heads(layer.W_k(x_kv), Hkv)  # (B, Lk, .) -> (B, Hkv, Lk, d)
    v = split_heads(layer.W_v(x_kv), Hkv)
    return layer.W_o(merge_heads(_sdpa(q, k, v, keep)))  # (B, H, Lq, d) -> (B, Lq, D)


@settings(max_examples=60, deadline=None)
@given(problems(depth=2), st.sampled_from(["mha", "gqa"]), st.booleans(), st.integers(0, 2**16))
def test_every_layer_path_obeys_the_mask(problem, kind, need_weights, seed):
    B, Lq, Lk, _, mask, _ = problem  # (no q_offset without a cache: queries at 0 .. Lq - 1)
    torch.manual_seed(seed)
    layer = (MultiHeadAttention(8, 8, 8, 8, 4, 0.0) if kind == "mha"
             else GroupedQueryAttention(8, 4, 2, 0.0)).double().eval()
    x_q, x_kv = torch.randn(B, Lq, 8, dtype=torch.float64), torch.randn(B, Lk, 8, dtype=torch.float64)
    keep = mask.dense(B, Lq, Lk)
    with torch.no_grad():
        got = layer(x_q, x_kv, x_kv, mask=mask, need_weights=need_weights)
        want = _layer_reference(layer, x_q, x_kv, keep)
    out = got[0] if need_weights else got
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want)
    if need_weights:
        weights = got[1]  # (B, H, Lq, Lk): 0 where hidden, rows of a query that sees nothing 0
        assert not (weights * ~keep[:, None]).any()
        sees = keep.any(-1)[:, None].expand(B, layer.num_heads, Lq)  # (B, Lq) -> (B, H, Lq)
        torch.testing.assert_close(weights.sum(-1), sees.double())


@settings(max_examples=60, deadline=None)
@given(problems(depth=2), st.integers(1, 5), st.integers(0, 2**16))
def test_tiled_attention_obeys_the_mask_and_skips_hidden_tiles(problem, block, seed):
    B, Lq, Lk, _, mask, _ = problem
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, n, 4, generator=g, dtype=torch.float64) for n in (Lq, Lk, Lk))
    out, tiles = tiled_attention(q, k, v, block_size=block, mask=mask, return_tiles=True)
    keep = mask.dense(B, Lq, Lk)
    torch.testing.assert_close(out, _sdpa(q[:, None], k[:, None], v[:, None], keep)[:, 0])
    assert tiles.computed == int((~tiles.hidden.all(0)).sum()) <= tiles.total


@settings(max_examples=40, deadline=None)
@given(problems(depth=2), st.integers(0, 2**16))
def test_dot_product_attentions_obey_the_mask(problem, seed):
    B, Lq, Lk, _, mask, _ = problem
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, n, 4, generator=g, dtype=torch.float64) for n in (Lq, Lk, Lk))
    want = _sdpa(q[:, None], k[:, None], v[:, None], mask.dense(B, Lq, Lk))[:, 0]
    for attention in (DotProductAttention(0.0), FiniteDotProductAttention(0.0)):
        torch.testing.assert_close(attention(q, k, v, mask=mask), want)


def _decode(layer, x, steps, cache, mask=None):
    """Run ``x`` (B, L, D) through ``layer`` with ``cache``, ``steps`` new tokens at a time."""
    outs, t = [], 0
    for n in steps:
        xt = x[:, t:t + n]
        outs.append(layer(xt, xt, xt, cache=cache, mask=mask))
        t += n
    return torch.cat(outs, 1)


@st.composite
def decoding_problems(draw):
    B, L = draw(st.integers(1, 2)), draw(st.integers(1, 12))
    steps, left = [], L
    while left:
        steps.append(draw(st.integers(1, left)))
        left -= steps[-1]
    return B, L, steps


@settings(max_examples=40, deadline=None)
@given(decoding_problems(), st.integers(1, 5), st.integers(0, 3), st.booleans(), st.integers(0, 2**16))
def test_rolling_cache_equals_the_full_cache_and_full_recompute(problem, window, num_sinks, rope, seed):
    """KVCache(window=w, num_sinks=s) keeps O(w + s) keys and gives what a full cache gives
    under sliding_window(w) | sinks(s), and what one forward without a cache gives."""
    B, L, steps = problem
    torch.manual_seed(seed)
    layer = GroupedQueryAttention(8, 4, 2, 0.0, rope=rope).double().eval()
    x = torch.randn(B, L, 8, dtype=torch.float64)
    rule = sliding_window(window) | sinks(num_sinks) if num_sinks else sliding_window(window)
    with torch.no_grad():
        rolling = KVCache(window=window, num_sinks=num_sinks)
        got = _decode(layer, x, steps, rolling)
        full = _decode(layer, x, steps, KVCache(), mask=rule)
        once = layer(x, x, x, mask=rule)
    torch.testing.assert_close(got, full)
    torch.testing.assert_close(got, once)
    assert rolling[0].keys.shape[2] <= window - 1 + num_sinks and len(rolling) == L


def _positional_masks(B, L):
    """Masks that mean the same at every step of decoding: they depend on positions only."""
    g = torch.Generator().manual_seed(B * 100 + L)
    ids = torch.sort(torch.randint(0, 3, (B, L), generator=g), dim=1).values
    return [sliding_window(3), sinks(2), chunked(3), prefix_lm(4), prefix_lm(torch.arange(B) + 2),
            document(ids), padding(torch.randint(0, L + 1, (B,), generator=g))]


@settings(max_examples=40, deadline=None)
@given(decoding_problems(), st.data())
def test_decoding_with_a_cache_obeys_any_mask(problem, data):
    """Step by step with a cache, every mask (here with q_offset = the cached positions) gives
    the rows of one causal forward under the same mask."""
    B, L, steps = problem
    kinds = _positional_masks(B, L)
    mask = data.draw(st.sampled_from(kinds))
    if data.draw(st.booleans()):
        other = data.draw(st.sampled_from(kinds))
        mask = mask & other if data.draw(st.booleans()) else mask | other
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).double().eval()
    x = torch.randn(B, L, 8, dtype=torch.float64)
    with torch.no_grad():
        got = _decode(layer, x, steps, KVCache(), mask=mask)
        want = layer(x, x, x, mask=causal() & mask)
        ref = _layer_reference(layer, x, x, (causal() & mask).dense(B, L, L))
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got, ref)


def test_streaming_llm_decoding_equals_its_dense_definition():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).double().eval()
    x = torch.randn(1, 40, 8, dtype=torch.float64)
    cache = KVCache(window=8, num_sinks=4)
    with torch.no_grad():
        got = _decode(layer, x, [1] * 40, cache)
        keep = (sliding_window(8) | sinks(4)).dense(1, 40, 40)
        want = _layer_reference(layer, x, x, keep)
    torch.testing.assert_close(got, want)
    assert cache[0].keys.shape[2] == 11  # 4 sinks + the last 7 positions (the next token's window), not 40


def test_a_query_that_sees_nothing_gets_zeros_on_every_path():
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0).eval()
    x = torch.randn(2, 5, 4)
    mask = document([[0, 0, 1, 1, 1], [2, 2, 2, 2, 2]]) & padding([2, 5])  # example 0: 2..4 see nothing
    for need_weights in (False, True):
        out = mha(x, x, x, mask=mask, need_weights=need_weights)
        out = out[0] if need_weights else out
        assert torch.isfinite(out).all()
        torch.testing.assert_close(mha.W_o(torch.zeros(3, 4)), out[0, 2:])
    out = tiled_attention(x, x, x, mask=mask, block_size=2)
    assert torch.equal(out[0, 2:], torch.zeros(3, 4)) and torch.isfinite(out).all()


def test_the_block_passes_the_mask_on():
    torch.manual_seed(0)
    block = TransformerBlock(8, 2, 16, 0.0).eval()
    x = torch.randn(2, 6, 8)
    lens = torch.tensor([6, 3])
    torch.testing.assert_close(block(x, mask=padding(lens)), block(x, lens))
    torch.testing.assert_close(block(x, mask=causal() & padding(lens)),
                               block(x, torch.minimum(torch.arange(1, 7), lens[:, None])))


def test_causal_tiled_attention_computes_about_half_the_tiles():
    torch.manual_seed(0)
    q = torch.randn(1, 256, 8)
    _, tiles = tiled_attention(q, q, q, mask=causal(), block_size=32, return_tiles=True)
    assert (tiles.computed, tiles.total) == (8 * 9 // 2, 64)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda m, x: m(x, x, x, mask="causal"), "mask must be a mha_lib.masks.Mask"),
        (lambda m, x: m(x, x, x, mask=causal(), cache=KVCache(window=2), positions=[0, 1, 2]),
         "positions"),
        (lambda m, x: KVCache(num_sinks=2), "num_sinks"),
        (lambda m, x: KVCache(window=0), "window"),
        (lambda m, x: m(x, x, x, mask=document([[0, 1]])), "doc_ids"),
    ],
)
def test_bad_masks_name_the_argument(call, name):
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0)
    with pytest.raises(ValueError, match=name):
        call(mha, torch.randn(1, 3, 4))
