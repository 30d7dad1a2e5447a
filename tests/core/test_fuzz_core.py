"""Fuzz properties of the attention core (issue 26, "bad input").

* Finite in, finite out: inputs whose scores overflow the dtype (float32 x 1e20, float16 x 200)
  give finite outputs on every path, close to a float64 softmax of the same scores where those
  are moderate, and always inside the range of the values attended to (a convex combination).
* Both paths, one answer: NaN and infinities reach the same rows, with the same numbers
  elsewhere, whether a layer returns its weights or not (MultiHeadAttention,
  GroupedQueryAttention, TransformerBlock, decoding with a cache) and in tiled attention.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import DotProductAttention, MultiHeadAttention
from mha_lib.attention import FiniteDotProductAttention
from mha_lib.block import TransformerBlock
from mha_lib.decoding import KVCache
from mha_lib.flash import tiled_attention
from mha_lib.gqa import GroupedQueryAttention, grouped_attention
from mha_lib.mask_conventions import keep_mask_from_valid_lens

SETTINGS = settings(max_examples=40, deadline=None)

#: (dtype, largest scale of the inputs): entries stay far inside the dtype's range
SCALES = {torch.float32: 1e30, torch.float64: 1e150, torch.float16: 1e3, torch.bfloat16: 1e30}


@st.composite
def attention_inputs(draw, dtypes=tuple(SCALES)):
    """q (B, Lq, d), k (B, Lk, d), v (B, Lk, dv) of one scale, and valid lengths or None."""
    dtype = draw(st.sampled_from(dtypes))
    B, Lq, Lk = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    d, dv = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    scale = 10.0 ** draw(st.floats(0, math.log10(SCALES[dtype])))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = (torch.randn(B, Lq, d, generator=g, dtype=torch.float64) * scale).to(dtype)
    k = (torch.randn(B, Lk, d, generator=g, dtype=torch.float64) * scale).to(dtype)
    v = torch.randn(B, Lk, dv, generator=g, dtype=torch.float64).to(dtype)
    lens = None
    if draw(st.booleans()):
        shape = (B, Lq) if draw(st.booleans()) else (B,)
        lens = torch.randint(0, Lk + 1, shape, generator=g)
    return q, k, v, lens


def reference(q, k, v, lens):
    """Attention in float64 from the formula (rows with valid length 0: zeros), and the keep mask."""
    q, k, v = q.double(), k.double(), v.double()
    B, Lq, Lk = q.shape[0], q.shape[1], k.shape[1]
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])  # (B, Lq, Lk)
    keep = torch.ones(B, Lq, Lk, dtype=torch.bool) if lens is None else \
        keep_mask_from_valid_lens(lens, Lq, Lk)
    scores = scores.masked_fill(~keep, -math.inf)
    top = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - torch.where(torch.isfinite(top), top, 0.0))
    total = weights.sum(-1, keepdim=True)
    weights = torch.where(total > 0, weights / total.clamp(min=1e-300), 0.0)
    return weights @ v, keep


def assert_convex(out, v, keep):
    """Each output row lies between the smallest and largest value it may attend to."""
    out, v = out.double(), v.double()
    big = torch.finfo(torch.float64).max
    vals = v[:, None, :, :]  # (B, 1, Lk, dv)
    kept = keep[..., None]  # (B, Lq, Lk, 1)
    low = torch.where(kept, vals, big).amin(2)  # (B, Lq, dv)
    high = torch.where(kept, vals, -big).amax(2)
    empty = ~keep.any(-1, keepdim=True)  # (B, Lq, 1): zeros
    low, high = torch.where(empty, 0.0, low), torch.where(empty, 0.0, high)
    tol = 1e-2 * (1 + v.abs().amax())
    assert (out >= low - tol).all() and (out <= high + tol).all()


def _tol(dtype):
    return {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 1e-4, torch.float64: 1e-8}[dtype]


FUNCTIONS = {
    "DotProductAttention": lambda q, k, v, lens: DotProductAttention(0.0)(q, k, v, lens),
    "FiniteDotProductAttention": lambda q, k, v, lens: FiniteDotProductAttention(0.0)(q, k, v, lens),
    "tiled_attention": lambda q, k, v, lens: tiled_attention(q, k, v, lens, block_size=2),
    "grouped_attention": lambda q, k, v, lens: grouped_attention(
        q[:, None], k[:, None], v[:, None],
        None if lens is None else keep_mask_from_valid_lens(lens, q.shape[1], k.shape[1])[:, None],
    )[0][:, 0],
}


@pytest.mark.parametrize("name", FUNCTIONS)
@SETTINGS
@given(inputs=attention_inputs())
def test_finite_inputs_give_finite_outputs_near_a_float64_softmax(name, inputs):
    q, k, v, lens = inputs
    if name == "grouped_attention" and q.shape[-1] != v.shape[-1]:
        v = v[..., :1].expand(-1, -1, q.shape[-1]).contiguous()  # (grouped_attention: dv = d)
    out = FUNCTIONS[name](q, k, v, lens)
    want, keep = reference(q, k, v, lens)
    assert out.dtype == q.dtype and out.shape == want.shape
    assert torch.isfinite(want).all() and torch.isfinite(out).all()
    assert_convex(out, v, keep)
    scores = q.double().abs().amax() * k.double().abs().amax() * q.shape[-1]
    if scores < 1e3:  # moderate scores: the float64 softmax's numbers (where they cannot overflow)
        torch.testing.assert_close(out.double(), want, atol=_tol(q.dtype), rtol=_tol(q.dtype))


@pytest.mark.parametrize("dtype, scale", [(torch.float32, 1e20), (torch.float16, 200.0)])
def test_the_issues_overflowing_scores_stay_finite(dtype, scale):
    """The held-out fuzz's examples: float32 inputs x 1e20, float16 x 200."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 8, generator=g) for n in (3, 5, 5))
    q, k, v = (q * scale).to(dtype), (k * scale).to(dtype), v.to(dtype)
    want, keep = reference(q, k, v, None)
    for name, fn in FUNCTIONS.items():
        out = fn(q, k, v, None)
        assert torch.isfinite(out).all(), name
        torch.testing.assert_close(out.double(), want, atol=2e-2, rtol=0, msg=name)


def test_ordinary_inputs_give_the_same_bits_as_before():
    """fit_queries multiplies ordinary rows by exactly 1: the weights path equals an
    unscaled computation bit for bit."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, n, 4, generator=g) for n in (3, 5, 5))
    _, weights = DotProductAttention(0.0)(q, k, v, need_weights=True)
    assert torch.equal(weights, torch.softmax(q / 2.0 @ k.transpose(1, 2), dim=-1))


# --- layers: finite in, finite out on both paths -------------------------------------------------

@st.composite
def layer_inputs(draw):
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
    B, L = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    Hkv = draw(st.integers(1, 2))
    H = Hkv * draw(st.integers(1, 2))
    D = H * 2 * draw(st.integers(1, 2))
    scale = 10.0 ** draw(st.floats(0, {torch.float64: 100, torch.float32: 30, torch.bfloat16: 30}[dtype]))
    seed = draw(st.integers(0, 2**16))
    lens = draw(st.one_of(st.none(), st.lists(st.integers(0, L), min_size=B, max_size=B)))
    return dict(dtype=dtype, B=B, L=L, H=H, Hkv=Hkv, D=D, scale=scale, seed=seed,
                lens=None if lens is None else torch.tensor(lens))


def _layers(c):
    torch.manual_seed(c["seed"])
    D, H, Hkv = c["D"], c["H"], c["Hkv"]
    layers = {
        "MultiHeadAttention": MultiHeadAttention(D, D, D, D, H, 0.0, bias=True),
        "GroupedQueryAttention": GroupedQueryAttention(D, H, Hkv, 0.0, bias=True),
        "GroupedQueryAttention(rope)": GroupedQueryAttention(D, H, Hkv, 0.0, rope=True),
        "TransformerBlock": TransformerBlock(D, H, 2 * D, 0.0),
        "TransformerBlock(post-LN, GQA)": TransformerBlock(D, H, 2 * D, 0.0, False, num_kv_heads=Hkv),
    }
    return {name: layer.to(c["dtype"]).eval() for name, layer in layers.items()}


def _run(layer, x, lens, need_weights, **kwargs):
    if isinstance(layer, TransformerBlock):
        out = layer(x, lens, need_weights=need_weights, **kwargs)
    else:
        out = layer(x, x, x, lens, need_weights=need_weights, **kwargs)
    return out[0] if need_weights else out


def assert_same_answer(a, b, tol):
    """The same rows are NaN (and the same entries inf), and the finite numbers agree."""
    assert torch.equal(a.isnan(), b.isnan())
    assert torch.equal(a.isinf(), b.isinf()) and torch.equal(a[a.isinf()], b[b.isinf()])
    finite = torch.isfinite(a)
    torch.testing.assert_close(a[finite].double(), b[finite].double(), atol=tol, rtol=tol)


@SETTINGS
@given(c=layer_inputs())
def test_layers_give_finite_outputs_for_finite_inputs_on_both_paths(c):
    g = torch.Generator().manual_seed(c["seed"])
    x = (torch.randn(c["B"], c["L"], c["D"], generator=g, dtype=torch.float64) * c["scale"]).to(c["dtype"])
    for name, layer in _layers(c).items():
        fused = _run(layer, x, c["lens"], False)
        weights_path = _run(layer, x, c["lens"], True)
        assert torch.isfinite(fused).all() and torch.isfinite(weights_path).all(), name
        tol = 5e-2 if c["dtype"] == torch.bfloat16 else 1e-4
        scale = 1 + fused.double().abs().amax()
        torch.testing.assert_close(fused.double() / scale, weights_path.double() / scale,
                                   atol=tol, rtol=0, msg=name)


# --- both paths, one answer, for NaN and infinities -----------------------------------------------

@st.composite
def broken_inputs(draw):
    c = draw(layer_inputs())
    c["dtype"] = draw(st.sampled_from([torch.float32, torch.float64]))
    c["scale"] = 1.0
    n = c["B"] * c["L"] * c["D"]
    spots = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from([math.nan, math.inf, -math.inf])),
                          min_size=1, max_size=3))
    c["spots"] = spots
    return c


def _broken_x(c):
    g = torch.Generator().manual_seed(c["seed"])
    x = torch.randn(c["B"], c["L"], c["D"], generator=g, dtype=c["dtype"])
    flat = x.view(-1)
    for index, value in c["spots"]:
        flat[index] = value
    return x


@SETTINGS
@given(c=broken_inputs())
def test_nan_and_inf_give_the_same_answer_on_both_paths(c):
    x = _broken_x(c)
    for name, layer in _layers(c).items():
        assert_same_answer(_run(layer, x, c["lens"], False), _run(layer, x, c["lens"], True), 1e-4)


@SETTINGS
@given(c=broken_inputs(), step=st.integers(1, 3))
def test_nan_and_inf_give_the_same_answer_on_both_paths_with_a_cache(c, step):
    """Decoding with a cache, `step` positions at a time, fused against the weights path."""
    x = _broken_x(c)
    for name, layer in _layers(c).items():
        outs = []
        for need_weights in (False, True):
            cache, pieces = KVCache(), []
            with torch.no_grad():
                for start in range(0, c["L"], step):
                    piece = x[:, start:start + step]
                    pieces.append(_run(layer, piece, None, need_weights, cache=cache))
            outs.append(torch.cat(pieces, dim=1))
        assert_same_answer(*outs, 1e-4)


@SETTINGS
@given(c=broken_inputs(), block_size=st.integers(1, 4))
def test_tiled_attention_meets_nan_and_inf_as_dot_product_attention(c, block_size):
    x = _broken_x(c)
    q, k, v = x, x.flip(1), x.roll(1, dims=-1)
    lens = c["lens"]
    assert_same_answer(tiled_attention(q, k, v, lens, block_size=block_size),
                       DotProductAttention(0.0)(q, k, v, lens), 1e-4)
