"""Tests for mha_lib.variants and the boolean-mask helpers of mha_lib.mask_conventions.

Every equality between a variant and MultiHeadAttention is checked on hypothesis-generated
shapes and valid-length masks (per example, per query, causal), in float32 and float64.
"""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import (
    MultiHeadAttention,
    causal_valid_lens,
    check_attention_mask,
    keep_mask_from_valid_lens,
    keep_to_padding,
    masked_softmax,
    softmax_over_kept,
    valid_lens_from_keep_mask,
)
from mha_lib.variants import (
    ColumnMajorMultiHeadAttention,
    EinsumMultiHeadAttention,
    HaikuStyleMultiheadAttention,
)

FEW = settings(max_examples=15, deadline=None)
DTYPES = st.sampled_from([torch.float32, torch.float64])


def tol(dtype):
    return {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-9}


@st.composite
def problems(draw, same_length=False):
    """(seed, dtype, B, H, d, Lq, Lk, valid_lens or None) with valid lengths of every kind."""
    B = draw(st.integers(1, 3))
    H = draw(st.integers(1, 3))
    d = draw(st.integers(1, 3))
    Lq = draw(st.integers(1, 5))
    Lk = Lq if same_length else draw(st.integers(1, 5))
    kind = draw(st.sampled_from(["none", "example", "query", "causal"]))
    if kind == "causal":
        Lk = Lq
        valid_lens = causal_valid_lens(B, Lq)
    elif kind == "example":
        valid_lens = torch.tensor(draw(st.lists(st.integers(0, Lk), min_size=B, max_size=B)))
    elif kind == "query":
        rows = st.lists(st.integers(0, Lk), min_size=Lq, max_size=Lq)
        valid_lens = torch.tensor(draw(st.lists(rows, min_size=B, max_size=B)))
    else:
        valid_lens = None
    return draw(st.integers(0, 2**16)), draw(DTYPES), B, H, d, Lq, Lk, valid_lens


@contextlib.contextmanager
def default_dtype(dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def make_mha(D, H, dtype, bias):
    return MultiHeadAttention(D, D, D, D, H, dropout=0.0, bias=bias).to(dtype).eval()


def qkv(B, Lq, Lk, D, dtype):
    return (torch.randn(B, Lq, D, dtype=dtype), torch.randn(B, Lk, D, dtype=dtype),
            torch.randn(B, Lk, D, dtype=dtype))


def seeded_mha_case(problem, bias):
    """A seeded MultiHeadAttention (eval mode) and queries, keys, values for a problem."""
    seed, dtype, B, H, d, Lq, Lk, _ = problem
    torch.manual_seed(seed)
    return make_mha(H * d, H, dtype, bias), qkv(B, Lq, Lk, H * d, dtype)


# --- masking helpers -------------------------------------------------------------------------


@FEW
@given(problems())
def test_softmax_over_kept_equals_masked_softmax_on_valid_lens(problem):
    seed, dtype, B, _, _, Lq, Lk, valid_lens = problem
    torch.manual_seed(seed)
    X = torch.randn(B, Lq, Lk, dtype=dtype)
    if valid_lens is None:
        valid_lens = torch.full((B,), Lk)
    keep = keep_mask_from_valid_lens(valid_lens, Lq, Lk)
    torch.testing.assert_close(softmax_over_kept(X, keep), masked_softmax(X, valid_lens))


@FEW
@given(st.integers(0, 2**16), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4))
def test_softmax_over_kept_any_mask(seed, B, Lq, Lk):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, 2, Lq, Lk, generator=g)
    keep = torch.rand(B, 1, Lq, Lk, generator=g) < 0.5  # broadcast over the head axis
    W = softmax_over_kept(X, keep)
    assert not W.isnan().any()
    assert (W[~keep.expand_as(W)] == 0).all()
    sums = W.sum(-1)
    expected = keep.any(-1).expand_as(sums).to(W.dtype)  # 1 where something is kept, else 0
    torch.testing.assert_close(sums, expected)


def test_softmax_over_kept_rejects_bad_input():
    with pytest.raises(ValueError, match="keep must be a boolean"):
        softmax_over_kept(torch.randn(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="broadcastable"):
        softmax_over_kept(torch.randn(2, 3), torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="X must be a floating-point"):
        softmax_over_kept(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool))


@FEW
@given(problems())
def test_valid_lens_from_keep_mask_roundtrip(problem):
    _, _, B, _, _, Lq, Lk, valid_lens = problem
    if valid_lens is None:
        valid_lens = torch.zeros(B, dtype=torch.long)
    per_query = valid_lens if valid_lens.dim() == 2 else valid_lens[:, None].expand(B, Lq)
    keep = keep_mask_from_valid_lens(valid_lens, Lq, Lk)
    assert torch.equal(valid_lens_from_keep_mask(keep), per_query)


def test_valid_lens_from_keep_mask_rejects_holes_and_bad_types():
    keep = torch.tensor([[[True, False, True]]])
    with pytest.raises(ValueError, match="not a valid-length mask"):
        valid_lens_from_keep_mask(keep)
    with pytest.raises(ValueError, match=r"shape \(B, Lq, Lk\)"):
        valid_lens_from_keep_mask(torch.ones(2, 3, dtype=torch.bool))


def test_causal_valid_lens():
    assert causal_valid_lens(2, 3).tolist() == [[1, 2, 3], [1, 2, 3]]
    keep = keep_mask_from_valid_lens(causal_valid_lens(1, 4), 4, 4)
    assert torch.equal(keep[0], torch.ones(4, 4, dtype=torch.bool).tril())
    assert causal_valid_lens(0, 3).shape == (0, 3) and causal_valid_lens(2, 0).shape == (2, 0)
    with pytest.raises(ValueError, match="num_queries"):
        causal_valid_lens(1, -1)


def test_check_attention_mask_broadcasts_and_reads_integers():
    mask = torch.tensor([[[1, 0, 1]], [[0, 0, 1]]])  # (B, 1, Lk), 0/1 as in the Haiku test
    out = check_attention_mask(mask, 2, 4, 3)
    assert out.shape == (2, 4, 3) and out.dtype == torch.bool
    assert torch.equal(out[:, 2], mask[:, 0].bool())
    with pytest.raises(ValueError, match=r"broadcastable to \(B, Lq, Lk\) = \(2, 4, 3\)"):
        check_attention_mask(torch.ones(3, 4, 3, dtype=torch.bool), 2, 4, 3)
    with pytest.raises(ValueError, match="boolean"):
        check_attention_mask(torch.full((2, 4, 3), 0.5), 2, 4, 3)
    with pytest.raises(ValueError, match="boolean"):
        check_attention_mask(torch.full((2, 4, 3), 2), 2, 4, 3)
    with pytest.raises(ValueError, match="my_mask must be a boolean torch.Tensor"):
        check_attention_mask([[True]], 1, 1, 1, name="my_mask")


# --- einsum variant --------------------------------------------------------------------------


@FEW
@given(problems(), st.booleans())
def test_einsum_from_mha_equals_layernorm_of_mha_plus_q(problem, bias):
    _, dtype, _, H, d, Lq, Lk, valid_lens = problem
    D = H * d
    mha, (q, k, v) = seeded_mha_case(problem, bias)
    block = EinsumMultiHeadAttention.from_mha(mha).eval()
    mask = None
    if valid_lens is not None:
        mask = keep_to_padding(keep_mask_from_valid_lens(valid_lens, Lq, Lk))  # True = masked
    out, attn = block(q, k, v, mask)
    ref, weights = mha(q, k, v, valid_lens, need_weights=True)
    torch.testing.assert_close(out, F.layer_norm(ref + q, (D,)), **tol(dtype))
    # (H, B, Lq, Lk) against (B, H, Lq, Lk)
    torch.testing.assert_close(attn, weights.transpose(0, 1), **tol(dtype))
    assert out.dtype == dtype and not out.isnan().any()


@FEW
@given(problems())
def test_einsum_to_mha_roundtrip(problem):
    seed, dtype, B, H, d, Lq, Lk, valid_lens = problem
    torch.manual_seed(seed)
    D = H * d
    block = EinsumMultiHeadAttention(H, D, d, d, dropout=0.1).to(dtype).eval()
    with torch.no_grad():
        block.layer_norm.weight.uniform_(0.5, 1.5)  # a trained LayerNorm, not the identity
    mha = block.to_mha()
    assert not mha.training
    q, k, v = qkv(B, Lq, Lk, D, dtype)
    mask = None if valid_lens is None else keep_to_padding(keep_mask_from_valid_lens(valid_lens, Lq, Lk))
    torch.testing.assert_close(
        block(q, k, v, mask)[0], block.layer_norm(mha(q, k, v, valid_lens) + q), **tol(dtype)
    )


def test_einsum_separate_head_sizes_and_shapes():
    torch.manual_seed(0)
    block = EinsumMultiHeadAttention(n_head=3, d_model=5, d_k=2, d_v=4)
    q = torch.randn(2, 4, 5)
    kv = torch.randn(2, 6, 5)
    out, attn = block(q, kv, kv)
    assert out.shape == (2, 4, 5) and attn.shape == (3, 2, 4, 6)
    assert block.w_qs.out_features == 6 and block.w_vs.out_features == 12
    assert block.fc.in_features == 12
    with pytest.raises(ValueError, match="n_head \\* d_k == n_head \\* d_v == d_model"):
        block.to_mha()


def test_einsum_initialisation_follows_the_notes():
    torch.manual_seed(0)
    d_model, d_k, d_v = 256, 64, 32
    block = EinsumMultiHeadAttention(4, d_model, d_k, d_v)
    for layer, head in ((block.w_qs, d_k), (block.w_ks, d_k), (block.w_vs, d_v)):
        expected = math.sqrt(2 / (d_model + head))
        assert abs(layer.weight.std().item() / expected - 1) < 0.03
    xavier = math.sqrt(2 / (block.fc.in_features + block.fc.out_features))
    assert abs(block.fc.weight.std().item() / xavier - 1) < 0.03


def test_einsum_fully_masked_row_is_zero_not_nan():
    torch.manual_seed(0)
    block = EinsumMultiHeadAttention(2, 4, 2, 2).eval()
    x = torch.randn(1, 3, 4)
    mask = torch.zeros(1, 3, 3, dtype=torch.bool)
    mask[0, 1] = True  # query 1 may look at nothing
    out, attn = block(x, x, x, mask)
    assert not out.isnan().any() and not attn.isnan().any()
    assert (attn[:, 0, 1] == 0).all()
    torch.testing.assert_close(attn[:, 0, 0].sum(-1), torch.ones(2))


def test_einsum_bad_input():
    block = EinsumMultiHeadAttention(2, 4, 2, 2)
    x = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="k must have feature size d_model = 4"):
        block(x, torch.randn(1, 3, 5), x)
    with pytest.raises(ValueError, match="queries must have 3 dimensions"):
        block(torch.randn(3, 4), x, x)
    with pytest.raises(ValueError, match=r"mask must be broadcastable to \(B, Lq, Lk\)"):
        block(x, x, x, torch.zeros(2, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="n_head must be an integer >= 1"):
        EinsumMultiHeadAttention(0, 4, 2, 2)
    with pytest.raises(ValueError, match="dropout must be a number in"):
        EinsumMultiHeadAttention(2, 4, 2, 2, dropout=1.5)
    with pytest.raises(ValueError, match="one model width"):
        EinsumMultiHeadAttention.from_mha(MultiHeadAttention(3, 4, 4, 4, 2, 0.0))


# --- Haiku-style variant ---------------------------------------------------------------------


@FEW
@given(problems(), st.booleans())
def test_haiku_from_mha_equals_mha(problem, bias):
    _, dtype, _, _, _, Lq, Lk, valid_lens = problem
    mha, (q, k, v) = seeded_mha_case(problem, bias)
    module = HaikuStyleMultiheadAttention.from_mha(mha)
    assert not module.training
    mask = None if valid_lens is None else keep_mask_from_valid_lens(valid_lens, Lq, Lk)
    values, attention = module(q, k, v, mask)
    ref, weights = mha(q, k, v, valid_lens, need_weights=True)
    torch.testing.assert_close(values, ref, **tol(dtype))
    torch.testing.assert_close(attention, weights, **tol(dtype))
    # and back again
    torch.testing.assert_close(module.to_mha()(q, k, v, valid_lens), ref, **tol(dtype))


def test_haiku_tutorial_shapes_and_integer_mask():
    torch.manual_seed(0)
    bs, seq_len, d_model, num_heads = 2, 12, 64, 8
    module = HaikuStyleMultiheadAttention(d_model, num_heads)
    q, k, v = torch.randn(3, bs, seq_len, d_model)
    mask = torch.randint(0, 2, (bs, 1, seq_len))  # 1 = may attend, as in the tutorial's test
    out, attn = module(q, k, v, mask)
    assert out.shape == (bs, seq_len, d_model) and attn.shape == (bs, num_heads, seq_len, seq_len)
    torch.testing.assert_close(module(q, k, v, mask.bool())[0], out)
    hidden = (mask == 0)[:, None].expand_as(attn)  # (B, 1, Lk) -> (B, H, Lq, Lk)
    assert (attn[hidden] == 0).all() and not attn.isnan().any()
    assert all(torch.all(b == 0) for b in (lin.bias for lin in module.lin_projs))


def test_haiku_fully_masked_row_is_zero_not_nan():
    torch.manual_seed(0)
    module = HaikuStyleMultiheadAttention(4, 2)
    x = torch.randn(2, 3, 4)
    keep = torch.ones(2, 3, 3, dtype=torch.bool)
    keep[1] = False  # example 1 may look at nothing
    values, attention = module(x, x, x, keep)
    assert not values.isnan().any() and (attention[1] == 0).all()
    torch.testing.assert_close(values[1], module.lin_projs[-1].bias.expand(3, 4))  # only the bias


def test_haiku_bad_input():
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by num_heads \(3\)"):
        HaikuStyleMultiheadAttention(10, 3)
    module = HaikuStyleMultiheadAttention(4, 2)
    x = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="v must have feature size d_model = 4"):
        module(x, x, torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match="same batch size"):
        module(x, torch.randn(1, 3, 4), torch.randn(1, 3, 4))
    with pytest.raises(ValueError, match="mask must be boolean"):
        module(x, x, x, torch.rand(2, 1, 3))
    with pytest.raises(ValueError, match="must be a mha_lib.MultiHeadAttention"):
        HaikuStyleMultiheadAttention.from_mha(torch.nn.MultiheadAttention(4, 2))


# --- column-major variant --------------------------------------------------------------------


@FEW
@given(problems(same_length=True), st.booleans(), st.booleans(), st.booleans())
def test_column_major_equals_mha_on_transpose(problem, add_connection, stiefel, batched):
    seed, dtype, B, H, d, T, _, _ = problem
    torch.manual_seed(seed)
    N = H * d
    with default_dtype(dtype):  # born in dtype: orthonormal to dtype's precision
        cm = ColumnMajorMultiHeadAttention(N, H, add_connection=add_connection, stiefel=stiefel)
    mha = cm.to_mha()
    Z = torch.randn(B, N, T, dtype=dtype)
    X = Z.transpose(1, 2)  # (B, N, T) -> (B, T, N): tokens as rows
    expected = mha(X, X, X).transpose(1, 2)  # (B, T, N) -> (B, N, T)
    if add_connection:
        expected = expected + Z
    if batched:
        torch.testing.assert_close(cm(Z), expected, **tol(dtype))
    else:
        torch.testing.assert_close(cm(Z[0]), expected[0], **tol(dtype))
    # from_mha reads the same projections back
    again = ColumnMajorMultiHeadAttention.from_mha(mha, add_connection=add_connection, stiefel=stiefel)
    for name in ("PQ", "PK", "PV"):
        torch.testing.assert_close(getattr(again, name), getattr(cm, name), **tol(dtype))
    torch.testing.assert_close(again(Z), cm(Z), **tol(dtype))


def test_column_major_columns_are_probability_vectors():
    torch.manual_seed(0)
    cm = ColumnMajorMultiHeadAttention(6, 3)
    Z = torch.randn(6, 5)
    out, weights = cm(Z, need_weights=True)
    assert out.shape == (6, 5) and weights.shape == (3, 5, 5)
    torch.testing.assert_close(weights.sum(dim=-2), torch.ones(3, 5))  # down each column
    C = cm.correlation_matrices(Z)
    torch.testing.assert_close(weights, torch.softmax(C / math.sqrt(2), dim=-2))
    # [C_i]_{mn} = key m . query n
    i, m, n = 1, 3, 0
    k_m = cm.PK[i].T @ Z[:, m]
    q_n = cm.PQ[i].T @ Z[:, n]
    torch.testing.assert_close(C[i, m, n], k_m @ q_n)


def test_column_major_from_mha_needs_its_design():
    N, H = 4, 2
    mha = MultiHeadAttention(N, N, N, N, H, dropout=0.0)
    with pytest.raises(ValueError, match="W_o must be the identity"):
        ColumnMajorMultiHeadAttention.from_mha(mha)
    with torch.no_grad():
        mha.W_o.weight.copy_(torch.eye(N))
    ColumnMajorMultiHeadAttention.from_mha(mha)  # now fine without the Stiefel constraint
    with pytest.raises(ValueError, match="stiefel=True needs mha.W_q to have orthonormal"):
        ColumnMajorMultiHeadAttention.from_mha(mha, stiefel=True)
    biased = MultiHeadAttention(N, N, N, N, H, dropout=0.0, bias=True)
    with pytest.raises(ValueError, match="mha.W_q must have no bias"):
        ColumnMajorMultiHeadAttention.from_mha(biased)


def test_column_major_bad_input():
    with pytest.raises(ValueError, match=r"dim \(5\) must be divisible by n_heads \(2\)"):
        ColumnMajorMultiHeadAttention(5, 2)
    with pytest.raises(ValueError, match="stiefel must be True or False"):
        ColumnMajorMultiHeadAttention(4, 2, stiefel="yes")
    cm = ColumnMajorMultiHeadAttention(4, 2)
    with pytest.raises(ValueError, match=r"Z must have dim = 4 rows"):
        cm(torch.randn(5, 4))  # tokens given as rows
    with pytest.raises(ValueError, match="Z must have 2 or 3 dimensions"):
        cm(torch.randn(4))


def test_stiefel_constraint_holds_after_optimizer_steps():
    torch.manual_seed(0)
    N, H, T = 6, 2, 5
    free = ColumnMajorMultiHeadAttention(N, H, add_connection=True)
    stiefel = ColumnMajorMultiHeadAttention(N, H, add_connection=True, stiefel=True)
    with torch.no_grad():  # same starting point, on the manifold
        for name in ("PQ", "PK", "PV"):
            setattr(stiefel, name, getattr(free, name).detach().clone())
    start = {name: getattr(stiefel, name).detach().clone() for name in ("PQ", "PK", "PV")}
    Z = torch.randn(8, N, T)
    target = torch.roll(Z, shifts=1, dims=-1)  # copy the previous token
    for model in (free, stiefel):
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        for _ in range(20):
            loss = F.mse_loss(model(Z), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert stiefel.orthonormality_error() < 1e-5
    assert free.orthonormality_error() > 1e-2  # unconstrained training leaves the manifold
    for name in ("PQ", "PK", "PV"):  # the constraint did not freeze the projections: they moved
        assert (getattr(stiefel, name) - start[name]).abs().max() > 1e-2


# --- dtype/device, scaled_dot_product, Stiefel tolerance -------------------------------------


@pytest.mark.parametrize(
    ("make", "call"),
    [
        (lambda: EinsumMultiHeadAttention(2, 4, 2, 2), lambda m, x: m(x, x, x)),
        (lambda: HaikuStyleMultiheadAttention(4, 2), lambda m, x: m(x, x, x)),
        (lambda: ColumnMajorMultiHeadAttention(4, 2), lambda m, x: m(x[0].T)),
        (lambda: ColumnMajorMultiHeadAttention(4, 2),
         lambda m, x: m.correlation_matrices(x[0].T)),
    ],
)
def test_variants_reject_inputs_of_another_dtype(make, call):
    torch.manual_seed(0)
    module = make()
    x = torch.randn(1, 3, 4)
    call(module, x)  # float32 module, float32 input: fine
    with pytest.raises(ValueError, match=r"must have the dtype and device of the module's "
                                         r"parameters \(torch.float32"):
        call(module, x.double())
    with pytest.raises(ValueError, match=r"torch.float64 on cpu\), got torch.float32"):
        call(module.double(), x)


def test_scaled_dot_product_checks_its_operands():
    from mha_lib.variants import scaled_dot_product

    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    values, attention = scaled_dot_product(q, k, v)
    assert values.shape == (2, 3, 6) and attention.shape == (2, 3, 5)
    bad = [
        ((q, torch.randn(2, 5, 3), v), "q and k must have the same size d, got 4 and 3"),
        ((q, k, torch.randn(2, 4, 6)), "k and v must have the same length Lk, got 5 and 4"),
        (([[1.0]], k, v), "q must be a torch.Tensor, got list"),
        ((q, torch.randn(4), v), "k must be a floating-point tensor"),
        ((q, k, v.double()), "v must have the dtype and device of q"),
        ((q, torch.randn(3, 5, 4), torch.randn(3, 5, 6)), "leading axes of q, k and v must broadcast"),
    ]
    for args, match in bad:
        with pytest.raises(ValueError, match=match):
            scaled_dot_product(*args)


def test_column_major_stiefel_tolerance_scales_with_dtype():
    N, H = 4, 2
    mha = MultiHeadAttention(N, N, N, N, H, dropout=0.0).double()
    with torch.no_grad():
        mha.W_o.weight.copy_(torch.eye(N))
        for lin in (mha.W_q, mha.W_k, mha.W_v):
            lin.weight.copy_(torch.eye(N, dtype=torch.float64))  # orthonormal rows in each head
    ColumnMajorMultiHeadAttention.from_mha(mha, stiefel=True)  # exact: accepted
    with torch.no_grad():
        mha.W_q.weight[0, 0] += 1e-7  # far above float64 rounding, below float32's
    with pytest.raises(ValueError, match=r"orthonormal .* up to .* for torch.float64"):
        ColumnMajorMultiHeadAttention.from_mha(mha, stiefel=True)
    ColumnMajorMultiHeadAttention.from_mha(mha.float(), stiefel=True)  # within float32 rounding
