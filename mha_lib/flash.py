"""FlashAttention's idea in plain PyTorch: walk the keys in blocks with an online softmax.

Shape legend
    B   batch size (heads folded in: B*H, as for DotProductAttention)
    Lq  number of queries
    Lk  number of key-value pairs
    d   query/key size
    dv  value size
    b   block size, keys per block

``softmax(s) @ V`` needs, for every query, the maximum of its scores (for a stable
``exp``), the sum of the exponentials, and the weighted sum of the values. All three can be
kept *running* as blocks of keys arrive (Milakov & Gimelshein, 2018; Dao et al., 2022): when a
block raises the maximum from ``m`` to ``m'``, everything summed so far was scaled by
``exp(-m)`` and must be rescaled by ``exp(m - m')``. At the end, output = weighted sum / sum.
Only a (B, Lq, b) block of scores exists at any time, never the (B, Lq, Lk) matrix.

A mask (:mod:`mha_lib.masks`) saves work: :func:`tiled_attention` cuts the scores into tiles of
b queries by b keys and asks the mask's tile rule (:meth:`mha_lib.masks.Mask.tiles`) which
ones to skip (the mask hides them: half the tiles of a causal mask, all but a band of a
sliding window) and on which it needs no mask at all (it shows them fully).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib._checks import check_positive_int
from mha_lib.attention import check_qkv, score_operands
from mha_lib.masking import Visible, as_mask, read_valid_lens, visible
from mha_lib.masks import Mask, TileMap
from mha_lib.scores import ScoreMod

__all__ = [
    "OnlineSoftmaxState",
    "online_softmax_blocks",
    "online_step",
    "tiled_attention",
    "tiled_attention_steps",
]


@dataclass
class OnlineSoftmaxState:
    """What the online softmax keeps per query after the keys ``0 .. keys_seen - 1``.

    Shapes:
        running_max: (B, Lq), the largest valid score so far (the lowest float if none yet)
        running_sum: (B, Lq), sum of exp(score - running_max) over the valid keys so far
        accumulator: (B, Lq, dv), sum of exp(score - running_max) * value

    In float32 for half-precision inputs (as the scores: see ``mha_lib.attention.score_operands``).
    """

    keys_seen: int
    running_max: Tensor
    running_sum: Tensor
    accumulator: Tensor

    @property
    def output(self) -> Tensor:
        """accumulator / running_sum: the attention output over the keys seen so far.

        A query that has seen no valid key yet (sum 0) gets zeros, as in ``masked_softmax``.
        Shape (B, Lq, dv).
        """
        safe = torch.where(self.running_sum > 0, self.running_sum, 1.0)  # (B, Lq)
        return self.accumulator / safe[..., None]


class _Walk(NamedTuple):
    """What the walk over the keys reads, prepared once for a call (:func:`_prepare`)."""

    q: Tensor  # (B, Lq, d): Q / sqrt(d), rows that could overflow scaled down (score_operands)
    keys: Tensor  # (B, Lk, d)
    values: Tensor  # (B, Lk, dv), in the scores' dtype
    rule: Mask | None  # the mask, valid lengths included
    tiles: TileMap | None  # its tile rule (None without a mask)
    scores: Visible  # the score modification at the true positions (Visible.modify)
    block_size: int


def _prepare(queries, keys, values, valid_lens, block_size, mask, score_mod) -> _Walk:
    """The checks of :func:`online_softmax_blocks` and :func:`tiled_attention`, and what their
    walk reads: the mask (valid lengths included, read once), its tile rule, the scores'
    operands and the modification (a :class:`~mha_lib.scores.ScoreMod` of H heads reads
    queries (B*H, Lq, d), the heads folded in as ``mha_lib.heads.transpose_qkv`` folds them)."""
    check_qkv(queries, keys, values, dot=True)
    block_size = check_positive_int(block_size, "block_size")
    B, Lq, _ = queries.shape
    Lk = keys.shape[1]
    valid_lens, _ = read_valid_lens(valid_lens, B, Lq, Lk, device=queries.device)
    rule = as_mask(valid_lens, mask)
    tiles = None if rule is None else rule.tiles(B, Lq, Lk, block_size, device=queries.device)
    context = visible(None, B, Lq, Lk, device=queries.device, score_mod=score_mod)
    H = getattr(score_mod, "num_heads", None) or 1
    if B % H:
        raise ValueError(f"score_mod is for H = {H} heads: queries must be (B*H, Lq, d), got "
                         f"batch size {B}")
    q, keys = score_operands(queries, keys)  # Q / sqrt(d) (scores that cannot overflow), K
    values = values.to(q.dtype)  # (float32 for half precision, as the scores)
    return _Walk(q, keys, values, rule, tiles, replace(context, heads=H), block_size)


def online_step(m: Tensor, s: Tensor, acc: Tensor, scores: Tensor, values: Tensor,
                keep: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """One block of keys through the online softmax: the running max, sum and weighted sum after it.

    Shapes:
        m, s: (B, Lq); acc: (B, Lq, dv); scores: (B, Lq, b) (overwritten); values: (B, b, dv);
        keep: None, or bool broadcastable to the scores (True = may attend)
    """
    if keep is not None:
        scores = scores.masked_fill_(~keep, torch.finfo(scores.dtype).min)
    # The maximum only keeps exp() in range: the output does not depend on it, so it
    # needs no gradient (detached), and the scores can then be shifted in place.
    m_new = torch.maximum(m, scores.detach().amax(dim=-1))  # (B, Lq)
    correction = torch.exp(m - m_new)  # (B, Lq): rescales what was summed so far
    p = torch.exp(scores.sub_(m_new[..., None]))  # (B, Lq, b)
    if keep is not None:
        p = p * keep  # masked keys add nothing, even before the first valid one
    s = s * correction + p.sum(dim=-1)
    acc = acc * correction[..., None] + p @ values  # (B, Lq, dv)
    return m_new, s, acc


def online_softmax_blocks(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    valid_lens: Tensor | Sequence[float] | None = None,
    *,
    block_size: int = 64,
    mask: Mask | None = None,
    score_mod: ScoreMod | None = None,
) -> Iterator[OnlineSoftmaxState]:
    """The online softmax: walk the keys in blocks, yield the running state after each block.

    Shapes and arguments as in :func:`tiled_attention`; the last state's ``output`` is the
    attention output. A block of keys that no query may see is skipped.
    """
    walk = _prepare(queries, keys, values, valid_lens, block_size, mask, score_mod)
    Lq, Lk = queries.shape[1], keys.shape[1]
    # Per block of keys: 0 no query sees it (skip), 1 the mask applies, 2 every query sees all of it
    if walk.tiles is None or Lq == 0:
        states = [2 if Lq else 0] * -(-Lk // walk.block_size)
    else:  # a column of tiles: skipped when all are, without the mask when all are full
        tile_states = walk.tiles.states  # (nQ, nK)
        states = torch.where(tile_states.amax(0) == 0, 0,
                             torch.where(tile_states.amin(0) == 2, 2, 1)).tolist()  # (nK,)
    yield from _walk_keys(walk, 0, Lq, states)


def _walk_keys(walk: _Walk, r0: int, r1: int, states: list[int]) -> Iterator[OnlineSoftmaxState]:
    """THE loop of the online softmax: the queries ``r0 .. r1 - 1`` walk the keys in blocks,
    with the state after each block. ``states[c]`` says what block c is to them: 0 hidden
    (skipped), 1 partly masked, 2 fully visible (no mask needed)."""
    B, Lk, b = walk.q.shape[0], walk.keys.shape[1], walk.block_size
    m = walk.q.new_full((B, r1 - r0), torch.finfo(walk.q.dtype).min)  # running max
    s = walk.q.new_zeros(B, r1 - r0)  # running sum
    acc = walk.q.new_zeros(B, r1 - r0, walk.values.shape[-1])  # running weighted sum
    walked = False
    for c, c0 in enumerate(range(0, Lk, b)):
        if states[c] == 0:
            continue  # the mask hides the block
        c1 = min(c0 + b, Lk)
        scores = walk.q[:, r0:r1] @ walk.keys[:, c0:c1].transpose(1, 2)  # (B, r1 - r0, b)
        scores = walk.scores.modify(scores, slice(r0, r1), slice(c0, c1))  # product -> modification
        keep = None if states[c] == 2 else walk.rule.block(B, (r0, r1), (c0, c1), device=scores.device)
        m, s, acc = online_step(m, s, acc, scores, walk.values[:, c0:c1], keep)  # -> mask
        walked = True
        yield OnlineSoftmaxState(c1, m, s, acc)
    if not walked:  # no query sees any key: nothing to walk
        yield OnlineSoftmaxState(0, m, s, acc)


def tiled_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    valid_lens: Tensor | Sequence[float] | None = None,
    *,
    block_size: int = 64,
    mask: Mask | None = None,
    return_tiles: bool = False,
    score_mod: ScoreMod | None = None,
) -> Tensor | tuple[Tensor, TileMap]:
    """Scaled dot-product attention computed tile by tile (online softmax), skipping what the
    mask hides.

    Equals ``DotProductAttention`` (and ``masked_softmax``'s convention: a query that sees
    nothing gets zeros) while holding only a (B, b, b) tile of scores at a time. The scores are
    cut into tiles of ``block_size`` queries by ``block_size`` keys; the mask's tile rule
    (:meth:`mha_lib.masks.Mask.tiles`) skips the tiles it hides and computes those it shows
    fully without a mask. Also for NaN and inf: a non-finite value reaches every
    query of its example (weight 0 times NaN is NaN, as in ``DotProductAttention``), a
    non-finite key only the queries that may attend to it.

    Shapes:
        queries: (B, Lq, d)
        keys: (B, Lk, d)
        values: (B, Lk, dv)
        valid_lens: None, (B,) or (B, Lq)
        mask: None or a :class:`mha_lib.masks.Mask` (queries and keys at positions 0, 1, ...)
        returns: (B, Lq, dv), and with ``return_tiles`` the :class:`~mha_lib.masks.TileMap`
            (``tiles.computed`` of ``tiles.total`` tiles were computed)

    Args:
        block_size: queries and keys per tile, >= 1.
        score_mod: a :class:`mha_lib.scores.ScoreMod` applied to each tile of scores before
            the mask, at the tile's positions; one of H heads (``alibi(H)``) reads the heads
            folded into the batch, queries (B*H, Lq, d) (``mha_lib.heads.transpose_qkv``).

    Raises:
        ValueError: inputs that do not fit (as for ``DotProductAttention``), bad valid
            lengths or mask, or block_size < 1.
    """
    walk = _prepare(queries, keys, values, valid_lens, block_size, mask, score_mod)
    B, Lq, _ = queries.shape
    Lk, tiles = keys.shape[1], walk.tiles
    nK = -(-Lk // block_size)
    if tiles is None:  # no mask: every tile, none masked
        shape = (B, -(-Lq // block_size), nK)
        tiles = TileMap(torch.zeros(shape, dtype=torch.bool, device=queries.device),
                        torch.ones(shape, dtype=torch.bool, device=queries.device), block_size)
        # nothing to skip: one block of all the queries, so only the keys are tiled (the
        # (B, Lq, b) scores of one block of keys at a time; fewer, larger products)
        q_block, states = max(Lq, 1), [[2] * nK]
    else:
        q_block, states = block_size, tiles.states.tolist()  # (nQ, nK): 0 skip, 1 with the mask, 2 without
    values = walk.values
    # The weights 0 of DotProductAttention meet the values of skipped tiles too: per block of
    # keys, 0, or NaN where a value is NaN or inf. (B, Lk, dv) -> (B, nK, b, dv) -> (B, nK, dv)
    zeros = F.pad(values * 0, (0, 0, 0, nK * block_size - Lk))
    zeros = zeros.reshape(B, nK, block_size, values.shape[-1]).sum(2)
    rows = []
    for r, r0 in enumerate(range(0, Lq, q_block)):
        for state in _walk_keys(walk, r0, min(r0 + q_block, Lq), states[r]):
            pass  # (only the last state is kept: one block of scores at a time)
        out = state.output  # (B, b, dv)
        skipped = [c for c in range(nK) if states[r][c] == 0]
        if skipped:  # (B, nK, dv) -> (B, 1, dv)
            out = out + zeros.index_select(1, torch.tensor(skipped, device=zeros.device)).sum(1, keepdim=True)
        rows.append(out)
    out = torch.cat(rows, dim=1) if rows else walk.q.new_zeros(B, 0, values.shape[-1])  # (B, Lq, dv)
    out = out.to(queries.dtype)
    return (out, tiles) if return_tiles else out


def tiled_attention_steps(queries: Tensor, keys: Tensor, values: Tensor,
                          *args, **kwargs) -> list[OnlineSoftmaxState]:
    """Every intermediate state of the online softmax over the keys, one per block of keys
    (for figures); the last state's ``output`` is what :func:`tiled_attention` returns.
    Arguments as :func:`online_softmax_blocks` (valid lengths, ``block_size``, ``mask``,
    ``score_mod``)."""
    return list(online_softmax_blocks(queries, keys, values, *args, **kwargs))
