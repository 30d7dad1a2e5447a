"""The story model's heads checked against the truth: the stories know what each token depends on.

For every link ``(i, j)`` of a relation (token ``i`` is fixed by token ``j``, see
:mod:`mha_lib.stories`), the model predicts token ``i`` at query position ``i - 1``. A head that
does the relation's work should put weight from query ``i - 1`` on key ``j`` itself, or on key
``j + 1`` when it reads what an earlier layer copied there (an induction head reads the token
*after* the one it matches; in ``a red kite`` the key ``kite`` can carry ``red``).

* :func:`link_weights`  mean weight of every head from query ``i - 1`` on key ``j`` and ``j + 1``
* :func:`find_heads`    for each relation, the head (layer, head, offset) with the most weight
  (of a hybrid, whose layers with a fixed state have no weights (:mod:`mha_lib.linear`), the
  softmax layers' heads only)
* :func:`_link_losses`   the loss at each relation's linked tokens and at all the others
* :func:`ablate`        the same losses with one head gated off (``head_mask``)
* :func:`bigram_table`, :func:`bigram_loss`   the baseline that sees only the previous token

Shape legend
    B   number of stories
    L   padded story length
    N   layers; H heads per layer
    V   vocabulary size
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Sequence

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_tensor
from mha_lib._modes import eval_mode
from mha_lib.importance import head_gates
from mha_lib.linear import nan_weights_without_softmax
from mha_lib.lm import check_model
from mha_lib.lm_eval import encode_stories, next_token_losses
from mha_lib.stories import RELATIONS, Story, Tokenizer, check_stories, link_mask
from mha_lib.training import model_device, to_device

__all__ = [
    "ablate",
    "bigram_loss",
    "bigram_table",
    "find_heads",
    "link_weights",
]

OFFSETS = (0, 1)
"""Where a head may read a link (i, j) from query i - 1: key j (0) or key j + 1 (1)."""


class _HeadFinding(NamedTuple):
    """The head that reads a relation's links the most."""

    layer: int
    head: int
    offset: int
    """0: the head looks at key j itself; 1: at key j + 1."""
    weight: float
    """Its mean weight from query i - 1 on key j + offset, over the relation's links."""


def _check_relation(relation: object) -> str:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return relation  # type: ignore[return-value]


def link_weights(weights: Tensor, stories: Sequence[Story], relation: str) -> Tensor:
    """Mean attention weight of every head from query ``i - 1`` on key ``j + offset``.

    A link contributes to offset 1 only when ``j + 1 <= i - 1`` (a key the query can see).

    Shapes:
        weights: (B, N, H, L, L), e.g. ``model(ids, lens, need_weights=True)[1]``
        returns: (N, H, 2); ``[..., offset]``, NaN where the relation has no such link.
    """
    check_tensor(weights, "weights", 5)
    stories = check_stories(stories)
    relation = _check_relation(relation)
    longest = max(len(s.tokens) for s in stories)
    if weights.shape[0] != len(stories) or weights.shape[3] != weights.shape[4] or weights.shape[3] < longest:
        raise ValueError(f"weights must hold one story per row, (B, N, H, L, L) with B = {len(stories)} and "
                         f"L >= {longest} (the longest story), got shape {tuple(weights.shape)}")
    N, H = weights.shape[1:3]
    out = torch.full((N, H, len(OFFSETS)), float("nan"), device=weights.device)
    for offset in OFFSETS:
        rows = [(b, i - 1, j + offset) for b, s in enumerate(stories) for i, j in s.links.get(relation, ())
                if j + offset <= i - 1]
        if rows:
            b, q, k = (torch.tensor(x, device=weights.device) for x in zip(*rows))
            out[..., offset] = weights[b, :, :, q, k].mean(dim=0)  # (links, N, H) -> (N, H)
    return out


@torch.no_grad()
def _weights(model: nn.Module, stories: Sequence[Story]) -> Tensor:
    """(B, N, H, L, L); NaN in the layers that have no attention weights (a fixed state)."""
    ids, lens = to_device(encode_stories(Tokenizer(), stories), model_device(check_model(model, interface=True)))
    with eval_mode(model), nan_weights_without_softmax(model):
        _, weights = model(ids, lens, need_weights=True)  # (B, N, H, L, L)
    return weights


def find_heads(model: nn.Module, stories: Sequence[Story]) -> dict[str, _HeadFinding]:
    """For each relation, the (layer, head, offset) with the most mean weight on its links."""
    stories = check_stories(stories)
    weights = _weights(model, stories)
    found = {}
    for relation in RELATIONS:
        scores = link_weights(weights, stories, relation).nan_to_num(-1.0)  # (N, H, 2)
        if scores.max() < 0:
            continue  # no link of this relation in these stories
        flat = int(scores.argmax())
        H, K = scores.shape[1:]
        found[relation] = _HeadFinding(flat // (H * K), flat // K % H, flat % K, float(scores.max()))
    return found


def _link_losses(model: nn.Module, stories: Sequence[Story], head_mask: Tensor | None = None) -> dict[str, float]:
    """Mean loss (nats) at each relation's linked tokens, and at every other predicted token.

    Returns:
        ``{relation: loss, ..., "rest": loss}``.
    """
    stories = check_stories(stories, predict=True)
    ids, lens = encode_stories(Tokenizer(), stories)
    losses = next_token_losses(model, ids, lens, head_mask)  # (B, L), NaN where nothing is predicted
    linked = torch.zeros_like(losses, dtype=torch.bool)  # (on the model's device, as the losses)
    result = {}
    for relation in RELATIONS:
        mask = link_mask(stories, relation, tuple(ids.shape)).to(losses.device)
        linked |= mask
        result[relation] = float(losses[mask].mean()) if mask.any() else float("nan")
    result["rest"] = float(losses[~linked].nanmean())
    return result


def ablate(model: nn.Module, stories: Sequence[Story], heads: dict[str, _HeadFinding] | None = None) -> dict[str, dict[str, float]]:
    """Gate off each relation's head and measure the losses again.

    Args:
        heads: from :func:`find_heads` (default: computed on ``stories``).

    Returns:
        ``{relation: {"linked": (loss with the head, loss without), "rest": (...)}}``, losses
        as in :func:`_link_losses`: the relation's own linked tokens, and every token no relation links.
    """
    stories = check_stories(stories, predict=True)
    shape = (check_model(model, interface=True).config.num_layers, model.config.num_heads)
    heads = find_heads(model, stories) if heads is None else _check_heads(heads, shape)
    before = _link_losses(model, stories)
    result = {}
    for relation, found in heads.items():
        after = _link_losses(model, stories, head_gates(shape, [tuple(found[:2])]))  # (layer, head, ...)
        result[relation] = {"linked": (before[relation], after[relation]), "rest": (before["rest"], after["rest"])}
    return result


def _check_heads(heads: object, shape: tuple[int, int]) -> dict[str, tuple]:
    """``heads`` if it maps relations to (layer, head, ...) inside ``shape`` = (N, H), else raise."""
    ok = isinstance(heads, dict) and all(
        r in RELATIONS and isinstance(f, tuple) and len(f) >= 2
        and all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < n for k, n in zip(f, shape))
        for r, f in heads.items())
    if not ok:
        raise ValueError(f"heads must map relations of {RELATIONS} to (layer, head, ...) with layer < {shape[0]} "
                         f"and head < {shape[1]} (as find_heads returns), got {heads!r:.80}")
    return heads


def bigram_table(stories: Sequence[Story], vocab_size: int | None = None, smoothing: float = 0.1) -> Tensor:
    """Log-probabilities of the next token given the current one, counted in ``stories``.

    Shapes:
        returns: (V, V), row ``a`` = log p(next | a), with ``smoothing`` added to every count.
    """
    stories = check_stories(stories)
    tokenizer = Tokenizer()
    V = tokenizer.vocab_size if vocab_size is None else check_positive_int(vocab_size, "vocab_size")
    if V < tokenizer.vocab_size or V > 10**4:
        raise ValueError(f"vocab_size must be None or in [{tokenizer.vocab_size}, 10000] (the tokenizer's "
                         f"{tokenizer.vocab_size} ids must fit), got {vocab_size!r}")
    if not isinstance(smoothing, numbers.Real) or isinstance(smoothing, bool) or not 0 < smoothing < math.inf:
        raise ValueError(f"smoothing must be a finite number > 0, got {smoothing!r}")
    counts = torch.full((V, V), float(smoothing), dtype=torch.float64)
    for story in stories:
        ids = torch.tensor(tokenizer.encode(story.text))
        counts.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64), accumulate=True)
    logs = counts.log()  # (V, V); normalised in logs, so a huge smoothing cannot overflow the sums
    return (logs - logs.logsumexp(dim=1, keepdim=True)).float()


def bigram_loss(table: Tensor, stories: Sequence[Story]) -> float:
    """Mean loss (nats per predicted token) of the bigram ``table`` on ``stories``."""
    check_tensor(table, "table", 2)
    stories = check_stories(stories, predict=True)
    tokenizer = Tokenizer()
    if table.shape[0] != table.shape[1] or table.shape[0] < tokenizer.vocab_size:
        raise ValueError(f"table must be (V, V) with V >= {tokenizer.vocab_size} (the tokenizer's), "
                         f"got shape {tuple(table.shape)}")
    total, count = 0.0, 0
    for story in stories:
        ids = torch.tensor(tokenizer.encode(story.text))
        total -= float(table[ids[:-1], ids[1:]].double().sum())
        count += len(ids) - 1
    return total / count
