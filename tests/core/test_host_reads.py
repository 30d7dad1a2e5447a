"""Reading a value from the device (``.item()``, ``bool(t)``, ``.tolist()``, ...) waits for it:
an attention layer's forward reads nothing without valid lengths and head gates, and reads
once with them (their values and, for the NaN/inf rule, whether the inputs are finite).

On the CPU, where a read waits for nothing, every attention call reads one value more by design
(whether its guards would change anything: ``mha_lib.attend._read_first``). These tests count
the reads of the other devices: the ``gpu_policy`` fixture makes the layers act as there (the
device guard, ``test_device_guard.py``, counts them on another device), and
``test_on_the_cpu_the_guards_cost_one_read`` counts the CPU's."""

import contextlib
from unittest import mock

import pytest
import torch

from mha_lib import MultiHeadAttention, attend
from mha_lib.decoding import KVCache
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.masking import CheckedLens, masked_softmax

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy")


@contextlib.contextmanager
def counted_reads():
    """Count the calls of the Tensor methods that read a value back to the host."""
    calls = []

    def counting(name, original):
        def method(self, *args, **kwargs):
            calls.append(name)
            return original(self, *args, **kwargs)
        return method

    with contextlib.ExitStack() as stack:
        for name in READS:
            stack.enter_context(mock.patch.object(torch.Tensor, name, counting(name, getattr(torch.Tensor, name))))
        yield calls


@pytest.fixture(autouse=True)
def gpu_policy(request, monkeypatch):
    """The layers' read policy of a GPU (their guards always run, on the device)."""
    if "cpu_policy" not in request.keywords:
        monkeypatch.setattr(attend, "_read_first", lambda q: False)


def _inputs(B=2, Lq=3, Lk=5, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, n, D, generator=g) for n in (Lq, Lk, Lk))


def test_the_counter_counts():
    with counted_reads() as calls:
        torch.ones(2).sum().item()
        bool(torch.ones(()) > 0)
    assert calls == ["item", "__bool__"]


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize(
    "valid_lens, gates, reads",
    [
        (None, None, 0),
        (torch.tensor([5, 2]), None, 1),
        (torch.tensor([[1, 2, 3], [5, 0, 4]]), None, 1),
        ([5.0, 2.0], None, 1),  # a list of whole-number floats
        (None, torch.tensor([1.0, 0.5]), 1),  # the gates must be finite
        (torch.tensor([5, 2]), torch.tensor([1.0, 0.5]), 1),
    ],
)
def test_multihead_attention_reads_at_most_once(need_weights, valid_lens, gates, reads):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).eval()
    q, k, v = _inputs()
    with counted_reads() as calls:
        mha(q, k, v, valid_lens, need_weights=need_weights, head_mask=gates)
    assert len(calls) == reads, calls


@pytest.mark.parametrize("need_weights", [False, True])
def test_non_finite_inputs_cost_no_extra_read(need_weights):
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).eval()
    q, k, v = _inputs()
    k[1, 4, 0] = float("inf")  # masked for example 1 (valid length 2)
    for lens, reads in ((None, 0), (torch.tensor([5, 2]), 1)):
        with counted_reads() as calls:
            out = mha(q, k, v, lens, need_weights=need_weights)
        out = out[0] if need_weights else out
        assert len(calls) == reads, calls
        if lens is None:  # example 1 attends to its infinite key
            assert out[1].isnan().all() and torch.isfinite(out[0]).all()
        else:  # the key is past example 1's valid length
            assert torch.isfinite(out).all()


@pytest.mark.parametrize("need_weights", [False, True])
def test_grouped_query_attention_and_decoding_read_at_most_once(need_weights):
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(8, 4, 2, 0.0, rope=True).eval()
    x = torch.randn(2, 4, 8)
    for lens, reads in ((None, 0), (torch.tensor([4, 1]), 1)):
        with counted_reads() as calls:
            gqa(x, x, x, lens, need_weights=need_weights)
        assert len(calls) == reads, calls
    cache = KVCache()
    with torch.no_grad(), counted_reads() as calls:
        gqa(x, x, x, cache=cache, need_weights=need_weights)  # prefill, causal
        gqa(x[:, :1], x[:, :1], x[:, :1], cache=cache, need_weights=need_weights)  # one step
    assert calls == []
    with torch.no_grad(), counted_reads() as calls:  # explicit positions: the cache checks them
        gqa(x[:, :1], x[:, :1], x[:, :1], cache=cache, positions=torch.tensor([[5], [3]]))
    assert len(calls) == 1, calls


def test_checked_lens_are_not_read_again():
    X = torch.randn(2, 3, 4)
    checked = CheckedLens(torch.tensor([1, 4]), 1, 4)
    with counted_reads() as calls:
        W = masked_softmax(X, checked)
    assert calls == []
    torch.testing.assert_close(W, masked_softmax(X, torch.tensor([1, 4])))


@pytest.mark.cpu_policy
@pytest.mark.parametrize("need_weights", [False, True])
def test_on_the_cpu_the_guards_cost_one_read(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).eval()
    q, k, v = _inputs()
    for lens, reads in ((None, 1), (torch.tensor([5, 2]), 2)):
        with counted_reads() as calls:
            mha(q, k, v, lens, need_weights=need_weights)
        assert len(calls) == reads, calls
