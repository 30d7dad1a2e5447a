"""PyTorch's own ``nn.MultiheadAttention``, both ways.

Used by the chapters and the tests to show that ``MultiHeadAttention`` computes what PyTorch
computes, once the weights are the same.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mha_lib._settings import build
from mha_lib.mask_conventions import keep_mask_from_valid_lens, keep_to_padding
from mha_lib.multihead import MultiHeadAttention

__all__ = ["from_torch_mha", "to_torch_mha"]


def to_torch_mha(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` (``batch_first=True``) holding the same weights as ``mha``.

    PyTorch packs the three input projections into one ``in_proj_weight`` of shape (3D, D) when
    queries, keys and values have the same size D: its three row blocks are our ``W_q``,
    ``W_k`` and ``W_v``. With other key or value sizes it keeps ``q_proj_weight``,
    ``k_proj_weight`` and ``v_proj_weight`` instead.

    Raises:
        ValueError: if ``query_size != d_model``: PyTorch's module projects queries to
            their own width, so it cannot express that configuration.
    """
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"mha must be an mha_lib.MultiHeadAttention, got {type(mha).__name__}")
    s = mha.settings  # every option of mha, each one mapped or refused here
    mha.check_options("nn.MultiheadAttention", name="mha")
    D, H, bias = s.d_model, s.num_heads, s.bias
    if s.query_size != D or (s.output_size or D) != D:
        raise ValueError(
            "nn.MultiheadAttention needs query_size == d_model == output_size, got "
            f"query_size={s.query_size}, d_model={D}, output_size={s.output_size or D}"
        )
    torch_mha = nn.MultiheadAttention(
        D, H, dropout=s.dropout, bias=bias, batch_first=True, kdim=s.key_size, vdim=s.value_size,
    ).to(dtype=mha.W_q.weight.dtype, device=mha.W_q.weight.device)
    with torch.no_grad():
        if torch_mha.in_proj_weight is not None:
            torch_mha.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
        else:
            torch_mha.q_proj_weight.copy_(mha.W_q.weight)
            torch_mha.k_proj_weight.copy_(mha.W_k.weight)
            torch_mha.v_proj_weight.copy_(mha.W_v.weight)
        torch_mha.out_proj.weight.copy_(mha.W_o.weight)
        if bias:
            torch_mha.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
            torch_mha.out_proj.bias.copy_(mha.W_o.bias)
    return torch_mha.train(mha.training)


def from_torch_mha(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` holding the weights of ``torch_mha``: the inverse of
    :func:`to_torch_mha`.

    ``in_proj_weight`` (3D, D) stacks ``W_q``, ``W_k``, ``W_v`` by rows (or, with other key and
    value sizes, ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``); ``out_proj`` is ``W_o``.
    The result has ``torch_mha``'s dropout rate, dtype, device and training mode.

    Raises:
        ValueError: not an ``nn.MultiheadAttention``, or one with settings the book's layer
            does not have (``batch_first=False`` is fine: only the call's layout differs;
            ``add_bias_kv``, ``add_zero_attn``, a bias on some projections only).
    """
    if not isinstance(torch_mha, nn.MultiheadAttention):
        raise ValueError(f"torch_mha must be an nn.MultiheadAttention, got {type(torch_mha).__name__}")
    if torch_mha.bias_k is not None or torch_mha.add_zero_attn:
        raise ValueError("torch_mha must have add_bias_kv=False and add_zero_attn=False "
                         "(extra keys the book's layer does not have)")
    bias = torch_mha.in_proj_bias is not None
    if bias != (torch_mha.out_proj.bias is not None):
        raise ValueError("torch_mha must have a bias on all projections or on none")
    D, H = torch_mha.embed_dim, torch_mha.num_heads
    weight = torch_mha.out_proj.weight
    settings = MultiHeadAttention.Settings(torch_mha.kdim, D, torch_mha.vdim, D, H,
                                           torch_mha.dropout, bias=bias)
    mha = build(MultiHeadAttention, settings, like=torch_mha)
    with torch.no_grad():
        if torch_mha.in_proj_weight is not None:
            w_q, w_k, w_v = torch_mha.in_proj_weight.chunk(3)  # (3D, D) -> 3 x (D, D)
        else:
            w_q, w_k, w_v = torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight
        for linear, w in ((mha.W_q, w_q), (mha.W_k, w_k), (mha.W_v, w_v)):
            linear.weight.copy_(w)
        mha.W_o.weight.copy_(weight)
        if bias:
            for linear, b in zip((mha.W_q, mha.W_k, mha.W_v), torch_mha.in_proj_bias.chunk(3)):
                linear.bias.copy_(b)  # (3D,) -> 3 x (D,)
            mha.W_o.bias.copy_(torch_mha.out_proj.bias)
    return mha


def _torch_attn_mask(valid_lens: Tensor, num_heads: int, num_queries: int, num_keys: int) -> Tensor:
    """``attn_mask`` for ``nn.MultiheadAttention`` (``True`` = masked) from checked valid lengths.

    Shapes:
        valid_lens: (B,) or (B, Lq)
        returns: (B*H, Lq, Lk), batch-major like :func:`mha_lib.transpose_qkv`.
    """
    keep = keep_mask_from_valid_lens(valid_lens, num_queries, num_keys)  # (B, Lq, Lk)
    return keep_to_padding(keep).repeat_interleave(num_heads, dim=0)  # (B*H, Lq, Lk)
