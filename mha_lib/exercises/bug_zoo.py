"""The bug zoo: attention layers that pass a shape test and are wrong, one real bug each.

Every specimen is a :class:`mha_lib.gqa.GroupedQueryAttention` (D = 16, H = 4 query heads,
Hkv = 2 key/value heads, d = 4, RoPE, dropout 0.1) whose forward is written out step by step
in :class:`ZooAttention`, each step a method; a specimen gets one step wrong, as code in the
issue trackers of nanoGPT, ``transformers``, PyTorch, flash-attention, llama.cpp and others
did. They take ``MultiHeadAttention``'s arguments (``valid_lens``, ``mask=``,
``need_weights=``, ``cache=``, ``positions=``), so one probe runs on all of them
(:mod:`mha_lib.exercises.probes`).

* :data:`SPECIMENS`, name -> :class:`_Specimen` (the names say nothing about the bug); call one
  to build its layer, in evaluation mode, with seeded weights;
* :data:`BUG_CLASSES`, the labels a student chooses from;
* :func:`reference`, the correct layer: the library's own ``GroupedQueryAttention``.

Grading (:mod:`mha_lib.exercises.zoo_grading`): ``grade_labels`` for the diagnoses,
``grade_test`` for a test, by mutation testing.

Shape legend
    B    batch size
    H    query heads; Hkv key/value heads, g = H / Hkv
    Lq   queries; Lk keys (with a cache: every position so far); n new positions
    d    head size; D = H*d, d_model
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib.cached import query_positions
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.heads import merge_heads, split_heads
from mha_lib.masks import Mask, causal
from mha_lib.positions import rotary

__all__ = ["BUG_CLASSES", "SPECIMENS", "ZooAttention", "reference"]

#: The zoo's layers: D, H, Hkv, dropout (every specimen and the reference).
SIZES = dict(d_model=16, num_heads=4, num_kv_heads=2, dropout=0.1)

#: The labels of Part A: what kind of bug a specimen has (the classes of the issue trackers).
BUG_CLASSES: dict[str, str] = {
    "mask_polarity": "mask polarity or convention (True = keep read as True = hide)",
    "mask_leak": "a mask that leaks (a finite fill training can beat, a mask skipped)",
    "nan": "NaN from a fully masked row (or an overflow)",
    "scale": "the wrong score scale (sqrt(d_model) for sqrt(d), or none)",
    "head_layout": "heads split or merged with view/reshape where a transpose is needed",
    "rotary": "a rotary convention (interleaved pairs vs halves)",
    "padding": "padding in batches (the padding mask on the wrong axis or example)",
    "kv_cache": "KV-cache offsets, rotated vs unrotated cached keys",
    "causal_alignment": "causal alignment when Lq != Lk (top-left vs bottom-right)",
    "gqa_expansion": "K/V heads expanded for grouped-query attention in the wrong order",
    "dropout_in_eval": "dropout left on in evaluation",
}


class ZooAttention(GroupedQueryAttention):
    """``GroupedQueryAttention``'s forward written out step by step (RoPE, masks, KV cache).

    Computes what the library's layer computes (``tests/exercises/test_bug_zoo.py`` checks
    it), in plain tensor code: each step is a method, so that a specimen overrides one of them.
    The weights it returns are the ones that multiplied the values.

    Shapes: as :class:`~mha_lib.gqa.GroupedQueryAttention` (``head_mask`` is not supported).
    """

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Tensor | Sequence[int] | None = None, *, mask: Mask | None = None,
                need_weights: bool = False, head_mask: Tensor | None = None, cache=None,
                positions: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        if head_mask is not None:
            raise ValueError("head_mask: the zoo's layers take none, got "
                             f"{type(head_mask).__name__}")
        self._check_forward(queries, keys, values, valid_lens, mask, need_weights, None, cache,
                            positions)  # the library's checks of the arguments
        (B, Lq, _), Lk = queries.shape, keys.shape[1]
        q = self.split(self.W_q(queries), self.num_heads)  # (B, Lq, D) -> (B, H, Lq, d)
        k = self.split(self.W_k(keys), self.num_kv_heads)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
        v = self.split(self.W_v(values), self.num_kv_heads)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
        q_pos, k_pos = self.places(cache, positions, B, Lq, Lk)  # (B, Lq), (B, Lk)
        q = self.rotate(q, q_pos)
        if cache is None:
            k = self.rotate(k, k_pos)
            rows, cols = torch.arange(Lq, device=q.device), torch.arange(Lk, device=q.device)
            keep = self.keep(mask, rows[None], cols[None], B)  # the mask at rows 0, 1, ...
        else:  # every position so far: (B, Hkv, L + n, d)
            k, v = self.remember(cache, k, v, k_pos, positions)
            keep = self.keep(causal() if mask is None else causal() & mask, q_pos,
                             cache.key_positions(k.device).expand(B, -1), B)
        if valid_lens is not None:  # the keys past each example's length are padding
            pad = self.padding(torch.as_tensor(valid_lens, device=q.device), q_pos, k.shape[2])
            keep = pad if keep is None else keep & pad
        k, v = self.expand(k), self.expand(v)  # (B, Hkv, Lk, d) -> (B, H, Lk, d)
        scores = q @ k.transpose(-2, -1) / self.scale()  # (B, H, Lq, Lk)
        weights = self.softmax(scores, None if keep is None else self.per_head(keep))
        weights = self.drop(weights)
        output = self.W_o(self.merge(weights @ v))  # (B, H, Lq, d) -> (B, Lq, D)
        return (output, weights) if need_weights else output

    # --- the steps ----------------------------------------------------------------------------

    def split(self, x: Tensor, num_heads: int) -> Tensor:
        """(B, L, heads*d) -> (B, heads, L, d)."""
        return split_heads(x, num_heads)

    def merge(self, x: Tensor) -> Tensor:
        """(B, H, L, d) -> (B, L, H*d)."""
        return merge_heads(x)

    def places(self, cache, positions, B: int, Lq: int, Lk: int) -> tuple[Tensor, Tensor]:
        """The positions of the queries and of the new keys, (B, Lq) and (B, Lk)."""
        if cache is not None:  # right after the L cached positions (or as given)
            q_pos = query_positions(cache, positions, B, Lq, self.W_q.weight.device)
            q_pos = q_pos.expand(B, Lq)  # (1 or B, Lq) -> (B, Lq)
            return q_pos, q_pos
        device = self.W_q.weight.device
        q_pos = torch.arange(Lq, device=device) if positions is None else \
            torch.as_tensor(positions, device=device)
        q_pos = q_pos.expand(B, Lq)  # (Lq,) or (B, Lq) -> (B, Lq)
        return q_pos, q_pos if Lk == Lq else torch.arange(Lk, device=device).expand(B, Lk)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """RoPE, interleaved pairs (the library's convention)."""
        return rotary(x, positions)

    def remember(self, cache, k: Tensor, v: Tensor, k_pos: Tensor,
                 positions) -> tuple[Tensor, Tensor]:
        """Store the new keys (rotated) and values; return every position's."""
        return cache.update(self.rotate(k, k_pos), v, positions)

    def keep(self, mask: Mask | None, q_pos: Tensor, k_pos: Tensor, B: int) -> Tensor | None:
        """The mask at these positions, (B or 1, Lq, Lk), True = may attend (None: all)."""
        return None if mask is None else mask.keep(q_pos, k_pos, batch_size=B)

    def padding(self, valid_lens: Tensor, q_pos: Tensor, num_keys: int) -> Tensor:
        """Keys past the valid lengths, hidden: (B, 1 or Lq, Lk) from lengths (B,) or (B, Lq)."""
        lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens  # (B, 1 or Lq)
        return torch.arange(num_keys, device=lens.device) < lens[:, :, None]

    def per_head(self, keep: Tensor) -> Tensor:
        """(B or 1, Lq, Lk) -> (B or 1, 1, Lq, Lk): one mask for every head."""
        return keep[:, None]

    def expand(self, x: Tensor) -> Tensor:
        """Key/value head j serves query heads j*g .. j*g + g - 1.

        (B, Hkv, L, d) -> (B, H, L, d)."""
        return x.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)

    def scale(self) -> float:
        """sqrt(d): the scores' spread does not grow with the head size."""
        return math.sqrt(self.head_size)

    def softmax(self, scores: Tensor, keep: Tensor | None) -> Tensor:
        """Softmax over the keys a query may see; a query that sees none gets zeros."""
        if keep is None:
            return scores.softmax(-1)
        weights = scores.masked_fill(~keep, float("-inf")).softmax(-1)
        return weights.masked_fill(~keep.any(-1, keepdim=True), 0.0)

    def drop(self, weights: Tensor) -> Tensor:
        """Dropout on the weights, in training mode only."""
        return self.attention.dropout(weights)


# --- the specimens (a name each that says nothing about the bug) --------------------------------


class Aardvark(ZooAttention):
    def scale(self):
        return math.sqrt(self.num_heads * self.head_size)  # sqrt(D)


class Bison(ZooAttention):
    def remember(self, cache, k, v, k_pos, positions):
        k_all, v_all = cache.update(k, v, positions)  # stored as projected
        n = k.shape[2]
        return torch.cat([k_all[:, :, :-n], self.rotate(k, k_pos)], dim=2), v_all


class Capybara(ZooAttention):
    def softmax(self, scores, keep):
        if keep is None:
            return scores.softmax(-1)
        weights = scores.masked_fill(keep, float("-inf")).softmax(-1)  # as nn.MultiheadAttention
        return weights.masked_fill(keep.all(-1, keepdim=True), 0.0)


class Dingo(ZooAttention):
    def per_head(self, keep):
        B, Lq, Lk = keep.shape
        return keep.repeat(self.num_heads, 1, 1).reshape(B, self.num_heads, Lq, Lk)


class Echidna(ZooAttention):
    def drop(self, weights):
        return F.dropout(weights, self.attention.dropout.p, training=True)


class Ferret(ZooAttention):
    def split(self, x, num_heads):
        B, L, _ = x.shape
        return x.view(B, num_heads, L, -1)


class Gecko(ZooAttention):
    def softmax(self, scores, keep):
        if keep is None:
            return scores.softmax(-1)
        weights = scores.masked_fill(~keep, -1e4).softmax(-1)
        return weights.masked_fill(~keep.any(-1, keepdim=True), 0.0)


class Heron(ZooAttention):
    def keep(self, mask, q_pos, k_pos, B):
        if mask is None:
            return None
        rows = torch.arange(q_pos.shape[1], device=q_pos.device).expand(q_pos.shape)  # the queries: 0 .. Lq-1
        return mask.keep(rows, k_pos, batch_size=B)


class Ibis(ZooAttention):
    def rotate(self, x, positions):
        return rotary(x, positions, pairs="halves")


class Jackal(ZooAttention):
    def softmax(self, scores, keep):
        if keep is None:
            return scores.softmax(-1)
        return scores.masked_fill(~keep, float("-inf")).softmax(-1)


class Kiwi(ZooAttention):
    def forward(self, queries, keys, values, valid_lens=None, *, mask=None, **options):
        if valid_lens is None:  # nothing is padded
            mask = None
        return super().forward(queries, keys, values, valid_lens, mask=mask, **options)


class Lemur(ZooAttention):
    def expand(self, x):
        return x.repeat(1, self.num_heads // self.num_kv_heads, 1, 1)


class Marmot(ZooAttention):
    def padding(self, valid_lens, q_pos, num_keys):
        lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens
        rows = torch.arange(q_pos.shape[1], device=lens.device)
        return (rows[None, :] < lens)[:, :, None].expand(-1, -1, num_keys)


class Narwhal(ZooAttention):
    def remember(self, cache, k, v, k_pos, positions):
        new = torch.arange(k.shape[2], device=k.device)  # the new keys' positions
        return cache.update(self.rotate(k, new), v, positions)


@dataclass(frozen=True)
class _Specimen:
    """One exhibit: call it to build its layer (seeded weights, evaluation mode).

    Attributes:
        name: what the student calls it (says nothing about the bug).
        layer_class: the class of its layer.
    """

    name: str
    layer_class: type

    def __call__(self, seed: int = 0) -> ZooAttention:
        return _build(self.layer_class, seed)

    def __repr__(self) -> str:
        return f"Specimen({self.name!r})"


def _build(layer_class: type, seed: int) -> GroupedQueryAttention:
    """``layer_class(**SIZES, rope=True)`` with weights seeded by ``seed``, in eval mode."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return layer_class(**SIZES, rope=True).eval()


def reference(seed: int = 0) -> GroupedQueryAttention:
    """The correct layer: the library's ``GroupedQueryAttention`` with the zoo's sizes, RoPE and
    the same seeded weights as every specimen (in evaluation mode)."""
    return _build(GroupedQueryAttention, seed)


_CLASSES = (Aardvark, Bison, Capybara, Dingo, Echidna, Ferret, Gecko, Heron, Ibis, Jackal,
            Kiwi, Lemur, Marmot, Narwhal)
#: name -> specimen, the exhibits of Part A and Part B.
SPECIMENS: dict[str, _Specimen] = {c.__name__.lower(): _Specimen(c.__name__.lower(), c)
                                  for c in _CLASSES}
