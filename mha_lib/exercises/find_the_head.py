"""Find the head: trained models nobody has looked at, and a grader that measures their heads.

A challenge set after chapters 7, 8 and 12. Each checkpoint is a model of one of the book's
experiments (the digit task of chapter 7, the repeated tokens of chapter 8, the stories of
chapter 12), trained from a seed the book never printed, with its heads moved by a seeded
permutation: the heads that matter sit in different places in each. The student loads a
model, finds the head that does each role, and hands in ``(layer, head)`` per role::

    model = load("induction-2l")
    CHALLENGES["induction-2l"].roles       # ('previous-token', 'induction')
    report = grade("induction-2l", {"previous-token": (0, 0), "induction": (1, 0, 3.1)})
    print(report)                          # role by role, what the head does
    report.points                          # out of report.max_points

No answer key ships: :func:`grade` measures every head at grading time, on data of its own
``seed`` (odd; a class's autograder passes one no student has), not on the chapters' held-out
data a student measures on. A role's points
(:data:`POINTS_PER_ROLE`) need both halves of the evidence:

* **pattern**: the named head puts at least :data:`MIN_PATTERN` of its attention where the
  role looks (:data:`PATTERNS`);
* **ablation**: gating it off (``head_mask``) raises the role's loss (:data:`MEASURES`) by at
  least :data:`MIN_RISE` nats and at least :data:`RIVAL_SHARE` of the largest rise of any head
  with that pattern.

A third number per role, the rise of the loss the student predicts before measuring it (from
the weights alone: how much of the role's work the head's attention carries), earns
:data:`BONUS_PER_ROLE` when the head is right and the prediction is within
:data:`BONUS_TOLERANCE` nats (or :data:`BONUS_SHARE` of it) of the rise measured on the
grader's data. Each family's rise is
defined in :data:`MEASURES`.

Shape legend
    B   examples; L padded length; N layers; H heads per layer
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from mha_lib import digits, induction, lm
from mha_lib.exercises.capstone import CapstoneReport
from mha_lib.importance import head_gates
from mha_lib.lm_eval import encode_stories
from mha_lib.lm_heads import _link_losses, link_weights
from mha_lib.stories import RELATIONS, Tokenizer, sample_stories
from mha_lib.checkpoints import load_checkpoint

__all__ = [
    "BONUS_PER_ROLE",
    "BONUS_SHARE",
    "BONUS_TOLERANCE",
    "CHALLENGES",
    "DATA_DIR",
    "FindTheHeadReport",
    "GRADE_SEED",
    "MEASURES",
    "MIN_PATTERN",
    "MIN_RISE",
    "PATTERNS",
    "POINTS_PER_ROLE",
    "RIVAL_SHARE",
    "grade",
    "load",
]

DATA_DIR = Path(str(resources.files("mha_lib") / "data" / "find_the_head"))
"""Where the checkpoints are (one ``NAME.pt`` per challenge)."""
MIN_PATTERN = 0.4
"""Least mean attention of a named head where its role looks."""
MIN_RISE = 0.1
"""Least rise (nats) of the role's loss when the named head is gated off."""
RIVAL_SHARE = 0.5
"""The named head's rise must be at least this share of the largest rise of a head with the role's pattern."""
POINTS_PER_ROLE = 2
BONUS_PER_ROLE = 1
BONUS_TOLERANCE = 0.2
"""A predicted rise within this many nats of the measured one earns the bonus (or within
:data:`BONUS_SHARE` of the measured rise, where that is more)."""
BONUS_SHARE = 0.1
"""The bonus's tolerance as a share of the measured rise: a rise of several nats measured on the
grader's stories moves by more than 0.2 nats from the student's stories."""
GRADE_SEED = 3521
"""Seed of the graded examples by default (odd: the story models trained on even seeds only; the
digit and induction models' held-out data have seeds of their own, so no chapter measures on these)."""

PATTERNS = {
    "previous": "query i on key i - 1 (the previous digit)",
    "last": "query i on the last digit, key len - 1",
    "previous-token": "query i on key i - 1",
    "duplicate-token": "query i on the earlier position of its own token",
    "induction": "query i on the position after the earlier occurrence of its token",
    "antecedent": "query i - 1 on key j or j + 1 of an antecedent link (i, j) of the stories",
    "recall": "query i - 1 on key j or j + 1 of a recall link (i, j)",
    "possession": "query i - 1 on key j or j + 1 of a possession link (i, j)",
}
"""What each role's head attends to."""
MEASURES = {
    "digits": "rise = the task's loss with the head gated off - without (raw), on 1000 new examples",
    "induction": "rise = the loss on the repeated half with the head gated off - without (raw), on 256 new sequences",
    "lm": "rise = (loss at the relation's links, gated off - before) - (the same at the unlinked tokens), "
          "on 300 new stories",
}
"""How each experiment's rise is measured when a head is gated off (on the grader's own data)."""


class _Challenge(NamedTuple):
    """One find-the-head task."""

    experiment: str
    """``"digits"``, ``"induction"`` or ``"lm"``: the chapter's model and data."""
    roles: tuple[str, ...]
    """The roles to find (keys of :data:`PATTERNS`)."""
    description: str


_DIGIT_ROLES, _INDUCTION_ROLES = ("previous", "last"), ("previous-token", "induction")
CHALLENGES = {name: _Challenge(*task) for name, task in {
    "digits-h4": ("digits", _DIGIT_ROLES, "chapter 7's digit model, 4 heads"),
    "digits-h8": ("digits", _DIGIT_ROLES, "chapter 7's digit model, 8 heads"),
    "induction-2l": ("induction", _INDUCTION_ROLES, "chapter 8's model, 2 layers of 2 heads"),
    "induction-2l-h3": ("induction", _INDUCTION_ROLES, "chapter 8's model, 2 layers of 3 heads"),
    "induction-3l": ("induction", _INDUCTION_ROLES, "chapter 8's model, 3 layers of 2 heads"),
    "induction-alt": ("induction", ("duplicate-token", "induction"),
                      "chapter 8's model, 2 layers of 2 heads, trained so that the alternative circuit forms"),
    "story-mha": ("lm", ("recall", "possession"), "chapter 12's story model, 2 layers of 4 heads"),
    "story-gqa": ("lm", ("antecedent", "recall"),
                  "chapter 12's story model, 4 query heads sharing 2 key/value heads a layer"),
}.items()}
"""Challenge name -> its task: ``.experiment``, ``.roles`` (the roles to find), ``.description``."""


def _check_name(name: object) -> str:
    if name not in CHALLENGES:
        raise ValueError(f"name must be one of {sorted(CHALLENGES)}, got {name!r}")
    return name  # type: ignore[return-value]


def _load_path(path: Path, experiment: str) -> nn.Module:
    if experiment == "lm":
        return lm.load_pretrained(path)[0]
    module = digits if experiment == "digits" else induction
    return module.load_pretrained(path)  # torch.load(..., weights_only=True), through load_checkpoint


def load(name: str) -> nn.Module:
    """The challenge's model in eval mode, offline (``torch.load(..., weights_only=True)``).

    Raises:
        ValueError: a name not in :data:`CHALLENGES`.
    """
    return _load_path(DATA_DIR / f"{_check_name(name)}.pt", CHALLENGES[name].experiment)


# --- measuring every head -------------------------------------------------------------------------

def _on_keys(weights: Tensor, keys: Tensor) -> Tensor:
    """Mean weight of each head's queries on one key each.

    Shapes:
        weights: (B, N, H, L, L); keys: (B, L), the key of each query or -1 (not counted)
        returns: (N, H)
    """
    has = keys >= 0  # (B, L)
    index = keys.clamp(min=0)[:, None, None, :, None].expand(*weights.shape[:4], 1)  # (B, L) -> (B, N, H, L, 1)
    on = weights.gather(-1, index)[..., 0]  # (B, N, H, L)
    return on.permute(0, 3, 1, 2)[has].mean(dim=0)  # (B, L, N, H) -> (queries, N, H) -> (N, H)


def _digit_measures(model: digits.DigitAttentionModel, seed: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    max_len = model.config.max_len  # (the task's shortest example has 4 digits)
    batch = digits.make_batch(1000, generator=torch.Generator().manual_seed(seed), max_len=max_len, min_len=min(4, max_len))
    H = model.num_heads
    with torch.no_grad():
        _, weights = model(batch.tokens, batch.valid_lens, need_weights=True)  # (B, H, L, L)
        base = float(digits.example_losses(model, batch).mean())
        rises = torch.tensor([[float(digits.example_losses(model, batch, head_gates(H, [h])).mean()) - base
                               for h in range(H)]])  # (1, H)
    L = batch.tokens.shape[1]
    i = torch.arange(L)  # (L,)
    labelled = (i >= 1) & (i < batch.valid_lens[:, None])  # (B, L)
    previous = torch.where(labelled, i - 1, -1)  # (B, L)
    last = torch.where(labelled, batch.valid_lens[:, None] - 1, -1)  # (B, L)
    weights = weights[:, None]  # (B, H, L, L) -> (B, 1, H, L, L)
    patterns = {"previous": _on_keys(weights, previous), "last": _on_keys(weights, last)}
    return patterns, {role: rises for role in patterns}


def _induction_measures(model: induction.AttentionOnlyTransformer, seed: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    tokens = induction.make_repeated_batch(256, induction.EVAL_HALF_LEN, model.config.vocab_size,
                                           torch.Generator().manual_seed(seed))  # (B, L)
    shape = (model.num_layers, model.num_heads)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)  # (B, N, H, L, L)
    base = induction.half_losses(model, tokens).repeated
    rises = torch.tensor([[induction.half_losses(model, tokens, head_gates(shape, [(n, h)])).repeated - base
                           for h in range(shape[1])] for n in range(shape[0])])  # (N, H)
    previous = torch.arange(tokens.shape[1]).expand_as(tokens) - 1  # (B, L): key i - 1, -1 at i = 0
    after = induction.induction_targets(tokens)  # (B, L): j + 1, or -1
    patterns = {
        "previous-token": _on_keys(weights, previous),
        "duplicate-token": _on_keys(weights, torch.where(after >= 0, after - 1, -1)),
        "induction": _on_keys(weights, after),
    }
    return patterns, {role: rises for role in patterns}


def _story_measures(model: lm.StoryLM, seed: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    stories = sample_stories(300, seed)
    shape = (model.config.num_layers, model.config.num_heads)
    ids, lens = encode_stories(Tokenizer(), stories)
    with torch.no_grad():
        _, weights = model(ids, lens, need_weights=True)  # (B, N, H, L, L)
    relations = RELATIONS
    before = _link_losses(model, stories)  # {relation: loss at its links, ..., "rest": loss elsewhere}
    after = {(n, h): _link_losses(model, stories, head_gates(shape, [(n, h)]))
             for n in range(shape[0]) for h in range(shape[1])}
    patterns, rises = {}, {}
    for relation in relations:
        patterns[relation] = link_weights(weights, stories, relation).nan_to_num(0.0).amax(-1)  # (N, H, 2) -> (N, H)
        rises[relation] = torch.tensor([[
            (after[n, h][relation] - before[relation]) - (after[n, h]["rest"] - before["rest"])
            for h in range(shape[1])] for n in range(shape[0])])  # (N, H): the rise at the links less elsewhere
    return patterns, rises


@functools.lru_cache(maxsize=None)
def _measured(name: str, seed: int = GRADE_SEED) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Each role's (N, H) pattern scores and loss rises on data of ``seed``: where each head looks,
    and what gating it off costs."""
    model = load(name)
    experiment = CHALLENGES[name].experiment
    if experiment == "digits":
        return _digit_measures(model, seed)
    if experiment == "induction":
        return _induction_measures(model, seed)
    return _story_measures(model, seed)


# --- the grade ------------------------------------------------------------------------------------

@dataclass
class FindTheHeadReport(CapstoneReport):
    """What :func:`grade` found: :class:`~mha_lib.exercises.capstone.CapstoneReport`'s ``.points``,
    ``.max_points`` and ``.parts``, here role -> ``(points, max_points, message)`` in the order
    of the challenge's roles.

    Attributes:
        name: the challenge.
    """

    name: str = ""

    def __str__(self) -> str:
        lines = [f"Find the head, {self.name}: {self.points:g}/{self.max_points:g} points"]
        lines += [f"{role}: {points:g}/{most:g}. {message}" for role, (points, most, message) in self.parts.items()]
        return "\n".join(lines)


def _check_answer(name: str, answer: object) -> dict[str, tuple]:
    roles = CHALLENGES[name].roles
    if not isinstance(answer, dict) or not set(answer) <= set(roles):
        got = sorted(map(str, answer)) if isinstance(answer, dict) else type(answer).__name__
        raise ValueError(f"answer must be a dict with keys among the roles {roles} of {name!r}, got {got}")
    model = load(name)
    config = model.config
    N, H = getattr(config, "num_layers", 1), config.num_heads
    for role, entry in answer.items():
        ok = isinstance(entry, tuple) and len(entry) in (2, 3) and all(
            isinstance(k, numbers.Integral) and not isinstance(k, bool) for k in entry[:2])
        if ok and len(entry) == 3:
            ok = isinstance(entry[2], numbers.Real) and not isinstance(entry[2], bool) and abs(float(entry[2])) < 1e3
        if not ok:
            raise ValueError(f"answer[{role!r}] must be (layer, head) or (layer, head, predicted rise in nats), "
                             f"got {entry!r:.60}")
        if not (0 <= entry[0] < N and 0 <= entry[1] < H):
            raise ValueError(f"answer[{role!r}] must name a head of layers 0-{N - 1} and heads 0-{H - 1}, "
                             f"got {entry[:2]}")
    return answer


def _grade_role(role: str, entry: tuple | None, pattern: Tensor, rise: Tensor) -> tuple[float, str]:
    if entry is None:
        return 0.0, f"no head named (answer['{role}'] = (layer, head) or (layer, head, predicted rise))"
    n, h = int(entry[0]), int(entry[1])
    looks = pattern >= MIN_PATTERN  # (N, H)
    best = float(rise[looks].max()) if looks.any() else float("inf")
    pattern_ok = bool(looks[n, h])
    rise_ok = float(rise[n, h]) >= max(MIN_RISE, RIVAL_SHARE * best)
    notes = [f"layer {n} head {h}: {float(pattern[n, h]):.2f} of its attention is where the {role} role looks"
             + ("" if pattern_ok else f" (needs {MIN_PATTERN}: {PATTERNS[role]})"),
             f"gating it off raises the loss {float(rise[n, h]):+.2f} nats"
             + ("" if rise_ok else f" (needs {MIN_RISE} and {RIVAL_SHARE:g} of the largest rise of a head "
                                   "that looks there: another head does more of this work)")]
    points = float(POINTS_PER_ROLE) if pattern_ok and rise_ok else 0.0
    if len(entry) == 3:
        tolerance = max(BONUS_TOLERANCE, BONUS_SHARE * abs(float(rise[n, h])))
        close = abs(float(entry[2]) - float(rise[n, h])) <= tolerance
        verdict = (f"{'within' if close else 'not within'} {tolerance:.2f} nats" if points
                   else "no bonus for a wrong head")
        notes.append(f"you predicted {float(entry[2]):+.2f}: {verdict}")
        points += BONUS_PER_ROLE * (close and points > 0)
    return points, "; ".join(notes)


def grade(name: str, answer: dict[str, tuple], *, seed: int = GRADE_SEED) -> FindTheHeadReport:
    """Grade the heads named for each role of a challenge, by measuring them now.

    Args:
        name: a key of :data:`CHALLENGES`.
        answer: role -> ``(layer, head)``, or ``(layer, head, predicted rise)`` for the bonus;
            a role left out earns nothing.
        seed: the seed of the data the heads are measured on (odd; a class's autograder passes
            one no student has).

    Returns:
        a :class:`FindTheHeadReport`; ``print(report)`` gives the feedback. Every role is worth
        :data:`POINTS_PER_ROLE` plus :data:`BONUS_PER_ROLE`.

    Raises:
        ValueError: an unknown name or role, a malformed entry, or a head the model does not have.
    """
    answer = _check_answer(_check_name(name), answer)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0 or seed % 2 == 0:
        raise ValueError(f"seed must be an odd integer >= 0 (even seeds are training seeds), got {seed!r}")
    patterns, rises = _measured(name, int(seed))  # every head, measured now (and kept for the next answer)
    report = FindTheHeadReport(name=name)
    for role in CHALLENGES[name].roles:
        points, message = _grade_role(role, answer.get(role), patterns[role], rises[role])
        report.parts[role] = (points, POINTS_PER_ROLE + BONUS_PER_ROLE, message)
    return report
