"""What the guards of a ``MultiHeadAttention`` forward cost, counted in dispatched operations.

On a GPU every operation is a kernel launch, and the guards (the overflow fit of the queries,
``mha_lib.attention.fit_queries``, and the rule for NaN and infinite inputs,
``mha_lib.attention.NonFiniteRule``) run on every forward there, on the device (the "device
policy": no host read, ``mha_lib.multihead._read_first`` is False). On the CPU a forward first
reads whether they would change anything (the "CPU policy") and skips them when not.

The count runs on the CPU: :class:`CountOps`, a ``TorchDispatchMode``, sees every ATen
operation a forward dispatches. The device policy is selected as ``tests/core/
test_host_reads.py`` selects it (``_read_first`` patched to False: what it answers for a CUDA
tensor, or one on ``test_device_guard.py``'s other device).

Counted: every operation that computes, allocates or reads (``mm``, ``abs``, ``amax``,
``where``, ``arange``, ``_to_copy``, ``_local_scalar_dense``, ...). Not counted, the operations
of :data:`VIEWS`: they only make another view of the same memory (new sizes, strides or
offset: no kernel runs on a GPU, no element is read), or they are bookkeeping that touches no
data (``detach``, ``alias``). Nothing else is excluded.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mha_lib import MultiHeadAttention, multihead
from mha_lib.masks import causal, padding

aten = torch.ops.aten

#: Views and metadata-only operations: not counted (see the module docstring).
VIEWS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.transpose.int, aten.permute.default, aten.t.default, aten.expand.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.default,
    aten.slice.Tensor, aten.select.int, aten.as_strided.default,
    aten.detach.default, aten.alias.default,
})


class CountOps(TorchDispatchMode):
    """Record every ATen operation dispatched while active (``ops``; ``compute``: less VIEWS)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))

    @property
    def compute(self) -> list[str]:
        return [str(op) for op in self.ops if op not in VIEWS]


B, L, D, H = 2, 6, 16, 2
CASES = {
    "no_mask": lambda: {},
    "causal": lambda: {"mask": causal()},
    "padding": lambda: {"mask": padding(torch.tensor([3, 6]))},
}
#: The most compute operations a forward may dispatch, (policy, case) -> bound.
#: Before issue 49: device 37 / 60 / 69, CPU 26 / 29 / 36 (these counts; the issue's own
#: count, with other exclusions, said 32 and 44 on the device).
BOUNDS = {
    ("device", "no_mask"): 37, ("device", "causal"): 60, ("device", "padding"): 69,
    ("cpu", "no_mask"): 26, ("cpu", "causal"): 29, ("cpu", "padding"): 36,
}
#: The forward without any guard: three projections, the fused kernel, W_o.
UNGUARDED = 5


def count(policy: str, case: str, same_tensor: bool = True) -> CountOps:
    """The operations of one forward (no_grad, eval) under ``policy``."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, D, D, D, H, 0.0).eval()
    x = torch.randn(B, L, D)
    q, k, v = (x, x, x) if same_tensor else (x, x.clone(), x.clone())
    kwargs = CASES[case]()
    read_first = (lambda q: False) if policy == "device" else multihead._read_first
    with mock.patch.object(multihead, "_read_first", read_first), torch.no_grad(), CountOps() as ops:
        mha(q, k, v, **kwargs)
    return ops


def test_the_counter_counts_compute_not_views():
    x = torch.randn(3, 4)
    with CountOps() as ops:
        x.reshape(12).view(3, 4).t()[1:].abs().amax()  # the copy of t().reshape would count
    assert ops.compute == ["aten.abs.default", "aten.amax.default"]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("policy", ["device", "cpu"])
def test_guard_op_counts(policy, case, capsys):
    ops = count(policy, case)
    with capsys.disabled():
        print(f"\n{policy:6} {case:8} {len(ops.compute):3} compute ops: {ops.compute}")
    assert len(ops.compute) <= BOUNDS[policy, case], ops.compute


@pytest.mark.parametrize("case", list(CASES))
def test_distinct_keys_and_values_cost_at_most_a_few_ops_more(case):
    """Cross-attention (keys and values not the queries' tensor) reduces them too."""
    same, distinct = count("device", case), count("device", case, same_tensor=False)
    assert len(distinct.compute) <= len(same.compute) + 4, distinct.compute
