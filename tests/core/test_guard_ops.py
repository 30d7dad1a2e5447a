"""What the guards of a ``MultiHeadAttention`` forward cost, counted in dispatched operations.

On a GPU every operation is a kernel launch, and the guards (the overflow fit of the queries,
``mha_lib.attention.fit_queries``, and the rule for NaN and infinite inputs,
``mha_lib.attention.NonFiniteRule``) run on every forward there, on the device (the "device
policy": no host read, ``mha_lib.attend._read_first`` is False). On the CPU a forward first
reads whether they would change anything (the "CPU policy") and skips them when not.

The count runs on the CPU with the library's counter, :func:`mha_lib.bench.ops.count_ops`
(a ``TorchDispatchMode`` that sees every ATen operation a forward dispatches; the operations
of its ``VIEWS`` are not counted: its module docstring says which and why). It selects
the device policy as ``tests/core/test_host_reads.py`` does (``_read_first`` answering False:
what it answers for a CUDA tensor, or one on ``test_device_guard.py``'s other device).
"""

from __future__ import annotations

import pytest
import torch

from mha_lib import MultiHeadAttention
from mha_lib.bench.ops import count_ops, format_guard_op_table, guard_op_table
from mha_lib.masks import causal, padding

B, L, D, H = 2, 6, 16, 2
CASES = {
    "no_mask": lambda: {},
    "causal": lambda: {"mask": causal()},
    "padding": lambda: {"mask": padding(torch.tensor([3, 6]))},
    "valid_lens": lambda: {"valid_lens": torch.tensor([3, 6])},  # (read once, finiteness too)
}
#: The most compute operations a forward may dispatch, (policy, case) -> bound.
#: Before issue 49 these counts were: device 37 / 60 / 69 / 54, CPU 26 / 29 / 36 / 40 (the issue's
#: own count, with other exclusions, said 32 and 44 on the device); after its first round
#: device 24 / 30 / 42 / 37. Issue 49 asks for at most 12 without a mask and 14 causal on the
#: device: the overflow fit and the rule's NaN rows in one pass (see
#: test_where_the_device_operations_go), and the causal mask built only when asked for.
BOUNDS = {
    ("device", "no_mask"): 12, ("device", "causal"): 14, ("device", "padding"): 33,
    ("cpu", "no_mask"): 17, ("cpu", "causal"): 17, ("cpu", "padding"): 27,
    ("device", "valid_lens"): 29, ("cpu", "valid_lens"): 31,
}
#: The forward without any guard: three projections, the fused kernel, W_o.
UNGUARDED = 5


def count(policy: str, case: str, same_tensor: bool = True) -> list[str]:
    """The compute operations of one forward (no_grad, eval) under ``policy``."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, D, D, D, H, 0.0).eval()
    x = torch.randn(B, L, D)
    q, k, v = (x, x, x) if same_tensor else (x, x.clone(), x.clone())
    kwargs = CASES[case]()
    return count_ops(lambda: mha(q, k, v, **kwargs), policy=policy)


def test_the_counter_counts_compute_not_views():
    x = torch.randn(3, 4)
    ops = count_ops(lambda: x.reshape(12).view(3, 4).t()[1:].abs().amax())
    assert ops == ["aten.abs.default", "aten.amax.default"]  # the copy of t().reshape would count


def test_count_ops_refuses_a_bad_policy_or_fn():
    for policy in ("gpu", "DEVICE", None, 0):
        with pytest.raises(ValueError, match="policy"):
            count_ops(lambda: None, policy=policy)
    for fn in (None, 3, "x.abs()"):
        with pytest.raises(ValueError, match="fn"):
            count_ops(fn)
    with pytest.raises(ValueError, match=r"policy must be one of \('device', 'cpu'\), got 'gpu'"):
        count_ops(lambda: None, policy="gpu")


def test_count_ops_restores_the_policy_and_runs_without_grad():
    from mha_lib import attend

    read_first = attend._read_first
    x = torch.randn(3, requires_grad=True)
    seen = []

    def fn():
        seen.append((attend._read_first(x), torch.is_grad_enabled()))
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        count_ops(fn)
    assert attend._read_first is read_first
    count_ops(lambda: seen.append((attend._read_first(x), torch.is_grad_enabled())), policy="cpu")
    assert seen == [(False, False), (True, False)]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("policy", ["device", "cpu"])
def test_guard_op_counts(policy, case, capsys):
    ops = count(policy, case)
    with capsys.disabled():
        print(f"\n{policy:6} {case:8} {len(ops):3} compute ops: {ops}")
    assert len(ops) <= BOUNDS[policy, case], ops


@pytest.mark.parametrize("case", list(CASES))
def test_distinct_keys_and_values_cost_at_most_a_few_ops_more(case):
    """Cross-attention (keys and values not the queries' tensor): a pass over each of them
    (x * 0 and a sum: 2 operations each), their sum, and with a mask their own NaN test."""
    same, distinct = count("device", case), count("device", case, same_tensor=False)
    assert len(distinct) <= len(same) + 6, distinct


def test_where_the_device_operations_go():
    """The device policy's forwards: 5 operations without guards (three projections, the
    kernel, W_o); 1 for the rule for NaN and inf (``NonFiniteRule.of``: the sum in float64 of
    the self-attention's one input over each example without a mask, its running sum causal,
    finite exactly when the entries are); 2 causal to zero the keys' and values' NaN and inf;
    5 for the overflow fit (``fit_queries``: the keys' largest |k_i|, each row's terms
    |q_i| M_i d / 2**100, their largest, the divisor, the division in place); 1 to add
    ``0 * rows`` to the kernel's output (NaN on the broken rows). The fit stays per row: a bound
    from max|q| * max|k| alone would scale rows whose scores cannot overflow (q = [2**99, 1]
    against keys [0, +-10]: softmax weights 1 - 2e-9 become 0.78), changing outputs, which the
    fit promises not to do. The NaN cannot ride on the queries into the kernel: some of
    PyTorch's kernels give a NaN query row zeros (see test_a_nan_query_row_is_not_enough)."""
    from mha_lib.attention import NonFiniteRule, fit_queries
    from mha_lib.masking import visible

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(B, H, L, D // H, generator=g), torch.randn(B, H, L, D // H, generator=g)
    v, x, out = k.clone(), torch.randn(B, L, D, generator=g), q.clone()
    seen = visible(causal(), B, L, L)
    with torch.no_grad():
        plain, masked = NonFiniteRule.of(x, x, x, None), NonFiniteRule.of(x, x, x, seen)
    rule = count_ops(lambda: NonFiniteRule.of(x, x, x, None))
    running = count_ops(lambda: NonFiniteRule.of(x, x, x, seen))
    zeroing = count_ops(lambda: (masked.usable(k), masked.usable(v)))
    fit = count_ops(lambda: fit_queries(q, k, finite_keys=True, in_place=True))
    spoil = count_ops(lambda: plain.spoil(out, inplace=True))
    assert len(rule) == len(running) == 1, (rule, running)
    assert len(zeroing) == 2 and plain.usable(k) is k
    assert len(fit) == 5, fit
    assert len(spoil) == 1, spoil
    assert len(count("device", "no_mask")) == UNGUARDED + 1 + 5 + 1
    assert len(count("device", "causal")) == UNGUARDED + 1 + 2 + 5 + 1


@pytest.mark.parametrize("L", [5, 64])
def test_a_nan_query_row_is_not_enough(L):
    """Why the rule adds its NaN to the kernel's output: PyTorch's fused kernel turns a NaN
    query row into NaN for some sizes and into zeros for others (on this CPU: zeros at L = 5).
    Either is allowed here; the layer's output is NaN on that row at both."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, L, 8, generator=g) for _ in range(3))
    q[0, :, 1] = float("nan")
    out = F.scaled_dot_product_attention(q, k, v)
    assert out[0, :, 1].isnan().all() or (out[0, :, 1] == 0).all()
    mha = MultiHeadAttention(16, 16, 16, 16, 2, 0.0).eval()
    x = torch.randn(1, L, 16, generator=g)
    y = x.clone()
    y[0, 1, 0] = float("nan")
    with torch.no_grad():
        assert mha(y, x, x)[0, 1].isnan().all() and torch.isfinite(mha(y, x, x)[0, [0, 2]]).all()


def test_the_fit_divides_in_place_only_when_asked():
    from mha_lib.attention import fit_queries

    q = torch.full((1, 1, 2, 4), 2.0**90)
    k = torch.full((1, 1, 3, 4), 2.0**30)
    before = q.clone()
    fitted = fit_queries(q, k)
    assert torch.equal(q, before) and fitted.dtype == q.dtype
    assert fit_queries(q, k, in_place=True) is q and torch.equal(q, fitted)


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
def test_fit_queries_changes_only_the_rows_of_before(seed, dtype):
    """Against the fit of before issue 49 (a power of two from a log2 bound): the rows it left
    alone keep their bits; the rows it scaled are divided by a factor within a factor 2 of its
    own (exactly down to the limit, where it rounded the power up); rows with a NaN or inf stay
    broken (the rule for NaN and inf makes them NaN in a layer)."""
    import math

    from mha_lib.attention import _HEADROOM, _score_dtype, fit_queries

    g = torch.Generator().manual_seed(seed)
    q = _poke(torch.randn(2, 3, 5, 4, generator=g), g).to(dtype)
    k = _poke(torch.randn(2, 3, 7, 4, generator=g), g).to(dtype)
    if dtype == torch.float64:
        q, k = q * 2.0**400, k * 2.0**500  # past float64's limit too
    new, old = fit_queries(q, k), _old_fit(q, k)
    finite = torch.isfinite(q).all(-1)  # (2, 3, 5)
    kept = (old == q).all(-1) & finite  # the rows the old fit left alone
    assert torch.equal(new[kept], q[kept])
    scaled = finite & ~kept
    ratio = (q[scaled].double() / new[scaled].double()).nan_to_num(nan=1.0)  # its divisor
    old_ratio = (q[scaled].double() / old[scaled].double()).nan_to_num(nan=1.0)
    nonzero = q[scaled] != 0
    assert ((ratio <= old_ratio * (1 + 1e-3)) & (ratio >= old_ratio / 2 * (1 - 1e-3)) | ~nonzero).all()
    assert not torch.isfinite(new[~finite]).all(-1).any()
    if scaled.any():  # the new bound is the limit
        limit = int(math.log2(torch.finfo(_score_dtype(dtype)).max)) - _HEADROOM
        kk = torch.nan_to_num(k.double(), nan=0.0, posinf=0.0, neginf=0.0).abs().amax(-2, keepdim=True)
        bound = (new.double().abs() * kk).amax(-1) * q.shape[-1]
        assert (bound[scaled] <= 2.0**limit * (1 + 1e-6)).all()


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
    spoiled = torch.zeros(nan_rows.shape).add_(rule.rows.expand(nan_rows.shape), alpha=0)
    torch.testing.assert_close(spoiled, nan_rows, rtol=0, atol=0, equal_nan=True)
    assert rule.zero_kv == (keep is not None)
    if keep is not None:  # the broken pairs' entries that are not finite are zeroed
        used = rule.usable(k)
        assert torch.isfinite(used).all()
        assert torch.equal(used[~broken_kv], k[~broken_kv])


def test_chapter_6s_table_counts_what_the_tests_count():
    """``mha_lib.bench.ops.guard_op_table`` (chapter 6, ``python -m mha_lib.bench cost``):
    the limit is the forward without guards, the layer's rows are this file's counts."""
    rows = guard_op_table(B=B, L=L, D=D, H=H)
    assert [r["mask"] for r in rows] == ["none", "causal"]
    for row, case in zip(rows, ("no_mask", "causal"), strict=True):
        assert row["limit"] == UNGUARDED
        assert row["device"] == len(count("device", case)) <= BOUNDS["device", case]
        assert row["cpu"] == len(count("cpu", case)) <= BOUNDS["cpu", case]
    text = format_guard_op_table(rows)
    assert "without guards" in text and "mask: causal" in text
    with pytest.raises(ValueError, match="D"):
        guard_op_table(D=15, H=2)
