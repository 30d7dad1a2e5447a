"""Decoding token by token with a key-value cache.

Shape legend
    B   batch size
    H   number of heads (for grouped-query attention: the key/value heads)
    L   number of cached positions
    n   number of new positions in one step (usually 1)
    d   head size
    D   H*d, the model width

A language model generates one token at a time, and every new token attends causally to all
tokens before it. The keys and values of those earlier tokens do not change: a
:class:`KVCache` keeps them, per layer, in the head layout (B, H, L, d), so that each step
projects only the *new* positions and stores their keys and values. Then::

    cache = KVCache()
    for t in range(L):
        y_t = mha(x[:, t:t+1], x[:, t:t+1], x[:, t:t+1], cache=cache)

gives, at every step, the row ``t`` of ``mha(x, x, x, causal_valid_lens(B, L))``.

The cache only *stores*: :meth:`LayerCache.update` takes the new keys and values and returns
everything cached (the design of Hugging Face's caches). The attention layers
(``MultiHeadAttention``, ``GroupedQueryAttention``) attend to what it returns, through the one
computation they share, :func:`mha_lib.attend.attend_heads`.

Prompts of different lengths decode as one batch: pad them on the right, and give every step
the ``positions`` (B, n) of its new tokens. Example ``b`` then writes its keys and values at its
own positions (overwriting the keys of its padding, which later tokens replace), and the
causal rule, valid length = position + 1, hides the slots it has not written yet.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mha_lib._checks import check_positive_int, check_size, check_tensor, read_scalars, tracing
from mha_lib.cached import AttentionCache
from mha_lib.masking import check_positions
from mha_lib.masks import causal, sinks, sliding_window

__all__ = ["KVCache", "LayerCache", "RollingLayerCache", "causal_keep_mask", "kv_cache_bytes"]


def causal_keep_mask(num_cached: int, num_new: int, device=None) -> Tensor:
    """Keep mask (``True`` = may attend) of ``num_new`` queries that follow ``num_cached`` keys.

    New query ``i`` sits at position ``num_cached + i`` and may see keys ``0 .. num_cached + i``:
    everything cached, and the new positions up to itself (valid length ``num_cached + i + 1``).

    Returns:
        (n, L + n) bool with ``n = num_new``, ``L = num_cached``.
    """
    num_cached = check_size(num_cached, "num_cached")
    n = check_positive_int(num_new, "num_new")
    return causal().dense(1, n, num_cached + n, num_cached, device=device)[0]  # (n, L + n)


def kv_cache_bytes(
    length: int, *, B: int, num_kv_heads: int, head_size: int, num_layers: int = 1,
    dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes a cache of ``length`` positions holds: keys and values, ``2 B H L d`` numbers a layer."""
    check_size(length, "length")
    for value, name in ((B, "B"), (num_kv_heads, "num_kv_heads"), (head_size, "head_size"),
                        (num_layers, "num_layers")):
        check_positive_int(value, name)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * B * num_kv_heads * length * head_size * itemsize


class LayerCache(AttentionCache):
    """The cached keys and values of one attention layer, in head layout (B, H, L, d).

    The storage grows like a Python list: when it is full, it is reallocated with twice the
    room, so that storing n positions costs O(n) on average, not a copy of everything cached.
    ``keys`` and ``values`` are views of the first L positions. When the new keys need a
    gradient (training, not ``torch.no_grad``), each update concatenates instead, so that
    autograd keeps every step's tensors intact. Slots nobody wrote hold zeros.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every cached position (and free the storage)."""
        self._keys: Tensor | None = None  # (B, H, capacity, d)
        self._values: Tensor | None = None
        self._length = 0

    def __len__(self) -> int:
        """L, the number of cached positions."""
        return self._length

    @property
    def keys(self) -> Tensor | None:
        """The cached keys, (B, H, L, d), or None when nothing is cached."""
        return None if self._keys is None else self._keys[:, :, : self._length]

    @property
    def values(self) -> Tensor | None:
        """The cached values, (B, H, L, d), or None when nothing is cached."""
        return None if self._values is None else self._values[:, :, : self._length]

    @property
    def nbytes(self) -> int:
        """Bytes of the L cached keys and values (the storage may reserve up to twice that)."""
        if self._keys is None:
            return 0
        return 2 * self.keys.numel() * self._keys.element_size()

    def update(
        self, keys: Tensor, values: Tensor, positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Store the keys and values of n new positions; return everything cached.

        Every update adds n slots, L -> L + n. Without ``positions`` the new keys fill them
        (an append); with ``positions`` example ``b`` writes its keys at ``positions[b]``
        instead, anywhere in 0 .. L + n - 1 (a batch of prompts of different lengths, each
        continuing at its own position; see the module docstring).

        Shapes:
            keys, values: (B, H, n, d), already projected and split into heads.
            positions: None, (n,) or (B, n) integers in [0, L + n).
            returns: keys and values (B, H, L + n, d), views of the storage.

        Raises:
            ValueError: keys or values not 4-D, of different shapes, dtypes or devices, or not matching what is
                cached (batch size, number of heads, head size, dtype, device); positions of
                another shape or out of range.
        """
        self._check_pair(keys, values)
        B, H, n, d = keys.shape
        if self._keys is not None:
            self._check_fits(keys)
        L = self._length
        index = None
        if positions is not None:
            positions = self._check_position_values(check_positions(positions, B, n), L + n)
            index = positions.to(keys.device)[:, None, :, None].expand(B, H, n, d)  # (B, H, n, d)
        if torch.is_grad_enabled() and (keys.requires_grad or values.requires_grad):
            # Autograd keeps the cached tensors of earlier steps for the backward pass: no
            # writes in place, a new tensor each step (slower, but gradients flow).
            self._keys, self._values = (self._stored(old, new, index) for old, new in
                                        ((self.keys, keys), (self.values, values)))
        else:
            self._reserve(keys, L + n)
            if index is None:
                self._keys[:, :, L : L + n] = keys
                self._values[:, :, L : L + n] = values
            else:  # example b writes position positions[b, i] (slots nobody writes stay 0)
                self._keys.scatter_(2, index, keys)
                self._values.scatter_(2, index, values)
        self._length = L + n
        return self.keys, self.values

    @staticmethod
    def _check_pair(keys: object, values: object) -> None:
        """Raise unless keys and values are 4-D floating-point tensors of one shape, dtype, device."""
        check_tensor(keys, "keys", 4)
        check_tensor(values, "values", 4)
        if keys.shape != values.shape:
            raise ValueError(
                f"keys and values must have one shape (B, H, n, d), got {tuple(keys.shape)} "
                f"and {tuple(values.shape)}"
            )
        if values.dtype != keys.dtype or values.device != keys.device:  # (the cache stores one dtype)
            raise ValueError(
                f"values must have the dtype and device of the keys ({keys.dtype} on {keys.device}), "
                f"got {values.dtype} on {values.device}: convert one with .to(...)"
            )

    def _stored(self, old: Tensor | None, new: Tensor, index: Tensor | None) -> Tensor:
        """Out of place (for autograd): the cached tensor with the n new positions stored."""
        if old is None:
            old = new[:, :, :0]  # (B, H, 0, d)
        if index is None:
            return torch.cat([old, new], dim=2)  # (B, H, L + n, d)
        room = torch.cat([old, torch.zeros_like(new)], dim=2)  # (B, H, L + n, d)
        return room.scatter(2, index, new)

    def _reserve(self, like: Tensor, length: int) -> None:
        """Make room for ``length`` positions (zeros), doubling the storage when it is full."""
        B, H, _, d = like.shape
        if self._keys is None:
            self._keys = like.new_zeros(B, H, max(length, 16), d)
            self._values = like.new_zeros(B, H, max(length, 16), d)
        elif length > self._keys.shape[2]:
            capacity = max(2 * self._keys.shape[2], length)
            self._keys = self._grow(self._keys, capacity)
            self._values = self._grow(self._values, capacity)

    def _check_fits(self, keys: Tensor) -> None:
        B, H, _, d = keys.shape
        cached = (self._keys.shape[0], self._keys.shape[1], self._keys.shape[3])
        if (B, H, d) != cached:
            raise ValueError(
                "the new keys must match the cache: (B, H, d) = "
                f"{cached} cached, got {(B, H, d)} (a different batch or layer? "
                "call reset() to start a new sequence)"
            )
        if keys.dtype != self._keys.dtype or keys.device != self._keys.device:
            raise ValueError(
                f"the new keys are {keys.dtype} on {keys.device}, the cache holds "
                f"{self._keys.dtype} on {self._keys.device}"
            )

    @staticmethod
    def _check_position_values(positions: Tensor, length: int) -> Tensor:
        """Raise unless every position lies in [0, length) (one host read)."""
        if positions.numel() and not tracing():
            lowest, highest = read_scalars(*torch.aminmax(positions))
            if lowest < 0 or highest >= length:
                raise ValueError(
                    f"positions must lie in [0, L + n) = [0, {length}) (the cached positions "
                    f"and the n new slots), got {positions.tolist()}"
                )
        return positions

    def _grow(self, storage: Tensor, capacity: int) -> Tensor:
        B, H, _, d = storage.shape
        bigger = storage.new_zeros(B, H, capacity, d)
        bigger[:, :, : self._length] = storage[:, :, : self._length]
        return bigger


class RollingLayerCache(LayerCache):
    """One layer's cache for sliding-window attention: only the last ``window`` positions (and
    the first ``num_sinks``) stay, in order, O(window) memory however long the sequence: between
    steps the last ``window - 1``, which with the next token make its window.

    Each update appends n positions at the end (``positions`` must be None), returns what the
    n new queries may need (the kept keys and the n new ones, their positions in
    :meth:`key_positions`), then forgets what no later query can see.

    Args:
        window: each query sees the keys of the ``window`` last positions (itself included).
        num_sinks: the first positions, seen by every query (StreamingLLM's attention sinks).
    """

    def __init__(self, window: int, num_sinks: int = 0) -> None:
        self.window = check_positive_int(window, "window")
        self.num_sinks = check_size(num_sinks, "num_sinks")
        self.mask = sliding_window(window) | sinks(num_sinks) if num_sinks else sliding_window(window)
        super().__init__()

    def reset(self) -> None:
        super().reset()
        self._positions: Tensor | None = None  # (m,), the positions of the kept keys
        self._returned: Tensor | None = None  # (Lk,), those of the keys the last update returned

    @property
    def keys(self) -> Tensor | None:
        """The kept keys, (B, H, m, d) with m <= window - 1 + num_sinks."""
        return self._keys

    @property
    def values(self) -> Tensor | None:
        """The kept values, (B, H, m, d)."""
        return self._values

    def key_positions(self, device: torch.device | None = None) -> Tensor:
        """(1, Lk): positions of the keys the last update returned."""
        return self._returned.to(device)[None]

    def update(
        self, keys: Tensor, values: Tensor, positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Append n positions; return the kept keys and values with the new ones, (B, H, Lk, d).

        Raises:
            ValueError: as :meth:`LayerCache.update`; ``positions`` given (a rolling cache
                only appends).
        """
        if positions is not None:
            raise ValueError("positions: a rolling cache (window=) only appends; leave positions=None")
        self._check_pair(keys, values)
        if self._keys is not None:
            self._check_fits(keys)
        L, n = self._length, keys.shape[2]
        new = torch.arange(L, L + n, device=keys.device)  # (n,)
        if self._keys is None:
            k_all, v_all, p_all = keys, values, new
        else:  # (B, H, m, d) + (B, H, n, d) -> (B, H, m + n, d)
            k_all, v_all = torch.cat([self._keys, keys], 2), torch.cat([self._values, values], 2)
            p_all = torch.cat([self._positions, new])
        # Keep the sinks (positions 0 .. s-1, at the front) and the last window - 1 positions:
        # with the next token, the window of the next query
        m = p_all.shape[0]
        front = min(self.num_sinks, L + n)
        start = max(front, m - (L + n - self._first_kept(L + n)))  # (the kept positions are the last ones)
        self._keys = torch.cat([k_all[:, :, :front], k_all[:, :, start:]], 2)
        self._values = torch.cat([v_all[:, :, :front], v_all[:, :, start:]], 2)
        self._positions = torch.cat([p_all[:front], p_all[start:]])
        self._returned, self._length = p_all, L + n
        return k_all, v_all

    def _first_kept(self, next_position: int) -> int:
        """The first position (past the sinks) that the query at ``next_position`` or a later
        one may see: ``next_position - (window - 1)``."""
        return next_position - (self.window - 1)


class KVCache(AttentionCache):
    """Keys and values of every attention layer of a model, for decoding step by step.

    ``cache[i]`` is the :class:`LayerCache` of layer ``i``; a one-layer cache (the default)
    can also be passed as is: ``mha(x_t, x_t, x_t, cache=KVCache())``.

    With ``window`` every layer is a :class:`RollingLayerCache`: it keeps only the keys and
    values of the last ``window`` positions (and of the first ``num_sinks``), memory
    O(window) instead of O(L), and attends with ``sliding_window(window) | sinks(num_sinks)``:
    equal to a full cache with that mask, and to attention without a cache under it.

    Args:
        num_layers: how many attention layers share this cache (one entry each).
        window: None (keep everything), or the positions each query sees, >= 1.
        num_sinks: with ``window``, the first positions every query also sees (attention
            sinks, StreamingLLM), >= 0.
    """

    def __init__(self, num_layers: int = 1, *, window: int | None = None, num_sinks: int = 0) -> None:
        num_layers = check_positive_int(num_layers, "num_layers")
        num_sinks = check_size(num_sinks, "num_sinks")
        if window is None:
            if num_sinks:
                raise ValueError(f"num_sinks = {num_sinks} needs a window: pass window= too")
            self.layers = [LayerCache() for _ in range(num_layers)]
        else:
            self.layers = [RollingLayerCache(window, num_sinks) for _ in range(num_layers)]

    @classmethod
    def of_layers(cls, layers: list[LayerCache]) -> "KVCache":
        """A cache of these layer caches, one per layer, each of its own kind (a model whose
        layers keep different things: :func:`mha_lib.patterns.pattern_cache`)."""
        if not layers or not all(isinstance(layer, LayerCache) for layer in layers):
            raise ValueError(f"layers must be a non-empty list of LayerCache, got {layers!r}")
        cache = cls(len(layers))
        cache.layers = list(layers)
        return cache

    def __getitem__(self, i: int) -> LayerCache:
        if isinstance(i, bool) or not isinstance(i, int) or not -len(self.layers) <= i < len(self.layers):
            raise ValueError(f"layer index must be an integer in [0, {len(self.layers)}), got {i!r}")
        return self.layers[i]

    def __len__(self) -> int:
        """L, the number of cached positions (the same in every layer that has been run)."""
        return max(len(layer) for layer in self.layers)

    @property
    def nbytes(self) -> int:
        """Bytes of every cached key and value, all layers together."""
        return sum(layer.nbytes for layer in self.layers)

    def reset(self) -> None:
        """Empty every layer, to decode a new sequence."""
        for layer in self.layers:
            layer.reset()

    def update(
        self, keys: Tensor, values: Tensor, positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """:meth:`LayerCache.update` of the only layer (a cache of several layers needs ``cache[i]``)."""
        return _layer_cache(self).update(keys, values, positions)

    @property
    def mask(self):
        """The mask of the only layer's contents (see :class:`RollingLayerCache`)."""
        return _layer_cache(self).mask

    def key_positions(self, device: torch.device | None = None) -> Tensor:
        """The only layer's :meth:`~mha_lib.cached.AttentionCache.key_positions`."""
        return _layer_cache(self).key_positions(device)


def _layer_cache(cache: object) -> LayerCache:
    """The :class:`LayerCache` to use: ``cache`` itself, or the only layer of a ``KVCache``."""
    if isinstance(cache, LayerCache):
        return cache
    if isinstance(cache, KVCache):
        if len(cache.layers) != 1:
            raise ValueError(
                f"this cache has {len(cache.layers)} layers: pass cache[i], the cache of the "
                "layer being run"
            )
        return cache.layers[0]
    raise ValueError(f"cache must be a KVCache or one of its layers, got {type(cache).__name__}")
