"""How much does each head matter? Entropy, gates, ablation, gradient importance, and pruning.

The general head analysis behind chapters 5, 7 and 8; it knows no task. Two ways to measure a
head's importance, both through the ``head_mask`` gates of
:class:`~mha_lib.multihead.MultiHeadAttention` (gate ``xi_h`` multiplies head ``h``'s output
before ``W_o``):

* **ablation** (:func:`ablation`): set one gate to 0 and measure what is lost;
* **gradient importance** (:func:`gradient_importance`; Michel, Levy & Neubig, 2019, "Are
  Sixteen Heads Really Better than One?"): ``I_h = E_x |dL(x) / d xi_h|`` at ``xi = 1``, a
  first-order estimate of how much the loss would change if the head were removed, from a
  single backward pass.

Both take a function of the gates (the experiment's own accuracy or loss), so they work for
any model that accepts ``head_mask``. :func:`prune_heads` then removes heads for real: a
smaller module with fewer parameters and the same output as the gated original.

Shape legend
    B   batch size
    num_layers  layers (when gates are per layer)
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
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_tensor
from mha_lib._modes import eval_mode
from mha_lib._settings import rebuild
from mha_lib.mask_conventions import padding_mask_from_valid_lens, padding_to_keep
from mha_lib.masking import check_valid_lens
from mha_lib.multihead import MultiHeadAttention
from mha_lib.timing import paired_ratio, time_paired

if TYPE_CHECKING:
    from mha_lib.timing import Ratio

__all__ = [
    "ablation",
    "attention_entropy",
    "gradient_importance",
    "head_gates",
    "prune_heads",
    "prune_model",
    "pruned_speedups",
    "pruning_curve",
    "ranks",
    "spearman",
]


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
    if weights.is_meta:
        raise ValueError("weights must hold values, got a tensor on the meta device")
    B, H, Lq, Lk = weights.shape
    if B * Lq == 0:
        raise ValueError(
            f"weights have no query rows (shape {tuple(weights.shape)}): the mean entropy is undefined"
        )
    if not torch.isfinite(weights).all():
        raise ValueError("weights must be finite, got NaN or inf entries")
    if (weights < 0).any():
        raise ValueError(f"weights must be non-negative probabilities, got a minimum of {weights.min().item():.3g}")
    _check_row_sums(weights)
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


def _check_row_sums(weights: Tensor) -> None:
    """Raise unless every row of ``weights`` sums to 1 (a distribution) or to 0 (a query that
    sees nothing), up to rounding (a few units of the dtype's precision, at least 1e-4)."""
    sums = weights.sum(-1, dtype=torch.float64)  # (B, H, Lq)
    tol = max(1e-4, 8 * torch.finfo(weights.dtype).eps)
    bad = ((sums - 1).abs() > tol) & (sums.abs() > tol)
    if bad.any():
        raise ValueError(
            "weights must be attention distributions, each row summing to 1 (or 0 for a query "
            f"that sees nothing), got a row summing to {sums[bad][0].item():.6g}"
        )


def _check_shape(heads: object) -> tuple[int, ...]:
    """``heads`` as a shape: ``(H,)`` for an int H, ``(num_layers, H)`` for a pair."""
    if isinstance(heads, tuple) and len(heads) == 2:
        return (check_positive_int(heads[0], "heads[0] (num_layers)"), check_positive_int(heads[1], "heads[1] (H)"))
    if isinstance(heads, numbers.Integral) and not isinstance(heads, bool):
        return (check_positive_int(heads, "heads"),)
    raise ValueError(f"heads must be H (an integer >= 1) or a pair (num_layers, H) of layers and heads, got {heads!r}")


def _check_pairs(removed: object, shape: tuple[int, int]) -> list[tuple[int, int]]:
    num_layers, H = shape
    if isinstance(removed, (str, bytes, Tensor)) or not isinstance(removed, Iterable):
        raise ValueError(f"removed must be an iterable of (layer, head) pairs, got {removed!r}")
    pairs = list(removed)
    for item in pairs:
        if (not isinstance(item, tuple) or len(item) != 2
                or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in item)
                or not (0 <= item[0] < num_layers and 0 <= item[1] < H)):
            raise ValueError(
                f"removed must hold (layer, head) pairs with layer in [0, {num_layers}) and head in [0, {H}), got {item!r}"
            )
    if len(set(pairs)) != len(pairs):
        raise ValueError(f"removed must not repeat a head, got {pairs}")
    return [(int(n), int(h)) for n, h in pairs]


def head_gates(heads: int | tuple[int, int], removed: Iterable = ()) -> Tensor:
    """Gates for ``head_mask``: 1 everywhere except 0 at the ``removed`` heads.

    Args:
        heads: H, for one attention layer, or ``(num_layers, H)`` for that many layers of H heads.
        removed: head indices in ``[0, H)`` (a list, tuple or integer tensor), or with
            ``(num_layers, H)`` the ``(layer, head)`` pairs to switch off.

    Returns:
        (H,) or (num_layers, H) float gates.

    Raises:
        ValueError: heads not H or (num_layers, H), an unknown or repeated head in removed.
    """
    shape = _check_shape(heads)
    gates = torch.ones(shape)
    if len(shape) == 1:
        gates[_check_heads(removed, shape[0], allow_all=True, name="removed")] = 0.0
    else:
        for n, h in _check_pairs(removed, shape):
            gates[n, h] = 0.0
    return gates


def _all_heads(shape: tuple[int, ...]) -> list:
    return list(range(shape[0])) if len(shape) == 1 else [(n, h) for n in range(shape[0]) for h in range(shape[1])]


def ablation(evaluate: Callable[[Tensor], float], heads: int | tuple[int, int]) -> Tensor:
    """``evaluate`` with each head removed in turn (its gate set to 0, all others 1).

    Example (chapter 7): ``ablation(lambda gates: accuracy(model, examples, gates), H)``.

    Args:
        evaluate: ``evaluate(gates) -> number``, e.g. the accuracy of the model run with
            ``head_mask=gates``.
        heads: H, or ``(num_layers, H)`` for gates per layer.

    Returns:
        (H,) or (num_layers, H): entry ``h`` (or ``[n, h]``) is ``evaluate`` without that head.

    Raises:
        ValueError: evaluate not callable, or returning something that is not a real number.
    """
    if not callable(evaluate):
        raise ValueError(f"evaluate must be a function of the gates, got {evaluate!r}")
    shape = _check_shape(heads)
    values = []
    for head in _all_heads(shape):
        value = evaluate(head_gates(heads, [head]))
        if isinstance(value, Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"evaluate must return a real number, got {value!r}")
        values.append(float(value))
    return torch.tensor(values).reshape(shape)  # (H,) or (num_layers*H,) -> (num_layers, H)


def gradient_importance(
    per_example_loss: Callable[[Tensor], Tensor], batch_size: int, heads: int | tuple[int, int]
) -> Tensor:
    """Michel et al.'s head importance ``I_h = E_x |dL(x) / d xi_h|`` at gates ``xi = 1``.

    Every example gets its own row of gates, a (B, H) tensor of ones, so one backward pass
    of the summed per-example losses gives each example's own gradient ``dL(x_b)/d xi_{b,h}``;
    the absolute values are averaged over the batch. (Taking the absolute value per example
    matters: averaging first would let positive and negative gradients cancel.)

    Example (chapter 7):
    ``gradient_importance(lambda gates: example_losses(model, examples, gates), len(examples), H)``.

    Args:
        per_example_loss: ``per_example_loss(gates) -> (B,)`` losses, with gates of shape
            (B, H) (or (B, num_layers, H)) passed to the model as its ``head_mask``.
        batch_size: B.
        heads: H, or ``(num_layers, H)``.

    Returns:
        (H,) or (num_layers, H) non-negative importances.

    Raises:
        ValueError: per_example_loss not callable or not returning (B,) losses that depend
            on the gates.
    """
    if not callable(per_example_loss):
        raise ValueError(f"per_example_loss must be a function of the gates, got {per_example_loss!r}")
    B = check_positive_int(batch_size, "batch_size")
    shape = _check_shape(heads)
    gates = torch.ones(B, *shape, requires_grad=True)  # (B, H) or (B, num_layers, H)
    losses = per_example_loss(gates)
    if not isinstance(losses, Tensor) or losses.shape != (B,) or not losses.requires_grad:
        got = f"shape {tuple(losses.shape)}" if isinstance(losses, Tensor) else type(losses).__name__
        raise ValueError(f"per_example_loss must return (B,) = ({B},) losses computed from the gates, got {got}")
    (grad,) = torch.autograd.grad(losses.sum(), gates, allow_unused=True)  # (B, H) or (B, num_layers, H)
    if grad is None:
        raise ValueError("per_example_loss must use the gates (pass them as head_mask): no gradient reached them")
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
    if isinstance(x, Tensor) and x.is_meta:
        raise ValueError(f"{name} must hold values, got a tensor on the meta device")
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


def _check_heads(heads: Iterable[int], num_heads: int, *, allow_all: bool = False, name: str = "heads") -> list[int]:
    """Validate head indices: integers in [0, H), no duplicates (and not every head).

    Accepts an iterable of integers (Python or NumPy ints) or an integer tensor of at most one
    dimension. Strings, bools and floats are refused rather than converted: ``int("1")``,
    ``int(0.7)`` and ``int(True)`` would silently name a head nobody meant.
    """
    if isinstance(heads, Tensor):
        if heads.dim() > 1 or heads.dtype == torch.bool or heads.is_floating_point() or heads.is_complex():
            raise ValueError(
                f"{name} must be a 0-D or 1-D integer tensor of head indices, "
                f"got dtype {heads.dtype} and shape {tuple(heads.shape)}"
            )
        heads = heads.reshape(-1).tolist()  # () or (n,) -> [n ints]
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise ValueError(f"{name} must be an iterable of integer head indices, got {heads!r}")
    heads = list(heads)
    wrong = [h for h in heads if isinstance(h, bool) or not isinstance(h, numbers.Integral)]
    if wrong:
        raise ValueError(
            f"{name} must hold integer head indices (not bools, floats or strings), got {wrong!r} in {heads!r}"
        )
    heads = [int(h) for h in heads]
    bad = [h for h in heads if not 0 <= h < num_heads]
    if bad:
        raise ValueError(f"{name} must be indices in [0, {num_heads}) (H = {num_heads}), got {bad}")
    if len(set(heads)) != len(heads):
        raise ValueError(f"{name} must not repeat an index, got {heads}")
    if not allow_all and len(heads) == num_heads:
        raise ValueError(f"cannot prune all {num_heads} heads (got {sorted(heads)}): keep at least one")
    return heads


def prune_heads(mha: MultiHeadAttention, heads: Iterable[int]) -> MultiHeadAttention:
    """A genuinely smaller copy of ``mha`` without the given heads.

    Head ``h`` owns rows ``h*d:(h+1)*d`` of ``W_q``, ``W_k`` and ``W_v`` and the same columns
    of ``W_o``. The copy keeps the other heads' rows and columns, so with ``H'`` heads left it
    has ``W_q, W_k, W_v: (H'*d, in)`` and ``W_o: (D, H'*d)``: ``num_heads = H'``, the head size
    ``d`` and the output width ``D`` unchanged. ``W_o`` is therefore no longer square, which
    :class:`~mha_lib.multihead.MultiHeadAttention` supports (its width and ``head_size``
    read ``W_q``). A module pruned before can be pruned again.

    Every other setting of ``mha`` (``mha.settings``: sizes, dropout rate, bias) is kept, and
    so are its class, dtype, device and train/eval mode.
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
        ValueError: mha not a MultiHeadAttention, an unknown or repeated head index, every
            head listed, or ``qk_norm="width"`` (a norm over all heads: no head can leave it).
    """
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    if mha.W_q.weight.is_meta:
        raise ValueError("mha must hold weights, got a module on the meta device")
    H, d = mha.num_heads, mha.head_size
    removed = set(_check_heads(heads, H))
    kept = [h for h in range(H) if h not in removed]
    if mha.settings.qk_norm == "width":  # (its mean over H*d features would change)
        raise ValueError('mha has qk_norm="width", a norm over every head\'s features: '
                         "pruning heads would change the others' queries and keys; prune a "
                         'layer with qk_norm="head" or None')
    device = mha.W_q.weight.device
    # the rows of the heads kept: (H'*d,)
    rows = torch.cat([torch.arange(h * d, (h + 1) * d, device=device) for h in kept])
    # Every other setting of mha is kept: H' heads of width H'*d, the same output width D
    score_mod = None if mha.score_mod is None else mha.score_mod.for_heads(kept)
    pruned = rebuild(mha, d_model=len(kept) * d, num_heads=len(kept),
                     output_size=mha.W_o.out_features, score_mod=score_mod)
    # What a head owns: rows (per head, or per feature) of the weights along the heads' axis
    kept_heads = torch.tensor(kept, device=device)  # (H',)
    owned = {"W_q.weight": rows, "W_q.bias": rows, "W_k.weight": rows, "W_k.bias": rows,
             "W_v.weight": rows, "W_v.bias": rows, "sink_logits": kept_heads,
             "gate.weight": kept_heads if mha.settings.gate == "head" else rows}
    owned["gate.bias"] = owned["gate.weight"]
    # everything else as it is, by state (W_o's bias, per-head norms, ...)
    state = mha.state_dict()
    for name, value in state.items():
        if name in owned:
            state[name] = value[owned[name]]  # (H or H*d, ...) -> (H' or H'*d, ...)
        elif name == "W_o.weight":
            state[name] = value[:, rows]  # (D, H*d) -> (D, H'*d)
    pruned.load_state_dict(state)  # (strict: a weight of another shape raises)
    return pruned


def _check_attention_model(model: object) -> MultiHeadAttention:
    if not isinstance(model, nn.Module) or not isinstance(getattr(model, "attention", None), MultiHeadAttention):
        raise ValueError(
            "model must be a torch.nn.Module whose attention layer is a MultiHeadAttention, "
            f"got {type(model).__name__}"
        )
    return model.attention


def prune_model(model: nn.Module, heads: Iterable[int]) -> nn.Module:
    """A copy of ``model`` whose ``attention`` layer has the given heads pruned away (see :func:`prune_heads`)."""
    attention = _check_attention_model(model)
    smaller = copy.deepcopy(model)
    smaller.attention = prune_heads(attention, heads)
    return smaller


def pruning_curve(model: nn.Module, order: Sequence[int], evaluate: Callable[[nn.Module], float]) -> list[float]:
    """``evaluate`` while heads are pruned one after another in ``order``.

    Example (chapter 7): ``pruning_curve(model, order, lambda m: accuracy(m, examples))``.

    Args:
        model: has an ``attention`` layer, a :class:`~mha_lib.multihead.MultiHeadAttention`
            (see :func:`prune_model`).
        order: every head index ``0 .. H-1`` once, the first to be pruned first.
        evaluate: ``evaluate(model) -> number``.

    Returns:
        ``H`` values: with all heads, then without ``order[0]``, then without
        ``order[:2]``, ..., down to the single head ``order[H-1]``.
    """
    H = _check_attention_model(model).num_heads
    if not callable(evaluate):
        raise ValueError(f"evaluate must be a function of the model, got {evaluate!r}")
    order = _check_heads(order, H, allow_all=True, name="order")
    if len(order) != H:
        raise ValueError(f"order must list every one of the {H} heads once, got {order}")
    return [evaluate(model)] + [evaluate(prune_model(model, order[:k])) for k in range(1, H)]


def pruned_speedups(
    reference: nn.Module, others: Sequence[nn.Module], inputs: Sequence, *, repeats: int = 7
) -> list[Ratio]:
    """How many times faster each of ``others`` runs ``model(*inputs)`` than ``reference`` (eval mode).

    Uses :func:`mha_lib.timing.time_paired`: the models run in turns inside every repetition,
    and each repetition gives one ratio ``t_reference / t_other``, so a burst of load from
    another process slows both sides of a ratio alike. For reporting only: no test asserts a
    time.

    Args:
        reference: the model to compare with.
        others: the models to time against it (e.g. pruned copies).
        inputs: the positional arguments of every call, e.g. ``(tokens, valid_lens)``.
        repeats: repetitions of the paired timing.

    Returns:
        One ``Ratio`` (median, min, max over repetitions) per other model.
    """
    if isinstance(others, nn.Module) or not isinstance(others, Sequence):
        raise ValueError(f"others must be a sequence of models, got {type(others).__name__}")
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise ValueError(f"inputs must be a tuple of the models' positional arguments, got {type(inputs).__name__}")
    models = [reference, *others]
    for i, m in enumerate(models):
        if not isinstance(m, nn.Module):
            name = "reference" if i == 0 else f"others[{i - 1}]"
            raise ValueError(f"{name} must be a torch.nn.Module, got {type(m).__name__}")
    with ExitStack() as stack:
        for m in models:
            stack.enter_context(eval_mode(m))
        fns = {f"model {i}": partial(m, *inputs) for i, m in enumerate(models)}
        times = time_paired(fns, repeats=repeats)
    return [paired_ratio(times, "model 0", f"model {i}") for i in range(1, len(models))]
