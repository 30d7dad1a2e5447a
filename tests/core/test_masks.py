"""mha_lib.masks: every kind and every combination against its definition written out by hand,
and the tile rule against the dense mask (never wrong; exact for one kind on its own)."""

import operator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.masks import causal, document, padding, prefix_lm, sinks, sliding_window

# --- the definitions, one pair (b, row, i, j) at a time: row = the query's index, i its position --


def _atom(draw, B, Lq, Lk, L):
    """One mask kind with random data, and its definition as a Python function."""
    kind = draw(st.sampled_from(["causal", "window", "lens", "query_lens", "document", "prefix",
                                 "prefix_b", "sinks"]))
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
        (lambda: padding([5, 1]).dense(2, 1, 4), "valid_lens"),
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
