"""The one training loop, its learning-rate schedule, and an experiment's result as a checkpoint.

Every experiment of the book (:mod:`mha_lib.digits`, :mod:`mha_lib.induction`, the language
model) trains through :func:`train_loop` and stores its weights in the one checkpoint format
of :mod:`mha_lib.checkpoints`:

* :func:`train_loop`       steps of "batch -> loss -> backward -> optimizer step", a progress bar,
  periodic evaluation, and a history of what happened (plain data, ready for a checkpoint)
* :func:`warmup_cosine`    the learning-rate factor: linear warm-up, then cosine decay to 0
* :class:`TrainResult`     what an experiment's ``train`` returns: model, config, history
* :func:`save_result`, :func:`load_model`   an experiment's :class:`TrainResult` to a
  checkpoint (:func:`mha_lib.checkpoints.save_checkpoint`), and its model back
* :func:`run_main`         the command line shared by ``python -m mha_lib.<experiment> --out PATH``
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

import torch
from torch import Tensor, nn

from mha_lib._checks import check_device, check_positive_int, check_size
from mha_lib._modes import eval_mode
from mha_lib.checkpoints import check_output_path, load_checkpoint, save_checkpoint

__all__ = [
    "TrainResult",
    "check_config",
    "check_config_fields",
    "load_model",
    "model_device",
    "run_main",
    "save_result",
    "to_device",
    "train_loop",
    "warmup_cosine",
]


def _check_real(value: object, name: str, *, positive: bool = False) -> float:
    """Return ``value`` as a float if it is a finite real number >= 0 (> 0 with ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def check_config(config: object, cls: type) -> Any:
    """Return ``config`` if it is a ``cls`` (an experiment's ``Config``), else raise."""
    if not isinstance(config, cls):
        raise ValueError(f"config must be a {cls.__module__}.{cls.__qualname__}, got {type(config).__name__}")
    return config


def check_config_fields(config: Any) -> None:
    """Check the fields every experiment's ``Config`` has, from its ``__post_init__``.

    ``d_model`` and ``num_heads`` (integers >= 1, ``d_model`` divisible by ``num_heads``),
    ``seed`` (>= 0), ``steps``, ``batch_size`` and ``num_threads`` (>= 1), ``lr`` (a finite
    number > 0) and ``weight_decay`` (>= 0).

    Raises:
        ValueError: naming the first field that is out of range (never clamped).
    """
    for name in ("d_model", "num_heads", "steps", "batch_size", "num_threads"):
        check_positive_int(getattr(config, name), f"config.{name}")
    check_size(config.seed, "config.seed")
    if config.d_model % config.num_heads:
        raise ValueError(f"config.d_model ({config.d_model}) must be divisible by config.num_heads ({config.num_heads})")
    _check_real(config.lr, "config.lr", positive=True)
    _check_real(config.weight_decay, "config.weight_decay")


# --- the learning-rate schedule ---------------------------------------------------------------

def warmup_cosine(step: int, *, warmup: int, steps: int) -> float:
    """Multiplier of the base learning rate: linear warm-up to 1, then cosine decay to 0.

    ``(step + 1) / warmup`` for ``step < warmup``, then ``(1 + cos(pi * t)) / 2`` where ``t``
    goes from 0 at ``step = warmup`` to 1 at ``step = steps``.

    Raises:
        ValueError: step or warmup not an integer >= 0, steps not an integer >= 1, or step
            past the last step (the cosine would climb back up). A warm-up longer than the
            run is allowed: the first steps of a longer run (the tests retrace the shipped run so).
    """
    check_size(step, "step")
    check_size(warmup, "warmup")
    check_positive_int(steps, "steps")
    if step > steps:
        raise ValueError(f"step must be <= steps = {steps} (the schedule ends there), got {step}")
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


# --- the loop ---------------------------------------------------------------------------------

@dataclass
class TrainResult:
    """What an experiment's ``train`` returns.

    Attributes:
        model: the trained model, in eval mode.
        config: the experiment's frozen ``Config`` that produced it.
        history: plain data (tensors, numbers, strings) stored as the checkpoint's ``extra``.
    """

    model: nn.Module
    config: Any
    history: dict


def _progress_stream(progress: object) -> TextIO | None:
    if progress is True:
        return sys.stderr
    if progress is False:
        return None
    if not callable(getattr(progress, "write", None)):
        raise ValueError(f"progress must be True, False or a text stream, got {progress!r}")
    return progress  # type: ignore[return-value]


def _draw_bar(out: TextIO, step: int, steps: int, loss: float, evals: Mapping[str, float],
              width: int = 30) -> None:
    done = width * step // steps
    text = f"\r[{'#' * done}{'.' * (width - done)}] step {step:>5}/{steps}  loss {loss:.3f}"
    text += "".join(f"  {name} {value:.3f}" for name, value in evals.items())
    out.write(text + ("\n" if step == steps else ""))
    out.flush()


def _check_callable(value: object, name: str, optional: bool = False) -> None:
    if not ((value is None and optional) or callable(value)):
        raise ValueError(f"{name} must be a function{' or None' if optional else ''}, got {value!r}")


def to_device(batch: Any, device: torch.device | str) -> Any:
    """A batch (tensors in tuples, named tuples, lists, dicts, dataclasses) moved to ``device``.

    The experiments draw batches on the CPU from seeded generators: a GPU run reads the same data.
    """
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(batch, **{f.name: to_device(getattr(batch, f.name), device)
                                             for f in dataclasses.fields(batch) if f.init})
    if isinstance(batch, (tuple, list)):  # (a named tuple is rebuilt from its fields)
        moved = [to_device(x, device) for x in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return {k: to_device(x, device) for k, x in batch.items()} if isinstance(batch, dict) else batch


def model_device(model: nn.Module) -> torch.device:
    """Where a model's parameters are (the CPU for a model without any)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def train_loop(
    model: nn.Module,
    loss: Callable[[nn.Module, Any], Tensor],
    batches: Iterable[Any],
    optimizer: torch.optim.Optimizer,
    *,
    steps: int,
    schedule: Callable[[int], float] | None = None,
    evaluate: Callable[[nn.Module], Mapping[str, float]] | None = None,
    eval_every: int | None = None,
    max_grad_norm: float | None = None,
    num_threads: int | None = None,
    progress: bool | TextIO = True,
) -> dict:
    """Train ``model`` for ``steps`` steps, one batch each; return what happened.

    Each step takes the next batch, computes ``loss(model, batch)`` (a scalar), back-propagates,
    optionally clips the gradient norm, and steps the optimizer and the schedule. The model is
    in train mode during the steps and in eval mode at the end.

    Args:
        model: the module to train (its parameters are those of ``optimizer``).
        loss: ``loss(model, batch) -> scalar tensor``.
        batches: yields at least ``steps`` batches (a generator drawing from a seeded
            ``torch.Generator`` keeps the run reproducible).
        optimizer: any ``torch.optim`` optimizer over the model's parameters.
        steps: number of optimizer steps.
        schedule: ``schedule(step) -> factor`` of every group's base learning rate at step
            ``0, 1, ...`` (``torch.optim.lr_scheduler.LambdaLR``), e.g. :func:`warmup_cosine`;
            None keeps the learning rate constant.
        evaluate: ``evaluate(model) -> {name: value}``, run in eval mode without gradients
            before the first step, every ``eval_every`` steps and after the last step.
        eval_every: steps between evaluations (needs ``evaluate``; default: ``steps``).
        max_grad_norm: clip the gradients' total norm to this (None: no clipping).
        num_threads: torch's intra-op threads during the loop (restored after); None leaves
            them. Tiny models run fastest on one thread, especially on a shared CPU.
        progress: a one-line progress bar to stderr (True), to a text stream, or none (False).

    Each batch is moved to the device of the model's parameters (:func:`to_device`). The loss
    is read back from that device only when the progress bar or an evaluation shows it, and at
    the end (on a GPU, reading a value waits for the device): a loss that is not finite stops
    the run then, naming its step.

    Returns:
        The history, plain data for a checkpoint's ``extra``: ``train_loss`` (a tensor, the
        loss of every step); with ``evaluate`` also ``eval_steps`` (a tensor: 0 = before the
        first step) and ``eval_<name>`` (a tensor per metric, one value per entry of
        ``eval_steps``); ``cpu_seconds`` (this process's CPU time in the loop, which other
        processes' load hardly changes, unlike the wall clock), ``torch_version`` and
        ``cpu_capability`` (the CPU kernels PyTorch chose: a rerun reproduces the history bit
        for bit with the same version and kernels, and only closely with others).

    Raises:
        ValueError: a bad argument (named in the message), a loss that is not a finite scalar
            tensor, an ``evaluate`` that does not return a mapping of names to numbers, or
            ``batches`` running out before ``steps``.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_callable(loss, "loss")
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise ValueError(f"batches must be an iterable of batches, got {type(batches).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    steps = check_positive_int(steps, "steps")
    _check_callable(schedule, "schedule", optional=True)
    _check_callable(evaluate, "evaluate", optional=True)
    if eval_every is not None:
        if evaluate is None:
            raise ValueError("eval_every needs evaluate: got eval_every without an evaluate function")
        eval_every = check_positive_int(eval_every, "eval_every")
    if max_grad_norm is not None:
        max_grad_norm = _check_real(max_grad_norm, "max_grad_norm", positive=True)
    if num_threads is not None:
        num_threads = check_positive_int(num_threads, "num_threads")
    out = _progress_stream(progress)

    threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        return _run(model, loss, iter(batches), optimizer, steps, schedule, evaluate,
                    eval_every or steps, max_grad_norm, out)
    finally:
        torch.set_num_threads(threads)


def _evaluate(evaluate: Callable, model: nn.Module) -> dict[str, float]:
    with eval_mode(model), torch.no_grad():
        metrics = evaluate(model)
    if not isinstance(metrics, Mapping):
        raise ValueError(f"evaluate must return a mapping of names to numbers, got {type(metrics).__name__}")
    try:
        values = {str(name): float(value) for name, value in metrics.items()}
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"evaluate must return a mapping of names to numbers, got {metrics!r}: {err}") from None
    if "steps" in values:
        raise ValueError("evaluate must not name a metric 'steps' (the history's eval_steps holds the steps)")
    return values


def _run(model, loss, batches, optimizer, steps, schedule, evaluate, eval_every, max_grad_norm,
         out) -> dict:
    start_cpu = time.process_time()
    scheduler = None if schedule is None else torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    losses: list[float] = []
    eval_steps: list[int] = []
    evals: dict[str, list[float]] = {}
    latest: dict[str, float] = {}

    def run_evaluation(step: int) -> None:
        nonlocal latest
        latest = _evaluate(evaluate, model)
        eval_steps.append(step)
        for name, value in latest.items():
            evals.setdefault(name, []).append(value)

    if evaluate is not None:
        run_evaluation(0)
    bar_every = max(1, steps // 100)  # at most about 100 redraws
    device, unread = model_device(model), []  # unread: losses not read back from the device yet

    def read_losses() -> None:  # the pending losses, in one host read; stop at a non-finite one
        first = len(losses) + 1
        losses.extend(torch.stack(unread).tolist() if unread else [])
        unread.clear()
        for step, value in enumerate(losses[first - 1:], start=first):
            if not math.isfinite(value):
                raise ValueError(f"loss must stay finite, got {value} at step {step}: lower the learning rate?")

    model.train()
    for step in range(1, steps + 1):
        try:
            batch = to_device(next(batches), device)
        except StopIteration:
            raise ValueError(f"batches must yield at least steps = {steps} batches, it ran out after {step - 1}") from None
        value = loss(model, batch)
        if not isinstance(value, Tensor) or value.numel() != 1 or not value.requires_grad:
            got = f"shape {tuple(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(f"loss must return a scalar tensor that requires grad, got {got}")
        unread.append(value.detach().reshape(()).double())
        if device.type == "cpu":  # nothing to wait for: read it now (and stop at once)
            read_losses()
        optimizer.zero_grad()
        value.backward()
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        evaluated = evaluate is not None and (step % eval_every == 0 or step == steps)
        if evaluated:
            run_evaluation(step)  # in eval mode, then back to the modes it had
        if out is not None and (evaluated or step % bar_every == 0 or step == steps):
            read_losses()
            _draw_bar(out, step, steps, losses[-1], latest)
    read_losses()
    model.eval()
    history: dict[str, Any] = {"train_loss": torch.tensor(losses)}
    if eval_steps:
        history["eval_steps"] = torch.tensor(eval_steps)
        history.update({f"eval_{name}": torch.tensor(values) for name, values in evals.items()})
    history["cpu_seconds"] = time.process_time() - start_cpu
    history["torch_version"] = str(torch.__version__)
    # The CPU kernels PyTorch chose (AVX512, AVX2, ...): a rerun is bit for bit only on the same
    history["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return history


# --- an experiment's result as a checkpoint ----------------------------------------------------

def save_result(result: TrainResult, path: str | os.PathLike, *, kind: str, model_class: type,
                overwrite: bool = False) -> Path:
    """Save an experiment's :class:`TrainResult` with :func:`~mha_lib.checkpoints.save_checkpoint`:
    its config (as a dict), the model's ``state_dict`` and the history as ``extra``.

    Raises:
        ValueError: result not a TrainResult whose model is a ``model_class`` and whose config
            is a dataclass, or a reason of :func:`~mha_lib.checkpoints.save_checkpoint`.
    """
    if not isinstance(model_class, type):
        raise ValueError(f"model_class must be a class, got {model_class!r}")
    if not isinstance(result, TrainResult) or not isinstance(result.model, model_class) or not (
        dataclasses.is_dataclass(result.config) and not isinstance(result.config, type)
    ):
        raise ValueError(
            f"result must be a TrainResult of a {model_class.__name__} and its Config (what the "
            f"experiment's train returns), got {type(result).__name__}"
        )
    return save_checkpoint(path, kind=kind, config=dataclasses.asdict(result.config),
                           state_dict=result.model.state_dict(), extra=result.history, overwrite=overwrite)


def load_model(path: str | os.PathLike, *, kind: str, config_class: type,
               model_class: Callable[[Any], nn.Module]) -> nn.Module:
    """Rebuild an experiment's model from its checkpoint (:func:`~mha_lib.checkpoints.load_checkpoint`), in eval mode.

    Args:
        path: the checkpoint file.
        kind: the experiment it must belong to.
        config_class: the experiment's ``Config`` dataclass (built from the checkpoint's config).
        model_class: called with that config.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a checkpoint of that kind, its config does not fit
            ``config_class``, or its weights do not fit the model.
    """
    if not dataclasses.is_dataclass(config_class) or not isinstance(config_class, type):
        raise ValueError(f"config_class must be a dataclass, got {config_class!r}")
    _check_callable(model_class, "model_class")
    ckpt = load_checkpoint(path, kind=kind)
    try:
        config = config_class(**ckpt["config"])
    except TypeError as err:
        raise ValueError(f"the config of path {str(path)!r} does not fit {config_class.__name__}: {err}") from None
    model = model_class(config)
    try:
        model.load_state_dict(ckpt["state_dict"])
    except RuntimeError as err:
        raise ValueError(f"the weights of path {str(path)!r} do not fit {type(model).__name__}: {err}") from None
    return model.eval()


# --- the command line -------------------------------------------------------------------------

def run_main(
    argv: Sequence[str] | None,
    *,
    name: str,
    description: str,
    config: Any,
    train: Callable[[Any], TrainResult],
    save: Callable[..., Path],
    summary: Callable[[TrainResult], str],
) -> int:
    """``python -m mha_lib.<name> --out PATH [--seed S] [--steps N] [--overwrite]``.

    Parses ``argv``, refuses an existing ``--out`` before training (unless ``--overwrite``),
    trains ``config`` with the given seed and steps, saves, and prints ``summary(result)``.

    Returns:
        0 (the exit status); a bad argument exits through argparse with status 2.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type) or not all(
        hasattr(config, field) for field in ("seed", "steps")
    ):
        raise ValueError(f"config must be an experiment's Config (a dataclass with seed and steps), got {config!r}")
    for arg, fn in (("train", train), ("save", save), ("summary", summary)):
        _check_callable(fn, arg)
    parser = argparse.ArgumentParser(prog=f"python -m mha_lib.{name}", description=description)
    parser.add_argument("--out", required=True, type=Path, help="the checkpoint file to write")
    parser.add_argument("--seed", type=int, default=config.seed, help=f"default {config.seed}")
    parser.add_argument("--steps", type=int, default=config.steps, help=f"default {config.steps}")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    args = parser.parse_args(argv)
    try:
        check_output_path(args.out, args.overwrite)
        config = dataclasses.replace(config, seed=args.seed, steps=args.steps)
    except ValueError as err:
        parser.error(str(err))
    result = train(config)
    save(result, args.out, overwrite=args.overwrite)
    print(f"{summary(result)} -> {args.out}")
    return 0
