"""Decoding with a KV cache: what an attention layer needs of a cache, and the one place where
the positions of the new queries and the mask of a cached step come from (chapter 9).

Shape legend
    B    batch size
    Hkv  number of key/value heads
    L    positions seen before this step
    n    new positions of a decoding step
    Lk   keys the cache returns (L + n, or fewer for a rolling cache)
    d    head size
"""

from __future__ import annotations

import torch
from torch import Tensor

from mha_lib._checks import check_tensor
from mha_lib.masking import Visible, as_mask, check_positions, read_valid_lens, visible
from mha_lib.masks import Mask, causal
from mha_lib.scores import ScoreMod

__all__ = ["AttentionCache", "cached_keys_values", "check_cached_attention", "query_positions"]


class AttentionCache:
    """What an attention layer needs of a key-value cache; ``mha_lib.decoding`` implements it.

    A cache only stores: ``update`` takes the keys and values of n new positions and returns
    the keys to attend to; the layer attends to those (:func:`cached_keys_values`), at the
    positions :meth:`key_positions` gives, under the cache's own :attr:`mask` (a rolling
    cache keeps only what its window shows).
    """

    #: The mask the cache's contents need (``sliding_window(w)`` for a rolling cache), or None.
    mask: Mask | None = None

    def __len__(self) -> int:
        """L, the number of positions seen (the position of the next new token)."""
        raise NotImplementedError

    def update(
        self, keys: Tensor, values: Tensor, positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Store (B, Hkv, n, d) keys and values; return the keys and values to attend to,
        (B, Hkv, Lk, d) (all cached ones: Lk = L + n)."""
        raise NotImplementedError

    def key_positions(self, device: torch.device | None = None) -> Tensor:
        """(1, Lk): the positions of the keys the last :meth:`update` returned, 0 .. L - 1."""
        return torch.arange(len(self), device=device)[None]


def query_positions(cache: AttentionCache, positions: object, batch_size: int, num_new: int,
                    device: torch.device | None = None) -> Tensor:
    """THE positions of n new tokens, before the cache stores them: ``positions`` (n,) or (B, n)
    when given, else L .. L + n - 1 right after the L positions seen. Rotary embeddings and the
    mask of the step both read them here.

    Returns:
        (1, n) or (B, n) ``torch.long``.
    """
    if positions is not None:
        return check_positions(positions, batch_size, num_new).to(device)  # (B, n)
    L = len(cache)
    return torch.arange(L, L + num_new, device=device)[None]  # (1, n)


def check_cached_attention(cache: object, queries: Tensor, keys: Tensor, positions: object) -> int:
    """The checks of an attention layer's call with a cache; returns L + n, the bound of the
    valid lengths (which count keys from the first position).

    With a cache, keys and values are the new positions themselves (self-attention).

    Raises:
        ValueError: not a cache, keys of another length than the queries, bad positions.
    """
    if not isinstance(cache, AttentionCache):
        raise ValueError(
            f"cache must be a mha_lib.decoding.KVCache or one of its layers, got {type(cache).__name__}"
        )
    B, n = queries.shape[0], queries.shape[1]
    if keys.shape[1] != n:
        raise ValueError(
            "with a cache, keys and values must be the new positions themselves "
            f"(self-attention): {n} queries but {keys.shape[1]} keys"
        )
    if positions is not None:
        check_positions(positions, B, n)
    return len(cache) + n


def cached_keys_values(
    cache: AttentionCache,
    k: Tensor,
    v: Tensor,
    mask: Mask | Tensor | None,
    positions: Tensor | None,
    *,
    score_mod: ScoreMod | None = None,
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor, Visible]:
    """Store the new keys and values in ``cache``; return the keys to attend to and the mask.

    The n new queries are causal, ``causal() & cache.mask & mask`` evaluated at the positions
    of the queries (:func:`query_positions`) and of the keys the cache returns: a query at
    position p sees the keys 0 .. p that the cache holds and the mask shows. Valid lengths in
    place of ``mask`` (None, (B,) or (B, n); a CheckedLens is not read again) count the keys
    from position 0 (``padding(valid_lens)``). With ``positions`` (B, n) example b writes its
    keys and values at its own positions (see ``mha_lib.decoding``).

    Shapes:
        k, v: (B, Hkv, n, d), the new positions
        returns: keys and values (B, Hkv, Lk, d), and the context of the n queries
            (:class:`mha_lib.masking.Visible`, with ``score_mod`` and ``sinks`` at the absolute
            positions; nothing hidden for one new token that sees all the cache holds)
    """
    if not isinstance(cache, AttentionCache):
        raise ValueError(
            f"cache must be a mha_lib.decoding.KVCache or one of its layers, got {type(cache).__name__}"
        )
    check_tensor(k, "k", 4)
    B, _, n, _ = k.shape
    if mask is not None and not isinstance(mask, Mask):  # valid lengths
        mask = as_mask(read_valid_lens(mask, B, n, len(cache) + n, device=k.device)[0], None)
    q_positions = query_positions(cache, positions, B, n, k.device)
    k_all, v_all = cache.update(k, v, positions)  # (B, Hkv, Lk, d)
    scores = {"score_mod": score_mod, "sinks": sinks}
    if mask is None and positions is None and n == 1:  # the newest token sees all the cache holds
        return k_all, v_all, visible(None, B, q_positions, cache.key_positions(k.device), **scores)
    rule = causal() if cache.mask is None else causal() & cache.mask
    rule = rule if mask is None else rule & mask
    return k_all, v_all, visible(rule, B, q_positions, cache.key_positions(k.device), **scores)
