"""Multi-head attention written with einsum and einops, as in the einsum study notes.

The notes rewrite the attention module of the widely copied ``attention-is-all-you-need-pytorch``
repository (jadore801120): its names ``w_qs``, ``w_ks``, ``w_vs``, ``fc``, its initialisation,
residual and LayerNorm, with the heads in front of the batch. They cite Transformer-XL, whose own
code keeps the heads last (``einsum('ibnd,jbnd->ijbn')``).

Shape legend
    B       batch size
    H       number of heads (``n_head``)
    Lq      number of queries (``l`` in the einsum strings)
    Lk      number of key-value pairs (``t``)
    d_k     query/key size of one head (``k``)
    d_v     value size of one head (``v``)
    d_model width of the inputs and of the output

What differs from :class:`mha_lib.MultiHeadAttention`: the heads sit on a leading axis,
(H, B, L, d), instead of after the batch, (B, H, L, d), or folded into it, (B*H, L, d), on the
path that returns the weights; queries/keys and values may have different head sizes; and
the block ends with dropout, a residual connection and LayerNorm:
``LayerNorm(dropout(fc(concat)) + q)``. The mask is boolean with ``True`` = masked (the
convention of ``nn.MultiheadAttention`` and of the notes).
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_probability
from mha_lib.attention import fit_queries
from mha_lib.mask_conventions import check_attention_mask, padding_to_keep
from mha_lib.masking import softmax_over_kept
from mha_lib.multihead import MultiHeadAttention
from mha_lib.variants._common import (
    check_qkv_for,
    check_square_mha,
    copy_linear,
)


__all__ = ["EinsumMultiHeadAttention"]

class EinsumMultiHeadAttention(nn.Module):
    """Multi-head attention block with residual connection and LayerNorm, in einsum notation.

    Shapes:
        q: (B, Lq, d_model); k: (B, Lk, d_model); v: (B, Lk, d_model)
        mask: None or bool broadcastable to (B, Lq, Lk), True = masked
        output: (B, Lq, d_model); attn: (H, B, Lq, Lk)

    Args:
        n_head: H.
        d_model: width of queries, keys, values and output.
        d_k: query/key size of one head.
        d_v: value size of one head.
        dropout: dropout rate on the projected output (before the residual), in [0, 1).
    """

    def __init__(self, n_head: int, d_model: int, d_k: int, d_v: int, dropout: float = 0.1):
        super().__init__()
        self.n_head = check_positive_int(n_head, "n_head")
        self.d_model = check_positive_int(d_model, "d_model")
        self.d_k = check_positive_int(d_k, "d_k")
        self.d_v = check_positive_int(d_v, "d_v")
        self.w_qs = nn.Linear(d_model, n_head * d_k)
        self.w_ks = nn.Linear(d_model, n_head * d_k)
        self.w_vs = nn.Linear(d_model, n_head * d_v)
        # The notes' initialisation: a normal whose variance averages fan-in and fan-out of
        # one head, and Xavier for the output projection.
        nn.init.normal_(self.w_qs.weight, mean=0.0, std=math.sqrt(2.0 / (d_model + d_k)))
        nn.init.normal_(self.w_ks.weight, mean=0.0, std=math.sqrt(2.0 / (d_model + d_k)))
        nn.init.normal_(self.w_vs.weight, mean=0.0, std=math.sqrt(2.0 / (d_model + d_v)))
        self.fc = nn.Linear(n_head * d_v, d_model)
        nn.init.xavier_normal_(self.fc.weight)
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attend, project, add the queries back and normalise.

        Returns:
            ``(output, attn)``: output (B, Lq, d_model), attention weights (H, B, Lq, Lk).
            A query whose every key is masked gets all-zero weights (not NaN).

        Raises:
            ValueError: inputs that are not 3-D, disagree on B or Lk, have a feature size other
                than d_model, or another dtype or device than the module; a bad mask.
        """
        check_qkv_for(q, k, v, self.d_model, self.fc.weight)
        B, Lq, Lk = q.shape[0], q.shape[1], k.shape[1]
        keep = None
        if mask is not None:
            keep = padding_to_keep(check_attention_mask(mask, B, Lq, Lk))  # (B, Lq, Lk)
        residual = q
        H = self.n_head
        q = rearrange(self.w_qs(q), "b l (head k) -> head b l k", head=H)  # (H, B, Lq, d_k)
        k = rearrange(self.w_ks(k), "b t (head k) -> head b t k", head=H)  # (H, B, Lk, d_k)
        v = rearrange(self.w_vs(v), "b t (head v) -> head b t v", head=H)  # (H, B, Lk, d_v)
        q = fit_queries(q, k)  # rows whose scores would overflow are scaled down (attention.fit_queries)
        scores = torch.einsum("hblk,hbtk->hblt", q, k) / math.sqrt(self.d_k)  # (H, B, Lq, Lk)
        if keep is None:
            attn = torch.softmax(scores, dim=-1)
        else:
            attn = softmax_over_kept(scores, keep[None])  # mask (1, B, Lq, Lk): every head
        output = torch.einsum("hblt,hbtv->hblv", attn, v)  # (H, B, Lq, d_v)
        output = rearrange(output, "head b l v -> b l (head v)")  # (B, Lq, H*d_v)
        output = self.dropout(self.fc(output))  # (B, Lq, d_model)
        return self.layer_norm(output + residual), attn

    @classmethod
    def from_mha(cls, mha: MultiHeadAttention) -> "EinsumMultiHeadAttention":
        """Build the einsum block from a MultiHeadAttention's weights.

        With the same d_model and d_k = d_v = head_size, in eval mode,
        ``from_mha(mha)(q, k, v, mask)[0]`` equals ``LayerNorm(mha(q, k, v, valid_lens) + q)``
        for a fresh LayerNorm, when ``mask`` is the padding mask of ``valid_lens``. Missing
        biases become zeros.

        Raises:
            ValueError: ``mha`` has different query, key, value and model widths.
        """
        check_square_mha(mha)
        H, d = mha.num_heads, mha.head_size
        block = cls(H, mha.d_model, d, d, dropout=mha.attention.dropout.p)
        block = block.to(device=mha.W_q.weight.device, dtype=mha.W_q.weight.dtype)
        # Both layouts put head h in features h*d .. h*d + d - 1: the weights copy as they are.
        for mine, theirs in ((block.w_qs, mha.W_q), (block.w_ks, mha.W_k),
                             (block.w_vs, mha.W_v), (block.fc, mha.W_o)):
            copy_linear(mine, theirs)
        return block.train(mha.training)

    def to_mha(self) -> MultiHeadAttention:
        """The MultiHeadAttention (with biases) that computes this block before its residual.

        Needs ``n_head * d_k == n_head * d_v == d_model``. In eval mode
        ``self(q, k, v, mask)[0]`` equals ``self.layer_norm(self.to_mha()(q, k, v, valid_lens) + q)``.

        Raises:
            ValueError: the head sizes do not make one model width.
        """
        D, H = self.d_model, self.n_head
        if not H * self.d_k == H * self.d_v == D:
            raise ValueError(
                "to_mha needs n_head * d_k == n_head * d_v == d_model, got "
                f"n_head={H}, d_k={self.d_k}, d_v={self.d_v}, d_model={D}"
            )
        mha = MultiHeadAttention(D, D, D, D, H, dropout=self.dropout.p, bias=True)
        mha = mha.to(device=self.fc.weight.device, dtype=self.fc.weight.dtype)
        for mine, theirs in ((mha.W_q, self.w_qs), (mha.W_k, self.w_ks),
                             (mha.W_v, self.w_vs), (mha.W_o, self.fc)):
            copy_linear(mine, theirs)
        return mha.train(self.training)
