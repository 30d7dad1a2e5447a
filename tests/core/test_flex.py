"""The FlexAttention route (``backend="flex"``, mha_lib.flex) gives the default paths' numbers.

On the CPU FlexAttention computes float32 (not float64) and inference only: the layers are
compared in float32 under ``torch.no_grad()``, to 2e-5 (measured: below 1e-7 for the masks
alone, below 6e-7 with ALiBi, soft-capping and sinks, 2.4e-6 with Llama 4's temperature). The
shapes are tiny and few (L < 128 pads to one block of 128, so one kernel serves them all): each
new kind of mask or modification compiles once, seconds each.

Marked ``compiled``: the kernels are inductor's own code, which ``MKL_CBWR`` does not change, so
the portability pass skips them.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention
from mha_lib.block import TransformerBlock
from mha_lib.decoding import KVCache
from mha_lib.flex import FlexUnavailable, _cached_block_mask, check_backend, flex_attention_heads
from mha_lib.gqa import GroupedQueryAttention, gqa_from_mha
from mha_lib.masks import Mask, causal, chunked, document, padding, prefix_lm, sinks, sliding_window
from mha_lib.scores import ScoreMod, alibi, softcap, temperature

pytestmark = pytest.mark.compiled

ATOL = 2e-5
B, L, D, H = 2, 40, 16, 2  # (L = 40: the length torch 2.13's CPU kernel got wrong unpadded)


@pytest.fixture(scope="module", autouse=True)
def _flex_runs():
    q = torch.randn(1, 1, 8, 8)
    try:
        with torch.no_grad():
            flex_attention_heads(q, q, q, causal())
    except FlexUnavailable as err:  # (no C++ compiler here)
        pytest.skip(str(err))


def _pair(**options) -> tuple[MultiHeadAttention, MultiHeadAttention]:
    torch.manual_seed(0)
    ref = MultiHeadAttention(D, D, D, D, H, 0.0, **options).eval()
    flex = MultiHeadAttention(D, D, D, D, H, 0.0, backend="flex", **options).eval()
    flex.load_state_dict(ref.state_dict())
    if ref.sink_logits is not None:
        with torch.no_grad():
            for m in (ref, flex):
                m.sink_logits.copy_(torch.tensor([0.5, -1.0]))
    return ref, flex


def _inputs(batch: int = B, length: int = L, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, length, D, generator=torch.Generator().manual_seed(seed))


def _docs(batch: int, length: int) -> torch.Tensor:
    return (torch.arange(length)[None] // 7 + torch.arange(batch)[:, None]) % 3  # (B, L)


MASKS = {
    "causal": lambda b, n: causal(),
    "sliding_window": lambda b, n: sliding_window(5),
    "padding": lambda b, n: padding(torch.tensor([0, 7, 40, 3][:b])),
    "padding per query": lambda b, n: padding(torch.arange(n)[None].expand(b, n) % 9),
    "document": lambda b, n: causal() & document(_docs(b, n)),
    "prefix_lm": lambda b, n: prefix_lm(torch.tensor([3, 0, 9, 1][:b])),
    "sinks": lambda b, n: sliding_window(4) | sinks(2),
    "chunked": lambda b, n: chunked(8),
}


@pytest.mark.parametrize("kind", list(MASKS))
def test_every_mask_kind_equals_the_default_path(kind):
    ref, flex = _pair()
    x, mask = _inputs(), MASKS[kind](B, L)
    with torch.no_grad():
        assert torch.allclose(flex(x, x, x, mask=mask), ref(x, x, x, mask=mask), atol=ATOL)


MODS = {
    "alibi": lambda: alibi(H),
    "softcap": lambda: softcap(2.0),
    "temperature": lambda: temperature(4.0, 0.5),
    "alibi >> softcap": lambda: alibi(H) >> softcap(3.0),
}


@pytest.mark.parametrize("kind", list(MODS))
@pytest.mark.parametrize("sink_logits", [False, True])
def test_every_modification_and_sinks_equal_the_default_path(kind, sink_logits):
    ref, flex = _pair(score_mod=MODS[kind](), sink_logits=sink_logits)
    x = _inputs() * 3  # (scores beyond the caps)
    with torch.no_grad():
        for mask in (causal(), padding(torch.tensor([0, 9])) & sliding_window(6)):
            assert torch.allclose(flex(x, x, x, mask=mask), ref(x, x, x, mask=mask), atol=ATOL)


def test_valid_lens_and_head_mask_and_no_mask():
    ref, flex = _pair(sink_logits=True)
    x = _inputs()
    with torch.no_grad():
        for kwargs in ({}, {"valid_lens": torch.tensor([3, 0])}, {"head_mask": torch.tensor([1.0, 0.0])}):
            assert torch.allclose(flex(x, x, x, **kwargs), ref(x, x, x, **kwargs), atol=ATOL)


@st.composite
def _masks(draw) -> tuple[int, int, Mask]:
    b, n = draw(st.integers(1, 2)), draw(st.integers(1, 60))
    parts = [MASKS[k](b, n) for k in draw(st.lists(st.sampled_from(list(MASKS)), min_size=1, max_size=3))]
    mask = parts[0]
    for part, op in zip(parts[1:], draw(st.lists(st.booleans(), min_size=2, max_size=2))):
        mask = mask & part if op else mask | part
    return b, n, mask


@settings(max_examples=6, deadline=None, derandomize=True)
@given(_masks(), st.sampled_from([None, *MODS]))
def test_composed_masks_and_modifications_equal_the_default_path(case, mod):
    b, n, mask = case
    options = {} if mod is None else {"score_mod": MODS[mod]()}
    ref, flex = _pair(**options)
    x = _inputs(b, n)
    with torch.no_grad():
        assert torch.allclose(flex(x, x, x, mask=mask), ref(x, x, x, mask=mask), atol=ATOL)


def test_grouped_query_attention_with_rope_and_positions():
    torch.manual_seed(0)
    ref = GroupedQueryAttention(4 * 8, 4, 2, 0.0, rope=True, score_mod=temperature(4.0, 0.5)).eval()
    flex = GroupedQueryAttention(4 * 8, 4, 2, 0.0, rope=True, backend="flex",
                                 score_mod=temperature(4.0, 0.5)).eval()
    flex.load_state_dict(ref.state_dict())
    x = torch.randn(2, 30, 32)
    positions = torch.arange(30)[None].expand(2, 30) + torch.tensor([[0], [50]])
    with torch.no_grad():
        for kwargs in ({"mask": causal()}, {"mask": sliding_window(4), "positions": positions}):
            assert torch.allclose(flex(x, x, x, **kwargs), ref(x, x, x, **kwargs), atol=ATOL)


def test_the_backend_is_a_setting_kept_by_conversions():
    _, flex = _pair()
    assert flex.settings.backend == "flex"
    assert gqa_from_mha(flex, 1).backend == "flex"
    for kv in (None, 1):  # a block passes it on to either layer, and keeps it in its settings
        block = TransformerBlock(D, H, 8, 0.0, num_kv_heads=kv, backend="flex")
        assert block.attention.backend == block.settings.backend == "flex"
    flex.check_options("a converter")  # (the backend changes no number: nothing to refuse)
    for bad in ("sdpa", None, 1):
        with pytest.raises(ValueError, match="backend must be"):
            MultiHeadAttention(D, D, D, D, H, 0.0, backend=bad)
    assert check_backend("auto") == "auto"


def test_calls_the_route_does_not_take_keep_the_default_paths():
    ref, flex = _pair()
    x = _inputs()
    with torch.no_grad():  # the weights: the weights path, for both
        out, weights = flex(x, x, x, mask=causal(), need_weights=True)
        ref_out, ref_weights = ref(x, x, x, mask=causal(), need_weights=True)
        assert torch.equal(out, ref_out) and torch.equal(weights, ref_weights)
        bad = x.clone()
        bad[0, 3] = float("nan")  # non-finite inputs: the default path's rule for them
        assert torch.equal(flex(bad, bad, bad, mask=causal()).isnan(), ref(bad, bad, bad, mask=causal()).isnan())
        cache_a, cache_b = KVCache(), KVCache()  # decoding with a cache
        for t in range(3):
            step = x[:, t:t + 1]
            assert torch.equal(flex(step, step, step, cache=cache_a), ref(step, step, step, cache=cache_b))


def test_refused_on_the_cpu_with_autograd_and_float64():
    _, flex = _pair()
    x = _inputs()
    with pytest.raises(ValueError, match="inference only"):
        flex(x, x, x, mask=causal())
    with torch.no_grad(), pytest.raises(ValueError, match="float64"):
        flex.double()(x.double(), x.double(), x.double())


def test_a_compiler_that_fails_is_a_clear_error(monkeypatch):
    import mha_lib.flex as route

    def broken(*args, **kwargs):
        raise torch._dynamo.exc.TorchDynamoException("no C++ compiler")

    monkeypatch.setitem(route._COMPILED, "fn", broken)
    q = torch.randn(1, 1, 8, 8)
    with torch.no_grad(), pytest.raises(FlexUnavailable, match='backend="auto"'):
        flex_attention_heads(q, q, q)


def test_the_block_mask_is_made_once_per_mask_and_shape():
    mask = causal() & document(_docs(2, 50))
    first = _cached_block_mask(mask, 2, 40, 40, device="cpu")
    assert _cached_block_mask(mask, 2, 40, 40, device="cpu") is first
    assert _cached_block_mask(mask, 2, 50, 50, device="cpu") is not first
    assert _cached_block_mask(causal() & document(_docs(2, 50)), 2, 40, 40, device="cpu") is not first
    with pytest.raises(ValueError, match="doc_ids"):
        _cached_block_mask(mask, 2, 60, 60, device="cpu")


class _Shift(ScoreMod):
    """A modification of one's own, without a head: called on each score."""

    def __call__(self, scores, q_idx, kv_idx):
        return scores - 0.1 * (q_idx - kv_idx).abs().to(scores.dtype)


def test_a_modification_of_ones_own():
    ref, flex = _pair(score_mod=_Shift())
    x = _inputs()
    with torch.no_grad():
        assert torch.allclose(flex(x, x, x, mask=causal()), ref(x, x, x, mask=causal()), atol=ATOL)


class _EveryOther(Mask):
    """A mask of one's own, without a closed form for FlexAttention: the even keys up to i."""

    def _keep(self, ix):
        i, j = ix.pairs()
        return (j <= i) & (j % 2 == 0)

    def _tiles(self, ix):
        q_lo, q_hi, k_lo, k_hi = ix.position_ranges()
        return k_lo > q_hi, k_lo != k_lo  # (never full)


def test_a_mask_of_ones_own_is_looked_up_in_its_dense_mask():
    ref, flex = _pair()
    x = _inputs()
    with torch.no_grad():
        assert torch.allclose(flex(x, x, x, mask=_EveryOther()), ref(x, x, x, mask=_EveryOther()), atol=ATOL)
