"""Train :class:`~mha_lib.models.DigitAttentionModel` on the previous-plus-last task.

Everything random is drawn from seeded ``torch.Generator`` objects (model initialisation,
every training batch, the test set), so a run is a pure function of its :class:`TrainConfig`.

Shape legend
    B   batch size
    L   padded sequence length
    V   vocabulary size
"""

from __future__ import annotations

import argparse
import math
import numbers
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_size, check_tensor
from mha_lib._modes import eval_mode
from mha_lib.models import DigitAttentionModel, ModelConfig, checkpoint
from mha_lib.tasks import IGNORE_INDEX, TaskBatch, make_batch

TEST_SEED = 2024
"""Seed of the held-out test set (never used for training batches)."""


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of a training run (the defaults trained the shipped weights)."""

    seed: int = 0
    steps: int = 1000
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 50
    num_threads: int = 1
    model: ModelConfig = field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        """Raise a ValueError naming the first field that is out of range (never clamp)."""
        check_size(self.seed, "seed")
        for name in ("steps", "batch_size", "num_threads"):
            check_positive_int(getattr(self, name), name)
        check_size(self.warmup, "warmup")
        if self.warmup > self.steps:
            raise ValueError(f"warmup must be <= steps = {self.steps}, got {self.warmup}")
        for name, low in (("lr", 0.0), ("weight_decay", 0.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
            if value < low or (name == "lr" and value == 0):
                raise ValueError(f"{name} must be {'> 0' if name == 'lr' else '>= 0'}, got {value!r}")
        if not isinstance(self.model, ModelConfig):
            raise ValueError(f"model must be a ModelConfig, got {type(self.model).__name__}")


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        model: the trained model, in eval mode.
        losses: training loss of every step.
        test_accuracy: :func:`accuracy` on :func:`held_out_set`.
        seconds: wall-clock time of the run (informative only).
    """

    model: DigitAttentionModel
    losses: list[float]
    test_accuracy: float
    seconds: float


def held_out_set(size: int = 2000, seed: int = TEST_SEED) -> TaskBatch:
    """The held-out examples every accuracy in the book is measured on."""
    return make_batch(size, generator=torch.Generator().manual_seed(seed))


def loss_fn(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Cross-entropy over the labelled positions.

    Shapes:
        logits: (B, L, V); targets: (B, L) with ``IGNORE_INDEX`` where there is no label.

    Returns:
        a scalar (``reduction="mean"``: mean over labelled positions), or with
        ``reduction="per_example"`` a (B,) tensor: each example's mean over its labelled positions.
    """
    _check_logits_and_targets(logits, targets)
    if reduction == "mean":
        flat_logits = logits.flatten(0, 1)  # (B, L, V) -> (B*L, V)
        flat_targets = targets.flatten()  # (B, L) -> (B*L,)
        return nn.functional.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORE_INDEX)
    if reduction == "per_example":
        class_first = logits.transpose(1, 2)  # (B, L, V) -> (B, V, L): cross_entropy wants classes on dim 1
        per_token = nn.functional.cross_entropy(
            class_first, targets, ignore_index=IGNORE_INDEX, reduction="none"
        )  # (B, V, L) vs (B, L) -> (B, L), 0 where ignored
        counts = (targets != IGNORE_INDEX).sum(dim=1).clamp(min=1)  # (B,)
        return per_token.sum(dim=1) / counts
    raise ValueError(f"reduction must be 'mean' or 'per_example', got {reduction!r}")


def _check_logits_and_targets(logits: object, targets: object) -> None:
    check_tensor(logits, "logits", 3)
    if (
        not isinstance(targets, Tensor) or targets.dtype != torch.long
        or tuple(targets.shape) != tuple(logits.shape[:2])
    ):
        got = f"{targets.dtype} of shape {tuple(targets.shape)}" if isinstance(targets, Tensor) else type(targets).__name__
        raise ValueError(f"targets must be int64 of shape (B, L) = {tuple(logits.shape[:2])}, got {got}")


@torch.no_grad()
def accuracy(model: nn.Module, batch: TaskBatch, head_mask: Tensor | None = None) -> float:
    """Fraction of labelled positions whose most likely digit is the target.

    Args:
        model: called as ``model(tokens, valid_lens, head_mask=head_mask)``, returns (B, L, V).
        batch: the examples.
        head_mask: optional gates (H,) passed to the model.
    """
    with eval_mode(model):
        logits = model(batch.tokens, batch.valid_lens, head_mask=head_mask)  # (B, L, V)
    labelled = batch.targets != IGNORE_INDEX  # (B, L)
    if not labelled.any():
        raise ValueError("batch must have at least one labelled position, got only IGNORE_INDEX targets")
    correct = (logits.argmax(dim=-1) == batch.targets) & labelled
    return correct.sum().item() / labelled.sum().item()


def _progress(step: int, steps: int, loss: float, out: TextIO, width: int = 30) -> None:
    done = width * step // steps
    end = "\n" if step == steps else ""
    out.write(f"\r[{'#' * done}{'.' * (width - done)}] step {step:>5}/{steps}  loss {loss:.3f}{end}")
    out.flush()


def train(config: TrainConfig = TrainConfig(), *, progress: bool | TextIO = True) -> TrainResult:
    """Train a fresh model from ``config.seed``; deterministic for a given config.

    Adam with weight decay, linear warm-up then cosine decay of the learning rate, a fresh
    random batch at every step (so the model never sees the same example twice).

    Args:
        config: hyper-parameters and model sizes.
        progress: print a one-line progress bar (to stderr, or to the given text stream).

    Returns:
        A :class:`TrainResult` with the model in eval mode.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if progress is not True and progress is not False and not hasattr(progress, "write"):
        raise ValueError(f"progress must be True, False or a text stream, got {progress!r}")
    out = sys.stderr if progress is True else (progress or None)
    threads = torch.get_num_threads()
    # One thread: this model is far too small to gain from two, and a shared CPU makes extra
    # threads wait for each other (measured: 21 ms/step on 1 thread, 120 ms/step on 2, loaded).
    torch.set_num_threads(config.num_threads)
    try:
        return training_loop(config, out)
    finally:
        torch.set_num_threads(threads)


def learning_rate_factor(step: int, warmup: int, steps: int) -> float:
    """Multiplier of the base learning rate: linear warm-up to 1, then cosine decay to 0.

    Raises:
        ValueError: step or warmup not an integer >= 0, steps not an integer >= 1.
    """
    check_size(step, "step")
    check_size(warmup, "warmup")
    check_positive_int(steps, "steps")
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def training_loop(config: TrainConfig, out: TextIO | None = None) -> TrainResult:
    """The loop behind :func:`train` (which also validates ``config`` and sets the threads).

    Args:
        config: hyper-parameters and model sizes.
        out: where to write the progress line, or None for silence.
    """
    steps = config.steps
    start = time.perf_counter()
    torch.manual_seed(config.seed)  # parameter initialisation draws from the global generator
    model = DigitAttentionModel(config.model).train()
    data = torch.Generator().manual_seed(config.seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    warmup = config.warmup  # TrainConfig checked 0 <= warmup <= steps
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: learning_rate_factor(s, warmup, steps))
    losses = []
    for step in range(1, steps + 1):
        batch = make_batch(config.batch_size, generator=data, max_len=config.model.max_len)
        loss = loss_fn(model(batch.tokens, batch.valid_lens), batch.targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if out is not None and (step % 50 == 0 or step == steps):
            _progress(step, steps, loss.item(), out)
    model.eval()
    acc = accuracy(model, held_out_set())
    return TrainResult(model, losses, acc, time.perf_counter() - start)


def history(result: TrainResult, config: TrainConfig) -> dict:
    """The training record stored next to the weights (plain data, ``weights_only``-safe)."""
    cfg = asdict(config)
    cfg.pop("model")
    return {
        "train_config": cfg,
        "losses": torch.tensor(result.losses),
        "test_accuracy": result.test_accuracy,
        "seconds": result.seconds,
    }


def save_pretrained(
    path: str | Path, config: TrainConfig = TrainConfig(), *, overwrite: bool = False
) -> TrainResult:
    """Train with ``config`` and save weights plus training record to ``path``.

    With the default config this reproduces the shipped checkpoint
    (``mha_lib/data/previous_plus_last.pt``); ``python -m mha_lib.training OUT.pt`` runs it.

    Raises:
        ValueError: ``path`` missing or a directory, or an existing file without ``overwrite``
            (checked before the training starts).
    """
    path = _check_output_path(path, overwrite)
    result = train(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint(result.model, history=history(result, config)), path)
    return result


def _check_output_path(path: object, overwrite: object) -> Path:
    if not isinstance(path, (str, Path)) or not str(path):
        raise ValueError(f"path must be a file name (str or Path), got {path!r}")
    if not isinstance(overwrite, bool):
        raise ValueError(f"overwrite must be True or False, got {overwrite!r}")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path must be a file, got the directory {str(path)!r}")
    if path.exists() and not overwrite:
        raise ValueError(f"{str(path)!r} exists: pass overwrite=True (--overwrite) to replace it")
    return path


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m mha_lib.training OUT.pt [--overwrite]``."""
    parser = argparse.ArgumentParser(
        prog="python -m mha_lib.training",
        description="Train the model of chapter 7 with the default TrainConfig (the shipped "
        "checkpoint's) and save it.",
    )
    parser.add_argument("out", type=Path, help="the checkpoint file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    try:
        _check_output_path(args.out, args.overwrite)
    except ValueError as err:
        parser.error(str(err))
    done = save_pretrained(args.out, overwrite=args.overwrite)
    print(f"test accuracy {done.test_accuracy:.4f} after {done.seconds:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
