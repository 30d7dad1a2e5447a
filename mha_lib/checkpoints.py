"""The one checkpoint format of every experiment: write it, read it back, refuse anything else.

A checkpoint is a dict with four keys, ``kind`` (the experiment's name), ``config`` (plain
data), ``state_dict`` (parameter name -> tensor) and ``extra`` (plain data: the training
history), written with ``torch.save`` and read with ``torch.load(..., weights_only=True)``
(tensors and plain data, never arbitrary objects):

* :func:`save_checkpoint`    write one (never half a file; nothing overwritten without
  ``overwrite=True``)
* :func:`load_checkpoint`    read one of a given kind (a file that is not one of ours, or of
  another kind, is a ``ValueError``)
* :func:`check_output_path`  whether a checkpoint may be written at a path (the command line
  asks before it trains)

An experiment's :class:`~mha_lib.training.TrainResult` goes to a checkpoint, and its model
comes back, through :func:`mha_lib.training.save_result` and :func:`mha_lib.training.load_model`.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Mapping

import torch
from torch import Tensor

from mha_lib._checks import check_bool

__all__ = [
    "check_output_path",
    "load_checkpoint",
    "save_checkpoint",
]

_KEYS = ("kind", "config", "state_dict", "extra")
_PLAIN = (type(None), bool, int, float, str)


def _check_plain(value: object, name: str) -> None:
    """Raise unless ``value`` is what ``torch.load(weights_only=True)`` reads back: tensors,
    None, bools, numbers, strings, and lists, tuples and str-keyed dicts of them."""
    if isinstance(value, (Tensor, *_PLAIN)):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_plain(item, f"{name}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{name} must have string keys, got the key {key!r}")
            _check_plain(item, f"{name}[{key!r}]")
        return
    raise ValueError(
        f"{name} must hold only tensors, numbers, strings, None, lists and dicts "
        f"(what torch.load(weights_only=True) reads), got {type(value).__name__}"
    )


def _check_path(path: object, name: str = "path") -> Path:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"{name} must be a file name (str or Path), got {path!r}")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{name} must be a file, got the directory {str(path)!r}")
    return path


def _check_kind(kind: object) -> str:
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind must be a non-empty string (the experiment's name), got {kind!r}")
    return kind


def check_output_path(path: object, overwrite: object) -> Path:
    """``path`` as a Path if a checkpoint may be written there, else a ValueError (an existing
    file without ``overwrite``, a directory, not a file name)."""
    path = _check_path(path)
    if path.exists() and not check_bool(overwrite, "overwrite"):
        raise ValueError(f"path {str(path)!r} exists: pass overwrite=True (--overwrite) to replace it")
    return path


def save_checkpoint(
    path: str | os.PathLike,
    *,
    kind: str,
    config: dict,
    state_dict: Mapping[str, Tensor],
    extra: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a checkpoint: ``{"kind", "config", "state_dict", "extra"}``, via ``torch.save``.

    The file is written next to its destination and then renamed into place, so an
    interrupted save never leaves half a checkpoint; missing parent directories are made.

    Args:
        path: the file to write.
        kind: the experiment's name (``"digits"``, ``"induction"``, ...); :func:`load_checkpoint`
            refuses a file of another kind.
        config: plain data (``dataclasses.asdict`` of the experiment's ``Config``).
        state_dict: parameter name -> tensor (``model.state_dict()``).
        extra: more plain data (the training history); None stores ``{}``.
        overwrite: replace an existing file (default: refuse).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: an existing file without ``overwrite``, a directory, a bad kind, or
            contents that ``torch.load(weights_only=True)`` could not read back.
    """
    path = check_output_path(path, overwrite)
    kind = _check_kind(kind)
    if not isinstance(config, dict):
        raise ValueError(f"config must be a dict (dataclasses.asdict of a Config), got {type(config).__name__}")
    _check_plain(config, "config")
    if not isinstance(state_dict, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in state_dict.items()
    ):
        raise ValueError(f"state_dict must map parameter names to tensors (model.state_dict()), got {type(state_dict).__name__}")
    extra = {} if extra is None else extra
    if not isinstance(extra, dict):
        raise ValueError(f"extra must be a dict or None, got {type(extra).__name__}")
    _check_plain(extra, "extra")
    ckpt = {"kind": kind, "config": config, "state_dict": dict(state_dict), "extra": extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name beside the destination (torch.save opens it with the usual permissions).
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        torch.save(ckpt, tmp)
        if not overwrite and path.exists():  # appeared while we were writing
            raise ValueError(f"path {str(path)!r} exists: pass overwrite=True (--overwrite) to replace it")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _why(err: Exception) -> str:
    """The useful line of a torch.load error (its advice to retry with weights_only=False is not)."""
    text = str(err).strip()
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1].strip().split("\n")[0].split(". ")[0].strip()
    else:
        text = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def load_checkpoint(path: str | os.PathLike, *, kind: str) -> dict:
    """Read a checkpoint of :func:`save_checkpoint` with ``torch.load(..., weights_only=True)``.

    Args:
        path: the file.
        kind: the experiment it must belong to.

    Returns:
        A dict with ``kind``, ``config`` (dict), ``state_dict`` (name -> tensor, on the CPU)
        and ``extra`` (dict).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not one of our checkpoints (not a ``torch.save`` file, not
            loadable with ``weights_only=True``, not a dict with our four keys), or it is a
            checkpoint of another kind.
    """
    path = _check_path(path)
    kind = _check_kind(kind)
    if not path.exists():
        raise FileNotFoundError(f"path {str(path)!r}: no checkpoint at that path")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError:
        raise
    except Exception as err:  # noqa: BLE001 - a corrupt file can make the unpickler raise anything
        raise ValueError(
            f"path {str(path)!r} is not a mha_lib checkpoint: torch.load failed ({_why(err)})"
        ) from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"path {str(path)!r} is not a mha_lib checkpoint: it holds a {type(ckpt).__name__}, not a dict")
    if set(ckpt) != set(_KEYS):
        raise ValueError(
            f"path {str(path)!r} is not a mha_lib checkpoint: expected the keys {list(_KEYS)}, got {sorted(map(str, ckpt))}"
        )
    if ckpt["kind"] != kind:
        raise ValueError(f"path {str(path)!r} is a checkpoint of kind {ckpt['kind']!r}, not {kind!r}")
    if not isinstance(ckpt["config"], dict) or not isinstance(ckpt["extra"], dict) or not isinstance(
        ckpt["state_dict"], dict
    ) or not all(isinstance(v, Tensor) for v in ckpt["state_dict"].values()):
        raise ValueError(f"path {str(path)!r} is not a mha_lib checkpoint: config, state_dict or extra has the wrong type")
    return ckpt
