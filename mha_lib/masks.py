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
  always correct (composition keeps this: a tile hidden by one side of ``&`` is hidden).

Shape legend
    B    batch size
    Lq   number of queries
    Lk   number of keys (key-value pairs)
    nQ   query blocks, ceil(Lq / block_size)
    nK   key blocks, ceil(Lk / block_size)
"""

from __future__ import annotations

import numbers
from typing import NamedTuple, Sequence

import torch
from torch import Tensor

from mha_lib._checks import as_tensor, check_positive_int, check_size
from mha_lib.masking import CheckedLens, read_valid_lens

__all__ = [
    "Mask",
    "TileMap",
    "causal",
    "document",
    "padding",
    "prefix_lm",
    "sinks",
    "sliding_window",
]


class TileMap(NamedTuple):
    """Which tiles of tiled attention a mask hides, shows fully, or shows in part.

    Tile (r, c) holds the queries of block r and the keys of block c (``block_size`` positions
    each, the last block may be shorter).

    Attributes:
        hidden: (B, nQ, nK) bool, True: no query of the tile may see a key of it (skip it).
        full: (B, nQ, nK) bool, True: every query of the tile may see every key (no mask).
        block_size: positions per block.
    """

    hidden: Tensor
    full: Tensor
    block_size: int

    @property
    def total(self) -> int:
        """nQ * nK, the number of tiles."""
        return self.hidden.shape[1] * self.hidden.shape[2]

    @property
    def computed(self) -> int:
        """The tiles that some example needs (those tiled attention computes for the batch)."""
        return int((~self.hidden.all(0)).sum()) if self.hidden.shape[0] else 0

    @property
    def states(self) -> Tensor:
        """(nQ, nK) long for the whole batch: 0 skipped, 1 computed with the mask, 2 without."""
        states = torch.ones(self.hidden.shape[1:], dtype=torch.long, device=self.hidden.device)
        states[self.hidden.all(0)] = 0
        states[self.full.all(0)] = 2
        return states


class _Index:
    """The positions a mask is evaluated at: the queries (B or 1, Lq) and keys (B or 1, Lk) of
    a batch of B examples, and for the tile rule the size of a block."""

    def __init__(self, batch_size: int, queries: Tensor, keys: Tensor, block_size: int = 0):
        self.batch_size, self.queries, self.keys, self.block_size = batch_size, queries, keys, block_size

    @property
    def device(self) -> torch.device:
        return self.queries.device

    def pairs(self) -> tuple[Tensor, Tensor]:
        """Query positions (B or 1, Lq, 1) and key positions (B or 1, 1, Lk): they broadcast
        to every (query, key) pair."""
        return self.queries[:, :, None], self.keys[:, None, :]

    def query_ranges(self, values: Tensor) -> tuple[Tensor, Tensor]:
        """Smallest and largest of per-query ``values`` (X, Lq) in each query block: (X, nQ, 1)."""
        lo, hi = _block_ranges(values, self.block_size)
        return lo[:, :, None], hi[:, :, None]

    def key_ranges(self, values: Tensor) -> tuple[Tensor, Tensor]:
        """Smallest and largest of per-key ``values`` (X, Lk) in each key block: (X, 1, nK)."""
        lo, hi = _block_ranges(values, self.block_size)
        return lo[:, None, :], hi[:, None, :]

    def position_ranges(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The ends of each block of positions: query (B or 1, nQ, 1), key (B or 1, 1, nK)."""
        return (*self.query_ranges(self.queries), *self.key_ranges(self.keys))


def _block_ranges(values: Tensor, block_size: int) -> tuple[Tensor, Tensor]:
    """(X, L) -> smallest and largest of each block of ``block_size`` columns, each (X, n)."""
    X, L = values.shape
    n = -(-L // block_size)
    if L == 0:
        return values, values
    last = values[:, -1:].expand(X, n * block_size - L)  # repeat the last column: same min, max
    blocks = torch.cat([values, last], dim=1).reshape(X, n, block_size)  # (X, L') -> (X, n, b)
    return blocks.amin(-1), blocks.amax(-1)


class Mask:
    """A predicate ``keep(b, i, j)``: may query position i of example b see key position j?

    Build one with :func:`causal`, :func:`sliding_window`, :func:`padding`, :func:`document`,
    :func:`prefix_lm`, :func:`sinks`; combine with ``&`` and ``|``.
    A kind implements ``_keep`` (the predicate on broadcast positions), ``_tiles`` (which
    tiles it hides or shows fully, from the ends of each block) and ``_check`` (its data
    against the sizes).
    """

    # --- what a kind implements ------------------------------------------------------------------

    def _keep(self, ix: _Index) -> Tensor:
        """bool, broadcastable to (B, Lq, Lk)."""
        raise NotImplementedError

    def _tiles(self, ix: _Index) -> tuple[Tensor, Tensor]:
        """(hidden, full), each broadcastable to (B, nQ, nK)."""
        raise NotImplementedError

    def _check(self, ix: _Index) -> None:
        """Raise a ValueError when the mask's data does not fit these positions."""

    # --- composition -------------------------------------------------------------------------------

    def __and__(self, other: object) -> Mask:
        return _Combined("&", self, _check_mask(other, "the right side of &"))

    def __or__(self, other: object) -> Mask:
        return _Combined("|", self, _check_mask(other, "the right side of |"))

    # --- what the attention paths use ----------------------------------------------------------

    def keep(self, q_positions: Tensor, k_positions: Tensor, *, batch_size: int) -> Tensor:
        """The keep mask at given positions (a cache that holds keys of any positions).

        Shapes:
            q_positions: (Lq,), (1, Lq) or (B, Lq) integers >= 0 (the queries' rows are 0 .. Lq-1)
            k_positions: (Lk,), (1, Lk) or (B, Lk) integers >= 0
            returns: bool (B or 1, Lq, Lk), True = may attend (it broadcasts to (B, Lq, Lk))

        Raises:
            ValueError: positions of another shape; data of the mask that does not fit them.
        """
        B = check_size(batch_size, "batch_size")
        ix = _Index(B, _check_positions(q_positions, "q_positions", B),
                    _check_positions(k_positions, "k_positions", B))
        if ix.keys.device != ix.device:
            raise ValueError(f"k_positions are on {ix.keys.device}, q_positions on {ix.device}")
        self._check(ix)
        return self._keep(ix)

    def dense(self, batch_size: int, num_queries: int, num_keys: int, q_offset: int = 0, *,
              device: torch.device | str | None = None) -> Tensor:
        """The boolean keep mask of Lq queries at positions ``q_offset .. q_offset + Lq - 1``
        and Lk keys at positions ``0 .. Lk - 1`` (``q_offset`` = the keys cached before them).

        Returns:
            (B, Lq, Lk) bool, True = may attend: ``attn_mask`` of ``F.scaled_dot_product_attention``
            (an expanded view where the mask is the same for every example).

        Raises:
            ValueError: a size that is not an integer >= 0; the mask's data does not fit
                (``valid_lens`` of another batch size, ``doc_ids`` too short, ...).
        """
        ix = self._contiguous(batch_size, num_queries, num_keys, q_offset, device)
        self._check(ix)
        return self._keep(ix).expand(ix.batch_size, num_queries, num_keys)

    def tiles(self, batch_size: int, num_queries: int, num_keys: int, block_size: int,
              q_offset: int = 0, *, device: torch.device | str | None = None) -> TileMap:
        """The tile rule of tiled attention, from the ends of each block of positions.

        Builds nothing of size Lq x Lk: the work is O(B (Lq + Lk) + B nQ nK).

        Returns:
            a :class:`TileMap` of (B, nQ, nK) tiles of ``block_size`` queries by ``block_size``
            keys (positions as in :meth:`dense`).

        Raises:
            ValueError: as :meth:`dense`, or a block size that is not an integer >= 1.
        """
        block_size = check_positive_int(block_size, "block_size")
        ix = self._contiguous(batch_size, num_queries, num_keys, q_offset, device, block_size)
        self._check(ix)
        hidden, full = self._tiles(ix)
        shape = (ix.batch_size, -(-num_queries // block_size), -(-num_keys // block_size))
        hidden, full = hidden.expand(shape), full.expand(shape)
        return TileMap(hidden, full & ~hidden, block_size)  # an empty tile is hidden, not full

    def _contiguous(self, batch_size, num_queries, num_keys, q_offset, device, block_size=0) -> _Index:
        B = check_size(batch_size, "batch_size")
        Lq, Lk = check_size(num_queries, "num_queries"), check_size(num_keys, "num_keys")
        start = check_size(q_offset, "q_offset")
        device = self._device() if device is None else torch.device(device)
        queries = torch.arange(start, start + Lq, device=device)[None]  # (1, Lq)
        return _Index(B, queries, torch.arange(Lk, device=device)[None], block_size)

    def _device(self) -> torch.device:
        """Where the mask's data lives (the CPU for a mask without data)."""
        return torch.device("cpu")


def _check_mask(value: object, name: str) -> Mask:
    if not isinstance(value, Mask):
        raise ValueError(f"{name} must be a mha_lib.masks.Mask, got {type(value).__name__}")
    return value


def _check_positions(positions: object, name: str, batch_size: int) -> Tensor:
    """Positions as a (B or 1, L) long tensor, or a ValueError naming ``name``."""
    positions = as_tensor(positions, name, "a tensor of integers")
    if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
        raise ValueError(f"{name} must hold integers, got dtype {positions.dtype}")
    if positions.dim() == 1:
        positions = positions[None]  # (L,) -> (1, L)
    if positions.dim() != 2 or positions.shape[0] not in (1, batch_size):
        raise ValueError(
            f"{name} must have shape (L,), (1, L) or (B, L) with B = {batch_size}, "
            f"got {tuple(positions.shape)}"
        )
    return positions.long()


# --- composition: three-valued logic on tiles (hidden, partial, full) --------------------------


class _Combined(Mask):
    """``a & b`` (``op = "&"``): a pair is kept when both keep it; a tile is hidden when one side
    hides it, full when both show it fully. ``a | b``: kept when one side keeps it; hidden when
    both hide it, full when one side shows it fully."""

    def __init__(self, op: str, *parts: Mask) -> None:
        self.op = op
        self.parts = [p for part in parts
                      for p in (part.parts if isinstance(part, _Combined) and part.op == op else [part])]

    def _keep(self, ix):
        keep = self.parts[0]._keep(ix)
        for part in self.parts[1:]:
            keep = keep & part._keep(ix) if self.op == "&" else keep | part._keep(ix)
        return keep

    def _tiles(self, ix):
        hidden, full = self.parts[0]._tiles(ix)
        for part in self.parts[1:]:
            h, f = part._tiles(ix)
            hidden, full = (hidden | h, full & f) if self.op == "&" else (hidden & h, full | f)
        return hidden, full

    def _check(self, ix):
        for part in self.parts:
            part._check(ix)

    def _device(self):
        return _first_device(self.parts)

    def __repr__(self) -> str:
        return f" {self.op} ".join(f"({p!r})" if isinstance(p, _Combined) else repr(p)
                                   for p in self.parts)


def _first_device(parts: Sequence[Mask]) -> torch.device:
    devices = [p._device() for p in parts if p._device().type != "cpu"]
    return devices[0] if devices else torch.device("cpu")


# --- the kinds that depend only on positions ------------------------------------------------------


class _Causal(Mask):
    def _keep(self, ix):
        i, j = ix.pairs()
        return j <= i  # (B or 1, Lq, 1) vs (B or 1, 1, Lk) -> (B or 1, Lq, Lk)

    def _tiles(self, ix):
        q_lo, q_hi, k_lo, k_hi = ix.position_ranges()
        return k_lo > q_hi, k_hi <= q_lo

    def __repr__(self) -> str:
        return "causal()"


def causal() -> Mask:
    """Query position i may see the keys at positions 0 .. i (a decoder; GPT)."""
    return _Causal()


class _SlidingWindow(Mask):
    def __init__(self, window: int) -> None:
        self.window = check_positive_int(window, "window")

    def _keep(self, ix):
        i, j = ix.pairs()
        return (j <= i) & (j > i - self.window)

    def _tiles(self, ix):
        q_lo, q_hi, k_lo, k_hi = ix.position_ranges()
        hidden = (k_lo > q_hi) | (k_hi <= q_lo - self.window)
        return hidden, (k_hi <= q_lo) & (k_lo > q_hi - self.window)

    def __repr__(self) -> str:
        return f"sliding_window({self.window})"


def sliding_window(window: int) -> Mask:
    """Query position i may see the ``window`` keys ``i - window < j <= i`` (itself included):
    Mistral, Gemma 2 and 3, gpt-oss (a decoder that forgets what lies further back).

    Raises:
        ValueError: ``window`` not an integer >= 1.
    """
    return _SlidingWindow(window)


class _Sinks(Mask):
    def __init__(self, num_sinks: int) -> None:
        self.num_sinks = check_size(num_sinks, "num_sinks")

    def _keep(self, ix):
        i, j = ix.pairs()
        return (j < self.num_sinks) & (j <= i)

    def _tiles(self, ix):
        q_lo, q_hi, k_lo, k_hi = ix.position_ranges()
        hidden = (k_lo >= self.num_sinks) | (k_lo > q_hi)
        return hidden, (k_hi < self.num_sinks) & (k_hi <= q_lo)

    def __repr__(self) -> str:
        return f"sinks({self.num_sinks})"


def sinks(num_sinks: int) -> Mask:
    """The first ``num_sinks`` keys, seen by every query at or after them (attention sinks).

    ``sliding_window(w) | sinks(4)`` is StreamingLLM (Xiao et al., 2023): a window of recent
    keys plus the first four, on which the softmax parks the weight it must put somewhere.

    Raises:
        ValueError: ``num_sinks`` not an integer >= 0.
    """
    return _Sinks(num_sinks)


# --- the kinds that carry data per example ----------------------------------------------------------


def _per_example(value: object, name: str) -> int | Tensor:
    """An integer >= 0, or a (B,) tensor of integers >= 0 (one per example)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return check_size(value, name)
    value = as_tensor(value, name, "an integer >= 0 or a (B,) tensor of integers")
    if value.dtype == torch.bool or value.is_floating_point() or value.is_complex() or value.dim() != 1:
        raise ValueError(
            f"{name} must be an integer >= 0 or a (B,) tensor of integers, got "
            f"{value.dtype} of shape {tuple(value.shape)}"
        )
    if value.numel() and int(value.min()) < 0:
        raise ValueError(f"{name} must be >= 0, got {value.tolist()}")
    return value.long()


def _check_rows(value: int | Tensor, name: str, ix: _Index) -> None:
    if isinstance(value, Tensor) and value.shape[0] != ix.batch_size:
        raise ValueError(f"{name} has {value.shape[0]} rows but the batch has {ix.batch_size}")


def _column(value: int | Tensor, ix: _Index) -> int | Tensor:
    """An integer as is; (B,) -> (B, 1, 1) on the positions' device."""
    return value if isinstance(value, int) else value.to(ix.device)[:, None, None]


class _PrefixLM(Mask):
    def __init__(self, prefix_len: int | Tensor) -> None:
        self.prefix_len = _per_example(prefix_len, "prefix_len")

    def _check(self, ix):
        _check_rows(self.prefix_len, "prefix_len", ix)

    def _keep(self, ix):
        i, j = ix.pairs()
        return (j <= i) | (j < _column(self.prefix_len, ix))

    def _tiles(self, ix):
        q_lo, q_hi, k_lo, k_hi = ix.position_ranges()
        p = _column(self.prefix_len, ix)
        return (k_lo > q_hi) & (k_lo >= p), (k_hi <= q_lo) | (k_hi < p)

    def _device(self):
        return self.prefix_len.device if isinstance(self.prefix_len, Tensor) else torch.device("cpu")

    def __repr__(self) -> str:
        p = self.prefix_len
        return f"prefix_lm({p if isinstance(p, int) else p.tolist()})"


def prefix_lm(prefix_len: int | Tensor | Sequence[int]) -> Mask:
    """Prefix language model (T5's prefix-LM, UniLM, PaliGemma): the first ``prefix_len``
    positions see each other both ways, the rest is causal: ``j <= i`` or ``j < prefix_len``.

    Args:
        prefix_len: an integer >= 0, or one per example, shape (B,).

    Raises:
        ValueError: not an integer >= 0 nor a (B,) tensor of them.
    """
    return _PrefixLM(prefix_len)


class _Padding(Mask):
    def __init__(self, valid_lens) -> None:
        if valid_lens is None or isinstance(valid_lens, CheckedLens):
            lens = valid_lens
        else:
            lens = as_tensor(valid_lens, "valid_lens", "a tensor or a list of numbers")
        shape = getattr(getattr(lens, "lens", lens), "shape", None)
        if shape is None or len(shape) not in (1, 2):
            raise ValueError(
                f"valid_lens must have shape (B,) or (B, Lq), got {None if shape is None else tuple(shape)}"
            )
        # Read the values once here (the largest bounds Lk later without a second read)
        Lq = shape[1] if len(shape) == 2 else 1
        self.valid_lens, _ = read_valid_lens(valid_lens, shape[0], Lq, 2**62)

    def _check(self, ix):
        read_valid_lens(self.valid_lens, ix.batch_size, ix.queries.shape[1], ix.keys.shape[1])

    def _lens(self, ix: _Index) -> Tensor:
        """(B, 1) or (B, Lq) on the positions' device."""
        lens = self.valid_lens.lens.to(ix.device)
        return lens[:, None] if lens.dim() == 1 else lens

    def _keep(self, ix):
        _, j = ix.pairs()
        return j < self._lens(ix)[:, :, None]  # (B, 1 or Lq, 1) vs (B or 1, 1, Lk)

    def _tiles(self, ix):
        lens = self._lens(ix)
        _, _, k_lo, k_hi = ix.position_ranges()
        if lens.shape[1] == 1:
            lo = hi = lens[:, :, None]  # (B, 1) -> (B, 1, 1)
        else:
            lo, hi = ix.query_ranges(lens)  # (B, nQ, 1) each
        return k_lo >= hi, k_hi < lo

    def _device(self):
        return self.valid_lens.lens.device

    def __repr__(self) -> str:
        return f"padding({self.valid_lens.lens.tolist()})"


def padding(valid_lens: Tensor | Sequence[float] | CheckedLens) -> Mask:
    """d2l's valid lengths as a mask: query row i of example b sees the keys at positions
    ``j < valid_lens[b]`` (one length per example, (B,)) or ``j < valid_lens[b, i]`` (one per
    query, (B, Lq)); the keys after them are padding (right padding).

    Raises:
        ValueError: as :func:`mha_lib.masking.check_valid_lens` (checked against the number of
            keys when the mask is used).
    """
    return _Padding(valid_lens)


class _Document(Mask):
    def __init__(self, doc_ids) -> None:
        doc_ids = as_tensor(doc_ids, "doc_ids", "a (B, L) tensor of integers")
        if doc_ids.dtype == torch.bool or doc_ids.is_floating_point() or doc_ids.is_complex():
            raise ValueError(f"doc_ids must hold integers, got dtype {doc_ids.dtype}")
        if doc_ids.dim() != 2:
            raise ValueError(f"doc_ids must have shape (B, L), got {tuple(doc_ids.shape)}")
        self.doc_ids = doc_ids.long()

    def _check(self, ix):
        _check_rows(self.doc_ids, "doc_ids", ix)
        L = self.doc_ids.shape[1]
        for name, positions in (("queries", ix.queries), ("keys", ix.keys)):
            if positions.numel() and (int(positions.max()) >= L or int(positions.min()) < 0):
                raise ValueError(
                    f"doc_ids of shape {tuple(self.doc_ids.shape)} must give a document for every "
                    f"position of the {name}: positions {int(positions.min())} .. "
                    f"{int(positions.max())} (L = {L})"
                )

    def _ids(self, ix: _Index, positions: Tensor) -> Tensor:
        """The document of each position: (B, n) from positions (B or 1, n)."""
        ids = self.doc_ids.to(ix.device)
        return ids.gather(1, positions.expand(ids.shape[0], -1))

    def _keep(self, ix):
        return self._ids(ix, ix.queries)[:, :, None] == self._ids(ix, ix.keys)[:, None, :]

    def _tiles(self, ix):
        q_lo, q_hi = ix.query_ranges(self._ids(ix, ix.queries))  # (B, nQ, 1)
        k_lo, k_hi = ix.key_ranges(self._ids(ix, ix.keys))  # (B, 1, nK)
        hidden = (k_hi < q_lo) | (k_lo > q_hi)  # no document in common
        return hidden, (q_lo == q_hi) & (k_lo == k_hi) & (k_lo == q_lo)

    def _device(self):
        return self.doc_ids.device

    def __repr__(self) -> str:
        return f"document({self.doc_ids.tolist()})"


def document(doc_ids: Tensor | Sequence[Sequence[int]]) -> Mask:
    """Packed sequences: several documents share a row of the batch, and a query sees only the
    keys of its own document: ``doc_ids[b, i] == doc_ids[b, j]``. Combine with :func:`causal`
    for a decoder: ``causal() & document(doc_ids)``.

    Args:
        doc_ids: (B, L) integers, the document of each position (L covers every position used).

    Raises:
        ValueError: not a 2-D integer tensor; later, another batch size or too few positions.
    """
    return _Document(doc_ids)
