"""Tiled attention with the online softmax equals materialised attention, for any block size."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.attention import DotProductAttention
from mha_lib.flash import online_softmax_blocks, tiled_attention, tiled_attention_steps

_attention = DotProductAttention(0.0).eval()


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 3),
    Lq=st.integers(1, 7),
    Lk=st.integers(1, 20),
    block_size=st.integers(1, 25),
    masked=st.sampled_from(["none", "example", "query"]),
    scale=st.sampled_from([1.0, 30.0]),
    seed=st.integers(0, 2**16),
)
def test_equals_materialised_attention(B, Lq, Lk, block_size, masked, scale, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Lq, 4, generator=g) * scale  # scale 30: scores far apart, exp overflows naively
    k, v = torch.randn(B, Lk, 4, generator=g), torch.randn(B, Lk, 3, generator=g)
    valid_lens = {
        "none": None,
        "example": torch.randint(0, Lk + 1, (B,), generator=g),
        "query": torch.randint(0, Lk + 1, (B, Lq), generator=g),
    }[masked]
    out = tiled_attention(q, k, v, valid_lens, block_size=block_size)
    assert not out.isnan().any()
    torch.testing.assert_close(out, _attention(q, k, v, valid_lens), atol=1e-5, rtol=1e-5)


def test_matches_sdpa_and_float64():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 33, 8, dtype=torch.float64), torch.randn(2, 70, 8, dtype=torch.float64), torch.randn(2, 70, 8, dtype=torch.float64)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=16),
                               F.scaled_dot_product_attention(q, k, v))


def test_valid_length_zero_gives_zeros():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    out = tiled_attention(q, k, v, torch.tensor([0, 0]), block_size=2)
    assert torch.equal(out, torch.zeros(2, 3, 4))
    out = tiled_attention(q, k, v, torch.tensor([[0, 1, 5], [2, 0, 0]]), block_size=2)
    assert torch.equal(out[0, 0], torch.zeros(4)) and torch.equal(out[1, 1:], torch.zeros(2, 4))
    assert not out.isnan().any()


def test_steps_end_at_the_output_and_see_every_block():
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 2, 4), torch.randn(1, 10, 4), torch.randn(1, 10, 4)
    steps = tiled_attention_steps(q, k, v, block_size=4)
    assert [s.keys_seen for s in steps] == [4, 8, 10]
    torch.testing.assert_close(steps[-1].output, tiled_attention(q, k, v, block_size=4))
    torch.testing.assert_close(steps[0].output, _attention(q, k[:, :4], v[:, :4]))
    scores = q @ k.transpose(1, 2) / 2  # d = 4: sqrt(d) = 2
    torch.testing.assert_close(steps[-1].running_max, scores.amax(-1))
    maxima = torch.stack([s.running_max for s in steps])
    assert (maxima[1:] >= maxima[:-1]).all()  # the running max never decreases
    # blocks past the longest valid length are skipped
    assert [s.keys_seen for s in tiled_attention_steps(q, k, v, [5], block_size=4)] == [4, 8]


def test_bad_input_raises_value_error():
    q, k, v = torch.randn(1, 2, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="block_size"):
        tiled_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="valid_lens"):
        tiled_attention(q, k, v, torch.tensor([4]))
    with pytest.raises(ValueError, match="feature size"):
        tiled_attention(q, torch.randn(1, 3, 5), v)
    with pytest.raises(ValueError, match="same length"):
        tiled_attention(q, k, torch.randn(1, 4, 4))
    with pytest.raises(ValueError, match="dimensions"):
        tiled_attention(q[0], k, v)


def test_online_softmax_blocks_checks_its_arguments_and_yields_states():
    q, k, v = torch.randn(1, 2, 4), torch.randn(1, 6, 4), torch.randn(1, 6, 4)
    states = list(online_softmax_blocks(q, k, v, block_size=4))
    assert [s.keys_seen for s in states] == [4, 6]
    with pytest.raises(ValueError, match="block_size"):
        list(online_softmax_blocks(q, k, v, block_size=-1))
    # valid length 0 everywhere: one state, nothing seen, zeros out
    (state,) = online_softmax_blocks(q, k, v, [0])
    assert state.keys_seen == 0 and torch.equal(state.output, torch.zeros(1, 2, 4))


def test_gradients_equal_those_of_materialised_attention():
    torch.manual_seed(4)
    inputs = [torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True),
              torch.randn(2, 9, 4, dtype=torch.float64, requires_grad=True),
              torch.randn(2, 9, 3, dtype=torch.float64, requires_grad=True)]
    valid_lens = torch.tensor([[9, 1, 0, 4, 6], [2, 2, 9, 9, 3]])
    grads = []
    for fn in (lambda q, k, v: tiled_attention(q, k, v, valid_lens, block_size=4),
               lambda q, k, v: _attention(q, k, v, valid_lens)):
        (fn(*inputs) ** 2).sum().backward()
        grads.append([x.grad.clone() for x in inputs])
        for x in inputs:
            x.grad = None
    for ours, theirs in zip(*grads):
        torch.testing.assert_close(ours, theirs)
