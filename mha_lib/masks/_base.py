"""The mask model: :class:`Mask` (a predicate of example, query position, key position), its
composition with ``&`` and ``|``, the dense mask and the tile rule. The kinds are in
:mod:`mha_lib.masks.kinds`; see :mod:`mha_lib.masks`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from mha_lib._checks import check_device, check_positive_int, check_size
from mha_lib.lengths import check_positions

__all__ = ["Mask", "TileMap"]


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

    def __init__(self, batch_size: int, queries: Tensor, keys: Tensor, block_size: int = 0,
                 bounds: tuple[int, int, int, int] | None = None, rows: tuple[int, int] | None = None):
        self.batch_size, self.queries, self.keys, self.block_size = batch_size, queries, keys, block_size
        self._bounds = bounds
        # The rows of the queries among all Lq (per-query data is indexed by row): a tile's rows
        self.rows = (0, queries.shape[1]) if rows is None else rows

    def bounds(self) -> tuple[int, int, int, int]:
        """Smallest and largest query position, smallest and largest key position (-1 when
        there is none): known without a host read for contiguous positions."""
        if self._bounds is None:
            ends = [int(f(x)) if x.numel() else -1 for x in (self.queries, self.keys)
                    for f in (torch.min, torch.max)]
            self._bounds = tuple(ends)
        return self._bounds

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

    def _mask_mod(self, ix: _Index) -> Callable:
        """FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)`` (0-d tensors), for indices past the
        last query or key too (they must not index past the mask's data). A kind without a
        closed form: a lookup in its dense mask."""
        keep = self._keep(ix)
        keep = keep.expand(ix.batch_size, *keep.shape[1:])  # (B or 1, Lq or 1, Lk) -> (B, Lq or 1, Lk)
        rows, cols = keep.shape[1] - 1, keep.shape[2] - 1
        return lambda b, h, i, j: keep[b, i.clamp(max=rows), j.clamp(max=cols)]

    def _is_causal(self) -> bool:
        """True for exactly the causal mask: at positions 0, 1, ... (queries and keys) it is
        ``is_causal=True`` of ``F.scaled_dot_product_attention``, which then needs no mask."""
        return False

    def sees_everything(self, num_keys: int) -> bool:
        """True when it is known without reading a value that every query sees all ``num_keys``
        keys at positions 0 .. Lk - 1 (valid lengths checked to be all Lk); False when unknown."""
        return False

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
        ix = _Index(B, check_positions(q_positions, B, name="q_positions", expand=False),
                    check_positions(k_positions, B, name="k_positions", expand=False))
        if ix.keys.device != ix.device:
            raise ValueError(f"k_positions are on {ix.keys.device}, q_positions on {ix.device}")
        self._check(ix)
        return self._keep(ix)

    def dense(self, batch_size: int, num_queries: int, num_keys: int, q_offset: int = 0, *,
              device: torch.device | str | None = None, expand: bool = True) -> Tensor:
        """The boolean keep mask of Lq queries at positions ``q_offset .. q_offset + Lq - 1``
        and Lk keys at positions ``0 .. Lk - 1`` (``q_offset`` = the keys cached before them).

        Returns:
            (B, Lq, Lk) bool, True = may attend: ``attn_mask`` of ``F.scaled_dot_product_attention``
            (an expanded view where the mask is the same for every example); with
            ``expand=False`` the mask before broadcasting, (B or 1, Lq or 1, Lk).

        Raises:
            ValueError: a size that is not an integer >= 0; the mask's data does not fit
                (``valid_lens`` of another batch size, ``doc_ids`` too short, ...).
        """
        ix = self._contiguous(batch_size, num_queries, num_keys, q_offset, device)
        self._check(ix)
        keep = self._keep(ix)
        return keep.expand(ix.batch_size, num_queries, num_keys) if expand else keep

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

    def block(self, batch_size: int, rows: tuple[int, int], cols: tuple[int, int],
              q_offset: int = 0, *, device: torch.device | str | None = None) -> Tensor:
        """The keep mask of one tile of :meth:`dense`: the queries of rows ``rows[0] ..
        rows[1] - 1`` and the keys ``cols[0] .. cols[1] - 1`` (the data is not checked again:
        call :meth:`tiles` or :meth:`dense` first).

        Returns:
            bool (B or 1, rows or 1, cols), True = may attend.
        """
        (r0, r1), (c0, c1) = rows, cols
        device = self._device() if device is None else check_device(device)
        queries = torch.arange(q_offset + r0, q_offset + r1, device=device)[None]  # (1, r)
        bounds = (q_offset + r0, q_offset + r1 - 1, c0, c1 - 1)
        return self._keep(_Index(batch_size, queries, torch.arange(c0, c1, device=device)[None],
                                 bounds=bounds, rows=rows))

    def flex_mask_mod(self, batch_size: int, num_queries: int, num_keys: int, *,
                      device: torch.device | str | None = None) -> Callable:
        """The mask as FlexAttention's ``mask_mod(b, h, q_idx, kv_idx) -> bool`` for Lq queries
        and Lk keys at positions 0, 1, ... (the mask's data checked against them, as in
        :meth:`dense`, and captured on ``device``). Indices past Lq or Lk (FlexAttention's
        padded blocks) are answered without reading past the data.

        Raises:
            ValueError: as :meth:`dense`.
        """
        ix = self._contiguous(batch_size, num_queries, num_keys, 0, device)
        self._check(ix)
        return self._mask_mod(ix)

    def _contiguous(self, batch_size, num_queries, num_keys, q_offset, device, block_size=0) -> _Index:
        B = check_size(batch_size, "batch_size")
        Lq, Lk = check_size(num_queries, "num_queries"), check_size(num_keys, "num_keys")
        start = check_size(q_offset, "q_offset")
        device = self._device() if device is None else check_device(device)
        queries = torch.arange(start, start + Lq, device=device)[None]  # (1, Lq)
        bounds = (start, start + Lq - 1 if Lq else -1, 0 if Lk else -1, Lk - 1)
        return _Index(B, queries, torch.arange(Lk, device=device)[None], block_size, bounds)

    def _device(self) -> torch.device:
        """Where the mask's data lives (the CPU for a mask without data)."""
        return torch.device("cpu")


def _check_mask(value: object, name: str) -> Mask:
    if not isinstance(value, Mask):
        raise ValueError(f"{name} must be a mha_lib.masks.Mask, got {type(value).__name__}")
    return value


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

    def _mask_mod(self, ix):
        mods, both = [part._mask_mod(ix) for part in self.parts], self.op == "&"

        def mask_mod(b, h, i, j):
            keep = mods[0](b, h, i, j)
            for mod in mods[1:]:
                keep = keep & mod(b, h, i, j) if both else keep | mod(b, h, i, j)
            return keep

        return mask_mod

    def sees_everything(self, num_keys):
        every = [part.sees_everything(num_keys) for part in self.parts]
        return all(every) if self.op == "&" else any(every)

    def _device(self):
        return _first_device(self.parts)

    def __repr__(self) -> str:
        return f" {self.op} ".join(f"({p!r})" if isinstance(p, _Combined) else repr(p)
                                   for p in self.parts)


def _first_device(parts: Sequence[Mask]) -> torch.device:
    devices = [p._device() for p in parts if p._device().type != "cpu"]
    return devices[0] if devices else torch.device("cpu")
