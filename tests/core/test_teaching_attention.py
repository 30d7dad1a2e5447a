"""The teaching class: at most 25 statements, and the numbers of MultiHeadAttention."""

import ast
import inspect
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import MultiHeadAttention, causal_valid_lens, keep_mask_from_valid_lens
from mha_lib.teaching import TeachingAttention


def _statements(cls) -> int:
    """Statements of the class body (docstrings excluded), counted by Python's own parser."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    count = 0
    for node in ast.walk(tree.body[0]):
        if isinstance(node, ast.stmt) and not (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            count += 1
    return count - 1  # the class statement itself


def test_at_most_25_statements():
    assert _statements(TeachingAttention) <= 25


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 3), Lq=st.integers(1, 5), Lk=st.integers(1, 6), H=st.integers(1, 4),
       d=st.integers(1, 4), bias=st.booleans(), data=st.data(), seed=st.integers(0, 2**16))
def test_same_numbers_as_the_library(B, Lq, Lk, H, d, bias, data, seed):
    torch.manual_seed(seed)
    D = H * d
    mha = MultiHeadAttention(D, D, D, D, H, 0.0, bias=bias).double().eval()
    tiny = TeachingAttention(D, H, bias=bias).double()
    tiny.load_state_dict(mha.state_dict())  # the same names: W_q, W_k, W_v, W_o
    q, k, v = (torch.randn(B, L, D, dtype=torch.float64) for L in (Lq, Lk, Lk))
    lens = torch.tensor(data.draw(st.lists(st.integers(1, Lk), min_size=B * Lq, max_size=B * Lq)))
    lens = lens.reshape(B, Lq)
    keep = keep_mask_from_valid_lens(lens, Lq, Lk)  # (B, Lq, Lk)
    torch.testing.assert_close(tiny(q, k, v, keep), mha(q, k, v, lens), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(tiny(q, k, v), mha(q, k, v), rtol=1e-12, atol=1e-12)


def test_causal_float32():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).eval()
    tiny = TeachingAttention(8, 2)
    tiny.load_state_dict(mha.state_dict())
    x = torch.randn(2, 5, 8)
    keep = keep_mask_from_valid_lens(causal_valid_lens(2, 5), 5, 5)
    torch.testing.assert_close(tiny(x, x, x, keep), mha(x, x, x, causal_valid_lens(2, 5)))


@pytest.mark.parametrize("args, name", [
    ((8, 3), "d_model"), ((0, 1), "d_model"), ((8, 0), "num_heads"), ((8, 2, 1), "bias"),
])
def test_bad_sizes(args, name):
    with pytest.raises(ValueError, match=name):
        TeachingAttention(*args)


def test_bad_inputs():
    tiny = TeachingAttention(4, 2)
    x = torch.randn(1, 3, 4)
    for call, name in [
        (lambda: tiny(x[0], x, x), "queries"),
        (lambda: tiny(torch.randn(1, 3, 5), x, x), "queries"),
        (lambda: tiny(x, x, x.double()), "values"),
        (lambda: tiny(x, x, x, torch.ones(1, 3, 3)), "keep"),
        (lambda: tiny(x, x, x, torch.ones(1, 3, 2, dtype=torch.bool)), "keep"),
    ]:
        with pytest.raises(ValueError, match=name):
            call()
