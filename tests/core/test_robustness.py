"""The library at its edges: non-finite inputs, empty sizes, odd dtypes, in-place safety,
validated converters, and graphs (torch.compile with fullgraph, torch.jit.trace, torch.export).

The rule for NaN and inf, the same on both paths of MultiHeadAttention: a query's output row
(and its weights) is NaN when the query, or a key or value it may attend to, is not finite
(and it attends to something); non-finite keys and values it may not attend to never reach it.
"""

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import (
    DotProductAttention,
    MultiHeadAttention,
    check_valid_lens,
    keep_mask_from_valid_lens,
    keep_to_padding,
    masked_softmax,
    merge_heads,
    padding_mask_from_valid_lens,
    padding_to_keep,
    split_heads,
    transpose_output,
    transpose_qkv,
)
from mha_lib.masking import softmax_over_kept

SETTINGS = settings(max_examples=40, deadline=None)
BAD = [float("nan"), float("inf"), -float("inf")]


def _module(H=2, d=3, seed=0, dtype=torch.float32):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MultiHeadAttention(4, 5, 3, H * d, H, 0.0, bias=True).to(dtype).eval()


@st.composite
def problems(draw, allow_empty=True):
    """Sizes (zeros allowed), lengths (None, per example, per query), non-finite entries."""
    lo = 0 if allow_empty else 1
    B, Lq, Lk = draw(st.integers(lo, 3)), draw(st.integers(lo, 4)), draw(st.integers(lo, 5))
    kind = draw(st.sampled_from(["none", "per_example", "per_query"]))
    shape = {"none": None, "per_example": (B,), "per_query": (B, Lq)}[kind]
    lens = None
    if shape is not None:
        n = math.prod(shape)
        lens = torch.tensor(draw(st.lists(st.integers(0, Lk), min_size=n, max_size=n)),
                            dtype=torch.long).reshape(shape)
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(B, Lq, 5, generator=g), torch.randn(B, Lk, 4, generator=g), torch.randn(
        B, Lk, 3, generator=g)
    for x in (q, k, v):  # poke a few non-finite entries
        for _ in range(draw(st.integers(0, 2))):
            if x.numel():
                x.view(-1)[draw(st.integers(0, x.numel() - 1))] = draw(st.sampled_from(BAD))
    return dict(q=q, k=k, v=v, valid_lens=lens, seed=seed)


def _expected_broken(q, k, v, valid_lens):
    """(B, Lq) bool: the rows the rule makes NaN, computed by loops."""
    B, Lq, Lk = q.shape[0], q.shape[1], k.shape[1]
    out = torch.zeros(B, Lq, dtype=torch.bool)
    for b in range(B):
        for i in range(Lq):
            n = Lk if valid_lens is None else int(valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i])
            used_bad = any(not (torch.isfinite(k[b, j]).all() and torch.isfinite(v[b, j]).all()) for j in range(n))
            out[b, i] = n > 0 and (used_bad or not torch.isfinite(q[b, i]).all())
    return out


@SETTINGS
@given(problems())
def test_both_paths_give_the_same_answer_for_non_finite_and_empty_inputs(p):
    mha = _module(seed=p["seed"] % 7)
    fast = mha(p["q"], p["k"], p["v"], p["valid_lens"])
    clear, weights = mha(p["q"], p["k"], p["v"], p["valid_lens"], need_weights=True)
    torch.testing.assert_close(fast, clear, equal_nan=True, atol=2e-5, rtol=2e-4)
    broken = _expected_broken(p["q"], p["k"], p["v"], p["valid_lens"])
    assert torch.equal(fast.isnan().any(-1), broken)
    assert torch.isfinite(fast[~broken]).all()
    assert torch.equal(weights.isnan().any(-1).any(1), broken)


@SETTINGS
@given(problems(allow_empty=False))
def test_non_finite_entries_that_no_query_uses_change_nothing(p):
    """inf/NaN only where the lengths mask them gives the answer of zeros there."""
    lens = p["valid_lens"]
    if lens is None:
        return
    mha = _module(seed=p["seed"] % 7)
    q, k, v = p["q"].nan_to_num(0.0, 0.0, 0.0), p["k"].clone(), p["v"].clone()
    Lk = k.shape[1]
    unused = torch.arange(Lk) >= lens.reshape(lens.shape[0], -1).amax(-1, keepdim=True)  # (B, Lk)
    k, v = k.nan_to_num(0.0, 0.0, 0.0), v.nan_to_num(0.0, 0.0, 0.0)
    k_bad, v_bad = k.masked_fill(unused[..., None], float("inf")), v.masked_fill(unused[..., None], float("nan"))
    for need_weights in (False, True):
        got = mha(q, k_bad, v_bad, lens, need_weights=need_weights)
        want = mha(q, k, v, lens, need_weights=need_weights)
        torch.testing.assert_close(got, want)


def test_issue_examples_nan_query_and_inf_in_a_masked_key():
    mha = _module()
    q, k, v = torch.randn(2, 3, 5), torch.randn(2, 4, 4), torch.randn(2, 4, 3)
    q[0, 1, 0] = float("nan")
    k[1, 3, 2] = float("inf")
    lens = torch.tensor([4, 3])  # key 3 of example 1 is masked
    fast = mha(q, k, v, lens)
    clear, _ = mha(q, k, v, lens, need_weights=True)
    torch.testing.assert_close(fast, clear, equal_nan=True)
    assert fast[0, 1].isnan().all() and torch.isfinite(fast[0, [0, 2]]).all()
    assert torch.isfinite(fast[1]).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_odd_float_dtypes_agree_on_both_paths(dtype):
    mha = _module(dtype=dtype)
    q, k, v = (torch.randn(2, 3, n, dtype=dtype) for n in (5, 4, 3))
    lens = torch.tensor([[1, 0, 3], [2, 2, 3]])
    fast = mha(q, k, v, lens)
    clear, weights = mha(q, k, v, lens, need_weights=True)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
    torch.testing.assert_close(fast, clear, **tol)
    assert fast.dtype == weights.dtype == dtype and torch.isfinite(fast).all()


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_non_float_inputs_are_rejected_by_name(dtype):
    mha = _module()
    q = torch.zeros(1, 2, 5, dtype=dtype)
    with pytest.raises(ValueError, match="queries must be a floating-point tensor"):
        mha(q, torch.randn(1, 2, 4), torch.randn(1, 2, 3))


def test_integer_valid_lens_of_any_dtype_are_accepted():
    X = torch.randn(2, 3, 4)
    want = masked_softmax(X, torch.tensor([1, 4]))
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32):
        torch.testing.assert_close(masked_softmax(X, torch.tensor([1, 4], dtype=dtype)), want)
    with pytest.raises(ValueError, match="valid_lens must hold integers.*torch.bool"):
        masked_softmax(X, torch.tensor([True, False]))


def test_inplace_refuses_an_expanded_view_and_a_leaf_that_requires_grad():
    X = torch.randn(1, 4).expand(2, 3, 4)  # every row is the same memory
    with pytest.raises(ValueError, match="X shares memory between its elements"):
        masked_softmax(X, [1, 2], inplace=True)
    torch.testing.assert_close(masked_softmax(X, [1, 2]), masked_softmax(X.contiguous(), [1, 2]))
    leaf = torch.randn(2, 3, 4, requires_grad=True)
    with pytest.raises(ValueError, match="leaf tensor that requires grad"):
        masked_softmax(leaf, [1, 2], inplace=True)
    with pytest.raises(ValueError, match="inplace must be True or False"):
        masked_softmax(leaf, [1, 2], inplace=1)


def test_softmax_over_kept_checks_its_arguments():
    X = torch.randn(2, 3)
    with pytest.raises(ValueError, match="keep must be a boolean"):
        softmax_over_kept(X, torch.ones(2, 3))
    with pytest.raises(ValueError, match="keep must be broadcastable"):
        softmax_over_kept(X, torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="X must be a floating-point"):
        softmax_over_kept(torch.ones(2, 3, dtype=torch.long), torch.ones(3, dtype=torch.bool))


def test_mask_converters_check_their_arguments():
    with pytest.raises(ValueError, match="mask must be a boolean"):
        keep_to_padding(torch.tensor([1, 0]))  # ~ of integers would give [-2, -1]
    with pytest.raises(ValueError, match="mask must be a boolean"):
        padding_to_keep([True])
    with pytest.raises(ValueError, match="valid_lens must be <= .* Lk = 3"):
        keep_mask_from_valid_lens(torch.tensor([4]), 2, 3)
    with pytest.raises(ValueError, match="valid_lens must be >= 0"):
        padding_mask_from_valid_lens(torch.tensor([-1]), 3)
    with pytest.raises(ValueError, match="got None"):
        keep_mask_from_valid_lens(None, 2, 3)
    with pytest.raises(ValueError, match="one length per example"):
        padding_mask_from_valid_lens(torch.tensor([[1, 2]]), 3)
    with pytest.raises(ValueError, match="num_keys must be an integer >= 0"):
        keep_mask_from_valid_lens(torch.tensor([1]), 2, -3)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 0"):
        check_valid_lens([1], 1.5, 2, 3)
    assert keep_mask_from_valid_lens([2, 0], 1, 3).tolist() == [[[True, True, False]], [[False] * 3]]


def test_empty_sizes_give_empty_results_not_nan():
    X = torch.randn(0, 3, 4)
    assert masked_softmax(X, torch.zeros(0, dtype=torch.long)).shape == (0, 3, 4)
    assert masked_softmax(torch.randn(2, 3, 0), [0, 0]).shape == (2, 3, 0)
    assert split_heads(torch.randn(0, 2, 6), 3).shape == (0, 3, 2, 2)
    assert merge_heads(torch.randn(2, 3, 0, 2)).shape == (2, 0, 6)
    assert transpose_output(transpose_qkv(torch.randn(0, 5, 6), 2), 2).shape == (0, 5, 6)
    attention = DotProductAttention(0.0)
    out = attention(torch.randn(2, 3, 4), torch.randn(2, 0, 4), torch.randn(2, 0, 5))
    assert torch.equal(out, torch.zeros(2, 3, 5))  # nothing to attend to: zeros
    with pytest.raises(ValueError, match="at least one feature"):
        attention(torch.randn(2, 3, 0), torch.randn(2, 4, 0), torch.randn(2, 4, 5))


def _lens_module():
    mha = _module()
    q, k, v = torch.randn(2, 3, 5), torch.randn(2, 4, 4), torch.randn(2, 4, 3)
    return mha, q, k, v, torch.tensor([4, 2]), [torch.tensor([1, 3]), torch.tensor([0, 4])]


def test_jit_trace_holds_for_other_valid_lengths():
    mha, q, k, v, lens, others = _lens_module()
    with pytest.warns(Warning):  # torch.jit.trace itself is deprecated in torch 2.13
        traced = torch.jit.trace(mha, (q, k, v, lens))
    for other in others:
        torch.testing.assert_close(traced(q, k, v, other), mha(q, k, v, other))


def test_export_with_valid_lengths_agrees_with_eager():
    mha, q, k, v, lens, others = _lens_module()
    program = torch.export.export(mha, (q, k, v, lens))
    for other in [lens, *others]:
        torch.testing.assert_close(program.module()(q, k, v, other), mha(q, k, v, other))


@pytest.mark.parametrize("need_weights", [False, True])
def test_compile_fullgraph_with_valid_lengths(need_weights):
    """One graph for both paths, valid for any lengths (backend "eager": Dynamo's capture is
    what fullgraph tests; code generation would only cost time)."""
    torch._dynamo.reset()
    mha, q, k, v, lens, others = _lens_module()
    compiled = torch.compile(
        lambda *args: mha(*args, need_weights=need_weights), fullgraph=True, backend="eager"
    )
    for other in [lens, *others, torch.tensor([[1, 2, 0], [4, 4, 4]])]:
        torch.testing.assert_close(compiled(q, k, v, other), mha(q, k, v, other, need_weights=need_weights))


class _Weights(torch.nn.Module):
    """``mha(..., need_weights=True)`` as a module, for export and trace."""

    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, q, k, v, valid_lens):
        return self.mha(q, k, v, valid_lens, need_weights=True)


@pytest.mark.parametrize("grad", [False, True])
def test_weights_path_graphs_hold_for_empty_rows_recorded_without_them(grad):
    """Recorded with no valid length 0, export, trace and compile (with and without autograd,
    i.e. with the softmax out of place and in place) still zero the rows of a later length 0."""
    torch._dynamo.reset()
    mha, q, k, v, lens, others = _lens_module()
    with torch.set_grad_enabled(grad):
        exported = torch.export.export(_Weights(mha), (q, k, v, lens)).module()
        with pytest.warns(Warning):  # torch.jit.trace itself is deprecated in torch 2.13
            traced = torch.jit.trace(_Weights(mha), (q, k, v, lens), check_trace=False)
        compiled = torch.compile(_Weights(mha), fullgraph=True, backend="eager")
        per_query = [torch.tensor([[1, 2, 0], [4, 4, 4]])]  # a graph of its own shape
        for graph, lengths in ((exported, others), (traced, others), (compiled, others + per_query)):
            for other in lengths:
                for got, want in zip(graph(q, k, v, other), mha(q, k, v, other, need_weights=True)):
                    torch.testing.assert_close(got, want)


@SETTINGS
@given(
    st.integers(0, 3), st.integers(0, 3), st.integers(0, 4),
    st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.bool]),
    st.sampled_from([None, "per_example", "per_query"]), st.booleans(), st.integers(0, 2**16),
)
def test_masked_softmax_property(B, Lq, Lk, dtype, kind, poke, seed):
    """A clear ValueError for non-float scores; otherwise masked entries exactly 0, rows that
    keep a key sum to 1, rows that keep none are 0, and a NaN touches only its own row."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, Lq, Lk, generator=g).to(dtype)
    shape = {None: None, "per_example": (B,), "per_query": (B, Lq)}[kind]
    lens = None if shape is None else torch.randint(0, Lk + 1, shape, generator=g)
    if not X.is_floating_point():
        with pytest.raises(ValueError, match="X must be a floating-point tensor"):
            masked_softmax(X, lens)
        return
    if poke and X.numel():
        X.view(-1)[0] = float("nan")
    W = masked_softmax(X, lens)
    assert W.shape == X.shape and W.dtype == dtype
    n = torch.full((B, Lq), Lk) if lens is None else (lens[:, None].expand(B, Lq) if lens.dim() == 1 else lens)
    keep = torch.arange(Lk) < n[..., None]
    nan_row = torch.zeros(B, Lq, dtype=torch.bool)
    if poke and X.numel():
        nan_row[0, 0] = bool(keep[0, 0, 0])
    assert torch.equal(W.isnan().any(-1), nan_row)
    ok = ~nan_row
    assert (W[ok].masked_fill(keep[ok], 0) == 0).all()
    sums = W[ok].float().sum(-1)
    torch.testing.assert_close(sums, (n[ok] > 0).float(), atol=1e-2, rtol=0)


def test_library_functions_name_their_arguments_instead_of_failing_deep_inside():
    from mha_lib import digits, training
    from mha_lib.importance import ablation, attention_entropy, gradient_importance, ranks, spearman
    from mha_lib.variants import HaikuStyleMultiheadAttention, scaled_dot_product

    cases = [
        (lambda: spearman([1, float("nan"), 3], [1, 2, 3]), "a must be finite"),
        (lambda: ranks([1.0, float("inf")]), "x must be finite"),
        (lambda: attention_entropy(torch.zeros(2, 2, 0, 3)), "no query rows"),
        (lambda: attention_entropy(torch.full((1, 1, 2, 2), 0.5), torch.tensor([0])), "no real query"),
        (lambda: ablation(None, 3), "evaluate must be a function"),
        (lambda: gradient_importance(None, 2, 3), "per_example_loss must be a function"),
        (lambda: scaled_dot_product(torch.randn(2, 3, 0), torch.randn(2, 3, 0), torch.randn(2, 3, 4)), "d >= 1"),
        (lambda: digits.DigitAttentionModel()(torch.zeros(1, 3, dtype=torch.bool)), "tokens must be an integer"),
        (lambda: training.load_model(None, kind="digits", config_class=digits.Config,
                                     model_class=digits.DigitAttentionModel), "path must be a file name"),
        (lambda: digits._loss_fn(None, None), "logits must be a torch.Tensor"),
        (lambda: digits._loss_fn(torch.randn(1, 2, 3), torch.zeros(1, 2)), "targets must be int64"),
        (lambda: digits.token_labels(None, 3), "tokens must be a 1-D tensor"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    model = digits.DigitAttentionModel().eval()
    tokens = torch.tensor([[1, 2, 3, 10]])
    torch.testing.assert_close(model(tokens.int(), torch.tensor([3])), model(tokens, torch.tensor([3])))
    assert model(tokens[:0], torch.zeros(0, dtype=torch.long)).shape == (0, 4, 10)
    haiku = HaikuStyleMultiheadAttention(8, 2)
    x = torch.randn(0, 3, 8)
    assert haiku(x, x, x)[0].shape == (0, 3, 8)  # an empty batch


@SETTINGS
@given(
    st.integers(0, 3), st.integers(0, 4), st.integers(0, 4), st.integers(1, 3),
    st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64]),
)
def test_heads_helpers_property(B, L, d, H, dtype):
    """Round trips hold for every size, zeros included; non-float tensors are refused by name."""
    X = (torch.arange(B * L * H * d) % 7).reshape(B, L, H * d).to(dtype)
    if not X.is_floating_point():
        with pytest.raises(ValueError, match="X must be a floating-point tensor"):
            split_heads(X, H)
        return
    assert torch.equal(merge_heads(split_heads(X, H)), X)
    assert torch.equal(transpose_output(transpose_qkv(X, H), H), X)
    assert split_heads(X, H).shape == (B, H, L, d) and transpose_qkv(X, H).shape == (B * H, L, d)
    if H > 1 and d:
        with pytest.raises(ValueError, match="must be divisible by num_heads"):
            split_heads(X[..., 1:], H)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("lens", [None, torch.tensor([3, 1]), torch.tensor([[1, 2, 3], [3, 0, 2]])])
def test_half_precision_scores_past_65504_give_finite_outputs_on_both_paths(dtype, lens):
    """Scores and softmax run in float32 where half precision would overflow to inf (and NaN)."""
    torch.manual_seed(0)
    mha32 = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).eval()
    with torch.no_grad():
        for linear in (mha32.W_q, mha32.W_k, mha32.W_v, mha32.W_o):
            linear.weight.copy_(torch.eye(8))
    x = 200.0 + 40.0 * torch.randn(2, 3, 8)  # scores q.k / sqrt(4) of about 80000
    scores = (x[:, :, :4] @ x[:, :, :4].transpose(1, 2)) / 2
    assert scores.min() > torch.finfo(torch.float16).max  # every score overflows float16
    mha = copy.deepcopy(mha32).to(dtype)
    xh = x.to(dtype)
    want, want_w = mha32(xh.float(), xh.float(), xh.float(), lens, need_weights=True)
    fast = mha(xh, xh, xh, lens)
    clear, weights = mha(xh, xh, xh, lens, need_weights=True)
    for got in (fast, clear, weights):
        assert got.dtype == dtype and torch.isfinite(got).all()
    tol = dict(atol=2.0, rtol=2e-2)  # outputs of about 200, in 8 bits of mantissa (bfloat16)
    torch.testing.assert_close(fast.float(), want, **tol)
    torch.testing.assert_close(clear.float(), want, **tol)
    torch.testing.assert_close(weights.float(), want_w, atol=2e-2, rtol=0)


def test_meta_tensors_are_refused_by_name():
    mha = _module()
    q, k, v = torch.randn(2, 3, 5), torch.randn(2, 4, 4), torch.randn(2, 4, 3)
    meta = lambda x: x.to("meta")  # noqa: E731
    for args, message in (
        ((meta(q), k, v), "queries must hold values, but queries is on the meta device"),
        ((q, meta(k), v), "keys must hold values, but keys is on the meta device"),
        ((q, k, v, meta(torch.tensor([4, 2]))), "valid_lens must hold values, but valid_lens is on the meta device"),
    ):
        for need_weights in (False, True):
            with pytest.raises(ValueError, match=message):
                mha(*args, need_weights=need_weights)
    with pytest.raises(ValueError, match="head_mask must hold values, but head_mask is on the meta device"):
        mha(q, k, v, head_mask=torch.ones(2, device="meta"))
    with pytest.raises(ValueError, match="X must hold values, but X is on the meta device"):
        masked_softmax(torch.ones(2, 3, 4, device="meta"), [1, 2])
    with pytest.raises(ValueError, match="valid_lens must hold values, but valid_lens is on the meta device"):
        check_valid_lens(torch.tensor([1, 2], device="meta"), 2, 3, 4)
    with pytest.raises(ValueError, match="mask must hold values, but mask is on the meta device"):
        keep_to_padding(torch.ones(2, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match="X must hold values, but X is on the meta device"):
        split_heads(torch.ones(1, 2, 4, device="meta"), 2)
