"""A module's settings: the options of its constructor, as one frozen dataclass.

``MultiHeadAttention``, ``GroupedQueryAttention`` and ``TransformerBlock`` keep the arguments
they were built with in ``module.settings`` (each class's ``Settings``, whose fields are its
constructor's parameters, by name). Code that makes a changed copy of a module (pruning heads,
the conversions of :mod:`mha_lib.interop`, :func:`mha_lib.gqa.gqa_from_mha`) goes through
:func:`rebuild` or :func:`build`, so it keeps every option it does not mean to change, also the
ones added later, instead of copying them by hand.

The lowest layer: imports only torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import torch
from torch import nn

__all__ = ["build", "rebuild", "record"]

M = TypeVar("M", bound=nn.Module)


def build(cls: type[M], settings: Any, like: nn.Module | None = None) -> M:
    """``cls(**settings)``: a new module, on ``like``'s dtype and device and in its mode.

    Its weights are freshly initialised (the caller copies weights in), drawn without moving
    the global random generator: building a copy leaves later random draws unchanged.

    Args:
        cls: the module's class, whose ``Settings`` ``settings`` is.
        settings: a ``cls.Settings`` (a frozen dataclass of the constructor's arguments).
        like: the module whose dtype, device and train/eval mode the result takes (None: the
            defaults, training mode).

    Raises:
        ValueError: ``settings`` not a ``cls.Settings``; or as ``cls``'s constructor.
    """
    expected = getattr(cls, "Settings", None)
    if expected is None or type(settings) is not expected:
        raise ValueError(f"settings must be a {cls.__name__}.Settings, got {type(settings).__name__}")
    with torch.random.fork_rng(devices=[]):  # (the new weights are thrown away by the caller)
        module = cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)})
    if like is None:
        return module
    weight = next(like.parameters(), None)
    if weight is not None:
        module = module.to(dtype=weight.dtype, device=weight.device)
    return module.train(like.training)


def rebuild(module: M, **changes: Any) -> M:
    """A new module of ``module``'s class with ``module.settings`` changed by ``changes``
    (every other option kept), on its dtype and device, in its mode, with fresh weights.

    Example: ``rebuild(mha, d_model=2 * mha.head_size, num_heads=2)`` (the start of pruning).

    Raises:
        ValueError: a module without settings, or a name that is not one of its settings.
    """
    settings = getattr(module, "settings", None)
    if not dataclasses.is_dataclass(settings):
        raise ValueError(f"module must have settings (a Settings dataclass), got {type(module).__name__}")
    names = {f.name for f in dataclasses.fields(settings)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise ValueError(f"{type(module).__name__} has no setting {unknown[0]!r}; its settings "
                         f"are {sorted(names)}")
    return build(type(module), dataclasses.replace(settings, **changes), module)


def record(settings_cls: type, arguments: dict[str, Any], **normalised: Any) -> Any:
    """``settings_cls`` filled by name from a constructor's ``arguments`` (its ``locals()``),
    ``normalised`` taking precedence (the options as the layer checked them): the options are
    declared once, in :class:`mha_lib.options.Options`, never again in a positional call."""
    values = {**arguments, **normalised}
    return settings_cls(**{f.name: values[f.name] for f in dataclasses.fields(settings_cls)})

