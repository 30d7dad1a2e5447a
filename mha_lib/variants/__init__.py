"""One idea, many implementations: multi-head attention as other sources write it.

Each class re-implements multi-head attention in the layout and notation of one source, and
converts its weights from (and, where the designs match, to) :class:`mha_lib.MultiHeadAttention`
so that the chapter and the tests can assert that the outputs are equal. A converted module
keeps the training mode of its source (equalities hold in eval mode, where dropout is off).

* :class:`EinsumMultiHeadAttention`: einsum/einops notes (after the module of
  attention-is-all-you-need-pytorch), head-major layout (H, B, L, d), separate d_k and d_v,
  residual connection and LayerNorm.
* :class:`HaikuStyleMultiheadAttention`: the JAX/Haiku tutorial, layout (B, H, L, d), a mask
  broadcast over the heads.
* :class:`ColumnMajorMultiHeadAttention`: GeometricMachineLearning.jl, tokens as columns
  (D, L) per example, per-head projections that may live on the Stiefel manifold.

Mask conventions are converted with the named helpers of :mod:`mha_lib.mask_conventions`.
"""

from mha_lib.variants.column_major import ColumnMajorMultiHeadAttention
from mha_lib.variants.einsum import EinsumMultiHeadAttention
from mha_lib.variants.haiku_style import HaikuStyleMultiheadAttention, scaled_dot_product

__all__ = [
    "ColumnMajorMultiHeadAttention",
    "EinsumMultiHeadAttention",
    "HaikuStyleMultiheadAttention",
    "scaled_dot_product",
]
