"""Train/eval mode helpers shared by the upper layers (imports only torch).

:func:`eval_mode` runs a block with a module in eval mode and puts back whatever mode it was
in before, even when the block raises.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, TypeVar

from torch import nn

M = TypeVar("M", bound=nn.Module)


@contextmanager
def eval_mode(module: M, name: str = "module") -> Iterator[M]:
    """Put ``module`` (and its children) in eval mode for a ``with`` block, then restore it.

    The mode of every submodule is recorded first and restored in a ``finally``, so a module
    whose children were in mixed modes gets exactly those modes back, also after an exception.

    Example::

        with eval_mode(model) as m:
            logits = m(tokens)

    Args:
        module: any :class:`torch.nn.Module`.
        name: the caller's name for it in the error message (``"model"``, ``"mha"``, ...).

    Yields:
        ``module`` itself, in eval mode.

    Raises:
        ValueError: module is not a torch.nn.Module (the message says ``name``).
    """
    if not isinstance(module, nn.Module):
        raise ValueError(f"{name} must be a torch.nn.Module, got {type(module).__name__}")
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for m, training in modes:
            m.training = training
