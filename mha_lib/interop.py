"""Interoperation with PyTorch's own ``nn.MultiheadAttention`` (an upper layer).

Used by the chapters and the tests to show that ``MultiHeadAttention`` computes what PyTorch
computes, once the weights are the same.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mha_lib.masking import keep_mask_from_valid_lens, keep_to_padding
from mha_lib.multihead import MultiHeadAttention

__all__ = ["to_torch_mha"]


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
    D, H = mha.d_model, mha.num_heads
    if mha.W_q.in_features != D or mha.W_o.out_features != D:
        raise ValueError(
            "nn.MultiheadAttention needs query_size == d_model == output width, got "
            f"query_size={mha.W_q.in_features}, d_model={D}, output width={mha.W_o.out_features}"
        )
    bias = mha.W_q.bias is not None
    torch_mha = nn.MultiheadAttention(
        D, H, dropout=mha.attention.dropout.p, bias=bias, batch_first=True,
        kdim=mha.W_k.in_features, vdim=mha.W_v.in_features,
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


def _torch_attn_mask(valid_lens: Tensor, num_heads: int, num_queries: int, num_keys: int) -> Tensor:
    """``attn_mask`` for ``nn.MultiheadAttention`` (``True`` = masked) from checked valid lengths.

    Shapes:
        valid_lens: (B,) or (B, Lq)
        returns: (B*H, Lq, Lk), batch-major like :func:`mha_lib.transpose_qkv`.
    """
    keep = keep_mask_from_valid_lens(valid_lens, num_queries, num_keys)  # (B, Lq, Lk)
    return keep_to_padding(keep).repeat_interleave(num_heads, dim=0)  # (B*H, Lq, Lk)
