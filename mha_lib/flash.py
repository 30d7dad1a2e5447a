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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import Tensor

from mha_lib._checks import check_positive_int
from mha_lib.attention import check_qkv, score_operands
from mha_lib.masking import mask_from_valid_lens, read_valid_lens

__all__ = ["OnlineSoftmaxState", "online_softmax_blocks", "tiled_attention", "tiled_attention_steps"]


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


def _check(queries, keys, values, valid_lens, block_size):
    """The checks of :func:`online_softmax_blocks`; returns the valid lengths (checked, on the
    queries' device: one host read) and the block size."""
    check_qkv(queries, keys, values, dot=True)
    block_size = check_positive_int(block_size, "block_size")
    B, Lq, _ = queries.shape
    valid_lens, _ = read_valid_lens(valid_lens, B, Lq, keys.shape[1], device=queries.device)
    return valid_lens, block_size


def online_softmax_blocks(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    valid_lens: Tensor | Sequence[float] | None = None,
    *,
    block_size: int = 64,
) -> Iterator[OnlineSoftmaxState]:
    """The online softmax: walk the keys in blocks, yield the running state after each block.

    Shapes and arguments as in :func:`tiled_attention`; the last state's ``output`` is the
    attention output.
    """
    valid_lens, block_size = _check(queries, keys, values, valid_lens, block_size)
    B, Lq, d = queries.shape
    Lk = keys.shape[1]
    q, keys = score_operands(queries, keys)  # Q / sqrt(d) (scores that cannot overflow), K
    values = values.to(q.dtype)  # (float32 for half precision, as the scores)
    lowest = torch.finfo(q.dtype).min
    m = q.new_full((B, Lq), lowest)  # running max
    s = q.new_zeros(B, Lq)  # running sum
    acc = q.new_zeros(B, Lq, values.shape[-1])  # running weighted sum
    # Blocks past the longest valid length hold no key anybody may see: stop there.
    end = Lk if valid_lens is None else _longest(valid_lens)
    for start in range(0, end, block_size):
        stop = min(start + block_size, Lk)
        scores = q @ keys[:, start:stop].transpose(1, 2)  # (B, Lq, b)
        if valid_lens is not None:  # keep: (B, Lq or 1, b), keys start .. stop - 1
            keep, _ = mask_from_valid_lens(valid_lens.lens, stop - start, first_key=start)
            scores = scores.masked_fill_(~keep, lowest)
        # The maximum only keeps exp() in range: the output does not depend on it, so it
        # needs no gradient (detached), and the scores can then be shifted in place.
        m_new = torch.maximum(m, scores.detach().amax(dim=-1))  # (B, Lq)
        correction = torch.exp(m - m_new)  # (B, Lq): rescales what was summed so far
        p = torch.exp(scores.sub_(m_new[..., None]))  # (B, Lq, b)
        if valid_lens is not None:
            p = p * keep  # masked keys add nothing, even before the first valid one
        s = s * correction + p.sum(dim=-1)
        acc = acc * correction[..., None] + p @ values[:, start:stop]  # (B, Lq, dv)
        m = m_new
        yield OnlineSoftmaxState(stop, m, s, acc)
    if end == 0:  # every row has valid length 0: nothing to walk
        yield OnlineSoftmaxState(0, m, s, acc)


def _longest(valid_lens) -> int:
    """The largest valid length (read by the check; read here only while a graph is recorded)."""
    if valid_lens.highest is not None or valid_lens.lens.numel() == 0:
        return valid_lens.highest or 0
    return int(valid_lens.lens.max())


def tiled_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    valid_lens: Tensor | Sequence[float] | None = None,
    *,
    block_size: int = 64,
) -> Tensor:
    """Scaled dot-product attention computed block by block over the keys (online softmax).

    Equals ``DotProductAttention`` (and ``masked_softmax``'s convention: a query with valid
    length 0 gets zeros) while holding only a (B, Lq, block_size) block of scores at a time.

    Shapes:
        queries: (B, Lq, d)
        keys: (B, Lk, d)
        values: (B, Lk, dv)
        valid_lens: None, (B,) or (B, Lq)
        returns: (B, Lq, dv)

    Args:
        block_size: keys per block, >= 1.

    Raises:
        ValueError: inputs that do not fit (as for ``DotProductAttention``), bad valid
            lengths, or block_size < 1.
    """
    for state in online_softmax_blocks(queries, keys, values, valid_lens, block_size=block_size):
        pass
    return state.output.to(values.dtype)


def tiled_attention_steps(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    valid_lens: Tensor | Sequence[float] | None = None,
    *,
    block_size: int = 64,
) -> list[OnlineSoftmaxState]:
    """Every intermediate state of :func:`tiled_attention`, one per block (for figures).

    The last state's ``output`` is what :func:`tiled_attention` returns.
    """
    return list(online_softmax_blocks(queries, keys, values, valid_lens, block_size=block_size))
