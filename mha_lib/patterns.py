"""Per-layer patterns: the mask and the positions of each layer of a model, and its cache.

Today's models do not give every layer the same attention:

* **Gemma 3** repeats five sliding-window layers (a query sees the last 1024 keys, RoPE base
  10000) and one global layer (every key, RoPE base 1000000);
* **Llama 4** repeats three chunked layers (a query sees the keys of its own chunk of 8192,
  with RoPE) and one global layer without positions (NoPE);
* **Mistral** has one window on every layer, **Llama** none.

A model's config says it once, one :class:`LayerKind` per layer (``pattern``): its mask kind,
its window or chunk, its RoPE base or None. The model reads the pattern when it builds its
layers (:class:`mha_lib.llama.LlamaLM`), and so does its cache: a global layer keeps every
key, a window layer only the last ``window - 1`` (with the next token, its window: a
:class:`~mha_lib.decoding.RollingLayerCache`), a chunk layer only the keys of the current
chunk (:func:`pattern_cache`). :func:`cache_bytes` counts what each layer keeps.

Shape legend
    B    batch size
    Hkv  key/value heads
    L    positions decoded so far
    d    head size
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Sequence

import torch

from mha_lib._checks import check_positive_int, check_size
from mha_lib.decoding import KVCache, LayerCache, RollingLayerCache, kv_cache_bytes
from mha_lib.masks import Mask, causal, chunked, sliding_window
from mha_lib.positions import Rope

__all__ = ["LayerKind", "cache_bytes", "check_pattern", "pattern_cache"]

_MASKS = ("global", "window", "chunk")
_BOOK_ROPE_BASE = 10000.0  # (rope=True: the book's layers' default base)


@dataclass(frozen=True)
class LayerKind:
    """What one layer attends to, and with which positions.

    Args:
        mask: ``"global"`` (every earlier key: ``causal()``), ``"window"`` (the last ``size``
            keys, itself included: ``sliding_window(size)``) or ``"chunk"`` (the earlier keys
            of its own chunk of ``size`` positions: ``chunked(size)``).
        size: the window or the chunk, an integer >= 1; None for ``"global"``.
        rope_base: RoPE's base (10000: plain RoPE, ``rope=True``), or None: no positions
            (NoPE).
    """

    mask: str = "global"
    size: int | None = None
    rope_base: float | None = _BOOK_ROPE_BASE

    def __post_init__(self) -> None:
        if self.mask not in _MASKS:
            raise ValueError(f'mask must be "global", "window" or "chunk", got {self.mask!r}')
        if self.mask == "global" and self.size is not None:
            raise ValueError(f'size must be None for mask="global" (every key), got {self.size!r}')
        if self.mask != "global":
            check_positive_int(self.size, "size")
        if self.rope_base is not None:
            base = self.rope_base
            if isinstance(base, bool) or not isinstance(base, numbers.Real) or not 1 < base < math.inf:
                raise ValueError(f"rope_base must be a finite number > 1 or None (NoPE), got {base!r}")
            object.__setattr__(self, "rope_base", float(base))

    @property
    def attention_mask(self) -> Mask:
        """The layer's mask at positions 0, 1, ...: ``causal()``, ``sliding_window(size)`` or
        ``chunked(size)`` (each causal)."""
        if self.mask == "window":
            return sliding_window(self.size)
        return chunked(self.size) if self.mask == "chunk" else causal()

    @property
    def rope(self) -> bool | Rope:
        """The layer's ``rope`` argument: True (base 10000), ``Rope(base=rope_base)``, or
        False (NoPE)."""
        if self.rope_base is None:
            return False
        return True if self.rope_base == _BOOK_ROPE_BASE else Rope(base=self.rope_base)

    def cache(self) -> LayerCache:
        """An empty cache that keeps only what this layer reads (see the module)."""
        if self.mask == "window":
            return RollingLayerCache(self.size)
        return _ChunkLayerCache(self.size) if self.mask == "chunk" else LayerCache()

    def kept(self, length: int) -> int:
        """How many positions this layer's cache keeps once ``length`` have been decoded:
        all of them (global), the last ``size - 1`` (window), those of the current chunk,
        ``length mod size`` (chunk)."""
        length = check_size(length, "length")
        if self.mask == "window":
            return min(length, self.size - 1)
        return length % self.size if self.mask == "chunk" else length


def check_pattern(pattern: object, num_layers: int, name: str = "pattern") -> tuple[LayerKind, ...]:
    """``pattern`` as a tuple of ``num_layers`` :class:`LayerKind` (a ValueError naming
    ``name`` otherwise)."""
    if isinstance(pattern, (str, bytes)) or not isinstance(pattern, Sequence):
        raise ValueError(f"{name} must be a sequence of mha_lib.patterns.LayerKind, one per layer, "
                         f"got {type(pattern).__name__}")
    pattern = tuple(pattern)
    for i, kind in enumerate(pattern):
        if not isinstance(kind, LayerKind):
            raise ValueError(f"{name}[{i}] must be a mha_lib.patterns.LayerKind, got {type(kind).__name__}")
    if len(pattern) != num_layers:
        raise ValueError(f"{name} must give each of the {num_layers} layers a LayerKind, got {len(pattern)}")
    return pattern


def pattern_cache(pattern: Sequence[LayerKind]) -> KVCache:
    """A :class:`~mha_lib.decoding.KVCache` whose layer ``i`` keeps only what ``pattern[i]``
    reads (``LayerKind.cache``): pass ``cache[i]`` to layer ``i``."""
    pattern = check_pattern(pattern, len(pattern) if isinstance(pattern, Sequence) else 0)
    if not pattern:
        raise ValueError("pattern must give at least one layer a LayerKind, got none")
    return KVCache.of_layers([kind.cache() for kind in pattern])


def cache_bytes(
    pattern: Sequence[LayerKind], length: int, *, B: int, num_kv_heads: int, head_size: int,
    dtype: torch.dtype = torch.float32,
) -> list[int]:
    """Bytes each layer's cache holds after ``length`` positions (:meth:`LayerKind.kept` keys
    and values: ``2 B Hkv kept d`` numbers a layer), one entry per layer."""
    pattern = check_pattern(pattern, len(pattern) if isinstance(pattern, Sequence) else 0)
    return [kv_cache_bytes(kind.kept(length), B=B, num_kv_heads=num_kv_heads, head_size=head_size,
                           dtype=dtype) for kind in pattern]


class _ChunkLayerCache(RollingLayerCache):
    """One chunk layer's cache: between steps only the keys of the current chunk, from
    position ``(L // chunk) * chunk`` on (the next query sees no earlier key)."""

    def __init__(self, chunk: int) -> None:
        super().__init__(chunk)
        self.mask = chunked(chunk)

    def _first_kept(self, next_position: int) -> int:
        return next_position // self.window * self.window
