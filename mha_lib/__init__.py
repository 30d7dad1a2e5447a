"""mha_lib: the code of the interactive book on multi-head attention.

Layers, lowest first (a layer imports only from the ones above it in this list):

* :mod:`mha_lib.masking`          valid lengths, the one mask builder (``visible``), ``masked_softmax``
* :mod:`mha_lib.mask_conventions` keep and padding masks: the named converters (beside ``attention``)
* :mod:`mha_lib.attention`        ``DotProductAttention``
* :mod:`mha_lib.heads`            ``transpose_qkv`` / ``transpose_output``
* :mod:`mha_lib.multihead`        ``MultiHeadAttention``
* upper layers (``viz``, ``variants``, ``bench``, ``importance``, ...) build on these.

The notation of every docstring, comment, figure and chapter:

Shape legend
    B   batch size
    H   number of heads (h: one head's index)
    Lq  number of queries
    Lk  number of key-value pairs
    d   head size
    D   H*d, the model width ``d_model``
"""

from mha_lib.attention import DotProductAttention
from mha_lib.heads import merge_heads, split_heads, transpose_output, transpose_qkv
from mha_lib.mask_conventions import (
    keep_mask_from_valid_lens,
    keep_to_padding,
    padding_mask_from_valid_lens,
    padding_to_keep,
)
from mha_lib.masking import check_valid_lens, masked_softmax
from mha_lib.multihead import MultiHeadAttention

__all__ = [
    "DotProductAttention",
    "MultiHeadAttention",
    "check_valid_lens",
    "keep_mask_from_valid_lens",
    "keep_to_padding",
    "merge_heads",
    "masked_softmax",
    "padding_mask_from_valid_lens",
    "padding_to_keep",
    "split_heads",
    "transpose_output",
    "transpose_qkv",
]

# Mask helpers for boolean masks of any layout (used by mha_lib.variants).
from mha_lib.mask_conventions import check_attention_mask, valid_lens_from_keep_mask  # noqa: E402
from mha_lib.masking import causal_valid_lens, softmax_over_kept  # noqa: E402

__all__ += [
    "causal_valid_lens",
    "check_attention_mask",
    "softmax_over_kept",
    "valid_lens_from_keep_mask",
]
