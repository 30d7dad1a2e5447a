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
projects only the *new* positions and appends their keys and values. Then::

    cache = KVCache()
    for t in range(L):
        y_t = mha(x[:, t:t+1], x[:, t:t+1], x[:, t:t+1], cache=cache)

gives, at every step, the row ``t`` of ``mha(x, x, x, causal_valid_lens(B, L))``.

``MultiHeadAttention.forward(..., cache=cache)`` hands the call to :meth:`LayerCache.attend`
(the cache imports the layer's helpers; ``mha_lib.multihead`` never imports this module).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib._checks import check_positive_int, check_tensor
from mha_lib.heads import merge_heads, split_heads

__all__ = ["KVCache", "LayerCache", "causal_keep_mask", "kv_cache_bytes", "layer_cache"]


def causal_keep_mask(num_cached: int, num_new: int, device=None) -> Tensor:
    """Keep mask (``True`` = may attend) of ``num_new`` queries that follow ``num_cached`` keys.

    New query ``i`` sits at position ``num_cached + i`` and may see keys ``0 .. num_cached + i``:
    everything cached, and the new positions up to itself.

    Returns:
        (n, L + n) bool with ``n = num_new``, ``L = num_cached``.
    """
    if isinstance(num_cached, bool) or not isinstance(num_cached, int) or num_cached < 0:
        raise ValueError(f"num_cached must be an integer >= 0, got {num_cached!r}")
    n = check_positive_int(num_new, "num_new")
    keys = torch.arange(num_cached + n, device=device)  # (L + n,)
    last_visible = num_cached + torch.arange(n, device=device)  # (n,)
    return keys <= last_visible[:, None]  # (n, 1) vs (L + n,) -> (n, L + n)


def kv_cache_bytes(
    length: int, *, B: int, num_kv_heads: int, head_size: int, num_layers: int = 1,
    dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes a cache of ``length`` positions holds: keys and values, ``2 B H L d`` numbers a layer."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an integer >= 0, got {length!r}")
    for value, name in ((B, "B"), (num_kv_heads, "num_kv_heads"), (head_size, "head_size"),
                        (num_layers, "num_layers")):
        check_positive_int(value, name)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * B * num_kv_heads * length * head_size * itemsize


class LayerCache:
    """The cached keys and values of one attention layer, in head layout (B, H, L, d).

    The storage grows like a Python list: when it is full, it is reallocated with twice the
    room, so appending n positions costs O(n) on average, not a copy of everything cached.
    ``keys`` and ``values`` are views of the first L positions. When the new keys need a
    gradient (training, not ``torch.no_grad``), each append concatenates instead, so that
    autograd keeps every step's tensors intact.
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

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Append the keys and values of n new positions; return everything cached.

        Shapes:
            keys, values: (B, H, n, d), already projected and split into heads.
            returns: keys and values (B, H, L + n, d), views of the storage.

        Raises:
            ValueError: keys or values not 4-D, of different shapes, or not matching what is
                cached (batch size, number of heads, head size, dtype, device).
        """
        check_tensor(keys, "keys", 4)
        check_tensor(values, "values", 4)
        if keys.shape != values.shape:
            raise ValueError(
                f"keys and values must have one shape (B, H, n, d), got {tuple(keys.shape)} "
                f"and {tuple(values.shape)}"
            )
        B, H, n, d = keys.shape
        if self._keys is not None:
            self._check_fits(keys)
        if torch.is_grad_enabled() and (keys.requires_grad or values.requires_grad):
            # Autograd keeps the cached tensors of earlier steps for the backward pass: no
            # writes in place, a new concatenation each step (slower, but gradients flow).
            old_k, old_v = (keys[:, :, :0], values[:, :, :0]) if self._keys is None else (self.keys, self.values)
            self._keys = torch.cat([old_k, keys], dim=2)  # (B, H, L + n, d)
            self._values = torch.cat([old_v, values], dim=2)
            self._length += n
            return self.keys, self.values
        if self._keys is None:
            capacity = max(n, 16)
            self._keys = keys.new_empty(B, H, capacity, d)
            self._values = values.new_empty(B, H, capacity, d)
        elif self._length + n > self._keys.shape[2]:
            capacity = max(2 * self._keys.shape[2], self._length + n)
            self._keys = self._grow(self._keys, capacity)
            self._values = self._grow(self._values, capacity)
        self._keys[:, :, self._length : self._length + n] = keys
        self._values[:, :, self._length : self._length + n] = values
        self._length += n
        return self.keys, self.values

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

    def _grow(self, storage: Tensor, capacity: int) -> Tensor:
        B, H, _, d = storage.shape
        bigger = storage.new_empty(B, H, capacity, d)
        bigger[:, :, : self._length] = storage[:, :, : self._length]
        return bigger

    def attend(self, mha, queries, keys, values, valid_lens=None, *, need_weights=False,
               head_mask=None) -> Tensor:
        """Self-attention of n new positions to the cache and to themselves, then append them.

        Called by ``MultiHeadAttention.forward(..., cache=...)`` after its input checks.

        Shapes:
            queries, keys, values: (B, n, D); the new positions (keys and values are usually
                the queries themselves).
            returns: (B, n, D), the rows ``L .. L + n - 1`` of causal self-attention over all
                ``L + n`` positions.

        Raises:
            ValueError: keys of another length than the queries (cross-attention has nothing
                to cache step by step), valid_lens or need_weights given, or new positions
                that do not match the cache.
        """
        B, n, _ = queries.shape
        if keys.shape[1] != n:
            raise ValueError(
                "with a cache, keys and values must be the new positions themselves "
                f"(self-attention): {n} queries but {keys.shape[1]} keys"
            )
        if valid_lens is not None:
            raise ValueError(
                "valid_lens cannot be combined with cache: the cache makes the attention "
                "causal; pad nothing, decode each sequence with its own cache"
            )
        if need_weights:
            raise ValueError("need_weights=True is not supported with cache")
        gates = mha._check_head_mask(head_mask, B, queries)
        H = mha.num_heads
        q = split_heads(mha.W_q(queries), H)  # (B, n, D) -> (B, H, n, d)
        k = split_heads(mha.W_k(keys), H)  # (B, n, D) -> (B, H, n, d)
        v = split_heads(mha.W_v(values), H)  # (B, n, D) -> (B, H, n, d)
        L = len(self)
        k_all, v_all = self.append(k, v)  # (B, H, L + n, d) each
        keep = None if n == 1 else causal_keep_mask(L, n, device=q.device)  # (n, L + n)
        dropout_p = mha.attention.dropout.p if mha.training else 0.0
        out = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=keep, dropout_p=dropout_p)
        # out: (B, H, n, d)
        if gates is not None:
            out = out * gates[:, :, None, None]  # (B, H) -> (B, H, 1, 1)
        return mha.W_o(merge_heads(out))  # (B, H, n, d) -> (B, n, D)


class KVCache:
    """Keys and values of every attention layer of a model, for decoding step by step.

    ``cache[i]`` is the :class:`LayerCache` of layer ``i``; a one-layer cache (the default)
    can also be passed as is: ``mha(x_t, x_t, x_t, cache=KVCache())``.

    Args:
        num_layers: how many attention layers share this cache (one entry each).
    """

    def __init__(self, num_layers: int = 1) -> None:
        self.layers = [LayerCache() for _ in range(check_positive_int(num_layers, "num_layers"))]

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

    def attend(self, mha, *args, **kwargs) -> Tensor:
        """:meth:`LayerCache.attend` of the only layer (a cache of several layers needs ``cache[i]``)."""
        return layer_cache(self).attend(mha, *args, **kwargs)


def layer_cache(cache: object) -> LayerCache:
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
