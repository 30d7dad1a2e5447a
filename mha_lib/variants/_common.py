"""Checks shared by the variants (private: the public API is in :mod:`mha_lib.variants`)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mha_lib.attention import check_qkv
from mha_lib.multihead import MultiHeadAttention


def check_feature_size(x: Tensor, name: str, size: int, setting: str) -> None:
    """Raise a ValueError unless the last axis of ``x`` has ``size`` features."""
    if x.shape[-1] != size:
        raise ValueError(
            f"{name} must have feature size {setting} = {size}, got {x.shape[-1]} "
            f"(shape {tuple(x.shape)})"
        )


def check_like_module(x: Tensor, name: str, param: Tensor) -> None:
    """Raise a ValueError unless ``x`` has the dtype and device of the module parameter ``param``.

    Without it a float64 input to a float32 module (or a CPU input to a GPU module) fails deep
    inside torch with a bare RuntimeError.
    """
    if x.dtype != param.dtype or x.device != param.device:
        raise ValueError(
            f"{name} must have the dtype and device of the module's parameters ({param.dtype} on "
            f"{param.device}), got {x.dtype} on {x.device}: convert one with .to(...)"
        )


def check_qkv_for(q: Tensor, k: Tensor, v: Tensor, d_model: int, param: Tensor) -> None:
    """Check q, k, v of a variant: 3-D, one batch, Lk keys and values, width d_model, and the
    dtype and device of the module's parameter ``param``."""
    check_qkv(q, k, v)
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_feature_size(x, name, d_model, "d_model")
        check_like_module(x, name, param)


def check_square_mha(mha: object, name: str = "mha") -> MultiHeadAttention:
    """Check that ``mha`` is a MultiHeadAttention whose inputs and projections all have width D.

    The variants from the einsum notes, the Haiku tutorial and GeometricMachineLearning.jl use
    one model width ``d_model`` for queries, keys, values and output; only such a
    MultiHeadAttention converts to them.
    """
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"{name} must be a mha_lib.MultiHeadAttention, got {type(mha).__name__}")
    D = mha.d_model
    widths = {
        "query_size": mha.W_q.in_features,
        "key_size": mha.W_k.in_features,
        "value_size": mha.W_v.in_features,
        "output width": mha.W_o.out_features,
    }
    wrong = {k: v for k, v in widths.items() if v != D}
    if wrong:
        raise ValueError(
            f"{name} must have query_size = key_size = value_size = d_model = output width "
            f"(one model width), got d_model = {D} and {wrong}"
        )
    return mha


@torch.no_grad()
def copy_linear(target: nn.Linear, source: nn.Linear) -> None:
    """Copy weight and bias of ``source`` into ``target`` (a missing bias counts as zero)."""
    target.weight.copy_(source.weight)
    if target.bias is not None:
        if source.bias is None:
            target.bias.zero_()
        else:
            target.bias.copy_(source.bias)
    elif source.bias is not None and source.bias.any():
        raise ValueError("cannot copy a nonzero bias into a projection that has none")
