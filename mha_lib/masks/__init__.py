"""Masks as one idea: which keys may each query see?

A *mask* is a predicate ``keep(b, i, j)`` of the example ``b``, the position ``i`` of a query
and the position ``j`` of a key: True when the query may attend to the key. Every kind of mask
the literature uses is such a predicate, and they compose with ``&`` (both allow) and ``|``
(either allows), as in Hugging Face's ``masking_utils`` (``and_masks`` / ``or_masks``) and
PyTorch's FlexAttention (``mask_mod``):

======================================  ============================================================
kind                                    query ``i`` of example ``b`` may see key ``j`` when
======================================  ============================================================
:func:`causal`                          ``j <= i`` (no look at the future)
:func:`sliding_window` ``(w)``          ``i - w < j <= i`` (the last w keys, itself included)
:func:`padding` ``(valid_lens)``        ``j < valid_lens[b]`` or ``valid_lens[b, row]`` (d2l's valid
                                        lengths: the keys past them are padding)
:func:`document` ``(doc_ids)``          ``doc_ids[b, i] == doc_ids[b, j]`` (packed sequences)
:func:`prefix_lm` ``(p)``               ``j <= i`` or ``j < p`` (the prefix sees itself both ways)
:func:`sinks` ``(n)``                   ``j < n`` and ``j <= i`` (the first n keys, for every query
                                        at or after them: StreamingLLM's attention sinks)
:func:`chunked` ``(c)``                 ``j <= i`` in the same chunk of c positions (Llama 4)
======================================  ============================================================

so that StreamingLLM is ``sliding_window(w) | sinks(4)`` and packed causal training is
``causal() & document(doc_ids)``. Positions, not indices: with q_offset = L cached keys, the
n new queries sit at positions L .. L + n - 1 (the same rule for a cache and without one).

Everything an attention path needs is built here from a mask, in one place:

* :meth:`Mask.dense` the boolean keep mask (B, Lq, Lk) (True = may attend), the mask of
  ``F.scaled_dot_product_attention``; :meth:`Mask.keep` the same for any positions;
* :meth:`Mask.tiles` the tile rule of tiled attention, computed from the ends of each block
  of positions without building the (Lq, Lk) mask: a tile (a block of queries by a block of
  keys) is *hidden* (skip it), *full* (compute it without the mask) or partial (apply it).
  ``hidden`` and ``full`` are never wrong; a tile they cannot decide is partial, which is
  always correct (composition keeps this: a tile hidden by one side of ``&`` is hidden);
* :meth:`Mask.flex_mask_mod` the mask as FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)``
  (:mod:`mha_lib.flex` makes its ``BlockMask``: ``backend="flex"`` of the layers).

Shape legend
    B    batch size
    Lq   number of queries
    Lk   number of keys (key-value pairs)
    nQ   query blocks, ceil(Lq / block_size)
    nK   key blocks, ceil(Lk / block_size)
"""

from mha_lib.masks._base import Mask, TileMap
from mha_lib.masks.kinds import causal, chunked, document, padding, prefix_lm, sinks, sliding_window

__all__ = [
    "Mask",
    "TileMap",
    "causal",
    "chunked",
    "document",
    "padding",
    "prefix_lm",
    "sinks",
    "sliding_window",
]
