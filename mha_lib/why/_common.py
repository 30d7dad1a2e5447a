"""What every experiment of :mod:`mha_lib.why` shares: its description, one trained variant's
outcome, the training run, and a small decoder built from the library's own blocks.

Shape legend
    B   batch size
    L   sequence length
    H   query heads, Hkv key/value heads
    D   model width (``d_model``)
    V   vocabulary size
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterator, Mapping

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_size
from mha_lib.block import TransformerBlock
from mha_lib.masking import causal_valid_lens
from mha_lib.positions import Rope, sinusoidal
from mha_lib.scores import alibi
from mha_lib.training import train_loop, warmup_cosine

__all__ = [
    "CURVE_POINTS",
    "Experiment",
    "Outcome",
    "POSITIONS",
    "POSITIONS_MORE",
    "SequenceModel",
    "check_seed_and_steps",
    "cross_entropy",
    "fit",
    "mean_metrics",
    "parameter_count",
    "seeded",
    "spread",
    "summarise_curve",
]

CURVE_POINTS = 50
"""How many points of each training curve are kept (means over equal windows of steps)."""


@dataclass(frozen=True)
class Outcome:
    """One variant, trained once: its metrics, its training curve and anything a figure needs.

    Attributes:
        metrics: name -> number, always with ``"params"`` (the trained parameters).
        curve: the training loss, averaged over :data:`CURVE_POINTS` windows of steps.
        extra: plain data for the figures (e.g. one example's attention weights).
    """

    metrics: dict[str, float]
    curve: list[float] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """A controlled comparison: one question, one claim, several variants of one model.

    Attributes:
        name: the key in :data:`mha_lib.why.EXPERIMENTS` and on the command line.
        question: the "why" it answers (one sentence).
        claim: what the runs show (one sentence).
        variants: the variants' names, in the order they are reported.
        metric: the metric the claim is about (a key of every variant's metrics).
        higher_is_better: for ``metric``.
        steps: the default training steps of every variant.
        differs: what differs between the variants besides the choice itself (parameters).
        where: the chapter that asks the question (a document name of the book).
        trial: ``trial(seed, steps) -> {variant: Outcome}``, the run itself.
        threatens: for a threat run, the experiment whose claim it could overturn ("" for a claim).
    """

    name: str
    question: str
    claim: str
    variants: tuple[str, ...]
    metric: str
    higher_is_better: bool
    steps: int
    differs: str
    where: str
    trial: Callable[[int, int], dict[str, Outcome]] = field(repr=False, compare=False)
    threatens: str = ""


def check_seed_and_steps(seed: object, steps: object, default: int) -> tuple[int, int]:
    """``(seed, steps)`` checked: an integer seed >= 0, and steps an integer >= 1 (None: ``default``)."""
    seed = check_size(seed, "seed")
    steps = default if steps is None else check_positive_int(steps, "steps")
    return seed, steps


def seeded(seed: int, build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` with the global generator seeded (the initialisation), the caller's state untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def parameter_count(model: nn.Module) -> int:
    """The number of trained parameters (those with ``requires_grad``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def summarise_curve(losses: Tensor, points: int = CURVE_POINTS) -> list[float]:
    """A loss curve of every step as ``points`` means over equal windows of steps (rounded)."""
    chunks = torch.tensor_split(losses.double(), min(points, len(losses)))
    return [round(float(chunk.mean()), 5) for chunk in chunks]


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over the labelled positions: (B, L, V) and (B, L) (-100 = no label)."""
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())  # (B*L, V), (B*L,)


def fit(
    model: nn.Module,
    loss: Callable[[nn.Module, object], Tensor],
    batches: Iterator,
    *,
    steps: int,
    lr: float,
    warmup: int,
    weight_decay: float = 0.01,
) -> dict:
    """Train with AdamW, ``warmup`` steps of linear warm-up then cosine decay, on one thread.

    ``warmup=0`` starts at the full learning rate. Returns :func:`mha_lib.training.train_loop`'s
    history.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    return train_loop(model, loss, batches, optimizer, steps=steps,
                      schedule=partial(warmup_cosine, warmup=warmup, steps=steps),
                      num_threads=1, progress=False)


POSITIONS = ("none", "causal", "learned", "sinusoidal", "rotary")
"""Where a :class:`SequenceModel` gets word order from: nothing (a set, no mask), the causal
mask alone, a learned table, the sinusoidal table (both added to the embeddings), RoPE."""

POSITIONS_MORE = ("alibi",)
"""The kinds that :data:`POSITIONS` (the positions experiments' variants) leaves out: ALiBi (the
causal mask and a penalty ``-slope_h * (i - j)`` on every score, :func:`mha_lib.scores.alibi`)."""


class SequenceModel(nn.Module):
    """Token embeddings, ``num_layers`` :class:`~mha_lib.block.TransformerBlock`, LayerNorm, read-out.

    Every variant but ``"none"`` is a decoder: query ``i`` sees keys ``0 .. i``.

    Shapes:
        tokens: (B, L) integers in [0, V); returns logits (B, L, V)

    Args:
        vocab_size: V.
        d_model: D.
        num_heads: H.
        num_layers: blocks.
        max_len: the longest sequence (the learned table's rows).
        positions: one of :data:`POSITIONS`.
        norm_first: pre-LN (True) or post-LN blocks.
        num_kv_heads: Hkv for grouped-query attention (None: multi-head attention).
        rope_scale: the factor of RoPE's angles (``"rotary"`` only; position interpolation).
        rope: the position spec of ``"rotary"`` (a :class:`~mha_lib.positions.Rope`: NTK-aware,
            YaRN, ...), instead of ``rope_scale``; None: plain RoPE times ``rope_scale``.

    ``positions`` may also be one of :data:`POSITIONS_MORE`.
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, max_len: int,
                 positions: str = "rotary", *, norm_first: bool = True,
                 num_kv_heads: int | None = None, rope_scale: float = 1.0, rope: Rope | None = None) -> None:
        super().__init__()
        if positions not in POSITIONS + POSITIONS_MORE:
            raise ValueError(f"positions must be one of {POSITIONS + POSITIONS_MORE}, got {positions!r}")
        self.positions, self.max_len = positions, check_positive_int(max_len, "max_len")
        D = d_model
        self.embedding = nn.Embedding(vocab_size, D)
        if positions == "learned":
            self.position_embedding = nn.Embedding(max_len, D)
        rotary = positions == "rotary"
        if rope is not None and rope_scale != 1.0:
            raise ValueError(f"rope_scale must be 1 with rope= (say Rope(scale=...)), got {rope_scale!r}")
        if not rotary and (rope_scale != 1.0 or rope is not None):
            raise ValueError(f"rope_scale must be 1 and rope None unless positions='rotary', got "
                             f"rope_scale={rope_scale!r}, rope={rope!r}")
        extra = {"rope_scale": rope_scale} if rotary and rope is None else {}
        if positions == "alibi":
            extra = {"score_mod": alibi(num_heads)}
        self.blocks = nn.ModuleList(
            TransformerBlock(D, num_heads, 4 * D, 0.0, norm_first, num_kv_heads=num_kv_heads,
                             rope=rotary if rope is None else rope, **extra)
            for _ in range(check_positive_int(num_layers, "num_layers"))
        )
        self.norm = nn.LayerNorm(D)
        self.read_out = nn.Linear(D, vocab_size)

    def forward(self, tokens: Tensor, *, need_weights: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Logits (B, L, V); with ``need_weights`` also every block's weights (B, H, L, L)."""
        B, L = tokens.shape
        if L > self.max_len:
            raise ValueError(f"tokens may have at most max_len = {self.max_len} positions, got {L}")
        x = self.embedding(tokens)  # (B, L, D)
        if self.positions == "learned":
            x = x + self.position_embedding(torch.arange(L))  # (L, D) broadcasts over B
        elif self.positions == "sinusoidal":
            x = x + sinusoidal(L, x.shape[-1])  # (L, D) broadcasts over B
        lens = None if self.positions == "none" else causal_valid_lens(B, L)  # (B, L): i sees 0..i
        weights = []
        for block in self.blocks:
            x = block(x, lens, need_weights=need_weights)
            if need_weights:
                x, w = x
                weights.append(w)
        logits = self.read_out(self.norm(x))  # (B, L, D) -> (B, L, V)
        return (logits, weights) if need_weights else logits


def mean_metrics(rows: list[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each metric over several runs."""
    return {name: sum(row[name] for row in rows) / len(rows) for name in rows[0]}


def spread(values: list[float]) -> float:
    """Half the range of ``values`` (0 for one value): the ``±`` of the tables."""
    return (max(values) - min(values)) / 2 if values else math.nan
