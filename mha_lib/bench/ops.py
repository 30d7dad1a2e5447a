"""The operations a call dispatches, counted: what a forward costs where every operation is a kernel launch.

On a GPU every operation is a kernel launch, and the guards of a ``MultiHeadAttention``
forward (the overflow fit of the queries, :func:`mha_lib.attention.fit_queries`, and the rule
for NaN and infinite inputs, :class:`mha_lib.attention.NonFiniteRule`) run on every forward
there, on the device (the *device policy*: no host read, ``mha_lib.attend._read_first`` is
False). On the CPU a forward first reads whether they would change anything (the *CPU
policy*) and skips them when not. :func:`count_ops` counts on the CPU under either policy;
:func:`guard_op_table` counts one forward of chapter 6's layer with and without its guards.

Counted: every operation that computes, allocates or reads (``mm``, ``abs``, ``amax``,
``where``, ``arange``, ``_to_copy``, ``_local_scalar_dense``, ...). Not counted, the operations
of :data:`VIEWS`: they only make another view of the same memory (new sizes, strides or
offset: no kernel runs on a GPU, no element is read), or they are bookkeeping that touches no
data (``detach``, ``alias``). Nothing else is excluded.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mha_lib import attend
from mha_lib._checks import check_callable, check_size
from mha_lib.bench._checks import check_BDH, check_bench_size
from mha_lib.bench.cost import Sizes, make_case, make_contenders, make_modules
from mha_lib.masks import causal as causal_mask_kind

__all__ = ["VIEWS", "count_ops", "format_guard_op_table", "guard_op_table"]

aten = torch.ops.aten

#: Views and metadata-only operations: not counted (see the module docstring).
VIEWS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.transpose.int, aten.permute.default, aten.t.default, aten.expand.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.default,
    aten.slice.Tensor, aten.select.int, aten.as_strided.default,
    aten.detach.default, aten.alias.default,
})

#: The policies :func:`count_ops` knows: ``"device"`` (no host read, as on a GPU: the guards
#: always run) and ``"cpu"`` (what a forward on the CPU does: it reads first).
_POLICIES = ("device", "cpu")


class _CountOps(TorchDispatchMode):
    """Record every ATen operation dispatched while active (``ops``; ``compute``: less VIEWS)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))

    @property
    def compute(self) -> list[str]:
        """The names of the recorded operations that are not in :data:`VIEWS`, in order."""
        return [str(op) for op in self.ops if op not in VIEWS]


def _never_read_first(q: torch.Tensor) -> bool:
    """``mha_lib.attend._read_first`` under the device policy: never read (what a GPU answers)."""
    return False


@contextlib.contextmanager
def _policy(policy: str) -> Iterator[None]:
    """Run the block under ``policy``: ``"device"`` sets ``mha_lib.attend._read_first`` to
    answer False (as for a CUDA tensor, or while a graph is recorded) and restores it after;
    ``"cpu"`` leaves it as it is. Not thread-safe: it sets a module attribute."""
    if policy == "cpu":
        yield
        return
    saved = attend._read_first
    attend._read_first = _never_read_first
    try:
        yield
    finally:
        attend._read_first = saved


def count_ops(fn: Callable[[], object], *, policy: str = "device") -> list[str]:
    """The compute operations one call of ``fn()`` dispatches, under no_grad and ``policy``.

    Args:
        fn: called once, without arguments (e.g. ``lambda: layer(x, x, x)``); what it returns
            is dropped.
        policy: ``"device"``, the guards as a GPU runs them (no host read), or ``"cpu"``, as
            a forward on the CPU runs them (see the module docstring).

    Returns:
        The operations' names (``"aten.mm.default"``, ...) in the order dispatched, the views
        of :data:`VIEWS` left out.

    Raises:
        ValueError: if ``fn`` is not callable or ``policy`` is not one of :data:`_POLICIES`.
    """
    check_callable(fn, "fn")
    if not isinstance(policy, str) or policy not in _POLICIES:
        raise ValueError(f"policy must be one of {_POLICIES}, got {policy!r}")
    with _policy(policy), torch.no_grad(), _CountOps() as ops:
        fn()
    return ops.compute


def guard_op_table(*, B: int = 2, L: int = 6, D: int = 16, H: int = 2, seed: int = 0) -> list[dict]:
    """The compute operations of one self-attention forward, without a mask and causal.

    Rows ``{"mask", "limit", "device", "cpu"}`` for ``mask`` ``"none"`` and ``"causal"``
    (``mask=causal()``), each a count by :func:`count_ops`: ``limit`` is the limit of
    :func:`mha_lib.bench.cost.make_contenders` (three projections, the bare fused kernel,
    ``W_o``: the forward without guards), ``device`` and ``cpu`` a ``MultiHeadAttention``
    forward (eval, fast path, a (B, L, D) input) under either policy. Its inputs are ordinary,
    so under the CPU policy it reads that the guards would change nothing and skips them.

    Raises:
        ValueError: if B, L, D or H is not an integer >= 1, H does not divide D, or ``seed`` is
            not an integer >= 0.
    """
    check_BDH(B, D, H)
    check_bench_size(L, "L")
    check_size(seed, "seed")
    sizes = Sizes(B, L, L, D, H)
    layer, _ = make_modules(sizes, seed=seed)
    case = make_case(sizes, masked=False, seed=seed)
    x = case.queries  # (B, L, D), a self-attention
    rows = []
    for causal in (False, True):
        limit = make_contenders(case, seed=seed, causal=causal)["limit"]
        forward = functools.partial(layer, x, x, x, mask=causal_mask_kind() if causal else None)
        rows.append({"mask": "causal" if causal else "none", "limit": len(count_ops(limit)),
                     **{policy: len(count_ops(forward, policy=policy)) for policy in _POLICIES}})
    return rows


def format_guard_op_table(rows: Sequence[Mapping]) -> str:
    """:func:`guard_op_table`'s rows as text, one line per mask."""
    out = ["operations per forward  without guards  device policy  CPU policy",
           "----------------------  --------------  -------------  ----------"]
    for r in rows:
        out.append(f"{'mask: ' + r['mask']:<22}  {r['limit']:>14}  {r['device']:>13}  {r['cpu']:>10}")
    return "\n".join(out)
