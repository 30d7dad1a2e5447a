"""Chapter 7's experiment: a one-layer attention model on a digit task that needs two kinds of heads.

The *previous-plus-last* task. A sequence holds ``L`` digits ``x[0], ..., x[L-1]`` (``L`` varies
from example to example, the rest of the row is padding). At every position ``i >= 1`` the
model must output

    y[i] = (x[i-1] + x[L-1]) mod V

the units digit of "the previous digit plus the last digit" (``V = 10``). Position 0 has no
previous digit and padding has no target: both are marked ``IGNORE_INDEX``.

Two kinds of attention solve it: a *previous-token* head (query ``i`` looks at key ``i-1``, a
fixed offset) and a *last-token* head (every query looks at key ``L-1``, which moves with the
valid length). The last-token head only works if padding is masked: without ``valid_lens`` the
"rightmost key" would be a padding slot.

* :func:`make_batch`, :func:`targets_for`, :class:`TaskBatch`   the task
* :class:`Config`, :class:`DigitAttentionModel`   the model (and how it is trained)
* :func:`example_losses`, :func:`accuracy`, :func:`held_out_set`   measuring it
* :func:`train`, :func:`save`, :func:`load_pretrained`, :func:`main`   the experiment convention:
  ``python -m mha_lib.digits --out PATH`` retrains the shipped weights from the seed

Shape legend
    B   batch size
    L   padded sequence length (``max_len``)
    H   heads
    d   head size
    D   model width, H*d (``d_model``)
    V   vocabulary size (digits; the padding token is V)
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Sequence, TextIO

import torch
from torch import Tensor, nn

from mha_lib._checks import check_device, check_positive_int, check_size, check_tensor
from mha_lib._modes import eval_mode
from mha_lib.multihead import MultiHeadAttention
from mha_lib.training import (
    model_device,
    to_device,
    TrainResult,
    check_config,
    check_config_fields,
    load_model,
    run_main,
    save_result,
    train_loop,
    warmup_cosine,
)

__all__ = [
    "Config",
    "DigitAttentionModel",
    "KIND",
    "PRETRAINED_PATH",
    "TaskBatch",
    "accuracy",
    "example_losses",
    "held_out_set",
    "load_pretrained",
    "main",
    "make_batch",
    "save",
    "targets_for",
    "token_labels",
    "train",
]

_VOCAB_SIZE = 10
"""V: the digits 0..9 (the padding token is V)."""
_MIN_LEN = 4
_MAX_LEN = 12
_IGNORE_INDEX = -100
"""Target of positions without a label (``nn.CrossEntropyLoss``'s default ``ignore_index``)."""
_TEST_SEED = 2024
"""Seed of the held-out set (never used for training batches)."""

KIND = "digits"
"""The ``kind`` of this experiment's checkpoints."""
PRETRAINED_PATH = Path(str(resources.files("mha_lib") / "data" / "previous_plus_last.pt"))
"""The shipped checkpoint."""


# --- the task ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskBatch:
    """A batch of the previous-plus-last task.

    Attributes:
        tokens: (B, L) long; digits, then the padding token V after each valid length.
        valid_lens: (B,) long; how many positions of each row are real digits (or None:
            the model then sees the padding, see chapter 7).
        targets: (B, L) long; ``(x[i-1] + x[L-1]) mod V``, or ``IGNORE_INDEX`` (-100) at
            position 0 and on padding.
    """

    tokens: Tensor
    valid_lens: Tensor | None
    targets: Tensor

    def __len__(self) -> int:
        return self.tokens.shape[0]


def _check_integer_tensor(x: object, name: str, ndim: int) -> Tensor:
    if (
        not isinstance(x, Tensor) or x.dim() != ndim or x.is_floating_point()
        or x.is_complex() or x.dtype == torch.bool or x.is_meta
    ):
        got = f"{x.dtype} of shape {tuple(x.shape)} on {x.device}" if isinstance(x, Tensor) else type(x).__name__
        want = "(B, L)" if ndim == 2 else "(B,)"
        raise ValueError(f"{name} must be an integer tensor of shape {want} (not on meta), got {got}")
    return x


def targets_for(tokens: Tensor, valid_lens: Tensor, vocab_size: int = _VOCAB_SIZE) -> Tensor:
    """The labels of the task for given digits and lengths.

    Shapes:
        tokens: (B, L); valid_lens: (B,); returns (B, L).

    Returns:
        ``(tokens[b, i-1] + tokens[b, valid_lens[b]-1]) % vocab_size`` for ``1 <= i < valid_lens[b]``,
        ``IGNORE_INDEX`` elsewhere.

    Raises:
        ValueError: tokens not a (B, L) integer tensor, valid_lens not (B,) integers in
            [0, L], or vocab_size not an integer >= 1.
    """
    check_positive_int(vocab_size, "vocab_size")
    tokens = _check_integer_tensor(tokens, "tokens", 2)
    valid_lens = _check_integer_tensor(valid_lens, "valid_lens", 1)
    B, L = tokens.shape
    if L == 0:
        raise ValueError(f"tokens must have at least one position, got shape {tuple(tokens.shape)}")
    if valid_lens.shape != (B,):
        raise ValueError(f"valid_lens must have shape (B,) = ({B},), got {tuple(valid_lens.shape)}")
    if B and (valid_lens.min() < 0 or valid_lens.max() > L):
        raise ValueError(f"valid_lens must be in [0, L = {L}], got {valid_lens.tolist()}")
    tokens, valid_lens = tokens.long(), valid_lens.to(tokens.device).long()
    positions = torch.arange(L, device=tokens.device)  # (L,)
    last = tokens.gather(1, (valid_lens - 1).clamp(min=0)[:, None])  # (B,) -> (B, 1)
    previous = torch.cat([torch.zeros_like(tokens[:, :1]), tokens[:, :-1]], dim=1)  # (B, L)
    targets = (previous + last) % vocab_size  # (B, L)
    labelled = (positions >= 1) & (positions < valid_lens[:, None])  # (B, L)
    return targets.masked_fill(~labelled, _IGNORE_INDEX)


def make_batch(
    batch_size: int,
    *,
    generator: torch.Generator,
    vocab_size: int = _VOCAB_SIZE,
    min_len: int = _MIN_LEN,
    max_len: int = _MAX_LEN,
) -> TaskBatch:
    """Draw a random batch of the previous-plus-last task.

    Lengths are uniform in ``[min_len, max_len]``, digits uniform in ``[0, vocab_size)``.
    The padding token is ``vocab_size``.

    Args:
        batch_size: B.
        generator: the seeded source of randomness (required, so every batch is reproducible).
        vocab_size: V, number of digit values.
        min_len: shortest sequence (>= 2, so that there is at least one target).
        max_len: L, the padded length.

    Returns:
        A :class:`TaskBatch` with tensors of shape (B, max_len) and (B,).

    Raises:
        ValueError: a size that is not a positive integer, ``min_len < 2`` or
            ``min_len > max_len``, or a generator that is not a ``torch.Generator``.
    """
    B = check_positive_int(batch_size, "batch_size")
    V = check_positive_int(vocab_size, "vocab_size")
    lo = check_positive_int(min_len, "min_len")
    hi = check_positive_int(max_len, "max_len")
    if lo < 2 or lo > hi:
        raise ValueError(f"min_len must be in [2, max_len={hi}], got {lo}")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    valid_lens = torch.randint(lo, hi + 1, (B,), generator=generator)  # (B,)
    digits = torch.randint(0, V, (B, hi), generator=generator)  # (B, L)
    padding = torch.arange(hi) >= valid_lens[:, None]  # (B, L)
    tokens = digits.masked_fill(padding, V)
    return TaskBatch(tokens, valid_lens, targets_for(tokens, valid_lens, V))


def token_labels(tokens: Tensor, valid_len: int) -> list[str]:
    """Axis labels for one example: ``"0:3", "1:1", ...`` (position:digit), ``"i:pad"`` past ``valid_len``."""
    if not isinstance(tokens, Tensor) or tokens.dim() != 1:
        raise ValueError(f"tokens must be a 1-D tensor (one example), got {type(tokens).__name__}")
    check_size(valid_len, "valid_len")
    return [f"{i}:{int(t)}" if i < valid_len else f"{i}:pad" for i, t in enumerate(tokens)]


# --- the model --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """The model's sizes and its training run (the defaults made the shipped weights).

    Training: AdamW with weight decay, ``warmup`` steps of linear warm-up then cosine decay of
    the learning rate, a fresh random batch of ``batch_size`` examples at every step, the
    initialisation drawn from ``seed`` and the batches from ``seed + 1``.
    """

    vocab_size: int = _VOCAB_SIZE  # V digits; the padding token is V
    max_len: int = _MAX_LEN  # L, the longest sequence
    d_model: int = 32  # D = H * d
    num_heads: int = 4  # H
    mlp_hiddens: int = 128
    seed: int = 0
    steps: int = 1000
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 50
    num_threads: int = 1  # this model is far too small to gain from two

    def __post_init__(self) -> None:
        """Raise a ValueError naming the first field that is out of range (never clamp)."""
        check_config_fields(self)
        for name in ("vocab_size", "max_len", "mlp_hiddens"):
            check_positive_int(getattr(self, name), f"config.{name}")
        check_size(self.warmup, "config.warmup")
        if self.max_len < 2:
            raise ValueError(f"config.max_len must be >= 2 (a target needs two digits), got {self.max_len}")
        if self.warmup > self.steps:
            raise ValueError(f"config.warmup must be <= steps = {self.steps}, got {self.warmup}")


class DigitAttentionModel(nn.Module):
    """Embeddings, one :class:`~mha_lib.multihead.MultiHeadAttention` layer, an MLP read-out.

    ``X = token_embedding(tokens) + position_embedding(positions)``, then self-attention over
    the valid positions with a residual connection, then LayerNorm and a two-layer MLP that
    scores the V digits at every position. All information about *other* positions has to
    pass through the attention heads, which is what makes the heads worth studying.

    Shapes:
        tokens: (B, L) integers, digits in [0, V) and padding V
        valid_lens: None or (B,)
        head_mask: None, (H,) or (B, H)
        logits: (B, L, V); weights: (B, H, L, L)

    Args:
        config: the sizes (:class:`Config`; its training fields are not used here).
    """

    def __init__(self, config: Config = Config()) -> None:
        super().__init__()
        self.config = check_config(config, Config)
        D = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size + 1, D)  # +1: the padding token
        self.position_embedding = nn.Embedding(config.max_len, D)
        self.attention = MultiHeadAttention(D, D, D, D, config.num_heads, dropout=0.0)
        self.norm = nn.LayerNorm(D)
        self.mlp = nn.Sequential(
            nn.Linear(D, config.mlp_hiddens), nn.ReLU(), nn.Linear(config.mlp_hiddens, config.vocab_size)
        )

    @property
    def num_heads(self) -> int:
        """H of the attention layer (smaller after pruning)."""
        return self.attention.num_heads

    def embed(self, tokens: Tensor) -> Tensor:
        """The attention layer's input: token plus position embeddings, (B, L) -> (B, L, D)."""
        tokens = _check_integer_tensor(tokens, "tokens", 2)
        L = tokens.shape[1]
        if L > self.config.max_len:
            raise ValueError(f"tokens may have at most max_len = {self.config.max_len} positions, got {L}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() > self.config.vocab_size):
            raise ValueError(
                f"tokens must be in [0, {self.config.vocab_size}] (digits and padding), "
                f"got values in [{int(tokens.min())}, {int(tokens.max())}]"
            )
        positions = torch.arange(L, device=tokens.device)  # (L,)
        tokens = tokens.long()  # nn.Embedding takes int64 (uint8, int16, ... are fine too)
        return self.token_embedding(tokens) + self.position_embedding(positions)  # (B, L, D)

    def forward(
        self,
        tokens: Tensor,
        valid_lens: Tensor | None = None,
        *,
        head_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Score the digits at every position.

        Returns:
            logits (B, L, V), or ``(logits, weights)`` with weights (B, H, L, L) when
            ``need_weights`` is true.
        """
        X = self.embed(tokens)  # (B, L, D)
        out = self.attention(X, X, X, valid_lens, head_mask=head_mask, need_weights=need_weights)
        if need_weights:
            out, weights = out
        logits = self.mlp(self.norm(X + out))  # (B, L, D) -> (B, L, V)
        return (logits, weights) if need_weights else logits


# --- measuring it -----------------------------------------------------------------------------

def held_out_set(size: int = 2000, *, vocab_size: int = _VOCAB_SIZE, max_len: int = _MAX_LEN) -> TaskBatch:
    """The held-out examples every accuracy in the book is measured on (their own seed)."""
    check_positive_int(size, "size")
    check_positive_int(max_len, "max_len")
    generator = torch.Generator().manual_seed(_TEST_SEED)
    return make_batch(size, generator=generator, vocab_size=vocab_size, min_len=min(_MIN_LEN, max_len),
                      max_len=max_len)


def _loss_fn(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Cross-entropy over the labelled positions.

    Shapes:
        logits: (B, L, V); targets: (B, L) with ``IGNORE_INDEX`` where there is no label.

    Returns:
        a scalar (``reduction="mean"``: mean over labelled positions), or with
        ``reduction="per_example"`` a (B,) tensor: each example's mean over its labelled positions.
    """
    check_tensor(logits, "logits", 3)
    if (
        not isinstance(targets, Tensor) or targets.dtype != torch.long
        or tuple(targets.shape) != tuple(logits.shape[:2])
    ):
        got = f"{targets.dtype} of shape {tuple(targets.shape)}" if isinstance(targets, Tensor) else type(targets).__name__
        raise ValueError(f"targets must be int64 of shape (B, L) = {tuple(logits.shape[:2])}, got {got}")
    if reduction == "mean":
        flat_logits = logits.flatten(0, 1)  # (B, L, V) -> (B*L, V)
        flat_targets = targets.flatten()  # (B, L) -> (B*L,)
        return nn.functional.cross_entropy(flat_logits, flat_targets, ignore_index=_IGNORE_INDEX)
    if reduction == "per_example":
        class_first = logits.transpose(1, 2)  # (B, L, V) -> (B, V, L): cross_entropy wants classes on dim 1
        per_token = nn.functional.cross_entropy(
            class_first, targets, ignore_index=_IGNORE_INDEX, reduction="none"
        )  # (B, V, L) vs (B, L) -> (B, L), 0 where ignored
        counts = (targets != _IGNORE_INDEX).sum(dim=1).clamp(min=1)  # (B,)
        return per_token.sum(dim=1) / counts
    raise ValueError(f"reduction must be 'mean' or 'per_example', got {reduction!r}")


def _check_model_and_batch(model: object, batch: object) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module (like DigitAttentionModel), got {type(model).__name__}")
    if not isinstance(batch, TaskBatch):
        raise ValueError(f"batch must be a mha_lib.digits.TaskBatch, got {type(batch).__name__}")


def example_losses(model: nn.Module, batch: TaskBatch, head_mask: Tensor | None = None) -> Tensor:
    """Each example's mean loss over its labelled positions, in eval mode (with gradients).

    Args:
        model: called as ``model(tokens, valid_lens, head_mask=head_mask)``, returns (B, L, V).
        batch: the examples.
        head_mask: optional gates, (H,) or (B, H).

    Returns:
        (B,) losses (differentiable with respect to ``head_mask``).
    """
    _check_model_and_batch(model, batch)
    batch = to_device(batch, model_device(model))  # (the data goes where the model is)
    with eval_mode(model):
        logits = model(batch.tokens, batch.valid_lens, head_mask=head_mask)  # (B, L, V)
    return _loss_fn(logits, batch.targets, reduction="per_example")


@torch.no_grad()
def accuracy(model: nn.Module, batch: TaskBatch, head_mask: Tensor | None = None) -> float:
    """Fraction of labelled positions whose most likely digit is the target (eval mode).

    Args:
        model: called as ``model(tokens, valid_lens, head_mask=head_mask)``, returns (B, L, V).
        batch: the examples.
        head_mask: optional gates (H,) passed to the model.
    """
    _check_model_and_batch(model, batch)
    batch = to_device(batch, model_device(model))  # (the data goes where the model is)
    labelled = batch.targets != _IGNORE_INDEX  # (B, L)
    if not labelled.any():
        raise ValueError("batch must have at least one labelled position, got only IGNORE_INDEX targets")
    with eval_mode(model):
        logits = model(batch.tokens, batch.valid_lens, head_mask=head_mask)  # (B, L, V)
    correct = (logits.argmax(dim=-1) == batch.targets) & labelled
    right, total = torch.stack([correct.sum(), labelled.sum()]).tolist()  # (one host read)
    return right / total


# --- the experiment ---------------------------------------------------------------------------

def _batch_loss(model: nn.Module, batch: TaskBatch) -> Tensor:
    return _loss_fn(model(batch.tokens, batch.valid_lens), batch.targets)


def train(config: Config = Config(), *, progress: bool | TextIO = True,
          device: torch.device | str = "cpu") -> TrainResult:
    """Train a fresh model from ``config.seed``: the same config gives the same weights.

    The initialisation draws from the global generator inside ``fork_rng`` (the caller's
    random state is left alone), the batches from their own seeded generator; the loop is
    :func:`mha_lib.training.train_loop`.

    Args:
        config: sizes and hyper-parameters.
        progress: a one-line progress bar to stderr (True), to a text stream, or none (False).
        device: where to train ('cpu', 'cuda', ...): the same initial weights and batches on
            every device (drawn on the CPU); the CPU by default.

    Returns:
        A :class:`~mha_lib.training.TrainResult` (model in eval mode); ``history`` holds
        ``train_loss`` (every step), ``cpu_seconds``, ``torch_version`` and ``test_accuracy``
        (:func:`accuracy` on :func:`held_out_set`).
    """
    config = check_config(config, Config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)  # parameter initialisation draws from the global generator
        model = DigitAttentionModel(config)
    model.to(check_device(device))  # initialised on the CPU: the same weights on every device
    data = torch.Generator().manual_seed(config.seed + 1)
    batches = (
        make_batch(config.batch_size, generator=data, vocab_size=config.vocab_size,
                   min_len=min(_MIN_LEN, config.max_len), max_len=config.max_len)
        for _ in itertools.count()
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history = train_loop(
        model, _batch_loss, batches, optimizer, steps=config.steps,
        schedule=partial(warmup_cosine, warmup=config.warmup, steps=config.steps),
        num_threads=config.num_threads, progress=progress,
    )
    held_out = held_out_set(vocab_size=config.vocab_size, max_len=config.max_len)
    history["test_accuracy"] = accuracy(model, held_out)
    return TrainResult(model, config, history)


def save(result: TrainResult, path: str | Path, *, overwrite: bool = False) -> Path:
    """Save a :func:`train` result as a checkpoint of kind ``"digits"`` (refuses to overwrite
    an existing file unless ``overwrite``); returns the path."""
    return save_result(result, path, kind=KIND, model_class=DigitAttentionModel, overwrite=overwrite)


def load_pretrained(path: str | Path | None = None) -> DigitAttentionModel:
    """The shipped model, trained from ``Config()`` (or the checkpoint at ``path``), in eval mode.

    ``load_checkpoint(PRETRAINED_PATH, kind=KIND)["extra"]`` is its training record. A file
    that is not a checkpoint of this experiment raises a ValueError.
    """
    return load_model(PRETRAINED_PATH if path is None else path, kind=KIND, config_class=Config,
                      model_class=DigitAttentionModel)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mha_lib.digits --out PATH [--seed S] [--steps N] [--overwrite]``."""
    return run_main(
        argv, name="digits", config=Config(), train=train, save=save,
        description="Train chapter 7's model on the previous-plus-last task (the default Config "
        f"reproduces the shipped {PRETRAINED_PATH.name}) and save it.",
        summary=lambda r: f"test accuracy {r.history['test_accuracy']:.4f} after "
        f"{r.history['cpu_seconds']:.1f} s of CPU time",
    )


if __name__ == "__main__":
    sys.exit(main())
