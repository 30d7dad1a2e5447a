"""The Transformer block around the attention layer: residuals, LayerNorm and a feed-forward net.

An upper layer, built on :class:`mha_lib.MultiHeadAttention`. :meth:`TransformerBlock.from_torch`
copies the weights of a ``torch.nn.TransformerEncoderLayer``, so the two can be compared.

Shape legend
    B   batch size
    L   sequence length (self-attention: Lq = Lk = L)
    H   number of heads
    D   d_model, the width of the block's input and output
"""

from __future__ import annotations

from typing import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib._checks import check_positive_int, check_probability, check_tensor
from mha_lib.multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    """One encoder block: self-attention and a feed-forward net, each with a residual and a LayerNorm.

    Pre-LN (``norm_first=True``) normalises the input of each sublayer and leaves the residual
    stream untouched; post-LN (``norm_first=False``, the original Transformer) normalises after
    each residual sum. Same parameters, same layout as ``nn.TransformerEncoderLayer``
    (``batch_first=True``, ReLU).

    Shapes:
        x: (B, L, D)
        valid_lens: None, (B,) or (B, L), as for :class:`mha_lib.MultiHeadAttention`
        output: (B, L, D)

    Args:
        d_model: D, the width of the block.
        num_heads: H; must divide ``d_model``.
        d_ff: the hidden width of the feed-forward net.
        dropout: dropout rate on the attention weights and after each sublayer, in [0, 1).
        norm_first: pre-LN if True, post-LN if False.
        layer_norm_eps: the ``eps`` of both LayerNorms.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float,
        norm_first: bool = True,
        *,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check_positive_int(d_ff, "d_ff")
        check_probability(dropout, "dropout")
        if not isinstance(norm_first, bool):
            raise ValueError(f"norm_first must be True or False, got {norm_first!r}")
        self.norm_first = norm_first
        self.attention = MultiHeadAttention(d_model, d_model, d_model, d_model, num_heads,
                                            dropout, bias=True)
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: Tensor, valid_lens: Tensor | Sequence[int] | None = None) -> Tensor:
        """Apply the block; ``valid_lens`` masks padded keys exactly as in multi-head attention."""
        self._check_input(x)
        if self.norm_first:  # pre-LN: x + f(norm(x))
            x = x + self._self_attention(self.norm1(x), valid_lens)
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:  # post-LN: norm(x + f(x))
            x = self.norm1(x + self._self_attention(x, valid_lens))
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x

    def _check_input(self, x: object) -> None:
        check_tensor(x, "x", 3)
        D = self.norm1.normalized_shape[0]
        if x.shape[-1] != D:
            raise ValueError(f"x must have feature size d_model = {D}, got shape {tuple(x.shape)}")
        self.attention.check_inputs(x, x, x)  # dtype and device of the weights

    def _self_attention(self, x: Tensor, valid_lens) -> Tensor:
        return self.dropout1(self.attention(x, x, x, valid_lens))  # (B, L, D)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> "TransformerBlock":
        """A block holding the weights of ``layer`` (``batch_first=True``, ReLU, with biases).

        Raises:
            ValueError: naming the unsupported setting (``batch_first=False``, another
                activation, ``bias=False``, different dropout rates, ...).
        """
        _check_torch_layer(layer)
        attn = layer.self_attn
        weight = layer.linear1.weight
        block = cls(attn.embed_dim, attn.num_heads, layer.linear1.out_features, layer.dropout.p,
                    layer.norm_first, layer_norm_eps=layer.norm1.eps)
        block = block.to(dtype=weight.dtype, device=weight.device)
        _copy_torch_attention(attn, block.attention)
        block.feed_forward[0].load_state_dict(layer.linear1.state_dict())
        block.feed_forward[3].load_state_dict(layer.linear2.state_dict())
        block.norm1.load_state_dict(layer.norm1.state_dict())
        block.norm2.load_state_dict(layer.norm2.state_dict())
        return block.train(layer.training)


def _check_torch_layer(layer: object) -> None:
    """Raise a ``ValueError`` naming what :meth:`TransformerBlock.from_torch` cannot copy."""
    if not isinstance(layer, nn.TransformerEncoderLayer):
        raise ValueError(
            f"layer must be a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}"
        )
    attn = layer.self_attn
    problems = []
    if not attn.batch_first:
        problems.append("batch_first=False (build it with batch_first=True)")
    if not (layer.activation is F.relu or isinstance(layer.activation, nn.ReLU)):
        problems.append(f"activation={layer.activation!r} (only ReLU, the default)")
    if layer.linear1.bias is None or attn.in_proj_bias is None or layer.norm1.bias is None:
        problems.append("bias=False (only bias=True, the default)")
    if not attn._qkv_same_embed_dim:
        problems.append("separate key/value sizes in self_attn")
    if attn.bias_k is not None or attn.add_zero_attn:
        problems.append("add_bias_kv or add_zero_attn in self_attn")
    rates = {layer.dropout.p, layer.dropout1.p, layer.dropout2.p, attn.dropout}
    if len(rates) > 1:
        problems.append(f"different dropout rates {sorted(rates)} (one rate for the block)")
    if layer.norm1.eps != layer.norm2.eps:
        problems.append(f"different LayerNorm eps {layer.norm1.eps} and {layer.norm2.eps}")
    if problems:
        raise ValueError("TransformerBlock.from_torch does not support " + "; ".join(problems))


def _copy_torch_attention(source: nn.MultiheadAttention, target: MultiHeadAttention) -> None:
    """Copy an ``nn.MultiheadAttention`` into ``target``: the inverse of ``interop.to_torch_mha``.

    ``in_proj_weight`` (3D, D) stacks W_q, W_k, W_v by rows; ``out_proj`` is W_o.
    """
    q, k, v = source.in_proj_weight.detach().chunk(3)  # (3D, D) -> 3 x (D, D)
    bq, bk, bv = source.in_proj_bias.detach().chunk(3)  # (3D,) -> 3 x (D,)
    for linear, w, b in ((target.W_q, q, bq), (target.W_k, k, bk), (target.W_v, v, bv)):
        linear.load_state_dict({"weight": w, "bias": b})
    target.W_o.load_state_dict(source.out_proj.state_dict())
