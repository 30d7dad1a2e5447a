"""How much does each head matter? Entropy, ablation, gradient importance, and pruning.

Two ways to measure a head's importance, both through the ``head_mask`` gates of
:class:`~mha_lib.multihead.MultiHeadAttention` (gate ``xi_h`` multiplies head ``h``'s output
before ``W_o``):

* **ablation**: set one gate to 0 and measure how much accuracy drops;
* **gradient importance** (Michel, Levy & Neubig, 2019, "Are Sixteen Heads Really Better than
  One?"): ``I_h = E_x |dL(x) / d xi_h|`` at ``xi = 1``, a first-order estimate of how much the
  loss would change if the head were removed, from a single backward pass.

:func:`prune_heads` then removes heads for real: a smaller module with fewer parameters and
the same output as the gated original.

Shape legend
    B   batch size
    H   heads
    Lq  queries, Lk key-value pairs
    d   head size
    D   output width of ``W_o``
"""

from __future__ import annotations

import copy
import numbers
from contextlib import ExitStack
from functools import partial
from typing import Iterable, Sequence

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_tensor
from mha_lib._modes import eval_mode
from mha_lib.timing import Ratio, paired_ratio, time_paired
from mha_lib.masking import check_valid_lens, padding_mask_from_valid_lens, padding_to_keep
from mha_lib.multihead import MultiHeadAttention
from mha_lib.tasks import TaskBatch
from mha_lib.training import accuracy, loss_fn


def attention_entropy(weights: Tensor, valid_lens: Tensor | Sequence[float] | None = None) -> Tensor:
    """Mean entropy (in nats) of each head's attention distributions.

    A head that always looks at one key has entropy 0; one that spreads evenly over ``n`` keys
    has ``log n``. With ``valid_lens`` only real queries count, which assumes *self-attention*
    (``Lq == Lk``, queries and keys are the same positions): query ``i`` of example ``b`` is a
    real position, and is averaged in, when ``i < valid_lens[b]``. The padded queries' rows
    are computed by the model but describe no token, so they would bias the mean.

    Shapes:
        weights: (B, H, Lq, Lk), finite and non-negative, rows summing to 1 (or 0 for a query
            that sees nothing)
        valid_lens: None, or (B,) with ``Lq == Lk``
        returns: (H,)

    Raises:
        ValueError: weights not a 4-D floating-point tensor, NaN/inf or negative weights,
            valid_lens not (B,) or given with ``Lq != Lk``, or a bad entry of valid_lens.
    """
    check_tensor(weights, "weights", 4)
    B, H, Lq, Lk = weights.shape
    if B * Lq == 0:
        raise ValueError(
            f"weights have no query rows (shape {tuple(weights.shape)}): the mean entropy is undefined"
        )
    if not torch.isfinite(weights).all():
        raise ValueError("weights must be finite, got NaN or inf entries")
    if (weights < 0).any():
        raise ValueError(f"weights must be non-negative probabilities, got a minimum of {weights.min().item():.3g}")
    tiny = torch.finfo(weights.dtype).tiny  # 0 * log(tiny) = 0: a key with weight 0 adds nothing
    row_entropy = -(weights * torch.log(weights.clamp(min=tiny))).sum(-1)  # (B, H, Lq)
    valid_lens = check_valid_lens(valid_lens, B, Lq, Lk)
    if valid_lens is None:
        return row_entropy.mean(dim=(0, 2))
    if valid_lens.dim() != 1:
        raise ValueError(f"valid_lens must have shape (B,) = ({B},), got {tuple(valid_lens.shape)}")
    if Lq != Lk:
        raise ValueError(
            "valid_lens marks the real queries only in self-attention, where Lq == Lk; "
            f"got weights with Lq = {Lq} queries and Lk = {Lk} keys"
        )
    # Self-attention: query i is the same position as key i, so the positions that are not
    # padding (as keys) are exactly the real queries.
    real = padding_to_keep(padding_mask_from_valid_lens(valid_lens, Lq))  # (B,) -> (B, Lq), True = real
    real = real[:, None, :].to(weights.dtype)  # (B, Lq) -> (B, 1, Lq)
    if not real.any():
        raise ValueError("valid_lens marks no real query (all 0): the mean entropy is undefined")
    return (row_entropy * real).sum(dim=(0, 2)) / real.sum(dim=(0, 2))


def head_gates(num_heads: int, removed: Iterable[int] = ()) -> Tensor:
    """Gates (H,) for ``head_mask``: 1 everywhere except 0 at the ``removed`` heads."""
    H = check_positive_int(num_heads, "num_heads")
    gates = torch.ones(H)
    gates[_check_heads(removed, H, allow_all=True)] = 0.0
    return gates


def ablation_accuracies(model: nn.Module, batch: TaskBatch) -> Tensor:
    """Accuracy of ``model`` with each head removed in turn (its gate set to 0).

    Args:
        model: has ``num_heads`` and accepts ``head_mask``, like
            :class:`~mha_lib.models.DigitAttentionModel`.
        batch: the evaluation examples.

    Returns:
        (H,): entry ``h`` is the accuracy without head ``h``.
    """
    H = _check_model_and_batch(model, batch)
    return torch.tensor([accuracy(model, batch, head_gates(H, [h])) for h in range(H)])


def gradient_importance(model: nn.Module, batch: TaskBatch) -> Tensor:
    """Michel et al.'s head importance ``I_h = E_x |dL(x) / d xi_h|`` at gates ``xi = 1``.

    Every example gets its own row of gates, a (B, H) tensor of ones, so one backward pass
    of the summed per-example losses gives each example's own gradient ``dL(x_b)/d xi_{b,h}``;
    the absolute values are averaged over the batch. (Taking the absolute value per example
    matters: averaging first would let positive and negative gradients cancel.)

    Args:
        model: accepts ``head_mask`` of shape (B, H) and returns logits (B, L, V).
        batch: the examples the expectation runs over.

    Returns:
        (H,) non-negative importances.
    """
    H = _check_model_and_batch(model, batch)
    gates = torch.ones(len(batch), H, requires_grad=True)  # (B, H)
    with eval_mode(model):
        logits = model(batch.tokens, batch.valid_lens, head_mask=gates)
    per_example = loss_fn(logits, batch.targets, reduction="per_example")  # (B,)
    (grad,) = torch.autograd.grad(per_example.sum(), gates)  # (B, H)
    return grad.abs().mean(dim=0)


def ranks(x: Tensor) -> Tensor:
    """1-based ranks of a 1-D tensor, ties sharing their average rank: ``[10, 30, 20, 20] -> [1, 4, 2.5, 2.5]``."""
    x = _check_scores(x, "x", min_len=0)
    less = (x[None, :] < x[:, None]).sum(dim=1)  # how many are smaller than each entry
    equal = (x[None, :] == x[:, None]).sum(dim=1)  # how many are equal (itself included)
    return less + (equal + 1) / 2


def spearman(a: Tensor | Sequence[float], b: Tensor | Sequence[float]) -> float:
    """Spearman rank correlation: the Pearson correlation of the (tie-averaged) ranks.

    Raises:
        ValueError: a and b not 1-D finite numbers of the same length >= 2, or one of them
            constant.
    """
    a, b = _check_scores(a, "a", min_len=2), _check_scores(b, "b", min_len=2)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same length, got {a.numel()} and {b.numel()}")
    ra, rb = ranks(a) - ranks(a).mean(), ranks(b) - ranks(b).mean()
    denom = ra.norm() * rb.norm()
    if denom == 0:
        raise ValueError("spearman is undefined when a or b is constant (all ranks tie)")
    return float((ra @ rb) / denom)


def _check_scores(x: object, name: str, min_len: int) -> Tensor:
    """Return ``x`` as a 1-D float64 tensor of finite real numbers with ``min_len`` entries or more."""
    try:
        t = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} must be a 1-D tensor or list of numbers: {err}") from None
    if t.dtype == torch.bool or t.is_complex() or t.dim() != 1 or t.numel() < min_len:
        raise ValueError(
            f"{name} must be 1-D real numbers with at least {min_len} entries, "
            f"got dtype {t.dtype} and shape {tuple(t.shape)}"
        )
    t = t.to(torch.float64)
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite (a NaN has no rank), got {t.tolist()}")
    return t


def _check_model_and_batch(model: object, batch: object) -> int:
    """Check a model with ``num_heads`` heads and a TaskBatch; return H."""
    if not isinstance(model, nn.Module) or not isinstance(getattr(model, "num_heads", None), int):
        raise ValueError(
            f"model must be a torch.nn.Module with an integer num_heads (like DigitAttentionModel), "
            f"got {type(model).__name__}"
        )
    if not isinstance(batch, TaskBatch):
        raise ValueError(f"batch must be a mha_lib.tasks.TaskBatch, got {type(batch).__name__}")
    if len(batch) == 0:
        raise ValueError("batch must hold at least one example, got an empty batch")
    return model.num_heads


def _check_heads(heads: Iterable[int], num_heads: int, *, allow_all: bool = False) -> list[int]:
    """Validate head indices: integers in [0, H), no duplicates (and not every head).

    Accepts an iterable of integers (Python or NumPy ints) or an integer tensor of at most one
    dimension. Strings, bools and floats are refused rather than converted: ``int("1")``,
    ``int(0.7)`` and ``int(True)`` would silently name a head nobody meant.
    """
    if isinstance(heads, Tensor):
        if heads.dim() > 1 or heads.dtype == torch.bool or heads.is_floating_point() or heads.is_complex():
            raise ValueError(
                "heads must be a 0-D or 1-D integer tensor of head indices, "
                f"got dtype {heads.dtype} and shape {tuple(heads.shape)}"
            )
        heads = heads.reshape(-1).tolist()  # () or (n,) -> [n ints]
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise ValueError(f"heads must be an iterable of integer head indices, got {heads!r}")
    heads = list(heads)
    wrong = [h for h in heads if isinstance(h, bool) or not isinstance(h, numbers.Integral)]
    if wrong:
        raise ValueError(
            f"heads must hold integer head indices (not bools, floats or strings), got {wrong!r} in {heads!r}"
        )
    heads = [int(h) for h in heads]
    bad = [h for h in heads if not 0 <= h < num_heads]
    if bad:
        raise ValueError(f"heads must be indices in [0, {num_heads}) (H = {num_heads}), got {bad}")
    if len(set(heads)) != len(heads):
        raise ValueError(f"heads must not repeat an index, got {heads}")
    if not allow_all and len(heads) == num_heads:
        raise ValueError(f"cannot prune all {num_heads} heads (got {sorted(heads)}): keep at least one")
    return heads


def prune_heads(mha: MultiHeadAttention, heads: Iterable[int]) -> MultiHeadAttention:
    """A genuinely smaller copy of ``mha`` without the given heads.

    Head ``h`` owns rows ``h*d:(h+1)*d`` of ``W_q``, ``W_k`` and ``W_v`` and the same columns
    of ``W_o``. The copy keeps the other heads' rows and columns, so with ``H'`` heads left it
    has ``W_q, W_k, W_v: (H'*d, in)`` and ``W_o: (D, H'*d)``: ``num_heads = H'``, the head size
    ``d`` and the output width ``D`` unchanged. ``W_o`` is therefore no longer square, which
    :class:`~mha_lib.multihead.MultiHeadAttention` supports (its ``num_hiddens`` and
    ``head_size`` read ``W_q``). A module pruned before can be pruned again.

    The output equals the original's with those heads gated to 0
    (``mha(..., head_mask=head_gates(H, heads))``); the biases of ``W_o`` stay, as gating
    does not touch them. Attention weights of the kept heads are unchanged.

    Args:
        mha: the module to prune (left untouched).
        heads: indices in ``[0, H)`` to remove; no duplicates, and at least one head must stay.

    Returns:
        A new :class:`~mha_lib.multihead.MultiHeadAttention` in the same train/eval mode. The
        global random generator is left as it was (nothing is drawn from it for good).

    Raises:
        ValueError: mha not a MultiHeadAttention, an unknown or repeated head index, or every
            head listed.
    """
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    H, d = mha.num_heads, mha.head_size
    removed = set(_check_heads(heads, H))
    kept = [h for h in range(H) if h not in removed]
    rows = torch.cat([torch.arange(h * d, (h + 1) * d) for h in kept])  # (H'*d,)
    bias = mha.W_q.bias is not None
    # The new weights are all copied from mha below, so their random initialisation is thrown
    # away; fork_rng puts the global generator back, so pruning leaves later draws unchanged.
    with torch.random.fork_rng(devices=[]):
        pruned = MultiHeadAttention(
            key_size=mha.W_k.in_features,
            query_size=mha.W_q.in_features,
            value_size=mha.W_v.in_features,
            num_hiddens=len(kept) * d,
            num_heads=len(kept),
            dropout=mha.attention.dropout.p,
            bias=bias,
        )
        pruned.W_o = nn.Linear(len(kept) * d, mha.W_o.out_features, bias=mha.W_o.bias is not None)
    with torch.no_grad():
        for name in ("W_q", "W_k", "W_v"):
            old, new = getattr(mha, name), getattr(pruned, name)
            new.weight.copy_(old.weight[rows])  # (H*d, in) -> (H'*d, in)
            if bias:
                new.bias.copy_(old.bias[rows])  # (H*d,) -> (H'*d,)
        pruned.W_o.weight.copy_(mha.W_o.weight[:, rows])  # (D, H*d) -> (D, H'*d)
        if mha.W_o.bias is not None:
            pruned.W_o.bias.copy_(mha.W_o.bias)
    pruned.to(device=mha.W_q.weight.device, dtype=mha.W_q.weight.dtype)
    return pruned.train(mha.training)


def prune_model(model: nn.Module, heads: Iterable[int]) -> nn.Module:
    """A copy of ``model`` whose ``attention`` layer has the given heads pruned away."""
    if not isinstance(model, nn.Module) or not isinstance(getattr(model, "attention", None), MultiHeadAttention):
        raise ValueError(
            "model must be a torch.nn.Module whose attention layer is a MultiHeadAttention, "
            f"got {type(model).__name__}"
        )
    smaller = copy.deepcopy(model)
    smaller.attention = prune_heads(model.attention, heads)
    return smaller


def pruning_curve(model: nn.Module, batch: TaskBatch, order: Sequence[int]) -> list[float]:
    """Accuracy while heads are pruned one after another in ``order``.

    Returns:
        ``H`` accuracies: with all heads, then without ``order[0]``, then without
        ``order[:2]``, ..., down to the single head ``order[H-1]``.
    """
    H = _check_model_and_batch(model, batch)
    order = _check_heads(order, H, allow_all=True)
    if len(order) != H:
        raise ValueError(f"order must list every one of the {H} heads once, got {order}")
    return [accuracy(model, batch)] + [
        accuracy(prune_model(model, order[:k]), batch) for k in range(1, H)
    ]


def pruned_speedups(
    reference: nn.Module, others: Sequence[nn.Module], batch: TaskBatch, *, repeats: int = 7
) -> list[Ratio]:
    """How many times faster each of ``others`` runs ``batch`` than ``reference`` (eval mode).

    Uses :func:`mha_lib.bench.time_paired`: the models run in turns inside every repetition,
    and each repetition gives one ratio ``t_reference / t_other``, so a burst of load from
    another process slows both sides of a ratio alike. For reporting only: no test asserts a
    time.

    Returns:
        One :class:`~mha_lib.bench.Ratio` (median, min, max over repetitions) per other model.
    """
    if isinstance(others, nn.Module) or not isinstance(others, Sequence):
        raise ValueError(f"others must be a sequence of models, got {type(others).__name__}")
    for m in (reference, *others):
        _check_model_and_batch(m, batch)
    models = [reference, *others]
    with ExitStack() as stack:
        for m in models:
            stack.enter_context(eval_mode(m))
        fns = {f"model {i}": partial(m, batch.tokens, batch.valid_lens) for i, m in enumerate(models)}
        times = time_paired(fns, repeats=repeats)
    return [paired_ratio(times, "model 0", f"model {i}") for i in range(1, len(models))]
