"""Induction heads: a two-layer attention-only transformer that learns to copy in context.

Sequences of random tokens whose second half repeats the first (:func:`make_repeated_batch`)
can be predicted in their second half by a two-step circuit (Elhage et al., 2021; Olsson et
al., 2022): a *previous-token head* in layer 0 writes "the token before me was ``a``" into
every position, and an *induction head* in layer 1 lets the current token ``a`` look for the
position whose previous token was ``a`` (the token after the earlier ``a``) and copies it.

* :class:`AttentionOnlyTransformer`  embeddings, two causal ``MultiHeadAttention`` layers on a
  residual stream, unembedding (no MLP, no LayerNorm)
* :func:`make_repeated_batch`        the task
* :func:`half_losses`                loss on the random and on the repeated half
* :func:`head_scores`                previous-token and induction score of every head
* :func:`train`                      seeded CPU training with a progress bar and a loss log
* :func:`load_pretrained`            the shipped model (``mha_lib/data/induction_heads.pt``)

``python -m mha_lib.induction --out PATH`` retrains and saves a checkpoint to ``PATH``.

Shape legend
    B   batch size
    L   sequence length, 2 * half_len
    N   number of layers (2)
    H   heads per layer
    d   head size
    D   model width, H*d
    V   vocabulary size
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import NamedTuple, Sequence, TextIO

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_tensor
from mha_lib._modes import eval_mode
from mha_lib.masking import causal_valid_lens
from mha_lib.multihead import MultiHeadAttention

PRETRAINED_FILE = "induction_heads.pt"
"""Name of the shipped checkpoint inside ``mha_lib/data``."""

TEST_SEED = 2025
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
            or tokens.dtype == torch.bool or tokens.is_complex() or 0 in tokens.shape:
        got = (f"{tokens.dtype} of shape {tuple(tokens.shape)}" if isinstance(tokens, Tensor)
               else type(tokens).__name__)
        raise ValueError(f"tokens must be a non-empty integer tensor of shape (B, L), got {got}")
    if vocab_size is not None and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"tokens must be in [0, {vocab_size}), got values in [{int(tokens.min())}, {int(tokens.max())}]"
        )
    return tokens


# --- the model --------------------------------------------------------------------------------

@dataclass(frozen=True)
class InductionConfig:
    """Sizes of :class:`AttentionOnlyTransformer` (the defaults are the shipped model's)."""

    vocab_size: int = 32
    max_len: int = 64
    num_hiddens: int = 32
    num_heads: int = 2
    num_layers: int = 2
    position_infused: bool = True


class AttentionOnlyTransformer(nn.Module):
    """Token and position embeddings, N causal attention layers on a residual stream, unembedding.

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
        head_mask: None or (N, H) gates, row ``n`` passed to layer ``n``
        logits: (B, L, V), position ``i`` scores the token at ``i + 1``
        weights: (B, N, H, L, L)

    Args:
        config: the sizes (:class:`InductionConfig`).
    """

    def __init__(self, config: InductionConfig = InductionConfig()) -> None:
        super().__init__()
        for name, value in asdict(config).items():
            if name == "position_infused":
                if not isinstance(value, bool):
                    raise ValueError(f"config.position_infused must be True or False, got {value!r}")
            else:
                check_positive_int(value, f"config.{name}")
        self.config = config
        D = config.num_hiddens
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
        """N."""
        return self.config.num_layers

    def forward(
        self, tokens: Tensor, *, head_mask: Tensor | None = None, need_weights: bool = False,
        start: int = 0,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Next-token scores at every position.

        Args:
            tokens: see the shapes.
            head_mask: gates (N, H): 1 keeps a head, 0 removes it.
            need_weights: also return every head's attention weights.
            start: position of the first token (training draws it at random, so that every
                position embedding serves in both halves of the task).

        Returns:
            logits (B, L, V), or ``(logits, weights)`` with weights (B, N, H, L, L) when
            ``need_weights`` is true.

        Raises:
            ValueError: tokens not a (B, L) integer tensor in [0, V), start + L > max_len,
                or a head_mask that is not (N, H).
        """
        cfg = self.config
        tokens = _check_tokens(tokens, cfg.vocab_size)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0 \
                or start + tokens.shape[1] > cfg.max_len:
            raise ValueError(
                f"start + L must be <= max_len = {cfg.max_len} with start an integer >= 0, "
                f"got start = {start!r} and L = {tokens.shape[1]}"
            )
        if not isinstance(need_weights, bool):
            raise ValueError(f"need_weights must be True or False, got {need_weights!r}")
        if head_mask is not None:
            head_mask = torch.as_tensor(head_mask)
            if head_mask.shape != (cfg.num_layers, cfg.num_heads):
                raise ValueError(
                    f"head_mask must have shape (N, H) = ({cfg.num_layers}, {cfg.num_heads}), "
                    f"got {tuple(head_mask.shape)}"
                )
        B, L = tokens.shape
        causal = causal_valid_lens(B, L)  # (B, L): query i sees keys 0..i
        P = self.position_embedding(torch.arange(start, start + L, device=tokens.device))  # (L, D)
        X = self.token_embedding(tokens)  # (B, L, D), the residual stream
        if not cfg.position_infused:
            X = X + P
        weights = []
        for n, layer in enumerate(self.layers):
            gates = None if head_mask is None else head_mask[n]  # (N, H) -> (H,)
            QK = X + P if cfg.position_infused else X  # queries and keys see the positions
            out = layer(QK, QK, X, causal, head_mask=gates, need_weights=need_weights)
            if need_weights:
                out, w = out  # w: (B, H, L, L)
                weights.append(w)
            X = X + out  # the residual stream, (B, L, D)
        logits = self.unembedding(X)  # (B, L, D) -> (B, L, V)
        if need_weights:
            return logits, torch.stack(weights, dim=1)  # N x (B, H, L, L) -> (B, N, H, L, L)
        return logits


def head_gates(config: InductionConfig, removed: Sequence[tuple[int, int]] = ()) -> Tensor:
    """Gates (N, H) for ``head_mask``: 1 everywhere, 0 at each ``(layer, head)`` in ``removed``."""
    gates = torch.ones(config.num_layers, config.num_heads)
    for item in removed:
        if (not isinstance(item, tuple) or len(item) != 2
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in item)
                or not (0 <= item[0] < config.num_layers and 0 <= item[1] < config.num_heads)):
            raise ValueError(
                f"removed must hold (layer, head) pairs with layer in [0, {config.num_layers}) "
                f"and head in [0, {config.num_heads}), got {item!r}"
            )
        gates[item] = 0.0
    return gates


# --- what the model does ----------------------------------------------------------------------

class HalfLosses(NamedTuple):
    """Mean next-token cross-entropy on each half of repeated sequences (nats)."""

    random: float
    """Predictions of tokens 1 .. half_len-1 (the random half: nothing to copy)."""
    repeated: float
    """Predictions of tokens half_len+1 .. L-1 (the repeated half: each can be copied)."""


def _half_len(tokens: Tensor) -> int:
    L = tokens.shape[1]
    if L % 2 or L < 4:
        raise ValueError(f"tokens must have an even length L = 2 * half_len >= 4, got L = {L}")
    return L // 2


@torch.no_grad()
def half_losses(model: AttentionOnlyTransformer, tokens: Tensor, head_mask: Tensor | None = None) -> HalfLosses:
    """Loss on the random and on the repeated half of repeated sequences, in eval mode.

    Token ``half_len`` (the first of the repeat) is left out of both: nothing before it says
    which token comes next.

    Shapes:
        tokens: (B, L) from :func:`make_repeated_batch`; head_mask: None or (N, H).
    """
    tokens = _check_tokens(tokens)
    half = _half_len(tokens)
    with eval_mode(model):
        logits = model(tokens, head_mask=head_mask)  # (B, L, V)
    per_token = nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
    )  # (B, V, L-1) vs (B, L-1) -> (B, L-1): entry i is the loss of predicting token i+1
    return HalfLosses(float(per_token[:, : half - 1].mean()), float(per_token[:, half:].mean()))


class HeadScores(NamedTuple):
    """Per layer and head, what fraction of attention goes where (each (N, H), in [0, 1])."""

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
    earlier = torch.ones(L, L, dtype=torch.bool).tril(-1)  # (L, L): j < i
    j = torch.arange(L).expand_as(same)  # (B, L, L): key index j
    previous = torch.where(same & earlier, j, -1).max(dim=-1).values  # (B, L): latest such j
    return torch.where(previous >= 0, previous + 1, -1)


def attention_scores(weights: Tensor, tokens: Tensor) -> HeadScores:
    """Previous-token and induction scores of attention weights on ``tokens``.

    Shapes:
        weights: (B, N, H, L, L), e.g. from ``model(tokens, need_weights=True)``
        tokens: (B, L)
        returns: two (N, H) tensors (:class:`HeadScores`)

    Raises:
        ValueError: weights not 5-D floating point, or shapes that do not match tokens, or
            tokens where no token repeats (no induction score is defined).
    """
    check_tensor(weights, "weights", 5)
    tokens = _check_tokens(tokens)
    B, L = tokens.shape
    if weights.shape[0] != B or weights.shape[3:] != (L, L):
        raise ValueError(
            f"weights must have shape (B, N, H, L, L) with (B, L) = {(B, L)} from tokens, "
            f"got {tuple(weights.shape)}"
        )
    if L < 2:
        raise ValueError(f"tokens must have at least 2 positions, got L = {L}")
    i = torch.arange(1, L)  # queries with a previous position
    previous = weights[..., i, i - 1].mean(dim=(0, 3))  # (B, N, H, L-1) -> (N, H)
    target = induction_targets(tokens)  # (B, L)
    has = target >= 0  # (B, L)
    if not has.any():
        raise ValueError("tokens must repeat some token: the induction score needs earlier occurrences")
    index = target.clamp(min=0)[:, None, None, :, None].expand(*weights.shape[:4], 1)
    # index: (B, L) -> (B, N, H, L, 1); on_target: weight of each query on its target key
    on_target = weights.gather(-1, index)[..., 0]  # (B, N, H, L)
    mask = has[:, None, None, :].to(weights.dtype)  # (B, L) -> (B, 1, 1, L)
    induction = (on_target * mask).sum(dim=(0, 3)) / mask.sum(dim=(0, 3))  # (N, H)
    return HeadScores(previous, induction)


@torch.no_grad()
def head_scores(model: AttentionOnlyTransformer, tokens: Tensor) -> HeadScores:
    """Previous-token and induction score of every head of ``model`` on ``tokens`` (eval mode).

    Shapes:
        tokens: (B, L), e.g. from :func:`make_repeated_batch`; returns two (N, H) tensors.
    """
    with eval_mode(model):
        _, weights = model(tokens, need_weights=True)  # (B, N, H, L, L)
    return attention_scores(weights, tokens)


def held_out_tokens(batch_size: int = 512, half_len: int = EVAL_HALF_LEN,
                    vocab_size: int | None = None) -> Tensor:
    """The held-out sequences every number in the book is measured on (their own seed)."""
    V = InductionConfig().vocab_size if vocab_size is None else vocab_size
    return make_repeated_batch(batch_size, half_len, V, torch.Generator().manual_seed(TEST_SEED))


# --- training ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of a training run (the defaults trained the shipped weights).

    Each step draws a batch with its own ``half_len`` in ``[min_half_len, max_half_len]``:
    the repeat starts at a different position from batch to batch, so no head can copy by
    position alone (a fixed offset ``half_len`` would let one layer do it). Each batch also
    starts at a random position ``start`` (see :meth:`AttentionOnlyTransformer.forward`).
    """

    seed: int = 0
    steps: int = 5000
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.1
    min_half_len: int = 6
    max_half_len: int = 20
    eval_every: int = 25
    num_threads: int = 1
    model: InductionConfig = field(default_factory=InductionConfig)


@dataclass
class TrainResult:
    """What :func:`train` returns: the model (eval mode) and its training record."""

    model: AttentionOnlyTransformer
    history: dict


def _progress(step: int, steps: int, losses: HalfLosses, out: TextIO, width: int = 30) -> None:
    done = width * step // steps
    end = "\n" if step == steps else ""
    out.write(f"\r[{'#' * done}{'.' * (width - done)}] step {step:>5}/{steps}  loss: random half "
              f"{losses.random:.2f}, repeated half {losses.repeated:.2f}{end}")
    out.flush()


def _check_train_config(config: TrainConfig) -> None:
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    for name in ("steps", "batch_size", "min_half_len", "max_half_len", "eval_every", "num_threads"):
        check_positive_int(getattr(config, name), f"config.{name}")
    if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
        raise ValueError(f"config.seed must be an integer >= 0, got {config.seed!r}")
    if not 2 <= config.min_half_len <= config.max_half_len:
        raise ValueError(
            f"config needs 2 <= min_half_len <= max_half_len, got {config.min_half_len} and {config.max_half_len}"
        )
    if 2 * config.max_half_len > config.model.max_len or config.max_half_len > config.model.vocab_size:
        raise ValueError(
            f"config.max_half_len = {config.max_half_len} needs model.max_len >= {2 * config.max_half_len} "
            f"and model.vocab_size >= {config.max_half_len}, got {config.model.max_len} and "
            f"{config.model.vocab_size}"
        )
    for name in ("lr", "weight_decay"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0 or (name == "lr" and value == 0):
            raise ValueError(f"config.{name} must be a finite number {'> 0' if name == 'lr' else '>= 0'}, got {value!r}")


def train(config: TrainConfig = TrainConfig(), *, progress: bool | TextIO = True) -> TrainResult:
    """Train a fresh model from ``config.seed`` on the CPU; the same config gives the same weights.

    Adam(W) at a constant learning rate, a fresh random batch every step (drawn from a seeded
    generator), the parameters initialised from ``config.seed`` without touching the global
    random state. Every ``eval_every`` steps the losses on both halves of
    :func:`held_out_tokens` are logged: the loss curve the chapter plots.

    Args:
        config: hyper-parameters and model sizes.
        progress: print a one-line progress bar (to stderr, or to the given text stream).

    Returns:
        A :class:`TrainResult`; ``history`` holds ``train_config``, ``train_loss`` (every step,
        repeated half), ``eval_steps``, ``eval_random``, ``eval_repeated`` and ``cpu_seconds`` (this
        process's CPU time, which other processes' load hardly changes).
    """
    _check_train_config(config)
    out = sys.stderr if progress is True else (progress or None)
    threads = torch.get_num_threads()
    # One thread: the model is tiny, and on a shared CPU extra threads mostly wait for each other.
    torch.set_num_threads(config.num_threads)
    try:
        with torch.random.fork_rng(devices=[]):
            return _training_loop(config, out)
    finally:
        torch.set_num_threads(threads)


def _training_loop(config: TrainConfig, out: TextIO | None) -> TrainResult:
    # CPU time, not wall clock: on a shared machine the wall clock mostly measures the others
    # (and this VM's monotonic clock was seen to jump by tens of minutes under load).
    start_cpu = time.process_time()
    torch.manual_seed(config.seed)  # the initialisation (inside train's fork_rng)
    model = AttentionOnlyTransformer(config.model).train()
    data = torch.Generator().manual_seed(config.seed + 1)
    eval_half = min(EVAL_HALF_LEN, config.max_half_len)  # a length it trains on
    held_out = held_out_tokens(256, eval_half, config.model.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    V = config.model.vocab_size
    train_loss, eval_steps, eval_random, eval_repeated = [], [], [], []

    def log(step: int) -> None:
        losses = half_losses(model, held_out)
        eval_steps.append(step)
        eval_random.append(losses.random)
        eval_repeated.append(losses.repeated)
        if out is not None:
            _progress(step, config.steps, losses, out)

    log(0)
    for step in range(1, config.steps + 1):
        half = int(torch.randint(config.min_half_len, config.max_half_len + 1, (), generator=data))
        tokens = make_repeated_batch(config.batch_size, half, V, data)  # (B, L)
        # A random first position: every position index serves in both halves.
        start = int(torch.randint(0, config.model.max_len - 2 * half + 1, (), generator=data))
        logits = model(tokens, start=start)  # (B, L, V)
        # Train on every prediction (both halves), like a language model.
        loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        train_loss.append(loss.item())
        if step % config.eval_every == 0 or step == config.steps:
            log(step)
    model.eval()
    cfg = asdict(config)
    return TrainResult(model, {
        "train_config": {k: v for k, v in cfg.items() if k != "model"},
        "train_loss": torch.tensor(train_loss),
        "eval_steps": torch.tensor(eval_steps),
        "eval_random": torch.tensor(eval_random),
        "eval_repeated": torch.tensor(eval_repeated),
        "cpu_seconds": time.process_time() - start_cpu,
        "torch_version": str(torch.__version__),
    })


# --- checkpoints ------------------------------------------------------------------------------

def checkpoint(result: TrainResult) -> dict:
    """A ``torch.load(..., weights_only=True)``-safe dict: config, state_dict and history."""
    return {"config": asdict(result.model.config), "state_dict": result.model.state_dict(),
            "history": result.history}


def pretrained_path() -> Path:
    """Where the shipped checkpoint lives (``mha_lib/data/induction_heads.pt``)."""
    return Path(str(resources.files("mha_lib") / "data" / PRETRAINED_FILE))


def load_checkpoint(path: str | Path | None = None) -> dict:
    """Load a checkpoint dict with ``weights_only=True`` (tensors and plain data only)."""
    return torch.load(path or pretrained_path(), map_location="cpu", weights_only=True)


def from_checkpoint(ckpt: dict) -> AttentionOnlyTransformer:
    """Rebuild a model from :func:`checkpoint`'s dict (in eval mode)."""
    model = AttentionOnlyTransformer(InductionConfig(**ckpt["config"]))
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def load_pretrained(path: str | Path | None = None) -> AttentionOnlyTransformer:
    """The shipped two-layer model with its induction head, in eval mode.

    Its checkpoint also stores the training record (``load_checkpoint()["history"]``).
    """
    return from_checkpoint(load_checkpoint(path))


def save(result: TrainResult, path: str | Path, *, overwrite: bool = False) -> Path:
    """Save :func:`checkpoint` of ``result`` to ``path``; refuses to replace a file unless ``overwrite``."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise ValueError(f"{path} exists: pass overwrite=True (--overwrite) to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint(result), path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mha_lib.induction --out PATH [--seed S] [--steps N] [--overwrite]``."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_lib.induction",
        description="Train the two-layer attention-only model on repeated random tokens.",
    )
    parser.add_argument("--out", required=True, type=Path,
                        help=f"checkpoint to write (the shipped one is {pretrained_path()})")
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.overwrite:
        parser.error(f"{args.out} exists; pass --overwrite to replace it")
    result = train(TrainConfig(seed=args.seed, steps=args.steps))
    save(result, args.out, overwrite=args.overwrite)
    scores = head_scores(result.model, held_out_tokens())
    print(f"trained in {result.history['cpu_seconds']:.1f} s of CPU time -> {args.out}")
    print("previous-token scores (layer x head):", scores.previous_token.numpy().round(3).tolist())
    print("induction scores (layer x head):     ", scores.induction.numpy().round(3).tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
