"""The fast path (need_weights=False, fused SDPA) computes what the clear path computes.

Outputs, input gradients and parameter gradients agree in float32 and float64, in eval mode and
in training mode without dropout, for valid lengths None, (B,) and (B, Lq) (zeros included),
with and without a head mask. Also the masked softmax shortcuts (per-example masks that
broadcast over the queries, full lengths skipping the mask) against a plain reference, and the
weights path's FiniteDotProductAttention against the teaching DotProductAttention.
"""

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import DotProductAttention, MultiHeadAttention, masked_softmax
from mha_lib.attention import FiniteDotProductAttention

SETTINGS = settings(max_examples=30, deadline=None)
TOL = {torch.float32: dict(atol=2e-5, rtol=2e-4), torch.float64: dict(atol=1e-10, rtol=1e-8)}


@st.composite
def problems(draw):
    """A small MultiHeadAttention problem: sizes, dtype, valid lengths, head mask, bias."""
    B = draw(st.integers(1, 3))
    Lq = draw(st.integers(1, 5))
    Lk = draw(st.integers(1, 6))
    H = draw(st.integers(1, 3))
    d = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["none", "per_example", "per_query"]))
    shape = {"none": None, "per_example": (B,), "per_query": (B, Lq)}[kind]
    lens = None
    if shape is not None:
        n = math.prod(shape)
        lens = torch.tensor(draw(st.lists(st.integers(0, Lk), min_size=n, max_size=n))).reshape(shape)
    gate_kind = draw(st.sampled_from([None, (H,), (B, H)]))
    gates = None
    if gate_kind is not None:
        n = math.prod(gate_kind)
        gates = torch.tensor(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n)))
        gates = gates.reshape(gate_kind)
    return dict(
        B=B, Lq=Lq, Lk=Lk, H=H, d=d, valid_lens=lens, head_mask=gates,
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        bias=draw(st.booleans()), seed=draw(st.integers(0, 2**16)),
    )


def _build(p, training=False):
    g = torch.Generator().manual_seed(p["seed"])
    sizes = dict(query_size=3, key_size=4, value_size=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(p["seed"])
        mha = MultiHeadAttention(**sizes, d_model=p["H"] * p["d"], num_heads=p["H"],
                                 dropout=0.0, bias=p["bias"]).to(p["dtype"]).train(training)
    q = torch.randn(p["B"], p["Lq"], 3, generator=g, dtype=p["dtype"])
    k = torch.randn(p["B"], p["Lk"], 4, generator=g, dtype=p["dtype"])
    v = torch.randn(p["B"], p["Lk"], 2, generator=g, dtype=p["dtype"])
    gates = p["head_mask"]
    if gates is not None:
        gates = gates.to(p["dtype"])
    return mha, (q, k, v), dict(valid_lens=p["valid_lens"], head_mask=gates)


@SETTINGS
@given(problems())
def test_fast_output_equals_clear_output(p):
    mha, inputs, kw = _build(p)
    with torch.no_grad():
        fast = mha(*inputs, **kw)
        clear, weights = mha(*inputs, **kw, need_weights=True)
    assert fast.shape == clear.shape == (p["B"], p["Lq"], p["H"] * p["d"])
    assert weights.shape == (p["B"], p["H"], p["Lq"], p["Lk"])
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, clear, **TOL[p["dtype"]])


@SETTINGS
@given(problems(), st.booleans())
def test_fast_gradients_equal_clear_gradients(p, training):
    """Input and parameter gradients agree (training mode without dropout too)."""
    mha, inputs, kw = _build(p, training=training)
    g = torch.Generator().manual_seed(p["seed"] + 1)
    upstream = torch.randn(p["B"], p["Lq"], p["H"] * p["d"], generator=g, dtype=p["dtype"])
    grads = {}
    for path in ("fast", "clear"):
        leaves = [x.clone().requires_grad_() for x in inputs]
        mha.zero_grad()
        out = mha(*leaves, **kw, need_weights=path == "clear")
        out = out[0] if path == "clear" else out
        (out * upstream).sum().backward()
        grads[path] = [x.grad for x in leaves] + [prm.grad.clone() for prm in mha.parameters()]
    for fast, clear in zip(grads["fast"], grads["clear"], strict=True):
        assert torch.isfinite(fast).all()
        torch.testing.assert_close(fast, clear, **TOL[p["dtype"]])


def test_zero_valid_length_gives_bias_only_and_finite_gradients():
    """A query that may attend to nothing contributes W_o(0) = the output bias, on both paths."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 4, 4, 4, 2, dropout=0.0, bias=True).eval()
    q = torch.randn(2, 3, 4, requires_grad=True)
    kv = torch.randn(2, 5, 4)
    out = mha(q, kv, kv, torch.tensor([0, 5]))
    torch.testing.assert_close(out[0], mha.W_o.bias.detach().expand(3, 4))
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[0] == 0).all()


def test_full_lengths_take_the_unmasked_shortcut_with_the_same_result():
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 4, 4, 8, 2, dropout=0.0).eval()
    q, kv = torch.randn(3, 2, 4), torch.randn(3, 6, 4)
    for lens in (torch.tensor([6, 6, 6]), torch.full((3, 2), 6)):
        torch.testing.assert_close(mha(q, kv, kv, lens), mha(q, kv, kv))
        torch.testing.assert_close(
            mha(q, kv, kv, lens, need_weights=True)[1], mha(q, kv, kv, need_weights=True)[1]
        )


def test_dropout_acts_on_the_fast_path_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 4, 4, 8, 2, dropout=0.5)
    q, kv = torch.randn(2, 4, 4), torch.randn(2, 6, 4)
    torch.manual_seed(1)
    a = mha(q, kv, kv)
    torch.manual_seed(2)
    b = mha(q, kv, kv)
    assert not torch.allclose(a, b)  # training: different dropout masks
    mha.eval()
    torch.testing.assert_close(mha(q, kv, kv), mha(q, kv, kv, need_weights=True)[0])


def _reference_masked_softmax(X, valid_lens):
    """Masked softmax written the plain way: a full (B, Lq, Lk) mask, -inf, NaN rows -> 0."""
    B, Lq, Lk = X.shape
    lens = valid_lens if valid_lens.dim() == 2 else valid_lens[:, None].expand(B, Lq)
    keep = torch.arange(Lk) < lens[..., None]  # (B, Lq, Lk)
    return torch.softmax(X.masked_fill(~keep, -math.inf), dim=-1).nan_to_num(0.0)


@SETTINGS
@given(
    st.integers(1, 3), st.integers(1, 4), st.integers(1, 5), st.booleans(),
    st.sampled_from([torch.float32, torch.float64]), st.data(),
)
def test_masked_softmax_matches_the_plain_reference(B, Lq, Lk, per_query, dtype, data):
    shape = (B, Lq) if per_query else (B,)
    n = math.prod(shape)
    lens = torch.tensor(data.draw(st.lists(st.integers(0, Lk), min_size=n, max_size=n))).reshape(shape)
    X = torch.randn(B, Lq, Lk, dtype=dtype, generator=torch.Generator().manual_seed(n))
    W = masked_softmax(X, lens)
    assert W.shape == (B, Lq, Lk) and W.dtype == dtype
    torch.testing.assert_close(W, _reference_masked_softmax(X, lens))


def test_masked_softmax_ignores_non_finite_scores_in_masked_places():
    """Masked scores are replaced, not added to: inf or NaN there cannot leak into a row."""
    X = torch.tensor([[[1.0, 2.0, math.inf, math.nan]]])
    W = masked_softmax(X, torch.tensor([2]))
    torch.testing.assert_close(W, torch.softmax(torch.tensor([[[1.0, 2.0, -math.inf, -math.inf]]]), -1))
    W = masked_softmax(torch.full((1, 2, 3), 3e38), torch.tensor([[0, 1]]))
    torch.testing.assert_close(W, torch.tensor([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]]))


@pytest.mark.parametrize("lens", [torch.tensor([2, 0]), torch.tensor([[1, 0, 3], [0, 0, 0]])])
def test_masked_softmax_gradients_stay_finite(lens):
    X = torch.randn(2, 3, 4, requires_grad=True)
    masked_softmax(X, lens).pow(2).sum().backward()
    assert torch.isfinite(X.grad).all()


# --- the weights path: FiniteDotProductAttention against the teaching DotProductAttention ------


def _teaching_twin(mha):
    """A copy of ``mha`` that attends with the teaching DotProductAttention (masked_softmax)."""
    twin = copy.deepcopy(mha)
    twin.attention = DotProductAttention(mha.attention.dropout.p)
    return twin.train(mha.training)


@SETTINGS
@given(problems(), st.sampled_from([(False, 0.0), (True, 0.0), (True, 0.5)]))
def test_weights_path_equals_the_teaching_attention(p, mode):
    """Output, weights and gradients of need_weights=True equal those of DotProductAttention
    (valid lengths 0, per-query lengths, head masks; dropout in training with one seed)."""
    training, dropout = mode
    mha, (q, k, v), kwargs = _build(p, training=training)
    mha.attention.dropout.p = dropout
    twin = _teaching_twin(mha)
    assert type(mha.attention) is FiniteDotProductAttention
    results = []
    for module in (mha, twin):
        x = q.clone().requires_grad_(True)
        torch.manual_seed(p["seed"])
        out, weights = module(x, k, v, need_weights=True, **kwargs)
        (out.sum() + weights.sum()).backward()
        results.append((out, weights, x.grad, module.W_q.weight.grad))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, **TOL[p["dtype"]])
    with torch.no_grad():  # the in-place softmax, without autograd
        torch.manual_seed(p["seed"])
        out, weights = mha(q, k, v, need_weights=True, **kwargs)
    if dropout == 0.0:
        torch.testing.assert_close(out, results[1][0], **TOL[p["dtype"]])
    torch.testing.assert_close(weights, results[1][1], **TOL[p["dtype"]])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize(
    "lens", [None, torch.tensor([3, 0, 7]), torch.tensor([[0, 1, 2, 7], [7, 7, 0, 0], [0, 0, 0, 0]])]
)
def test_finite_attention_equals_dot_product_attention(dtype, lens):
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, n, s, dtype=dtype) for n, s in ((4, 5), (7, 5), (7, 2)))
    want = DotProductAttention(0.0)(q, k, v, lens, need_weights=True)
    got = FiniteDotProductAttention(0.0)(q, k, v, lens, need_weights=True)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tol)
    if lens is not None:  # nothing to attend to: zero weights and output, no NaN
        empty = (lens if lens.dim() == 2 else lens[:, None].expand(3, 4)) == 0
        assert (got[1][empty] == 0).all() and (got[0][empty] == 0).all()


def test_finite_attention_checks_like_dot_product_attention():
    attention = FiniteDotProductAttention(0.0)
    with pytest.raises(ValueError, match="valid_lens"):
        attention(torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 1), [6, 1])
    with pytest.raises(ValueError, match="at least one feature"):
        attention(torch.randn(2, 3, 0), torch.randn(2, 4, 0), torch.randn(2, 4, 5))
    out = attention(torch.randn(2, 3, 4), torch.randn(2, 0, 4), torch.randn(2, 0, 5), [0, 0])
    assert torch.equal(out, torch.zeros(2, 3, 5))
