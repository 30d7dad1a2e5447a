"""What the guards of a ``MultiHeadAttention`` forward cost, counted in dispatched operations.

On a GPU every operation is a kernel launch, and the guards (the overflow fit of the queries,
``mha_lib.attention.fit_queries``, and the rule for NaN and infinite inputs,
``mha_lib.attention.NonFiniteRule``) run on every forward there, on the device (the "device
policy": no host read, ``mha_lib.attend._read_first`` is False). On the CPU a forward first
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

from mha_lib import MultiHeadAttention, attend
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
    "valid_lens": lambda: {"valid_lens": torch.tensor([3, 6])},  # (read once, finiteness too)
}
#: The most compute operations a forward may dispatch, (policy, case) -> bound.
#: Before issue 49 these counts were: device 37 / 60 / 69 / 54, CPU 26 / 29 / 36 / 40 (the issue's
#: own count, with other exclusions, said 32 and 44 on the device). Issue 49 asks for at most 12
#: and 14 on the device: not reached (see test_where_the_device_operations_go).
BOUNDS = {
    ("device", "no_mask"): 24, ("device", "causal"): 30, ("device", "padding"): 42,
    ("cpu", "no_mask"): 17, ("cpu", "causal"): 20, ("cpu", "padding"): 27,
    ("device", "valid_lens"): 37, ("cpu", "valid_lens"): 31,
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
    read_first = (lambda q: False) if policy == "device" else attend._read_first
    with mock.patch.object(attend, "_read_first", read_first), torch.no_grad():
        with CountOps() as ops:
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
    """Cross-attention (keys and values not the queries' tensor): a pass over each of them
    (x * 0 and a sum: 2 operations each), their sum, and with a mask their own NaN test."""
    same, distinct = count("device", case), count("device", case, same_tensor=False)
    assert len(distinct.compute) <= len(same.compute) + 6, distinct.compute


def test_where_the_device_operations_go():
    """The device policy's no-mask forward: 5 operations without guards, 4 for the rule for NaN
    and inf (``NonFiniteRule.of``: ``x * 0`` summed over each row of the self-attention's one
    input, their max), 1 to apply it, and 14 for the overflow fit (``fit_queries``: the keys'
    largest finite |k_i|, each row's log2 max_i |q_i| M_i, a power of two). The fit keeps the
    count above issue 49's 12: a per-row bound from max|q| * max|k| alone (fewer operations)
    would scale rows whose scores cannot overflow (q = [2**99, 1] against keys [0, +-10]:
    softmax weights 1 - 2e-9 become 0.78), changing outputs, which the fit promises not to do."""
    from mha_lib.attention import NonFiniteRule, fit_queries

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(B, H, L, D // H, generator=g), torch.randn(B, H, L, D // H, generator=g)
    x = torch.randn(B, L, D, generator=g)
    with torch.no_grad(), CountOps() as fit:
        fit_queries(q, k)
    with torch.no_grad(), CountOps() as rule:
        NonFiniteRule.of(x, x, x, None)
    assert len(fit.compute) <= 14, fit.compute
    assert len(rule.compute) <= 4, rule.compute
    guarded = UNGUARDED + len(fit.compute) + len(rule.compute) + 1  # + 1: the rule's NaN added
    assert len(count("device", "no_mask").compute) <= guarded


# --- the guards in fewer operations compute what they computed before ----------------------------


def _old_fit(queries, keys):
    """fit_queries before issue 49 (its steps, unchanged)."""
    import math

    from mha_lib.attention import _HEADROOM, _score_dtype

    dtype = torch.promote_types(_score_dtype(queries.dtype), torch.float32)
    k = keys.to(dtype)
    largest = torch.where(torch.isfinite(k), k.abs(), 0.0).amax(-2, keepdim=True)
    terms = queries.to(dtype).abs().log2() + largest.log2()
    log_bound = terms.amax(-1) + math.log2(queries.shape[-1])
    limit = int(math.log2(torch.finfo(_score_dtype(queries.dtype)).max)) - _HEADROOM
    shift = torch.nan_to_num(log_bound - limit, nan=0.0, posinf=0.0, neginf=0.0)
    return queries * torch.exp2(-shift.clamp(min=0).ceil())[..., None].to(queries.dtype)


def _old_rule(queries, keys, values, keep):
    """NonFiniteRule.of before issue 49: (nan_rows, the pairs with a NaN or inf, or None)."""
    if keep is None:
        used = (keys * 0).sum((1, 2)) + (values * 0).sum((1, 2))
        rows = (queries * 0).sum(-1) + used[:, None]
        return rows * 0, None
    finite_q = torch.isfinite(queries).all(-1)
    finite_kv = torch.isfinite(keys).all(-1) & torch.isfinite(values).all(-1)
    broken = (keep & ~finite_kv[:, None, :]).any(-1) | (~finite_q & keep.any(-1))
    return torch.zeros(broken.shape, dtype=queries.dtype).masked_fill(broken, float("nan")), ~finite_kv


def _poke(x, g, p=0.1):
    """x with some entries NaN, +inf or -inf, and some rows scaled near or past float32's range."""
    x = x.clone()
    pick = torch.rand(x.shape, generator=g)
    x[pick < p / 3] = float("nan")
    x[(pick >= p / 3) & (pick < 2 * p / 3)] = float("inf")
    x[(pick >= 2 * p / 3) & (pick < p)] = -float("inf")
    scale = 2.0 ** torch.randint(-20, 70, x.shape[:-1] + (1,), generator=g).to(x.dtype)
    return x * scale


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_fit_queries_gives_the_bits_of_before(seed, dtype):
    from mha_lib.attention import fit_queries

    g = torch.Generator().manual_seed(seed)
    q = _poke(torch.randn(2, 3, 5, 4, generator=g), g).to(dtype)
    k = _poke(torch.randn(2, 3, 7, 4, generator=g), g).to(dtype)
    if dtype == torch.float64:
        q, k = q * 2.0**400, k * 2.0**500  # past float64's limit too
    torch.testing.assert_close(fit_queries(q, k), _old_fit(q, k), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("mask", ["none", "causal", "causal_visible", "rows_that_see_nothing"])
@pytest.mark.parametrize("inputs", ["self", "cross", "shared_kv"])
def test_the_rule_gives_the_rows_of_before(seed, mask, inputs):
    from mha_lib.attention import NonFiniteRule
    from mha_lib.masking import visible

    g = torch.Generator().manual_seed(seed)
    x = _poke(torch.randn(3, 6, 4, generator=g), g)
    y, z = (_poke(torch.randn(3, 6, 4, generator=g), g) for _ in range(2))
    q, k, v = {"self": (x, x, x), "cross": (x, y, z), "shared_kv": (x, y, y)}[inputs]
    tril = torch.ones(6, 6, dtype=torch.bool).tril()[None]
    keep = {"none": None, "causal": tril, "causal_visible": tril,
            "rows_that_see_nothing": torch.rand(3, 6, 6, generator=g) < 0.2}[mask]
    seen = visible(causal(), 3, 6, 6, device=x.device)  # the layer's context: a running sum
    assert seen.causal
    rule = NonFiniteRule.of(q, k, v, seen if mask == "causal_visible" else keep)
    nan_rows, broken_kv = _old_rule(q, k, v, keep)
    torch.testing.assert_close(rule.nan_rows, nan_rows, rtol=0, atol=0, equal_nan=True)
    if keep is None:
        assert rule.broken_kv is None
    else:
        assert torch.equal(rule.broken_kv, broken_kv)
