"""The capstone's grader: a story model the student built and trained, graded by what it does.

The student assembles the story model of chapter 12 from their own parts (multi-head attention,
rotary positions, a pre-LN block, a cached decoding step), trains it, names the head they
believe does each relation of the stories, and submits the model and ``roles``::

    report = grade(model, {"antecedent": (1, 0), "recall": (1, 3), "possession": (1, 1)},
                   parts={"attention": MyMultiHeadAttention, "rotary": my_rotary, "block": MyBlock})
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
  of its own: causal, pre-LN). The book's own classes earn nothing here.
* **decoding**: the same story scored alone and padded in a batch; greedy generation of a
  batch, one prompt at a time, and without the cache: all must agree token for token.
* **quality**: loss and accuracy at the antecedent and recall links on stories from an odd
  seed (training reads even seeds only), against :data:`MAX_LOSS` and :data:`MIN_ACCURACY`.
  The story grammar draws every name from one list of 64, all in the vocabulary: no story
  can hold a name that training never showed, so the held-out stories are new stories of
  known names.
* **heads**: for each relation, the named head's mean weight on the true links
  (:func:`mha_lib.lm_heads.link_weights`) must reach :data:`MIN_LINK_WEIGHT`, and gating it off
  must raise the loss at the relation's links by :data:`MIN_SELECTIVE_RISE` nats more than at
  the unlinked tokens, and by at least :data:`RIVAL_SHARE` of the most that gating any one head does.

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
from mha_lib.exercises.grading import _run_checker, max_points
from mha_lib.exercises.runner import NotImplementedYet, StudentError, call_student, seeded
from mha_lib.importance import head_gates
from mha_lib.lm import encode_stories
from mha_lib.lm_heads import link_weights
from mha_lib.stories import RELATIONS, Story, Tokenizer, link_mask, sample_stories

__all__ = [
    "CapstoneReport",
    "GRADE_SEED",
    "MAX_LOSS",
    "MIN_ACCURACY",
    "MIN_LINK_WEIGHT",
    "MIN_SELECTIVE_RISE",
    "NUM_STORIES",
    "POINTS",
    "RIVAL_SHARE",
    "check_block",
    "grade",
]

GRADE_SEED = 3501
"""Seed of the graded stories: odd, so no training run of the book has read them (training step
s of a run with seed c reads ``sample_stories(batch, 2 * (c * 10**6 + s))``), and not seed 1,
the held-out stories the chapters print numbers of. A class's hidden tests pass another odd seed."""
NUM_STORIES = 300
"""How many stories the quality and heads parts read."""
MAX_LOSS = 1.15
"""Highest mean loss (nats per predicted token) that passes; the shipped model has about 1.01."""
MIN_ACCURACY = {"antecedent": 0.9, "recall": 0.9}
"""Lowest accuracy at each relation's linked tokens that passes; the shipped model has about
0.96 (antecedent) and 1.0 (recall)."""
MIN_LINK_WEIGHT = 0.5
"""Lowest mean weight of a named head on its relation's links (from query i - 1 on key j or
j + 1, :func:`mha_lib.lm_heads.link_weights`); the shipped model's heads have 0.66 to 0.95."""
MIN_SELECTIVE_RISE = 0.2
"""Gating the named head off must raise the loss at the relation's links by this many nats more
than at the unlinked tokens (the shipped model's heads: 0.5 to 2.3)."""
RIVAL_SHARE = 0.5
"""The named head's rise (links less elsewhere) must be at least this share of the largest rise
any one head's gating gives: the head doing the work, not a bystander. Two heads may share a
relation (the shipped model's possession head in layer 1 reads what a layer-0 head prepared)."""
POINTS = {"components": 6, "decoding": 6, "quality": 6, "heads": 12}
"""The points of each part: components 2 per part; decoding 2 per check; quality 2 per
threshold; heads 4 per relation (2 for the weight on the links, 2 for the ablation)."""

_COMPONENTS = {"attention": "check_multihead_attention", "rotary": "check_rotary", "block": None}
_DECODING_PROMPTS = 6
_NEW_TOKENS = 8
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

class _Broken(Exception):
    """The model cannot be graded on this part; the message says why."""


def _call(what: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` through :func:`call_student`, its exceptions as :class:`_Broken`."""
    try:
        with torch.no_grad():
            return call_student(fn, *args, **kwargs)
    except NotImplementedYet:
        raise _Broken(f"{what} raises NotImplementedError: not implemented yet") from None
    except StudentError as err:
        raise _Broken(f"{what} raised {err}") from None


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
    return out.masked_fill(torch.arange(ids.shape[1]) >= lens[:, None], float("nan"))


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


def _block_points(block_class: object, most: float) -> tuple[float, str]:
    """A pre-LN block ``block_class(d_model, num_heads, d_ff)``, ``block(x) -> (B, L, D)``, causal.

    Half the points: causal (changing token 3 leaves positions 0-2 unchanged); half: pre-LN
    (``block(c x) - c x`` settles as ``c`` grows, since every sublayer reads a LayerNorm of the
    residual stream and adds to it; a post-LN block normalises its output and does not).
    """
    D, H, d_ff = 16, 2, 32
    try:
        block = _call(f"{getattr(block_class, '__name__', 'block')}({D}, {H}, {d_ff})", block_class, D, H, d_ff)
        if not isinstance(block, nn.Module):
            return 0.0, f"block: {getattr(block_class, '__name__', 'block')}({D}, {H}, {d_ff}) is not an nn.Module"
        g = seeded(35)
        with torch.no_grad():
            for p in block.parameters():  # random weights, so that no sublayer is close to zero
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        x = torch.randn(2, 5, D, generator=g)
        with eval_mode(block):
            out = _call("block(x)", block, x)
            if not isinstance(out, Tensor) or out.shape != x.shape:
                got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
                return 0.0, f"block: block(x) must return (B, L, D) = {tuple(x.shape)}, got {got}"
            changed = x.clone()
            changed[:, 3:] = torch.randn(2, 2, D, generator=g)
            causal = torch.allclose(_call("block(x)", block, changed)[:, :3], out[:, :3], atol=_TOLERANCE)
            far = [_call("block(x)", block, c * x) - c * x for c in (1e3, 1e4)]
    except _Broken as err:
        return 0.0, f"block: {err}"
    pre_ln = float((far[1] - far[0]).norm() / (9e3 * x.norm())) < 1e-2
    points = most / 2 * (causal + pre_ln)
    notes = [("causal" if causal else "not causal: a later token changed the outputs at earlier positions "
              "(the causal mask is missing or built the wrong way round)"),
             ("pre-LN" if pre_ln else "not pre-LN: the output is not x + sublayer(LayerNorm(x)) "
              "(a LayerNorm after the residual sum, post-LN, or no residual connection)")]
    return points, "block: " + "; ".join(notes)


def check_block(block_class: type) -> bool:
    """Check a pre-LN block ``block_class(d_model, num_heads, d_ff)``, ``block(x) -> (B, L, D)``:
    causal, and pre-LN. Prints what it finds, as the book's checkers do; True when both hold."""
    points, message = _block_points(block_class, 2.0)
    print(f"check_block: {'both checks pass' if points == 2 else 'not yet right'}.\n- {message}")
    return points == 2


def _components(parts: object) -> tuple[float, str]:
    most = POINTS["components"] / len(_COMPONENTS)
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
            points, message = (_block_points(answer, most) if checker is None
                               else _checked_points(checker, answer, most))
        total += points
        lines.append(message)
    return total, "\n".join(lines)


# --- decoding -------------------------------------------------------------------------------------

def _tokens(out: object, B: int, what: str) -> list[list[int]]:
    if not isinstance(out, (list, tuple)) or len(out) != B \
            or not all(isinstance(r, (list, tuple)) and len(r) == _NEW_TOKENS for r in out):
        raise _Broken(f"{what} must return {B} lists of {_NEW_TOKENS} new tokens, got {out!r:.60}")
    return [[int(t) for t in row] for row in out]


def _decoding(model: nn.Module, stories: list[Story]) -> tuple[float, str]:
    """Three checks, 2 points each: padding in forward; batch vs alone; cache vs no cache."""
    most = POINTS["decoding"] / 3
    tokenizer = Tokenizer()
    ids, lens = encode_stories(tokenizer, stories[:_DECODING_PROMPTS])
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
        lines.append("padding: a story's scores change when it is padded in a batch. Does forward apply valid_lens "
                     "(no query may see a key at or past its row's length), and is padding on the right?")
    prompts = [tokenizer.encode(s.text)[: 4 + 3 * k] for k, s in enumerate(stories[:_DECODING_PROMPTS])]
    try:
        with eval_mode(model):
            cached = _tokens(_call("model.generate(prompts, 8)", model.generate, prompts, _NEW_TOKENS),
                             len(prompts), "generate")
            one_by_one = [_tokens(_call("model.generate([prompt], 8)", model.generate, [p], _NEW_TOKENS), 1,
                                  "generate")[0] for p in prompts]
            uncached = _tokens(_call("model.generate(prompts, 8, use_cache=False)", model.generate, prompts,
                                     _NEW_TOKENS, use_cache=False), len(prompts), "generate")
    except _Broken as err:
        return points, "\n".join(lines + [f"generation: {err}"])
    checks = (
        ("batch", one_by_one, "a batch of prompts of different lengths decodes as each prompt alone",
         "decode differently in a batch than alone. Look at where each prompt's next token sits (its own length, "
         "not the longest prompt's), which side the prompts are padded on, and whether the cache's padding slots "
         "stay hidden"),
        ("cache", uncached, "decoding with the KV cache gives the same tokens as without it",
         "decode differently with the cache than without. Look at the cached step: the position it gives the token "
         "it feeds (its rotary angle, and where its keys and values go), and the mask of a query over the cached keys"),
    )
    for name, other, right, wrong in checks:
        differ = sum(a != b for a, b in zip(cached, other))
        points += most * (differ == 0)
        lines.append(f"{name}: {right}" if differ == 0 else f"{name}: {differ} of {len(prompts)} prompts {wrong}")
    return points, "\n".join(lines)


# --- quality --------------------------------------------------------------------------------------

def _quality(model: nn.Module, stories: list[Story]) -> tuple[float, str]:
    most = POINTS["quality"] / (1 + len(MIN_ACCURACY))
    ids, lens = encode_stories(Tokenizer(), stories)
    try:
        logits = _logits(model, ids, lens)
    except _Broken as err:
        return 0.0, str(err)
    loss = float(_token_losses(logits, ids, lens).nanmean())
    right = torch.zeros_like(ids, dtype=torch.bool)
    right[:, 1:] = logits[:, :-1].argmax(-1) == ids[:, 1:]  # (B, L): token i predicted from i-1
    ok = loss <= MAX_LOSS
    points = most * ok
    lines = [f"loss {loss:.3f} nats per token on {len(stories)} new stories: "
             + ("passes" if ok else f"above {MAX_LOSS}: train longer, or look for a bug that slows learning")]
    for relation, threshold in MIN_ACCURACY.items():
        accuracy = float(right[link_mask(stories, relation, tuple(ids.shape))].float().mean())
        ok = accuracy >= threshold
        points += most * ok
        lines.append(f"{relation} accuracy {accuracy:.2f}: " + ("passes" if ok else
                     f"below {threshold}: the model does not yet look back at the {relation} links"))
    return points, "\n".join(lines)


# --- heads ----------------------------------------------------------------------------------------

def _check_roles(roles: object) -> dict[str, tuple[int, int]]:
    ok = isinstance(roles, dict) and set(roles) <= set(RELATIONS) and all(
        isinstance(r, tuple) and len(r) == 2 and all(isinstance(k, int) and not isinstance(k, bool) for k in r)
        for r in roles.values())
    if not ok:
        raise ValueError(f"roles must map relations among {RELATIONS} to (layer, head) pairs of integers, "
                         f"got {roles!r:.80}")
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
    real = torch.arange(L) < lens[:, None]  # (B, L): real queries
    sums = weights.sum(-1).permute(0, 3, 1, 2)[real]  # (B, N, H, L) -> (B, L, N, H) -> (real, N, H)
    future = weights.triu(diagonal=1).abs().amax()
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-3) or float(future) > 1e-6:
        raise _Broken("need_weights does not report the weights the model uses: a real query's weights must sum "
                      "to 1 over its keys and be 0 on later keys")
    return weights


def _heads(model: nn.Module, stories: list[Story], roles: dict, shape: tuple[int, int]) -> tuple[float, str]:
    N, H = shape
    per_relation = POINTS["heads"] / len(RELATIONS)
    ids, lens = encode_stories(Tokenizer(), stories)
    try:
        logits = _logits(model, ids, lens)
        silent = _logits(model, ids, lens, head_gates(shape, [(n, h) for n in range(N) for h in range(H)]))
        if torch.allclose(silent, logits, atol=_TOLERANCE):
            return 0.0, ("head_mask does nothing: with every head gated off (all zeros) the logits are unchanged. "
                         "Multiply each head's output by its gate before the heads are merged")
        weights = _reported_weights(model, ids, lens, logits, shape)
        before = _link_losses(logits, ids, lens, stories)
        rises = {(n, h): _link_losses(_logits(model, ids, lens, head_gates(shape, [(n, h)])), ids, lens, stories)
                 for n in range(N) for h in range(H)}
    except _Broken as err:
        return 0.0, str(err)
    total, lines = 0.0, []
    for relation in RELATIONS:
        role = roles.get(relation)
        if role is None:
            lines.append(f"{relation}: no head named (roles['{relation}'] = (layer, head))")
            continue
        n, h = role
        if not (0 <= n < N and 0 <= h < H):
            lines.append(f"{relation}: head {role} does not exist (layers 0-{N - 1}, heads 0-{H - 1})")
            continue
        weight = float(link_weights(weights, stories, relation)[n, h].nan_to_num(0.0).max())
        selective = {k: (r[relation] - before[relation]) - (r["rest"] - before["rest"]) for k, r in rises.items()}
        rival = max(selective, key=selective.get)
        weight_ok = weight >= MIN_LINK_WEIGHT
        gate_ok = selective[(n, h)] >= max(MIN_SELECTIVE_RISE, RIVAL_SHARE * selective[rival])
        total += per_relation / 2 * (weight_ok + gate_ok)
        where = f"layer {n} head {h}"
        notes = [f"weight on the {relation} links {weight:.2f}" + ("" if weight_ok else f" (below {MIN_LINK_WEIGHT})"),
                 f"gating it off raises their loss {selective[(n, h)]:+.2f} nats more than elsewhere"
                 + ("" if gate_ok else f" (needs >= {MIN_SELECTIVE_RISE}" + (
                     ")" if rival == (n, h) else f" and {RIVAL_SHARE:g} of the largest, {selective[rival]:+.2f} "
                     f"by layer {rival[0]} head {rival[1]}: is that the {relation} head?)"))]
        if gate_ok and not weight_ok:
            notes.append("the loss says this head does the work, yet its reported weights do not look at the links: "
                         "does need_weights report the weights the forward pass uses?")
        lines.append(f"{relation} ({where}): " + "; ".join(notes))
    return total, "\n".join(lines)


# --- the grade ------------------------------------------------------------------------------------

def grade(model: nn.Module, roles: dict[str, tuple[int, int]], *, parts: dict[str, Callable] | None = None,
          seed: int = GRADE_SEED, num_stories: int = NUM_STORIES) -> CapstoneReport:
    """Grade a story model and the heads named for each relation.

    Args:
        model: any nn.Module with StoryLM's interface (module docstring).
        roles: relation -> (layer, head), e.g. ``{"antecedent": (1, 0), "recall": (1, 3),
            "possession": (1, 1)}``; a relation left out earns no head points.
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
