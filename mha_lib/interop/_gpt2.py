"""nanoGPT's ``CausalSelfAttention`` and Hugging Face's ``GPT2Attention``, both ways.

Both fuse the three input projections into one layer ``c_attn`` of 3D outputs, split in the
order queries, keys, values (``q, k, v = c_attn(x).split(D, dim=2)``), and call the output
projection ``c_proj``; both always have biases and attend causally. The one difference:

* nanoGPT's ``c_attn`` is an ``nn.Linear``: its weight is (3D, D), PyTorch's (out, in), so
  ``W_q`` is its first D *rows*;
* GPT-2's ``c_attn`` is a ``transformers`` ``Conv1D``, which computes ``x @ weight + bias``
  with a weight of shape (D, 3D), (in, out): ``W_q`` is the *transpose* of its first D
  *columns*. (The name comes from OpenAI's TensorFlow code, where it was a 1x1 convolution.)

The book's layer attends causally with ``valid_lens = mha_lib.causal_valid_lens(B, L)``.

Shape legend
    D   d_model (GPT-2's n_embd)
    H   heads (n_head)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mha_lib._settings import build
from mha_lib.multihead import MultiHeadAttention

__all__ = ["copy_to_gpt2_attention", "from_gpt2_attention", "to_gpt2_attention"]


def from_gpt2_attention(attn: nn.Module) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` (with biases) holding the weights of a GPT-2 attention layer.

    Args:
        attn: Hugging Face's ``GPT2Attention`` (``c_attn`` a ``Conv1D``) or nanoGPT's
            ``CausalSelfAttention`` (``c_attn`` an ``nn.Linear``, the head count in ``n_head``).
            Not modified.

    Returns:
        a ``MultiHeadAttention(D, D, D, D, H, dropout, bias=True)`` with ``attn``'s dtype,
        device and training mode; called with causal valid lengths it computes ``attn``.

    Raises:
        ValueError: ``attn`` without ``c_attn`` and ``c_proj`` of the right shapes, a
            cross-attention layer, or GPT-2 settings that change the scores
            (``scale_attn_by_inverse_layer_idx``, ``scale_attn_weights=False``).
    """
    D, H, conv = _check_gpt2(attn)
    w_attn, b_attn = _weight_and_bias(attn.c_attn, conv)  # (3D, D), (3D,) as nn.Linear stores them
    w_proj, b_proj = _weight_and_bias(attn.c_proj, conv)  # (D, D), (D,)
    dropout = attn.attn_dropout.p if hasattr(attn, "attn_dropout") else 0.0
    settings = MultiHeadAttention.Settings(D, D, D, D, H, dropout, bias=True)
    mha = build(MultiHeadAttention, settings, like=attn)
    with torch.no_grad():
        for linear, w, b in zip((mha.W_q, mha.W_k, mha.W_v), w_attn.split(D), b_attn.split(D)):
            linear.weight.copy_(w)  # rows 0..D-1: queries, D..2D-1: keys, 2D..3D-1: values
            linear.bias.copy_(b)
        mha.W_o.weight.copy_(w_proj)
        mha.W_o.bias.copy_(b_proj)
    return mha


def copy_to_gpt2_attention(mha: MultiHeadAttention, attn: nn.Module) -> nn.Module:
    """Copy ``mha``'s weights into an existing GPT-2 attention layer (``GPT2Attention`` or
    nanoGPT's ``CausalSelfAttention``): the inverse of :func:`from_gpt2_attention`.

    A layer without biases gives zero biases (GPT-2 always has them). Returns ``attn``.

    Raises:
        ValueError: ``mha`` with key, query or value sizes other than its width D, or of
            another width or head count than ``attn``.
    """
    D, H, conv = _check_gpt2(attn)
    _check_self_attention(mha, "mha")
    mha.check_options("GPT-2's attention", name="mha")
    if (mha.d_model, mha.num_heads) != (D, H):
        raise ValueError(f"mha has D = {mha.d_model}, H = {mha.num_heads} but attn has "
                         f"D = {D}, H = {H}")
    w_attn = torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight])  # 3 x (D, D) -> (3D, D)
    b_attn = torch.cat([_bias(mha.W_q), _bias(mha.W_k), _bias(mha.W_v)])  # 3 x (D,) -> (3D,)
    with torch.no_grad():
        for layer, w, b in ((attn.c_attn, w_attn, b_attn), (attn.c_proj, mha.W_o.weight, _bias(mha.W_o))):
            layer.weight.copy_(w.T if conv else w)  # Conv1D stores (in, out): the transpose
            layer.bias.copy_(b)
    return attn


def to_gpt2_attention(mha: MultiHeadAttention) -> nn.Module:
    """A Hugging Face ``GPT2Attention`` holding ``mha``'s weights (eager attention).

    Call it as GPT-2 does, with an additive causal mask of shape (B, 1, L, L) (0 where a
    query may attend, a large negative number elsewhere).

    Raises:
        ValueError: as :func:`copy_to_gpt2_attention`.
    """
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    _check_self_attention(mha, "mha")
    mha.check_options("GPT-2's attention", name="mha")
    s, weight = mha.settings, mha.W_q.weight  # (bias: GPT-2 always has one; zeros if not)
    config = GPT2Config(n_embd=s.d_model, n_head=s.num_heads, attn_pdrop=s.dropout,
                        resid_pdrop=0.0, attn_implementation="eager")
    attn = GPT2Attention(config, layer_idx=0).to(dtype=weight.dtype, device=weight.device)
    return copy_to_gpt2_attention(mha, attn).train(mha.training)


def _check_gpt2(attn: object) -> tuple[int, int, bool]:
    """(D, H, whether the layers are Conv1D) of a GPT-2 attention layer, or a ValueError."""
    c_attn, c_proj = getattr(attn, "c_attn", None), getattr(attn, "c_proj", None)
    H = getattr(attn, "num_heads", getattr(attn, "n_head", None))
    if not isinstance(attn, nn.Module) or c_attn is None or c_proj is None or not isinstance(H, int):
        raise ValueError("attn must be a GPT2Attention or nanoGPT CausalSelfAttention (with "
                         f"c_attn, c_proj and num_heads or n_head), got {type(attn).__name__}")
    if getattr(attn, "is_cross_attention", False):
        raise ValueError("attn must be a self-attention layer, got a cross-attention GPT2Attention")
    config = getattr(attn, "config", None)
    if config is not None and (getattr(config, "scale_attn_by_inverse_layer_idx", False)
                               or not getattr(config, "scale_attn_weights", True)):
        raise ValueError("attn must scale its scores by 1/sqrt(d) only, got scale_attn_weights="
                         f"{config.scale_attn_weights}, scale_attn_by_inverse_layer_idx="
                         f"{config.scale_attn_by_inverse_layer_idx}")
    conv = not isinstance(c_attn, nn.Linear)
    w = c_attn.weight
    D = w.shape[0] if conv else w.shape[1]
    want_attn, want_proj = ((D, 3 * D), (D, D)) if conv else ((3 * D, D), (D, D))
    if tuple(w.shape) != want_attn or tuple(c_proj.weight.shape) != want_proj or D % H:
        raise ValueError(f"attn.c_attn must have weight {want_attn} and attn.c_proj {want_proj} with "
                         f"H = {H} dividing D, got {tuple(w.shape)} and {tuple(c_proj.weight.shape)}")
    if c_attn.bias is None or c_proj.bias is None:
        raise ValueError("attn.c_attn and attn.c_proj must have biases (GPT-2's layers all do)")
    return D, H, conv


def _weight_and_bias(layer: nn.Module, conv: bool) -> tuple[Tensor, Tensor]:
    """The weight as ``nn.Linear`` stores it, (out, in), and the bias, detached."""
    w = layer.weight.detach()
    return (w.T if conv else w), layer.bias.detach()


def _check_self_attention(mha: object, name: str) -> None:
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"{name} must be an mha_lib.MultiHeadAttention, got {type(mha).__name__}")
    s = mha.settings
    D = s.d_model
    sizes = (s.query_size, s.key_size, s.value_size, s.output_size or D)
    if any(size != D for size in sizes):
        raise ValueError(f"{name} must have query, key, value and output sizes equal to its "
                         f"width D = {D} (self-attention), got {sizes}")


def _bias(linear: nn.Linear) -> Tensor:
    """The bias of ``linear``, or zeros."""
    if linear.bias is not None:
        return linear.bias
    return torch.zeros(linear.out_features, dtype=linear.weight.dtype, device=linear.weight.device)
