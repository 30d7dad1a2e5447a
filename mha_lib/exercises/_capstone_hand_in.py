"""The capstone's hand-in file: the trained model (its config and weights) and the roles with evidence.

The student's notebook saves it once, after training and measuring; the class's autograder loads
it (``torch.load(..., weights_only=True)``: tensors and plain data only, no code runs) and grades
it without training again. Re-exported by :mod:`mha_lib.exercises.capstone`.
"""

from __future__ import annotations

import dataclasses
import numbers
from pathlib import Path
from typing import Callable

import torch
from torch import nn

__all__: list[str] = []

_FORMAT = "mha_lib.capstone/1"


def save_hand_in(model: nn.Module, roles: dict, path: str | Path) -> Path:
    """Save ``model``'s config and weights and ``roles`` to ``path`` (overwriting it); returns the path.

    Raises:
        ValueError: model not an nn.Module with a dataclass ``config``; roles not a dict of
            ``{"head": (layer, head), "weight": w, "rise": r}``.
    """
    config = getattr(model, "config", None)
    if not isinstance(model, nn.Module) or not dataclasses.is_dataclass(config):
        raise ValueError(f"model must be an nn.Module whose config is a dataclass (as lm.Config), got "
                         f"{type(model).__name__} with config {type(config).__name__}")
    plain = {}
    for relation, role in (roles.items() if isinstance(roles, dict) else ()):
        if not (isinstance(role, dict) and set(role) == {"head", "weight", "rise"}
                and isinstance(role["weight"], numbers.Real) and isinstance(role["rise"], numbers.Real)):
            break
        plain[str(relation)] = {"head": [int(k) for k in role["head"]], "weight": float(role["weight"]),
                                "rise": float(role["rise"])}
    if not isinstance(roles, dict) or len(plain) != len(roles):
        raise ValueError(f"roles must map relations to {{'head': (layer, head), 'weight': w, 'rise': r}}, got {roles!r:.80}")
    path = Path(path)
    state = {name: t.detach().cpu() for name, t in model.state_dict().items()}
    torch.save({"format": _FORMAT, "config": dataclasses.asdict(config), "state_dict": state, "roles": plain}, path)
    return path


def load_hand_in(path: str | Path, model_class: Callable, config_class: Callable | None = None) -> tuple[nn.Module, dict]:
    """The model and roles saved by :func:`save_hand_in`, the model rebuilt as ``model_class(config)``.

    Args:
        path: the hand-in file.
        model_class: the student's model class (called with the config).
        config_class: the config's class (default :class:`mha_lib.lm.Config`).

    Returns:
        ``(model in eval mode, roles)``, roles with ``(layer, head)`` tuples.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a capstone hand-in, or its weights do not fit ``model_class``.
    """
    if config_class is None:
        from mha_lib.lm import Config as config_class
    data = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"path {str(path)!r} is not a capstone hand-in (save it with save_hand_in)")
    try:
        model = model_class(config_class(**data["config"]))
        model.load_state_dict(data["state_dict"])
    except (TypeError, KeyError, RuntimeError, ValueError) as err:
        raise ValueError(f"path {str(path)!r}: its weights do not fit {getattr(model_class, '__name__', model_class)}: "
                         f"{err}") from None
    roles = {r: {**role, "head": tuple(role["head"])} for r, role in data["roles"].items()}
    return model.eval(), roles
