"""The capstone's grader: a story model the student built and trained, graded by what it does.

The student assembles the story model of chapter 12 from their own parts (multi-head attention,
rotary positions, a pre-LN block, a cached decoding step), trains it, measures which head does
each relation of the stories, and hands in the model and ``roles``: per relation, the head and
the evidence they measured on stories they chose::

    roles = {"antecedent": {"head": (1, 0), "weight": 0.81, "rise": 0.63}, ...}
    report = grade(model, roles, parts={"attention": MyMultiHeadAttention, "rotary": my_rotary,
                                        "block": MyBlock})
    print(report)          # feedback, part by part, naming the likely mistake
    report.points          # out of report.max_points

The model is any ``nn.Module`` with :class:`mha_lib.lm.StoryLM`'s interface, not necessarily a
``StoryLM``: ``config.num_layers``, ``config.num_heads``, ``config.vocab_size`` (the
:class:`~mha_lib.stories.Tokenizer`'s), ``forward(ids, valid_lens=None, *, need_weights=False,
head_mask=None)`` returning logits (B, L, V) or ``(logits, weights)`` with weights
(B, N, H, L, L), and ``generate(prompts, max_new_tokens, use_cache=True)``. The student's code
is called through :func:`mha_lib.exercises.runner.call_student`: whatever it raises becomes a
message and no points, never an exception of the grader.

The four parts (:data:`POINTS`):

* **components**: the student's attention, rotary and block through the book's checkers
  (``check_multihead_attention``, ``check_rotary`` with their partial credit, and a block check
  of its own: causal, pre-LN), and the capstone attention's own interface, a point per check
  (``head_mask`` zeroes a head's output, the cached step equals the full forward at many
  offsets, rotary inside the layer, ``attention_weights`` are the weights used; see
  :mod:`mha_lib.exercises._capstone_parts`). The book's own classes earn nothing here.
* **decoding**: stories scored alone and padded in a batch; prompts of every length from 1 to
  the longest story decoded :data:`NEW_TOKENS` past it, as one batch, one at a time, and without
  the cache: all must agree token for token.
* **quality**: first causality (changing later tokens changes no earlier logit, with and
  without valid lengths, padded or not) and a loss no lower than the stories allow
  (:data:`LOSS_FLOOR`); then loss and accuracy at the antecedent and recall links on stories from
  an odd seed (training reads even seeds only), against :data:`MAX_LOSS` and
  :data:`MIN_ACCURACY`.
* **heads**: for each relation, the grader remeasures the named head on its own stories (a
  class's autograder passes a seed no student has): its mean weight on the relation's links
  (:func:`mha_lib.lm_heads.link_weights`, the larger of key j and j + 1) and its rise, how much
  more gating it off raises the loss at the links than elsewhere (the ``linked`` rise less the
  ``rest`` rise of :func:`mha_lib.lm_heads.ablate`). Evidence that itself falls short of the
  thresholds earns nothing and is not checked. Otherwise the evidence holds when both numbers
  agree with the remeasurement (within :data:`WEIGHT_TOLERANCE` / :data:`RISE_TOLERANCE`): 2
  points, and a point for each that the head then passes: weight >= :data:`MIN_LINK_WEIGHT`;
  rise >= :data:`MIN_SELECTIVE_RISE` and >= :data:`RIVAL_SHARE` of the largest rise of the heads
  that look at the links (weight >= :data:`RIVAL_MIN_WEIGHT`). The report says whether the
  evidence holds; it names no head the student did not name and prints no number the student did
  not give, so grading every head in turn with the same evidence reveals no role.

Shape legend
    B   stories; L padded length; N layers; H heads per layer; V vocabulary size
"""

from __future__ import annotations

import contextlib
import io
import numbers
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor, nn

from mha_lib._modes import eval_mode
from mha_lib.exercises._capstone_parts import INTERFACE_CHECKS, Broken as _Broken, block_points, call as _call
from mha_lib.exercises._capstone_parts import interface_points
from mha_lib.exercises._capstone_hand_in import load_hand_in, save_hand_in
from mha_lib.exercises.grading import _run_checker, max_points
from mha_lib.exercises.runner import seeded
from mha_lib.importance import head_gates
from mha_lib.lm_eval import encode_stories
from mha_lib.lm_heads import link_weights
from mha_lib.stories import RELATIONS, Story, Tokenizer, link_mask, sample_stories

__all__ = [
    "CapstoneReport",
    "GRADE_SEED",
    "HAND_IN",
    "LOSS_FLOOR",
    "MAX_LOSS",
    "MIN_ACCURACY",
    "MIN_LINK_WEIGHT",
    "MIN_SELECTIVE_RISE",
    "NEW_TOKENS",
    "NUM_STORIES",
    "POINTS",
    "RISE_TOLERANCE",
    "RIVAL_MIN_WEIGHT",
    "RIVAL_SHARE",
    "WEIGHT_TOLERANCE",
    "check_block",
    "check_capstone_attention",
    "grade",
    "load_hand_in",
    "save_hand_in",
]

GRADE_SEED = 3501
"""Seed of the graded stories: odd, so no training run of the book has read them (training step
s of a run with seed c reads ``sample_stories(batch, 2 * (c * 10**6 + s))``), and not seed 1,
the held-out stories the chapters print numbers of. A class's autograder passes another odd
seed, one no student sees."""
HAND_IN = "capstone_hand_in.pt"
"""The hand-in file (:func:`save_hand_in`), beside the notebook: a class's autograder grades it."""
NUM_STORIES = 300
"""How many stories the quality and heads parts read."""
MAX_LOSS = 1.15
"""Highest mean loss (nats per predicted token) that passes; the shipped model has about 1.01."""
LOSS_FLOOR = 0.85
"""Lowest mean loss a model that reads only earlier tokens reaches on the stories (the shipped
model has about 1.01; what it cannot predict is who does what next). A lower loss is a finding:
the model reads the tokens it predicts."""
MIN_ACCURACY = {"antecedent": 0.9, "recall": 0.9}
"""Lowest accuracy at each relation's linked tokens that passes; the shipped model has about
0.96 (antecedent) and 1.0 (recall)."""
MIN_LINK_WEIGHT = 0.5
"""Lowest mean weight of a named head on its relation's links (from query i - 1 on key j or
j + 1, :func:`mha_lib.lm_heads.link_weights`); the shipped model's heads have 0.64 to 0.95."""
MIN_SELECTIVE_RISE = 0.2
"""Gating the named head off must raise the loss at the relation's links by this many nats more
than at the unlinked tokens (the shipped model's heads: 0.45 to 2.4)."""
RIVAL_SHARE = 0.5
"""The named head's rise must be at least this share of the largest rise of a rival, a head
that looks at the links too: the head doing the work, not a bystander."""
RIVAL_MIN_WEIGHT = 0.25
"""A head with at least this mean weight on a relation's links is a rival for that relation."""
WEIGHT_TOLERANCE = 0.1
"""A handed-in weight holds when it is within this of the grader's measurement on its stories."""
RISE_TOLERANCE = (0.25, 0.15)
"""A handed-in rise r holds when it is within ``0.25 + 0.15 * |r'|`` nats of the grader's r'
(300 stories of one seed and of another give rises up to 0.25 nats apart)."""
NEW_TOKENS = 5
"""How many tokens each prompt of the decoding part is continued by."""
POINTS = {"components": 10, "decoding": 6, "quality": 6, "heads": 12}
"""The points of each part: components 2 each for attention, rotary and block, and 1 per check of
the attention's own interface; decoding 2 per check; quality 2 per threshold (none without
causality); heads 4 per relation (2 when the evidence holds, a point for each threshold the head
then passes)."""

_COMPONENTS = {"attention": "check_multihead_attention", "rotary": "check_rotary", "block": None}
_COMPONENT_POINTS = 2
_TOLERANCE = 1e-4


@dataclass
class CapstoneReport:
    """What :func:`grade` found.

    Attributes:
        parts: part name -> ``(points, max_points, message)``, in the order of :data:`POINTS`.
    """

    parts: dict[str, tuple[float, float, str]] = field(default_factory=dict)

    @property
    def points(self) -> float:
        return sum(p for p, _, _ in self.parts.values())

    @property
    def max_points(self) -> float:
        return sum(m for _, m, _ in self.parts.values())

    def __str__(self) -> str:
        lines = [f"Capstone: {_fmt(self.points)}/{_fmt(self.max_points)} points"]
        for name, (points, most, message) in self.parts.items():
            lines.append(f"\n{name}: {_fmt(points)}/{_fmt(most)}")
            lines += [f"  {line}" for line in message.splitlines()]
        return "\n".join(lines)


def _fmt(x: float) -> str:
    return f"{x:g}"


# --- calling the student's model ------------------------------------------------------------------

def _sizes(model: object) -> tuple[int, int]:
    """(N, H) of a model with StoryLM's interface, or :class:`_Broken` saying what is missing."""
    if not isinstance(model, nn.Module):
        raise _Broken(f"the model is a {type(model).__name__}, not an nn.Module")
    config = getattr(model, "config", None)
    sizes = {name: getattr(config, name, None) for name in ("num_layers", "num_heads", "vocab_size")}
    bad = [n for n, v in sizes.items() if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1]
    if bad:
        raise _Broken(f"model.config needs positive integers num_layers, num_heads, vocab_size (as StoryLM's); "
                      f"missing or wrong: {', '.join(bad)}")
    V = Tokenizer().vocab_size
    if sizes["vocab_size"] != V:
        raise _Broken(f"model.config.vocab_size is {sizes['vocab_size']}: the stories' Tokenizer() has {V} tokens")
    return int(sizes["num_layers"]), int(sizes["num_heads"])


def _logits(model: nn.Module, ids: Tensor, lens: Tensor | None, head_mask: Tensor | None = None) -> Tensor:
    """``model(ids, lens, head_mask=...)`` in eval mode, checked to be (B, L, V) floats."""
    gates = {} if head_mask is None else {"head_mask": head_mask}  # a model without head_mask still scores
    with eval_mode(model):
        out = _call("model(ids, valid_lens" + (", head_mask=...)" if gates else ")"), model, ids, lens, **gates)
    expected = (*ids.shape, Tokenizer().vocab_size)
    if not isinstance(out, Tensor) or tuple(out.shape) != expected or not out.is_floating_point():
        got = f"shape {tuple(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
        raise _Broken(f"model(ids, valid_lens) must return logits of shape (B, L, V) = {expected}, got {got}")
    return out.float()


def _token_losses(logits: Tensor, ids: Tensor, lens: Tensor) -> Tensor:
    """(B, L) cross-entropy of token i given 0 .. i-1; NaN at i = 0 and at padding."""
    losses = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    # (B, V, L-1) vs (B, L-1) -> (B, L-1): entry i-1 is the loss of token i
    out = torch.cat([losses.new_full((ids.shape[0], 1), float("nan")), losses], dim=1)  # (B, L)
    return out.masked_fill(torch.arange(ids.shape[1], device=ids.device) >= lens[:, None], float("nan"))


def _stories(seed: object, num_stories: object) -> list[Story]:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0 or seed % 2 == 0:
        raise ValueError(f"seed must be an odd integer >= 0 (even seeds are training seeds), got {seed!r}")
    if isinstance(num_stories, bool) or not isinstance(num_stories, numbers.Integral) or not 10 <= num_stories <= 5000:
        raise ValueError(f"num_stories must be an integer in [10, 5000], got {num_stories!r}")
    return sample_stories(int(num_stories), int(seed))


# --- components -----------------------------------------------------------------------------------

def _is_the_books(answer: object) -> bool:
    """The book's own function or class, or a class whose forward is the book's (a bare subclass)."""
    return any(str(getattr(x, "__module__", "")).startswith("mha_lib.")
               for x in (answer, getattr(answer, "forward", None)) if x is not None)


def _checked_points(checker: str, answer: object, most: float) -> tuple[float, str]:
    """Points of the book's ``checker`` on ``answer`` (its partial credit, scaled to ``most``)."""
    report = _run_checker(checker, answer)
    if report.passed:
        return most, f"{checker}: every case passes"
    table = report.table().splitlines()[1:]
    return most * report.score / max_points(checker), f"{checker}: " + "; ".join(
        line.strip() for line in table if line.strip().startswith("0/"))


def check_block(block_class: type) -> bool:
    """Check a pre-LN block ``block_class(d_model, num_heads, d_ff)``, ``block(x) -> (B, L, D)``:
    causal, and pre-LN. Prints what it finds, as the book's checkers do; True when both hold."""
    points, message = block_points(block_class, 2.0)
    print(f"check_block: {'both checks pass' if points == 2 else 'not yet right'}.\n- {message}")
    return points == 2


def check_capstone_attention(attention_class: type) -> bool:
    """Check the capstone attention's own interface: head_mask gates each head's output, the cached
    step gives the full forward's outputs, rotary turns queries and keys inside the layer, and
    ``attention_weights`` are the weights used. Prints a line per check; True when all hold."""
    points, lines = interface_points(attention_class)
    print(f"check_capstone_attention: {points}/{len(INTERFACE_CHECKS)} checks pass.")
    print("\n".join(f"- {line}" for line in lines))
    return points == len(INTERFACE_CHECKS)


def _components(parts: object) -> tuple[float, str]:
    most = _COMPONENT_POINTS
    if parts is None:
        return 0.0, ("no parts given: pass parts={'attention': YourMultiHeadAttention, 'rotary': your_rotary, "
                     "'block': YourBlock}")
    if not isinstance(parts, dict) or not set(parts) <= set(_COMPONENTS):
        raise ValueError(f"parts must be None or a dict with keys among {sorted(_COMPONENTS)}, got {parts!r:.80}")
    total, lines = 0.0, []
    for name, checker in _COMPONENTS.items():
        answer = parts.get(name)
        if answer is None:
            lines.append(f"{name}: not given")
            continue
        if _is_the_books(answer):
            lines.append(f"{name}: {getattr(answer, '__qualname__', answer)!s:.40} is the book's own code: "
                         "no credit here, write your own")
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            points, message = (block_points(answer, most) if checker is None
                               else _checked_points(checker, answer, most))
            if name == "attention":  # the capstone's own interface, a point per check
                extra, checks = interface_points(answer)
                points += extra
                message += "\n" + "\n".join(f"attention {line}" for line in checks)
        total += points
        lines.append(message)
    return total, "\n".join(lines)


# --- decoding -------------------------------------------------------------------------------------

def _tokens(out: object, B: int, what: str) -> list[list[int]]:
    if not isinstance(out, (list, tuple)) or len(out) != B \
            or not all(isinstance(r, (list, tuple)) and len(r) == NEW_TOKENS for r in out):
        raise _Broken(f"{what} must return {B} lists of {NEW_TOKENS} new tokens, got {out!r:.60}")
    return [[int(t) for t in row] for row in out]


def _prompts(stories: list[Story]) -> list[list[int]]:
    """A prompt of every length from 1 to the longest story's, each the start of a story that long."""
    tokenizer = Tokenizer()
    encoded = sorted((tokenizer.encode(s.text) for s in stories), key=len)
    longest = len(encoded[-1])
    return [next(e for e in encoded[k % len(encoded):] + encoded if len(e) >= n)[:n] for k, n in
            enumerate(range(1, longest + 1))]


def _decoding(model: nn.Module, stories: list[Story]) -> tuple[float, str]:
    """Three checks, 2 points each: padding in forward; batch vs alone; cache vs no cache."""
    most = POINTS["decoding"] / 3
    ids, lens = encode_stories(Tokenizer(), stories[:6])
    lines, points = [], 0.0
    try:
        batched = _logits(model, ids, lens)
        alone = [_logits(model, ids[b:b + 1, :n], None)[0] for b, n in enumerate(lens.tolist())]
    except _Broken as err:
        return 0.0, str(err)
    if all(torch.allclose(batched[b, :n], a, atol=_TOLERANCE) for b, (n, a) in enumerate(zip(lens.tolist(), alone))):
        points += most
        lines.append("padding: a story scores the same alone and padded in a batch")
    else:
        try:
            causal = _causality(model, stories) is None
        except _Broken:
            causal = True  # (the quality part reports what raised)
        lines.append("padding: a story's scores change when it is padded in a batch. " + (
            "Does forward apply valid_lens (no query may see a key at or past its row's length), and is padding on "
            "the right?" if causal else "The model is not causal (see quality): with valid_lens, a query sees later "
            "tokens, padding included"))
    prompts = _prompts(stories)
    n, P = NEW_TOKENS, len(prompts)
    try:
        with eval_mode(model):
            cached = _tokens(_call(f"model.generate(prompts, {n})", model.generate, prompts, n), P, "generate")
            one_by_one = [_tokens(_call(f"model.generate([prompt], {n})", model.generate, [p], n), 1, "generate")[0]
                          for p in prompts]
            uncached = _tokens(_call(f"model.generate(prompts, {n}, use_cache=False)", model.generate, prompts, n,
                                     use_cache=False), P, "generate")
    except _Broken as err:
        return points, "\n".join(lines + [f"generation: {err}"])
    checks = (
        ("batch", cached, one_by_one, "a batch of prompts of different lengths decodes as each prompt alone",
         "decode differently in a batch than alone. Look at where each prompt's next token sits (its own length, "
         "not the longest prompt's), which side the prompts are padded on, and whether the cache's padding slots "
         "stay hidden"),
        ("cache", cached, uncached, "decoding with the KV cache gives the same tokens as without it",
         "decode differently with the cache than without. Look at the cached step: the position it gives the token "
         "it feeds (its rotary angle, and where its keys and values go), the mask of a query over the cached keys, "
         "and whether the cache keeps every key and value so far"),
    )
    for name, ours, other, right, wrong in checks:
        differ = [len(p) for p, a, b in zip(prompts, ours, other) if a != b]
        points += most * (not differ)
        where = f" (prompts of {min(differ)} to {max(differ)} tokens)" if differ else ""
        lines.append(f"{name}: {right}" if not differ else f"{name}: {len(differ)} of {P} prompts {wrong}{where}")
    lines.append(f"(prompts of every length from 1 to {P} tokens, each continued by {n})")
    return points, "\n".join(lines)


# --- quality --------------------------------------------------------------------------------------

def _causality(model: nn.Module, stories: list[Story]) -> str | None:
    """None if no later token changes an earlier logit, with and without valid lengths, padded or not."""
    ids, lens = encode_stories(Tokenizer(), stories[:6])
    g, V = seeded(38), Tokenizer().vocab_size
    one = int(lens[0])
    cases = (("padded, with valid_lens", ids, lens), ("padded, without valid_lens", ids, None),
             ("alone, with valid_lens", ids[:1, :one], lens[:1]), ("alone, without valid_lens", ids[:1, :one], None))
    for what, x, x_lens in cases:
        before = _logits(model, x, x_lens)
        for t in (1, 4, 9, int(lens.min()) - 1):
            later = torch.arange(x.shape[1]) >= t  # (L,): with valid_lens, the real tokens only (padding: decoding)
            later = later & (torch.arange(x.shape[1]) < x_lens[:, None]) if x_lens is not None else later.expand_as(x)
            changed = torch.where(later, torch.randint(0, V, x.shape, generator=g), x)  # (B, L)
            after = _logits(model, changed, x_lens)
            if not torch.allclose(after[:, :t], before[:, :t], atol=_TOLERANCE):
                return (f"not causal: changing the tokens from position {t} on changes the logits at earlier "
                        f"positions ({what}). A model that reads the tokens it predicts earns no quality points. "
                        "Query i must see the keys 0 .. i only, also when valid_lens is given (then "
                        "0 .. min(i, len - 1))")
    return None


def _quality(model: nn.Module, stories: list[Story]) -> tuple[float, str]:
    most = POINTS["quality"] / (1 + len(MIN_ACCURACY))
    ids, lens = encode_stories(Tokenizer(), stories)
    try:
        problem = _causality(model, stories)
        logits = _logits(model, ids, lens)
    except _Broken as err:
        return 0.0, str(err)
    if problem is not None:
        return 0.0, problem
    loss = float(_token_losses(logits, ids, lens).nanmean())
    if loss < LOSS_FLOOR:
        return 0.0, (f"loss {loss:.3f} nats per token on {len(stories)} new stories: below {LOSS_FLOOR}, lower "
                     "than a model that reads only earlier tokens can go on these stories. Something lets the "
                     "model read what it predicts: the mask of a padded batch, the targets, or the data")
    right = torch.zeros_like(ids, dtype=torch.bool)
    right[:, 1:] = logits[:, :-1].argmax(-1) == ids[:, 1:]  # (B, L): token i predicted from i-1
    ok = loss <= MAX_LOSS
    points = most * ok
    lines = [f"causal: no later token changes an earlier logit",
             f"loss {loss:.3f} nats per token on {len(stories)} new stories: "
             + ("passes" if ok else f"above {MAX_LOSS}: train longer, or look for a bug that slows learning")]
    for relation, threshold in MIN_ACCURACY.items():
        accuracy = float(right[link_mask(stories, relation, tuple(ids.shape))].float().mean())
        ok = accuracy >= threshold
        points += most * ok
        lines.append(f"{relation} accuracy {accuracy:.2f}: " + ("passes" if ok else
                     f"below {threshold}: the model does not yet look back at the {relation} links"))
    return points, "\n".join(lines)


# --- heads ----------------------------------------------------------------------------------------

def _real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and abs(float(x)) < 1e6


def _check_roles(roles: object) -> dict[str, dict]:
    def ok(role: object) -> bool:
        head = role.get("head") if isinstance(role, dict) else None
        return (isinstance(role, dict) and set(role) == {"head", "weight", "rise"} and isinstance(head, tuple)
                and len(head) == 2 and all(isinstance(k, int) and not isinstance(k, bool) for k in head)
                and _real(role["weight"]) and _real(role["rise"]))

    if not (isinstance(roles, dict) and set(roles) <= set(RELATIONS) and all(ok(r) for r in roles.values())):
        raise ValueError(f"roles must map relations among {RELATIONS} to dicts {{'head': (layer, head), 'weight': "
                         f"mean weight on the links, 'rise': loss rise at the links less elsewhere}}, got {roles!r:.80}")
    return roles


def _link_losses(logits: Tensor, ids: Tensor, lens: Tensor, stories: list[Story]) -> dict[str, float]:
    """Mean loss at each relation's linked tokens, and at the tokens no relation links ("rest")."""
    losses = _token_losses(logits, ids, lens)
    linked = torch.zeros_like(ids, dtype=torch.bool)
    out = {}
    for relation in RELATIONS:
        mask = link_mask(stories, relation, tuple(ids.shape))
        linked |= mask
        out[relation] = float(losses[mask].mean())
    out["rest"] = float(losses[~linked].nanmean())
    return out


def _reported_weights(model: nn.Module, ids: Tensor, lens: Tensor, logits: Tensor, shape: tuple[int, int]) -> Tensor:
    """``model(ids, lens, need_weights=True)[1]``, checked to be attention weights the model could use."""
    with eval_mode(model):
        out = _call("model(ids, valid_lens, need_weights=True)", model, ids, lens, need_weights=True)
    B, L = ids.shape
    expected = (B, *shape, L, L)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Tensor)
            and tuple(out[1].shape) == expected):
        raise _Broken(f"model(ids, valid_lens, need_weights=True) must return (logits, weights) with weights "
                      f"(B, N, H, L, L) = {expected}, got {type(out).__name__}")
    if not torch.allclose(out[0].float(), logits, atol=_TOLERANCE):
        raise _Broken("need_weights=True changes the logits: the weights it reports come from another computation")
    weights = out[1].float()
    real = torch.arange(L, device=lens.device) < lens[:, None]  # (B, L): real queries
    sums = weights.sum(-1).permute(0, 3, 1, 2)[real]  # (B, N, H, L) -> (B, L, N, H) -> (real, N, H)
    future = weights.triu(diagonal=1).abs().amax()
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-3) or float(future) > 1e-6:
        raise _Broken("the weights need_weights reports are not a causal model's: a real query's weights must sum "
                      "to 1 over its keys and be 0 on later keys. Either the model is not causal (the quality part "
                      "checks), or need_weights reports other weights than the forward pass uses")
    return weights


def _measured(model: nn.Module, stories: list[Story], shape: tuple[int, int]) -> tuple[Tensor, dict]:
    """Every head's reported weights (B, N, H, L, L) and, per head, its rise per relation."""
    N, H = shape
    ids, lens = encode_stories(Tokenizer(), stories)
    logits = _logits(model, ids, lens)
    silent = _logits(model, ids, lens, head_gates(shape, [(n, h) for n in range(N) for h in range(H)]))
    if torch.allclose(silent, logits, atol=_TOLERANCE):
        raise _Broken("head_mask does nothing: with every head gated off (all zeros) the logits are unchanged. "
                      "Multiply each head's output by its gate before the heads are merged")
    weights = _reported_weights(model, ids, lens, logits, shape)
    before = _link_losses(logits, ids, lens, stories)
    rises = {}
    for n in range(N):
        for h in range(H):
            after = _link_losses(_logits(model, ids, lens, head_gates(shape, [(n, h)])), ids, lens, stories)
            rises[(n, h)] = {r: (after[r] - before[r]) - (after["rest"] - before["rest"]) for r in RELATIONS}
    return weights, rises


def _heads(model: nn.Module, stories: list[Story], roles: dict, shape: tuple[int, int]) -> tuple[float, str]:
    N, H = shape
    try:
        weights, rises = _measured(model, stories, shape)
    except _Broken as err:
        return 0.0, str(err)
    total, lines = 0.0, []
    for relation in RELATIONS:
        role = roles.get(relation)
        if role is None:
            lines.append(f"{relation}: no head named (roles['{relation}'] = {{'head': (layer, head), 'weight': ..., "
                         "'rise': ...}})")
            continue
        (n, h), weight, rise = role["head"], float(role["weight"]), float(role["rise"])
        if not (0 <= n < N and 0 <= h < H):
            lines.append(f"{relation}: head {role['head']} does not exist (layers 0-{N - 1}, heads 0-{H - 1})")
            continue
        points, note = _grade_role(relation, (n, h), weight, rise, weights, rises, stories)
        total += points
        lines.append(f"{relation} (layer {n} head {h}): {note}")
    return total, "\n".join(lines)


def _grade_role(relation: str, head: tuple[int, int], weight: float, rise: float, weights: Tensor,
                rises: dict, stories: list[Story]) -> tuple[int, str]:
    """Points (of 4) and the message of one role. Evidence below the thresholds is not checked, and
    evidence is judged as a whole: the message never depends on a number the student did not give."""
    if weight < MIN_LINK_WEIGHT or rise < MIN_SELECTIVE_RISE:
        return 0, (f"your weight {weight:.2f} and rise {rise:+.2f}: by your own evidence this is not the "
                   f"{relation} head (it needs a weight >= {MIN_LINK_WEIGHT} and a rise >= {MIN_SELECTIVE_RISE})")
    looks = link_weights(weights, stories, relation).nan_to_num(0.0).amax(-1)  # (N, H): key j or j + 1
    measured_weight, measured_rise = float(looks[head]), rises[head][relation]
    holds = abs(weight - measured_weight) <= WEIGHT_TOLERANCE and \
        abs(rise - measured_rise) <= RISE_TOLERANCE[0] + RISE_TOLERANCE[1] * abs(measured_rise)
    if not holds:
        return 0, (f"your evidence (weight {weight:.2f}, rise {rise:+.2f}) does not hold on the grader's stories: "
                   f"the weight, the rise or both differ from its measurement by more than {WEIGHT_TOLERANCE} / "
                   f"{RISE_TOLERANCE[0]} + {RISE_TOLERANCE[1]} x rise. Measure again, on stories of an odd seed: "
                   "link_weights on the weights need_weights reports, and ablate for the rise")
    rivals = [r[relation] for k, r in rises.items() if float(looks[k]) >= RIVAL_MIN_WEIGHT or k == head]
    weight_passes = measured_weight >= MIN_LINK_WEIGHT
    rise_passes = measured_rise >= max(MIN_SELECTIVE_RISE, RIVAL_SHARE * max(rivals))
    notes = [f"your evidence (weight {weight:.2f}, rise {rise:+.2f}) holds",
             "the weight passes" if weight_passes else f"but on the grader's stories the weight is below {MIN_LINK_WEIGHT}",
             "the rise passes" if rise_passes else (
                 f"but the rise is below {MIN_SELECTIVE_RISE} on the grader's stories, or below {RIVAL_SHARE:g} of "
                 f"the rise of another head that looks at the {relation} links: the model misses another head more")]
    return 2 + weight_passes + rise_passes, "; ".join(notes)


# --- the grade ------------------------------------------------------------------------------------

def grade(model: nn.Module, roles: dict[str, dict], *, parts: dict[str, Callable] | None = None,
          seed: int = GRADE_SEED, num_stories: int = NUM_STORIES) -> CapstoneReport:
    """Grade a story model and the heads, with their evidence, named for each relation.

    Args:
        model: any nn.Module with StoryLM's interface (module docstring).
        roles: relation -> ``{"head": (layer, head), "weight": w, "rise": r}``, the evidence
            measured on stories the student chose; a relation left out earns no head points.
        parts: the student's parts for the components part: ``{"attention": class, "rotary":
            function, "block": class}`` (any may be left out).
        seed: the stories' seed, odd (even seeds are training seeds).
        num_stories: how many stories the quality and heads parts read.

    Returns:
        a :class:`CapstoneReport`; ``print(report)`` gives the feedback.

    Raises:
        ValueError: roles, parts, seed or num_stories malformed (never because of the model's code).
    """
    roles = _check_roles(roles)
    stories = _stories(seed, num_stories)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model is tiny: on a busy machine, more threads mostly wait (30x slower)
    try:
        return _graded(model, roles, parts, stories)
    finally:
        torch.set_num_threads(threads)


def _graded(model: nn.Module, roles: dict, parts: object, stories: list[Story]) -> CapstoneReport:
    report = CapstoneReport()
    components = _components(parts)
    report.parts["components"] = (components[0], POINTS["components"], components[1])
    try:
        shape = _sizes(model)
    except _Broken as err:
        for name in ("decoding", "quality", "heads"):
            report.parts[name] = (0.0, POINTS[name], str(err))
        return report
    for name, part in (("decoding", _decoding), ("quality", _quality)):
        points, message = part(model, stories)
        report.parts[name] = (points, POINTS[name], message)
    points, message = _heads(model, stories, roles, shape)
    report.parts["heads"] = (points, POINTS["heads"], message)
    return report
