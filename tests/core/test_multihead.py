"""MultiHeadAttention: the chapter's toy test, PyTorch agreement, gradients, errors."""

import pytest
import torch

from mha_lib import MultiHeadAttention, padding_mask_from_valid_lens
from mha_lib.interop import _torch_attn_mask, to_torch_mha


def test_d2l_toy_test_verbatim():
    d_model, num_heads = 100, 5
    attention = MultiHeadAttention(d_model, d_model, d_model, d_model, num_heads, 0.5)
    attention.eval()
    batch_size, num_queries, num_kvpairs, valid_lens = 2, 4, 6, torch.tensor([3, 2])
    X = torch.ones((batch_size, num_queries, d_model))
    Y = torch.ones((batch_size, num_kvpairs, d_model))
    assert attention(X, Y, Y, valid_lens).shape == (batch_size, num_queries, d_model)


def test_children_and_sizes():
    mha = MultiHeadAttention(key_size=3, query_size=5, value_size=7, d_model=8, num_heads=2, dropout=0.0)
    assert (mha.W_q.in_features, mha.W_k.in_features, mha.W_v.in_features, mha.W_o.in_features) == (5, 3, 7, 8)
    assert mha.W_q.bias is None and mha.num_heads == 2 and mha.head_size == 4 and mha.d_model == 8
    assert MultiHeadAttention(3, 5, 7, 8, 2, 0.0, bias=True).W_o.bias is not None


def _inputs(B=2, Lq=4, Lk=6, size=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Lq, size, generator=g, dtype=dtype),
            torch.randn(B, Lk, size, generator=g, dtype=dtype),
            torch.randn(B, Lk, size, generator=g, dtype=dtype))


@pytest.mark.parametrize("bias", [False, True])
def test_agrees_with_torch_multihead_attention(bias):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0, bias=bias).eval()
    q, k, v = _inputs()
    valid_lens = torch.tensor([3, 6])
    out, weights = mha(q, k, v, valid_lens, need_weights=True)
    ref_out, ref_weights = to_torch_mha(mha)(
        q, k, v, key_padding_mask=padding_mask_from_valid_lens(valid_lens, 6),
        need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, ref_weights, atol=1e-5, rtol=1e-5)


def test_agrees_with_torch_for_causal_2d_valid_lens_and_distinct_sizes():
    torch.manual_seed(1)
    mha = MultiHeadAttention(key_size=3, query_size=8, value_size=5, d_model=8, num_heads=4, dropout=0.0).eval()
    B, L = 2, 5
    q = torch.randn(B, L, 8)
    k, v = torch.randn(B, L, 3), torch.randn(B, L, 5)
    causal = torch.arange(1, L + 1).repeat(B, 1)  # (B, Lq): query i sees keys 0..i
    out, weights = mha(q, k, v, causal, need_weights=True)
    ref_out, _ = to_torch_mha(mha)(q, k, v, attn_mask=_torch_attn_mask(causal, 4, L, L))
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    assert (weights.triu(diagonal=1) == 0).all()


def test_to_torch_refuses_what_torch_cannot_express():
    with pytest.raises(ValueError, match="query_size == d_model"):
        to_torch_mha(MultiHeadAttention(4, 6, 4, 8, 2, 0.0))


def test_float64_gradcheck():
    torch.manual_seed(0)
    mha = MultiHeadAttention(3, 4, 5, 6, 3, 0.0, bias=True).double().eval()
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    for need_weights in (True, False):
        def f(q, k, v):
            out = mha(q, k, v, torch.tensor([2, 0]), need_weights=need_weights)
            return out[0] if need_weights else out
        assert torch.autograd.gradcheck(f, (q, k, v))


@pytest.mark.parametrize("valid", range(0, 5))
@pytest.mark.parametrize("need_weights", [True, False])
def test_gradients_finite_for_every_valid_length(valid, need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0)
    q, k, v = (t.requires_grad_() for t in _inputs(B=1, Lq=3, Lk=4, size=4))
    out = mha(q, k, v, [valid], need_weights=need_weights)
    out = out[0] if need_weights else out
    assert torch.isfinite(out).all()
    out.sum().backward()
    for t in (q, k, v, mha.W_q.weight, mha.W_o.weight):
        assert torch.isfinite(t.grad).all()


def test_valid_length_zero_attends_to_nothing():
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0, bias=True).eval()
    q, k, v = _inputs()
    out, weights = mha(q, k, v, torch.tensor([0, 6]), need_weights=True)
    assert (weights[0] == 0).all()
    torch.testing.assert_close(out[0], mha.W_o.bias.expand(4, 8))  # W_o applied to zeros


def test_train_mode_applies_dropout_eval_is_deterministic():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.5)
    q, k, v = _inputs(Lq=16, Lk=16)
    for need_weights in (True, False):
        mha.train()
        run = lambda: mha(q, k, v, need_weights=need_weights)  # noqa: E731
        first, second = run(), run()
        first, second = (first[0], second[0]) if need_weights else (first, second)
        assert not torch.equal(first, second)
        mha.eval()
        first, second = run(), run()
        first, second = (first[0], second[0]) if need_weights else (first, second)
        assert torch.equal(first, second)


def test_head_mask_removes_heads():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).eval()
    q, k, v = _inputs()
    only_head_0 = mha(q, k, v, head_mask=torch.tensor([1.0, 0.0]))
    with torch.no_grad():
        mha.W_o.weight[:, 4:] = 0  # head 1's columns of W_o
    torch.testing.assert_close(only_head_0, mha(q, k, v))
    per_example = mha(q, k, v, head_mask=torch.tensor([[1.0, 1.0], [0.0, 0.0]]), need_weights=True)[0]
    assert (per_example[1] == 0).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(d_model=10, num_heads=3), r"d_model \(10\) must be divisible by num_heads \(3\)"),
        (dict(num_heads=0), "num_heads must be an integer >= 1, got 0"),
        (dict(dropout=1.0), r"dropout must be a number in \[0, 1\), got 1.0"),
        (dict(dropout=-0.5), r"dropout must be a number in \[0, 1\)"),
        (dict(key_size=0), "key_size must be an integer >= 1"),
        (dict(d_model=2.5), "d_model must be an integer >= 1"),
    ],
)
def test_bad_configuration(kwargs, message):
    args = dict(key_size=4, query_size=4, value_size=4, d_model=8, num_heads=2, dropout=0.0) | kwargs
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**args)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(q=torch.randn(2, 4, 5)), r"queries must have feature size query_size = 8, got 5"),
        (dict(k=torch.randn(2, 6, 3)), r"keys must have feature size key_size = 8, got 3"),
        (dict(v=torch.randn(2, 6, 2)), r"values must have feature size value_size = 8, got 2"),
        (dict(v=torch.randn(2, 5, 8)), "keys and values must have the same length Lk, got 6 keys and 5 values"),
        (dict(q=torch.randn(3, 4, 8)), "same batch size, got 3, 2 and 2"),
        (dict(valid_lens=torch.tensor([3, 2, 1])), "valid_lens has 3 rows but the batch has 2"),
        (dict(valid_lens=torch.ones(2, 3)), r"valid_lens of shape \(2, 3\) must be \(B, Lq\) = \(2, 4\)"),
        (dict(valid_lens=torch.ones(2, 4, 1)), "valid_lens must have shape"),
        (dict(valid_lens=torch.tensor([-1, 2])), "valid_lens must be >= 0"),
        (dict(valid_lens=torch.tensor([2.5, 2.0])), "valid_lens must be whole numbers"),
        (dict(valid_lens=torch.tensor([7, 2])), "valid_lens must be <= the number of key-value pairs Lk = 6"),
        (dict(head_mask=torch.ones(3)), r"head_mask must have shape \(H,\) = \(2,\) or \(B, H\) = \(2, 2\), got \(3,\)"),
        (dict(q=torch.randn(4, 8)), "queries must have 3 dimensions"),
    ],
)
def test_bad_input_is_named(change, message):
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0)
    q, k, v = _inputs()
    args = dict(q=q, k=k, v=v, valid_lens=None, head_mask=None) | change
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=message):
            mha(args["q"], args["k"], args["v"], args["valid_lens"],
                need_weights=need_weights, head_mask=args["head_mask"])


def test_dtype_and_device_mismatch_is_named():
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0)
    q, k, v = _inputs(dtype=torch.float64)
    with pytest.raises(ValueError, match="queries are torch.float64 on cpu but the module's weights are torch.float32"):
        mha(q, k, v)


@pytest.mark.parametrize(
    "head_mask, message",
    [
        ("ab", "head_mask must be a tensor of gates"),
        (torch.tensor([True, False]), "head_mask must hold real numbers"),
        ([float("nan"), 1.0], "head_mask must be finite"),
    ],
)
def test_bad_head_mask_values(head_mask, message):
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0)
    with pytest.raises(ValueError, match=message):
        mha(*_inputs(), head_mask=head_mask)


def test_head_mask_keeps_its_gradient():
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0)
    gates = torch.ones(2, requires_grad=True)
    mha(*_inputs(), head_mask=gates).sum().backward()
    assert gates.grad is not None and torch.isfinite(gates.grad).all()


def test_flags_must_be_booleans():
    with pytest.raises(ValueError, match="need_weights must be True or False, got 'no'"):
        MultiHeadAttention(8, 8, 8, 8, 2, 0.0)(*_inputs(), need_weights="no")
    with pytest.raises(ValueError, match="bias must be True or False"):
        MultiHeadAttention(8, 8, 8, 8, 2, 0.0, bias="no")


def test_to_torch_needs_our_module():
    with pytest.raises(ValueError, match="mha must be an mha_lib.MultiHeadAttention, got str"):
        to_torch_mha("x")


def test_attend_heads_and_cached_keys_values_name_bad_arguments():
    from mha_lib.attention import FiniteDotProductAttention
    from mha_lib.decoding import KVCache
    from mha_lib.attend import attend_heads
    from mha_lib.multihead import cached_keys_values

    attention = FiniteDotProductAttention(0.0)
    q, k = torch.randn(2, 4, 3, 5), torch.randn(2, 2, 6, 5)
    out, weights = attend_heads(q, k, k, torch.tensor([6, 0]), attention, need_weights=True)
    assert out.shape == (2, 4, 3, 5) and weights.shape == (2, 4, 3, 6) and (out[1] == 0).all()
    cases = [
        (lambda: attend_heads(q, torch.randn(2, 3, 6, 5), k, None, attention), "Hkv dividing H"),
        (lambda: attend_heads(q, k, k.double(), None, attention), "k and v must both have shape|v is torch.float64"),
        (lambda: attend_heads(q[0], k, k, None, attention), "q must have 4 dimensions"),
        (lambda: attend_heads(q, k, k, None, "sdpa"), "attention must be a mha_lib.DotProductAttention"),
        (lambda: attend_heads(q, k, k, torch.tensor([7, 1]), attention), "valid_lens must be <="),
        (lambda: attend_heads(q, k, k, None, attention, gates=torch.ones(4)), r"gates must be a tensor of shape \(B, H\)"),
        (lambda: cached_keys_values({}, k, k, None, None), "cache must be a mha_lib.decoding.KVCache"),
        (lambda: cached_keys_values(KVCache(), k, k, torch.tensor([7, 1]), None), "valid_lens must be <= .* Lk = 6"),
        (lambda: cached_keys_values(KVCache(), k, k, None, torch.tensor([[0.5] * 6] * 2)), "positions must hold integers"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
