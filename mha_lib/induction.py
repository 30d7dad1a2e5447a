"""Chapter 8's experiment: a two-layer attention-only transformer that learns to copy in context.

Sequences of random tokens whose second half repeats the first (:func:`make_repeated_batch`)
can be predicted in their second half by a two-step circuit (Elhage et al., 2021; Olsson et
al., 2022): a *previous-token head* in layer 0 writes "the token before me was ``a``" into
every position, and an *induction head* in layer 1 lets the current token ``a`` look for the
position whose previous token was ``a`` (the token after the earlier ``a``) and copies it.

* :func:`make_repeated_batch`        the task
* :class:`Config`, :class:`AttentionOnlyTransformer`   the model (and how it is trained):
  embeddings, two causal ``MultiHeadAttention`` layers on a residual stream, unembedding
  (no MLP, no LayerNorm)
* :func:`half_losses`                loss on the random and on the repeated half
* :func:`head_scores`                previous-token and induction score of every head
* :func:`train`, :func:`save`, :func:`load_pretrained`, :func:`main`   the experiment convention:
  ``python -m mha_lib.induction --out PATH`` retrains the shipped weights from the seed

Heads are switched off with ``head_mask`` gates of shape (num_layers, H), e.g.
``mha_lib.importance.head_gates((num_layers, H), [(1, 0)])``.

Shape legend
    B   batch size
    L   sequence length, 2 * half_len
    num_layers  number of layers (2)
    H   heads per layer
    d   head size
    D   model width, H*d (``d_model``)
    V   vocabulary size
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence, TextIO

import torch
from torch import Tensor, nn

from mha_lib._checks import check_bool, check_device, check_positive_int, check_tensor
from mha_lib._modes import eval_mode
from mha_lib.masking import causal_valid_lens
from mha_lib.multihead import MultiHeadAttention
from mha_lib.training import (
    model_device,
    TrainResult,
    check_config,
    check_config_fields,
    load_model,
    run_main,
    save_result,
    train_loop,
)

__all__ = [
    "AttentionOnlyTransformer",
    "Config",
    "KIND",
    "PRETRAINED_PATH",
    "attention_scores",
    "half_losses",
    "head_scores",
    "held_out_tokens",
    "induction_targets",
    "load_pretrained",
    "main",
    "make_repeated_batch",
    "save",
    "train",
]

KIND = "induction"
"""The ``kind`` of this experiment's checkpoints."""
PRETRAINED_PATH = Path(str(resources.files("mha_lib") / "data" / "induction_heads.pt"))
"""The shipped checkpoint."""

_TEST_SEED = 2025
"""Seed of the held-out sequences (never used for training batches)."""

EVAL_HALF_LEN = 12
"""half_len of the held-out sequences the loss log and the scores are measured on."""


# --- the task ---------------------------------------------------------------------------------

def make_repeated_batch(
    batch_size: int, half_len: int, vocab_size: int, generator: torch.Generator | None = None
) -> Tensor:
    """Random sequences whose second half repeats the first.

    The first half of each row holds ``half_len`` *different* tokens drawn uniformly from
    ``[0, V)``, so every token of the second half has exactly one earlier occurrence and the
    token after it is the right prediction.

    Shapes:
        returns: (B, L) long with L = 2 * half_len, ``tokens[:, half_len:] == tokens[:, :half_len]``.

    Args:
        batch_size: B.
        half_len: length of the random half; at most ``vocab_size``.
        vocab_size: V.
        generator: a seeded ``torch.Generator`` (None: the global one).

    Raises:
        ValueError: a size that is not an integer >= 1, ``half_len > vocab_size``, or a
            generator that is not a ``torch.Generator``.
    """
    B = check_positive_int(batch_size, "batch_size")
    half = check_positive_int(half_len, "half_len")
    V = check_positive_int(vocab_size, "vocab_size")
    if half > V:
        raise ValueError(
            f"half_len must be <= vocab_size ({V}): the first half holds different tokens, "
            f"got half_len = {half}"
        )
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    # A random permutation of the vocabulary per row, cut to half_len: distinct tokens.
    first = torch.rand(B, V, generator=generator).argsort(dim=1)[:, :half]  # (B, V) -> (B, half)
    return torch.cat([first, first], dim=1)  # (B, half) -> (B, L)


def _check_tokens(tokens: object, vocab_size: int | None = None) -> Tensor:
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.is_floating_point() \
            or tokens.dtype == torch.bool or tokens.is_complex() or 0 in tokens.shape or tokens.is_meta:
        got = (f"{tokens.dtype} of shape {tuple(tokens.shape)}" if isinstance(tokens, Tensor)
               else type(tokens).__name__)
        raise ValueError(f"tokens must be a non-empty integer tensor of shape (B, L) (not on meta), got {got}")
    if vocab_size is not None and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"tokens must be in [0, {vocab_size}), got values in [{int(tokens.min())}, {int(tokens.max())}]"
        )
    return tokens


# --- the model --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """The model's sizes and its training run (the defaults made the shipped weights).

    Training: AdamW at a constant learning rate; each step draws a batch with its own
    ``half_len`` in ``[min_half_len, max_half_len]``, so the repeat starts at a different
    position from batch to batch and no head can copy by position alone (a fixed offset
    ``half_len`` would let one layer do it). Each batch also starts at a random position
    ``start`` (see :meth:`AttentionOnlyTransformer.forward`). The held-out losses are logged
    every ``eval_every`` steps.
    """

    vocab_size: int = 32  # V
    max_len: int = 64  # the longest sequence (start + L)
    d_model: int = 32  # D = H * d
    num_heads: int = 2  # H, per layer
    num_layers: int = 2
    position_infused: bool = True  # positions go into queries and keys, not values
    seed: int = 0
    steps: int = 5000
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.1
    min_half_len: int = 6
    max_half_len: int = 20
    eval_every: int = 25
    num_threads: int = 1  # the model is tiny: extra threads mostly wait for each other

    def __post_init__(self) -> None:
        """Raise a ValueError naming the first field that is out of range (never clamp)."""
        check_config_fields(self)
        for name in ("vocab_size", "max_len", "num_layers", "min_half_len", "max_half_len", "eval_every"):
            check_positive_int(getattr(self, name), f"config.{name}")
        check_bool(self.position_infused, "config.position_infused")
        if not 2 <= self.min_half_len <= self.max_half_len:
            raise ValueError(
                f"config needs 2 <= min_half_len <= max_half_len, got {self.min_half_len} and {self.max_half_len}"
            )


class AttentionOnlyTransformer(nn.Module):
    """Token and position embeddings, ``num_layers`` causal attention layers on a residual stream, unembedding.

    The residual stream starts as the token embeddings ``X``; each layer adds its
    :class:`~mha_lib.multihead.MultiHeadAttention` output to it, with a causal mask (query
    ``i`` sees keys ``0 .. i``, :func:`~mha_lib.masking.causal_valid_lens`), and a linear
    unembedding turns the final stream into next-token scores. Without MLPs, every bit of
    information that moves between positions moves through a head.

    Positions are *position-infused* by default (as in Shortformer): every layer adds the
    position embeddings ``P`` to its queries and keys but not to its values,
    ``attention(X + P, X + P, X)``. Heads can *find* positions, but cannot *copy* them into
    the stream. (With ``position_infused=False``, ``X = tokens + P`` once, the usual way.)

    Shapes:
        tokens: (B, L) long in [0, V), start + L <= max_len
        head_mask: None or (num_layers, H) gates, row ``n`` passed to layer ``n``
        logits: (B, L, V), position ``i`` scores the token at ``i + 1``
        weights: (B, num_layers, H, L, L)

    Args:
        config: the sizes (:class:`Config`; its training fields are not used here).
    """

    def __init__(self, config: Config = Config()) -> None:
        super().__init__()
        self.config = check_config(config, Config)
        D = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size, D)
        self.position_embedding = nn.Embedding(config.max_len, D)
        self.layers = nn.ModuleList(
            MultiHeadAttention(D, D, D, D, config.num_heads, dropout=0.0)
            for _ in range(config.num_layers)
        )
        self.unembedding = nn.Linear(D, config.vocab_size)

    @property
    def num_heads(self) -> int:
        """H, heads per layer."""
        return self.config.num_heads

    @property
    def num_layers(self) -> int:
        """The number of layers."""
        return self.config.num_layers

    def forward(
        self, tokens: Tensor, *, head_mask: Tensor | None = None, need_weights: bool = False,
        start: int = 0,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Next-token scores at every position.

        Args:
            tokens: see the shapes.
            head_mask: gates (num_layers, H): 1 keeps a head, 0 removes it.
            need_weights: also return every head's attention weights.
            start: position of the first token (training draws it at random, so that every
                position embedding serves in both halves of the task).

        Returns:
            logits (B, L, V), or ``(logits, weights)`` with weights (B, num_layers, H, L, L) when
            ``need_weights`` is true.

        Raises:
            ValueError: tokens not a (B, L) integer tensor in [0, V), start + L > max_len,
                or a head_mask that is not (num_layers, H).
        """
        cfg = self.config
        tokens = _check_tokens(tokens, cfg.vocab_size)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0 \
                or start + tokens.shape[1] > cfg.max_len:
            raise ValueError(
                f"start + L must be <= max_len = {cfg.max_len} with start an integer >= 0, "
                f"got start = {start!r} and L = {tokens.shape[1]}"
            )
        check_bool(need_weights, "need_weights")
        if head_mask is not None and (
            not isinstance(head_mask, Tensor) or head_mask.shape != (cfg.num_layers, cfg.num_heads)
        ):
            got = tuple(head_mask.shape) if isinstance(head_mask, Tensor) else type(head_mask).__name__
            raise ValueError(
                f"head_mask must be a tensor of shape (num_layers, H) = ({cfg.num_layers}, {cfg.num_heads}), got {got}"
            )
        B, L = tokens.shape
        causal = causal_valid_lens(B, L)  # (B, L): query i sees keys 0..i
        P = self.position_embedding(torch.arange(start, start + L, device=tokens.device))  # (L, D)
        X = self.token_embedding(tokens)  # (B, L, D), the residual stream
        if not cfg.position_infused:
            X = X + P
        weights = []
        for n, layer in enumerate(self.layers):
            gates = None if head_mask is None else head_mask[n]  # (num_layers, H) -> (H,)
            QK = X + P if cfg.position_infused else X  # queries and keys see the positions
            out = layer(QK, QK, X, causal, head_mask=gates, need_weights=need_weights)
            if need_weights:
                out, w = out  # w: (B, H, L, L)
                weights.append(w)
            X = X + out  # the residual stream, (B, L, D)
        logits = self.unembedding(X)  # (B, L, D) -> (B, L, V)
        if need_weights:
            return logits, torch.stack(weights, dim=1)  # num_layers x (B, H, L, L) -> (B, num_layers, H, L, L)
        return logits


# --- what the model does ----------------------------------------------------------------------

class _HalfLosses(NamedTuple):
    """Mean next-token cross-entropy on each half of repeated sequences (nats)."""

    random: float
    """Predictions of tokens 1 .. half_len-1 (the random half: nothing to copy)."""
    repeated: float
    """Predictions of tokens half_len+1 .. L-1 (the repeated half: each can be copied)."""


def _check_model(model: object) -> None:
    if not isinstance(model, AttentionOnlyTransformer):
        raise ValueError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")


def _half_len(tokens: Tensor) -> int:
    L = tokens.shape[1]
    if L % 2 or L < 4:
        raise ValueError(f"tokens must have an even length L = 2 * half_len >= 4, got L = {L}")
    return L // 2


@torch.no_grad()
def half_losses(model: AttentionOnlyTransformer, tokens: Tensor, head_mask: Tensor | None = None) -> _HalfLosses:
    """Loss on the random and on the repeated half of repeated sequences, in eval mode.

    Token ``half_len`` (the first of the repeat) is left out of both: nothing before it says
    which token comes next.

    Shapes:
        tokens: (B, L) from :func:`make_repeated_batch`; head_mask: None or (num_layers, H).
    """
    _check_model(model)
    tokens = _check_tokens(tokens).to(model_device(model))  # (the data goes where the model is)
    half = _half_len(tokens)
    with eval_mode(model):
        logits = model(tokens, head_mask=head_mask)  # (B, L, V)
    per_token = nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
    )  # (B, V, L-1) vs (B, L-1) -> (B, L-1): entry i is the loss of predicting token i+1
    random, repeated = torch.stack([per_token[:, : half - 1].mean(), per_token[:, half:].mean()]).tolist()
    return _HalfLosses(random, repeated)  # (one host read)


class _HeadScores(NamedTuple):
    """Per layer and head, what fraction of attention goes where (each (num_layers, H), in [0, 1])."""

    previous_token: Tensor
    """Mean weight of query ``i`` on key ``i - 1`` (queries ``i >= 1``)."""
    induction: Tensor
    """Mean weight of query ``i`` on key ``j + 1``, ``j < i`` the previous occurrence of token
    ``i`` (queries whose token occurred before)."""


def induction_targets(tokens: Tensor) -> Tensor:
    """For every position, the position after the previous occurrence of its token, or -1.

    Shapes:
        tokens: (B, L) integers; returns (B, L) long, ``-1`` where the token is new.
    """
    tokens = _check_tokens(tokens)
    L = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, L, L): [b, i, j] token i == token j
    earlier = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril(-1)  # (L, L): j < i
    j = torch.arange(L, device=tokens.device).expand_as(same)  # (B, L, L): key index j
    previous = torch.where(same & earlier, j, -1).max(dim=-1).values  # (B, L): latest such j
    return torch.where(previous >= 0, previous + 1, -1)


def attention_scores(weights: Tensor, tokens: Tensor) -> _HeadScores:
    """Previous-token and induction scores of attention weights on ``tokens``.

    Shapes:
        weights: (B, num_layers, H, L, L), e.g. from ``model(tokens, need_weights=True)``
        tokens: (B, L)
        returns: two (num_layers, H) tensors (previous-token and induction scores)

    Raises:
        ValueError: weights not 5-D floating point, or shapes that do not match tokens, or
            tokens where no token repeats (no induction score is defined).
    """
    check_tensor(weights, "weights", 5)
    if weights.is_meta:
        raise ValueError("weights must hold values, got a tensor on the meta device")
    tokens = _check_tokens(tokens)
    B, L = tokens.shape
    if weights.shape[0] != B or weights.shape[3:] != (L, L):
        raise ValueError(
            f"weights must have shape (B, num_layers, H, L, L) with (B, L) = {(B, L)} from tokens, "
            f"got {tuple(weights.shape)}"
        )
    if L < 2:
        raise ValueError(f"tokens must have at least 2 positions, got L = {L}")
    i = torch.arange(1, L, device=weights.device)  # queries with a previous position
    previous = weights[..., i, i - 1].mean(dim=(0, 3))  # (B, num_layers, H, L-1) -> (num_layers, H)
    target = induction_targets(tokens)  # (B, L)
    has = target >= 0  # (B, L)
    if not has.any():
        raise ValueError("tokens must repeat some token: the induction score needs earlier occurrences")
    index = target.clamp(min=0)[:, None, None, :, None].expand(*weights.shape[:4], 1)
    # index: (B, L) -> (B, num_layers, H, L, 1); on_target: weight of each query on its target key
    on_target = weights.gather(-1, index)[..., 0]  # (B, num_layers, H, L)
    mask = has[:, None, None, :].to(weights.dtype)  # (B, L) -> (B, 1, 1, L)
    induction = (on_target * mask).sum(dim=(0, 3)) / mask.sum(dim=(0, 3))  # (num_layers, H)
    return _HeadScores(previous, induction)


@torch.no_grad()
def head_scores(model: AttentionOnlyTransformer, tokens: Tensor) -> _HeadScores:
    """Previous-token and induction score of every head of ``model`` on ``tokens`` (eval mode).

    Shapes:
        tokens: (B, L), e.g. from :func:`make_repeated_batch`; returns two (num_layers, H) tensors.
    """
    _check_model(model)
    tokens = tokens.to(model_device(model))  # (the data goes where the model is)
    with eval_mode(model):
        _, weights = model(tokens, need_weights=True)  # (B, num_layers, H, L, L)
    return _HeadScores(*(t.cpu() for t in attention_scores(weights, tokens)))


def held_out_tokens(batch_size: int = 512, half_len: int = EVAL_HALF_LEN,
                    vocab_size: int | None = None) -> Tensor:
    """The held-out sequences every number in the book is measured on (their own seed)."""
    V = Config().vocab_size if vocab_size is None else vocab_size
    return make_repeated_batch(batch_size, half_len, V, torch.Generator().manual_seed(_TEST_SEED))


# --- the experiment -------------------------------------------------------------------------

def _check_trainable(config: Config) -> None:
    """The checks that only training needs (a config for the model alone may skip them)."""
    if 2 * config.max_half_len > config.max_len or config.max_half_len > config.vocab_size:
        raise ValueError(
            f"config.max_half_len = {config.max_half_len} needs max_len >= {2 * config.max_half_len} "
            f"and vocab_size >= {config.max_half_len}, got {config.max_len} and {config.vocab_size}"
        )


def _batches(config: Config, data: torch.Generator) -> Iterator[tuple[Tensor, int]]:
    """Endless training batches ``(tokens (B, L), start)``, every draw from ``data``."""
    while True:
        half = int(torch.randint(config.min_half_len, config.max_half_len + 1, (), generator=data))
        tokens = make_repeated_batch(config.batch_size, half, config.vocab_size, data)  # (B, L)
        # A random first position: every position index serves in both halves.
        start = int(torch.randint(0, config.max_len - 2 * half + 1, (), generator=data))
        yield tokens, start


def _batch_loss(model: AttentionOnlyTransformer, batch: tuple[Tensor, int]) -> Tensor:
    """Next-token cross-entropy on every prediction (both halves), like a language model."""
    tokens, start = batch
    logits = model(tokens, start=start)  # (B, L, V)
    return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def train(config: Config = Config(), *, progress: bool | TextIO = True,
          device: torch.device | str = "cpu") -> TrainResult:
    """Train a fresh model from ``config.seed`` on the CPU; the same config gives the same weights.

    AdamW at a constant learning rate, a fresh random batch every step (drawn from a seeded
    generator), the parameters initialised from ``config.seed`` without touching the caller's
    random state; the loop is :func:`mha_lib.training.train_loop`. Before the first step and
    every ``eval_every`` steps it logs the losses on both halves of held-out sequences: the
    loss curve the chapter plots.

    Args:
        config: sizes and hyper-parameters.
        progress: a one-line progress bar to stderr (True), to a text stream, or none (False).
        device: where to train ('cpu', 'cuda', ...): the same initial weights and batches on
            every device (drawn on the CPU); the CPU by default.

    Returns:
        A :class:`~mha_lib.training.TrainResult` (model in eval mode); ``history`` holds
        ``train_loss`` (every step), ``eval_steps``, ``eval_random``, ``eval_repeated``,
        ``cpu_seconds`` (this process's CPU time, which other processes' load hardly changes)
        and ``torch_version``.
    """
    config = check_config(config, Config)
    _check_trainable(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)  # the initialisation, without touching the caller's state
        model = AttentionOnlyTransformer(config)
    model.to(check_device(device))  # initialised on the CPU: the same weights on every device
    data = torch.Generator().manual_seed(config.seed + 1)
    held_out = held_out_tokens(256, min(EVAL_HALF_LEN, config.max_half_len), config.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history = train_loop(
        model, _batch_loss, _batches(config, data), optimizer, steps=config.steps,
        evaluate=lambda m: half_losses(m, held_out)._asdict(), eval_every=config.eval_every,
        num_threads=config.num_threads, progress=progress,
    )
    return TrainResult(model, config, history)


def save(result: TrainResult, path: str | Path, *, overwrite: bool = False) -> Path:
    """Save a :func:`train` result as a checkpoint of kind ``"induction"`` (refuses to
    overwrite an existing file unless ``overwrite``); returns the path."""
    return save_result(result, path, kind=KIND, model_class=AttentionOnlyTransformer, overwrite=overwrite)


def load_pretrained(path: str | Path | None = None) -> AttentionOnlyTransformer:
    """The shipped two-layer model with its induction head (or the checkpoint at ``path``), eval mode.

    Its checkpoint's ``extra`` holds the loss curves the chapter plots:
    ``load_checkpoint(PRETRAINED_PATH, kind=KIND)["extra"]``. Another file raises a ValueError.
    """
    return load_model(PRETRAINED_PATH if path is None else path, kind=KIND, config_class=Config,
                      model_class=AttentionOnlyTransformer)


def _summary(result: TrainResult) -> str:
    config = result.config
    tokens = held_out_tokens(512, min(EVAL_HALF_LEN, config.max_half_len), config.vocab_size)
    scores = head_scores(result.model, tokens)
    return (f"trained in {result.history['cpu_seconds']:.1f} s of CPU time; previous-token scores "
            f"(layer x head) {scores.previous_token.numpy().round(3).tolist()}, induction scores "
            f"{scores.induction.numpy().round(3).tolist()}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mha_lib.induction --out PATH [--seed S] [--steps N] [--overwrite]``."""
    return run_main(
        argv, name="induction", config=Config(), train=train, save=save, summary=_summary,
        description="Train the two-layer attention-only model on repeated random tokens (the "
        f"default Config reproduces the shipped {PRETRAINED_PATH.name}) and save it.",
    )


if __name__ == "__main__":
    sys.exit(main())
