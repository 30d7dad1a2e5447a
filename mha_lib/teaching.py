"""Multi-head attention and nothing else: the class to read first (chapter 3).

:class:`TeachingAttention` is the whole idea in one screen: project, split into heads, score
every query against every key with one broadcast ``@``, mask, softmax, mix the values, merge
the heads, ``W_o``. :class:`mha_lib.MultiHeadAttention` computes the same numbers with the
same weights (the parameter names are the same, so ``load_state_dict`` moves them across);
what it adds has a name and a chapter of its own: valid lengths instead of a boolean mask
(chapter 2), the fused kernel that never stores the weights (chapter 6), the KV cache
(chapter 9), head gates (chapter 7), and a rule for a query that may attend to nothing (here
its row is NaN, as it is in a bare softmax over no score; there it is 0).

Shape legend
    B    batch size
    H    number of heads
    Lq   number of queries
    Lk   number of key-value pairs
    d    head size, D / H
    D    d_model, the width of inputs, projections and output
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from mha_lib._checks import check_bool, check_positive_int
from mha_lib.attention import check_qkv

__all__ = ["TeachingAttention"]


class TeachingAttention(nn.Module):
    """The smallest honest multi-head attention: every line is a step of the idea.

    Shapes:
        queries: (B, Lq, D)
        keys, values: (B, Lk, D)
        keep: None, or bool (B, Lq, Lk): True where a query may attend to a key
        returns: (B, Lq, D)

    Args:
        d_model: D, divisible by ``num_heads``.
        num_heads: H.
        bias: whether the four projections have a bias.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = False) -> None:
        super().__init__()
        _check_sizes(d_model, num_heads, bias)
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                keep: Tensor | None = None) -> Tensor:
        _check_inputs(self, queries, keys, values, keep)
        B, Lq, D = queries.shape
        Lk, H, d = keys.shape[1], self.num_heads, D // self.num_heads
        q = self.W_q(queries).reshape(B, Lq, H, d).transpose(1, 2)  # (B, Lq, D) -> (B, H, Lq, d)
        k = self.W_k(keys).reshape(B, Lk, H, d).transpose(1, 2)  # (B, Lk, D) -> (B, H, Lk, d)
        v = self.W_v(values).reshape(B, Lk, H, d).transpose(1, 2)  # (B, Lk, D) -> (B, H, Lk, d)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, Lq, d) @ (B, H, d, Lk) -> (B, H, Lq, Lk)
        if keep is not None:
            scores = scores.masked_fill(~keep[:, None], float("-inf"))  # (B, Lq, Lk) -> (B, 1, Lq, Lk)
        weights = torch.softmax(scores, dim=-1)  # each query's weights sum to 1 over the keys
        out = weights @ v  # (B, H, Lq, Lk) @ (B, H, Lk, d) -> (B, H, Lq, d)
        out = out.transpose(1, 2).reshape(B, Lq, D)  # (B, H, Lq, d) -> (B, Lq, H, d) -> (B, Lq, D)
        return self.W_o(out)


def _check_sizes(d_model: object, num_heads: object, bias: object) -> None:
    """The constructor's checks: positive sizes, H dividing D, a boolean ``bias``."""
    D = check_positive_int(d_model, "d_model")
    H = check_positive_int(num_heads, "num_heads")
    if D % H:
        raise ValueError(f"d_model ({D}) must be divisible by num_heads ({H})")
    check_bool(bias, "bias")


def _check_inputs(module: TeachingAttention, queries: object, keys: object, values: object,
                  keep: object) -> None:
    """Inputs that fit ``module`` (feature size D, its dtype) and a bool keep mask (B, Lq, Lk)."""
    check_qkv(queries, keys, values)
    D, weight = module.W_q.in_features, module.W_q.weight
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        if x.shape[-1] != D:
            raise ValueError(f"{name} must have feature size d_model = {D}, got shape {tuple(x.shape)}")
        if x.dtype != weight.dtype or x.device != weight.device:
            raise ValueError(f"{name} are {x.dtype} on {x.device} but the weights are "
                             f"{weight.dtype} on {weight.device}: convert one with .to(...)")
    if keep is None:
        return
    want = (queries.shape[0], queries.shape[1], keys.shape[1])
    if not isinstance(keep, Tensor) or keep.dtype != torch.bool or tuple(keep.shape) != want:
        got = f"{keep.dtype} {tuple(keep.shape)}" if isinstance(keep, Tensor) else type(keep).__name__
        raise ValueError(f"keep must be a bool tensor of shape (B, Lq, Lk) = {want}, got {got}")

