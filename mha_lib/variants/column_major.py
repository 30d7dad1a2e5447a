"""Multi-head self-attention in column-major form, as in GeometricMachineLearning.jl.

Shape legend
    B   batch size (optional: a single sequence is a matrix)
    H   number of heads (``n_heads``)
    D   ``dim``, the width of a token; D = H*d
    L   number of tokens (the columns of Z)
    d   head size, D / H

Tokens are the *columns* of Z (D, L), the convention of linear algebra and of Julia. Head i
has projections P^Q_i, P^K_i, P^V_i of shape (D, d) and sees the coordinates Q_i = P^Q_i^T Z
(d, L), likewise K_i and V_i. Its correlation matrix C_i = K_i^T Q_i (L, L) has entry [m, n] =
key m . query n, so a softmax down each *column* turns it into the weights with which query n
mixes the values: head_i = V_i softmax(C_i / sqrt(d)). The heads are stacked along the rows.

There is no output projection (W_o is the identity) and no bias. With ``stiefel=True`` every
P_i keeps orthonormal columns (P_i^T P_i = I, a point of the Stiefel manifold) while training.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.parametrizations import orthogonal

from mha_lib._checks import check_bool, check_positive_int, check_tensor
from mha_lib.attention import fit_queries
from mha_lib.multihead import MultiHeadAttention
from mha_lib.variants._common import check_like_module, check_square_mha

__all__ = ["ColumnMajorMultiHeadAttention"]

_NAMES = ("PQ", "PK", "PV")
# from_mha(stiefel=True) accepts max |P_i^T P_i - I| up to this many times D * eps of the dtype
# (float32: 5e-5 for D = 8; float64: 1e-13).
_STIEFEL_TOLERANCE_EPS = 50


class ColumnMajorMultiHeadAttention(nn.Module):
    """Column-major multi-head self-attention with optional residual and Stiefel projections.

    Shapes:
        Z: (D, L) or (B, D, L), one token per column
        output: Z's shape
        weights (``need_weights=True``): (H, L, L) or (B, H, L, L); column n holds the
        weights of query n over the keys, so every column sums to 1

    Args:
        dim: D, the token width; must be divisible by ``n_heads``.
        n_heads: H.
        add_connection: return ``Z + MHA(Z)`` instead of ``MHA(Z)``.
        stiefel: keep every P_i on the Stiefel manifold (orthonormal columns) through a
            ``torch.nn.utils.parametrizations.orthogonal`` parametrization.

    Attributes:
        PQ, PK, PV: (H, D, d), the per-head projections P_i stacked along the first axis.
    """

    def __init__(
        self, dim: int, n_heads: int, add_connection: bool = False, stiefel: bool = False
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if dim % n_heads:
            raise ValueError(f"dim ({dim}) must be divisible by n_heads ({n_heads})")
        self.add_connection = check_bool(add_connection, "add_connection")
        self.stiefel = check_bool(stiefel, "stiefel")
        H, d = n_heads, dim // n_heads
        for name in _NAMES:
            # Start from orthonormal columns (QR of a Gaussian), on the manifold or not.
            start = torch.linalg.qr(torch.randn(H, dim, d)).Q  # (H, D, d)
            self.register_parameter(name, nn.Parameter(start))
            if stiefel:
                orthogonal(self, name)

    @property
    def head_size(self) -> int:
        """d = D / H."""
        return self.dim // self.n_heads

    def _check_input(self, Z: Tensor) -> Tensor:
        check_tensor(Z, "Z", (2, 3))
        stored = next(self.parameters()).dtype  # (read before the parametrization computes)
        if self.stiefel and {Z.dtype, stored} & {torch.float16, torch.bfloat16}:
            raise ValueError(
                f"stiefel=True needs float32 or float64 (the Stiefel step's QR does not run in half "
                f"precision), got Z {Z.dtype} and a module of {stored}: convert both with .float()"
            )
        if Z.shape[-2] != self.dim:
            raise ValueError(
                f"Z must have dim = {self.dim} rows (one token per column, shape (D, L) or "
                f"(B, D, L)), got shape {tuple(Z.shape)}"
            )
        check_like_module(Z, "Z", self.PQ)
        return Z if Z.dim() == 3 else Z[None]  # (D, L) -> (1, D, L)

    def _project(self, Z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per-head coordinates P_i^T Z for queries, keys and values: each (B, H, d, L)."""
        return tuple(torch.einsum("hnd,bnt->bhdt", getattr(self, n), Z) for n in _NAMES)

    def correlation_matrices(self, Z: Tensor) -> Tensor:
        """The correlation matrices C_i = K_i^T Q_i, [C_i]_{mn} = key m . query n.

        Shapes:
            Z: (D, L) or (B, D, L)
            returns: (H, L, L) or (B, H, L, L)
        """
        Zb = self._check_input(Z)
        Q, K, _ = self._project(Zb)
        C = torch.einsum("bhdm,bhdn->bhmn", K, Q)  # (B, H, L, L)
        return C if Z.dim() == 3 else C[0]

    def forward(self, Z: Tensor, *, need_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Stack the heads V_i softmax(K_i^T Q_i / sqrt(d)) along the rows (plus Z).

        Returns:
            output with Z's shape, or ``(output, weights)`` when ``need_weights``.
        """
        Zb = self._check_input(Z)  # (B, D, L)
        check_bool(need_weights, "need_weights")
        B, D, L = Zb.shape
        Q, K, V = self._project(Zb)  # each (B, H, d, L)
        Q = fit_queries(Q.mT, K.mT).mT  # columns whose scores would overflow are scaled down
        C = torch.einsum("bhdm,bhdn->bhmn", K, Q)  # (B, H, L, L): [m, n] = key m . query n
        weights = torch.softmax(C / math.sqrt(self.head_size), dim=-2)  # down each column
        heads = torch.einsum("bhdm,bhmn->bhdn", V, weights)  # (B, H, d, L): V_i P_i
        out = heads.reshape(B, D, L)  # (B, H, d, L) -> (B, D, L): heads stacked along rows
        if self.add_connection:
            out = Zb + out
        if Z.dim() == 2:
            out, weights = out[0], weights[0]  # (1, D, L) -> (D, L)
        return (out, weights) if need_weights else out

    def orthonormality_error(self) -> float:
        """max over P in PQ, PK, PV and heads i of max |P_i^T P_i - I| (0 on the Stiefel manifold)."""
        eye = torch.eye(self.head_size, dtype=self.PQ.dtype, device=self.PQ.device)
        with torch.no_grad():
            return max(
                # P^T P: (H, D, d) -> (H, d, D) @ (H, D, d) -> (H, d, d)
                (getattr(self, n).transpose(-2, -1) @ getattr(self, n) - eye).abs().max().item()
                for n in _NAMES
            )

    @classmethod
    def from_mha(
        cls, mha: MultiHeadAttention, add_connection: bool = False, stiefel: bool = False
    ) -> "ColumnMajorMultiHeadAttention":
        """Read P^Q_i, P^K_i, P^V_i off a MultiHeadAttention's W_q, W_k, W_v.

        Head i of ``mha`` projects with rows i*d .. i*d + d - 1 of ``W_q.weight``: that block
        is (P^Q_i)^T. The design has no output projection and no bias, so ``mha`` must have
        ``W_o`` equal to the identity and no (or zero) biases. Then ``from_mha(mha)(Z)`` equals
        ``mha(Z.T[None])[0].T`` (plus Z with ``add_connection``).

        Raises:
            ValueError: widths differ, a nonzero bias, W_o not the identity, or ``stiefel``
                with projections whose columns are not orthonormal.
        """
        check_square_mha(mha)
        for name in ("W_q", "W_k", "W_v", "W_o"):
            bias = getattr(mha, name).bias
            if bias is not None and bias.any():
                raise ValueError(f"mha.{name} must have no bias (the column-major design has none)")
        D, H = mha.d_model, mha.num_heads
        eye = torch.eye(D, dtype=mha.W_o.weight.dtype, device=mha.W_o.weight.device)
        if not torch.equal(mha.W_o.weight, eye):
            raise ValueError(
                "mha.W_o must be the identity: the column-major design has no output projection"
            )
        module = cls(D, H, add_connection=add_connection, stiefel=stiefel)
        module = module.to(device=eye.device, dtype=eye.dtype)
        # Rounding error of a Gram matrix grows with the sum over D terms: scale with eps.
        tol = _STIEFEL_TOLERANCE_EPS * D * torch.finfo(eye.dtype).eps
        with torch.no_grad():
            for name, w_name in zip(_NAMES, ("W_q", "W_k", "W_v")):
                W = getattr(mha, w_name).weight  # (D, D)
                P = W.reshape(H, D // H, D).transpose(1, 2)  # (D, D) -> (H, d, D) -> (H, D, d)
                if not stiefel:
                    getattr(module, name).copy_(P)
                    continue
                gram = P.transpose(1, 2) @ P  # (H, D, d) -> (H, d, D) @ (H, D, d) -> (H, d, d)
                error = (gram - torch.eye(D // H).to(gram)).abs().max().item()
                if error > tol:
                    raise ValueError(
                        f"stiefel=True needs mha.{w_name} to have orthonormal rows within every "
                        f"head (P_i^T P_i = I up to {tol:.1e} for {eye.dtype}), got "
                        f"max |P_i^T P_i - I| = {error:.3g}"
                    )
                setattr(module, name, P.clone())  # through the parametrization's right_inverse
        return module.train(mha.training)

    def to_mha(self) -> MultiHeadAttention:
        """The MultiHeadAttention (no bias, ``W_o`` = identity) that equals this module on Z.T.

        ``self(Z)`` equals ``self.to_mha()(Z.T[None])[0].T`` (plus Z with ``add_connection``).
        """
        D, H = self.dim, self.n_heads
        mha = MultiHeadAttention(D, D, D, D, H, dropout=0.0, bias=False)
        mha = mha.to(device=self.PQ.device, dtype=self.PQ.dtype)
        with torch.no_grad():
            for lin, name in zip((mha.W_q, mha.W_k, mha.W_v), _NAMES):
                # (H, D, d) -> (H, d, D) -> (D, D): head i's rows are (P_i)^T
                lin.weight.copy_(getattr(self, name).transpose(1, 2).reshape(D, D))
            mha.W_o.weight.copy_(torch.eye(D))
        return mha.train(self.training)
