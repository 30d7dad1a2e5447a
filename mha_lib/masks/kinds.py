"""The kinds of mask (:mod:`mha_lib.masks` lists them): each a predicate ``_keep`` on broadcast
positions, a tile rule ``_tiles`` from the ends of each block, and ``_check`` of its data.
"""

from __future__ import annotations

import numbers
from typing import Sequence

import torch
from torch import Tensor

from mha_lib._checks import as_tensor, check_positive_int, check_size
from mha_lib.lengths import CheckedLens, read_valid_lens
from mha_lib.masks._base import Mask, _Index

__all__ = ["causal", "chunked", "document", "padding", "prefix_lm", "sinks", "sliding_window"]


# --- the kinds that depend only on positions ------------------------------------------------------


class _Causal(Mask):
    def _keep(self, ix):
        i, j = ix.pairs()
        return j <= i  # (B or 1, Lq, 1) vs (B or 1, 1, Lk) -> (B or 1, Lq, Lk)

    def _tiles(self, ix):
        q_lo, q_hi, k_lo, k_hi = ix.position_ranges()
        return k_lo > q_hi, k_hi <= q_lo

    def _is_causal(self) -> bool:
        return True

    def _mask_mod(self, ix):
        return lambda b, h, i, j: j <= i

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

    def _mask_mod(self, ix):
        w = _scalar(self.window, ix)
        return lambda b, h, i, j: (j <= i) & (j > i - w)

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

    def _mask_mod(self, ix):
        n = _scalar(self.num_sinks, ix)
        return lambda b, h, i, j: (j < n) & (j <= i)

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


class _Chunked(Mask):
    def __init__(self, chunk_size: int) -> None:
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")

    def _keep(self, ix):
        i, j = ix.pairs()
        return (j <= i) & (j // self.chunk_size == i // self.chunk_size)

    def _tiles(self, ix):
        q_lo, q_hi, k_lo, k_hi = ix.position_ranges()
        c = self.chunk_size
        hidden = (k_lo > q_hi) | (k_hi // c < q_lo // c) | (k_lo // c > q_hi // c)
        one_chunk = (q_lo // c == q_hi // c) & (k_lo // c == q_lo // c) & (k_hi // c == q_lo // c)
        return hidden, one_chunk & (k_hi <= q_lo)

    def _mask_mod(self, ix):
        c = _scalar(self.chunk_size, ix)
        return lambda b, h, i, j: (j <= i) & (j // c == i // c)

    def __repr__(self) -> str:
        return f"chunked({self.chunk_size})"


def chunked(chunk_size: int) -> Mask:
    """Chunked local attention (Llama 4): the positions are cut into chunks of ``chunk_size``
    and query i sees the keys ``j <= i`` of its own chunk (``j // chunk_size == i // chunk_size``).

    Raises:
        ValueError: ``chunk_size`` not an integer >= 1.
    """
    return _Chunked(chunk_size)


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


def _scalar(value: int, ix: _Index) -> Tensor:
    """A setting of a mask as a 0-d tensor on the positions' device: FlexAttention's compiled
    kernel then takes it as an input (another window does not compile again)."""
    return torch.tensor(value, device=ix.device)


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

    def _mask_mod(self, ix):
        p = _scalar(self.prefix_len, ix) if isinstance(self.prefix_len, int) else self.prefix_len.to(ix.device)
        if p.dim() == 0:
            return lambda b, h, i, j: (j <= i) | (j < p)
        return lambda b, h, i, j: (j <= i) | (j < p[b])

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
        # Positions, not counts: a length past the last key hides nothing (a cache that grows)
        read_valid_lens(self.valid_lens, ix.batch_size, ix.rows[1] - ix.rows[0], 2**62)

    def sees_everything(self, num_keys):
        return self.valid_lens.lowest is not None and self.valid_lens.lowest >= num_keys

    def _lens(self, ix: _Index) -> Tensor:
        """(B, 1) or (B, Lq) on the positions' device."""
        lens = self.valid_lens.lens.to(ix.device)
        return lens[:, None] if lens.dim() == 1 else lens[:, ix.rows[0]:ix.rows[1]]

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

    def _mask_mod(self, ix):
        lens = self.valid_lens.lens.to(ix.device)
        if lens.dim() == 1:
            return lambda b, h, i, j: j < lens[b]
        last = lens.shape[1] - 1  # (a padded query row reads the last row)
        return lambda b, h, i, j: j < lens[b, i.clamp(max=last)]

    def _device(self):
        return self.valid_lens.lens.device

    def __repr__(self) -> str:
        return f"padding({self.valid_lens.lens.tolist()})"


def padding(valid_lens: Tensor | Sequence[float] | CheckedLens) -> Mask:
    """d2l's valid lengths as a mask: query row i of example b sees the keys at positions
    ``j < valid_lens[b]`` (one length per example, (B,)) or ``j < valid_lens[b, i]`` (one per
    query, (B, Lq)); the keys after them are padding (right padding).

    Unlike the ``valid_lens`` argument of the layers (at most Lk, d2l's check), a length may
    pass the last key: the mask speaks of positions (the keys a cache will hold).

    Raises:
        ValueError: as :func:`mha_lib.masking.check_valid_lens`; later, another batch size or
            number of queries.
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
        q_lo, q_hi, k_lo, k_hi = ix.bounds()
        for name, lo, hi in (("queries", q_lo, q_hi), ("keys", k_lo, k_hi)):
            if hi >= L or (hi >= 0 and lo < 0):
                raise ValueError(
                    f"doc_ids of shape {tuple(self.doc_ids.shape)} must give a document for every "
                    f"position of the {name}: positions {lo} .. {hi} (L = {L})"
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

    def _mask_mod(self, ix):
        ids = self.doc_ids.to(ix.device)
        last = ids.shape[1] - 1  # (padded positions read the last document)
        return lambda b, h, i, j: ids[b, i.clamp(max=last)] == ids[b, j.clamp(max=last)]

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
