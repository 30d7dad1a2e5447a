"""Heads as circuits: what each head reads (its QK circuit) and what it writes (its OV circuit).

Head ``h`` of a :class:`~mha_lib.MultiHeadAttention` without biases uses the rows
``h*d .. h*d + d - 1`` of ``W_q``, ``W_k`` and ``W_v`` (call them ``W_q^h``, ``W_k^h``,
``W_v^h``, each (d, D_in)) and the same columns of ``W_o`` (``W_o^h``, (D, d)). Two products
of these say everything the head does (Elhage et al., 2021, "A Mathematical Framework for
Transformer Circuits"):

* ``W_QK^h = W_q^h^T W_k^h`` (query_size, key_size): a bilinear form. The score of query
  ``x`` for key ``y`` is ``x W_QK^h y^T / sqrt(d)``; the product of two matrices of d rows
  has rank at most d, however wide the model.
* ``W_OV^h = W_o^h W_v^h`` (D, value_size): what the head writes for each value it reads; the
  layer's output is the sum over heads of ``A^h X_v W_OV^h^T`` (A^h the head's weights), plus
  ``W_o``'s bias. Rank at most d too.

Shape legend
    B    batch size
    H    number of heads
    Lq   number of queries
    Lk   number of key-value pairs
    d    head size
    D    d_model
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mha_lib._modes import eval_mode
from mha_lib.attention import check_qkv
from mha_lib.multihead import MultiHeadAttention

__all__ = [
    "circuit_ranks",
    "composition_scores",
    "head_writes",
    "ov_circuits",
    "qk_circuits",
    "scores_from_circuits",
]


def qk_circuits(mha: MultiHeadAttention) -> Tensor:
    """Every head's QK circuit ``W_QK^h = W_q^h^T W_k^h``.

    Shapes:
        returns: (H, query_size, key_size)

    Raises:
        ValueError: ``mha`` not a MultiHeadAttention, or with biases (a bias adds terms that
            are not a bilinear form).
    """
    H, d = _check_layer(mha)
    W_q = mha.W_q.weight.detach().reshape(H, d, -1)  # (H*d, Dq) -> (H, d, Dq)
    W_k = mha.W_k.weight.detach().reshape(H, d, -1)  # (H*d, Dk) -> (H, d, Dk)
    return W_q.transpose(1, 2) @ W_k  # (H, Dq, d) @ (H, d, Dk) -> (H, Dq, Dk)


def ov_circuits(mha: MultiHeadAttention) -> Tensor:
    """Every head's OV circuit ``W_OV^h = W_o^h W_v^h``.

    Shapes:
        returns: (H, D, value_size)

    Raises:
        ValueError: as :func:`qk_circuits`.
    """
    H, d = _check_layer(mha)
    W_v = mha.W_v.weight.detach().reshape(H, d, -1)  # (H*d, Dv) -> (H, d, Dv)
    W_o = mha.W_o.weight.detach().reshape(-1, H, d).transpose(0, 1)  # (D, H*d) -> (H, D, d)
    return W_o @ W_v  # (H, D, d) @ (H, d, Dv) -> (H, D, Dv)


def circuit_ranks(circuits: Tensor) -> list[int]:
    """The rank of each head's circuit (at most d: see the module docstring).

    ``torch.linalg.matrix_rank`` with its default tolerance for the circuits' dtype (a float32
    product carries float32 rounding, which float64's tolerance would count as rank).

    Shapes:
        circuits: (H, m, n), from :func:`qk_circuits` or :func:`ov_circuits`
    """
    if not isinstance(circuits, Tensor) or circuits.dim() != 3 or not circuits.is_floating_point():
        got = tuple(circuits.shape) if isinstance(circuits, Tensor) else type(circuits).__name__
        raise ValueError(f"circuits must be a floating-point (H, m, n) tensor, got {got}")
    circuits = circuits.float() if circuits.element_size() < 4 else circuits
    return torch.linalg.matrix_rank(circuits.detach()).tolist()


def scores_from_circuits(mha: MultiHeadAttention, queries: Tensor, keys: Tensor) -> Tensor:
    """Every head's scores from its QK circuit alone: ``queries W_QK^h keys^T / sqrt(d)``.

    They are the scores the layer computes from the projected queries and keys (before the
    mask and the softmax).

    Shapes:
        queries: (B, Lq, query_size); keys: (B, Lk, key_size)
        returns: (B, H, Lq, Lk)
    """
    H, d = _check_layer(mha)
    check_qkv(queries, keys, keys)
    _check_width(queries, mha.W_q.in_features, "queries", "query_size")
    _check_width(keys, mha.W_k.in_features, "keys", "key_size")
    W_QK = qk_circuits(mha).to(queries.dtype)  # (H, Dq, Dk)
    # (B, 1, Lq, Dq) @ (H, Dq, Dk) @ (B, 1, Dk, Lk) -> (B, H, Lq, Lk)
    return queries[:, None] @ W_QK @ keys[:, None].transpose(-2, -1) / math.sqrt(d)


def head_writes(mha: MultiHeadAttention, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Tensor | None = None) -> Tensor:
    """What each head writes into the output: ``A^h values W_OV^h^T``.

    Their sum over the heads, plus ``W_o``'s bias (none here), is the layer's output.

    Shapes:
        queries: (B, Lq, query_size); keys: (B, Lk, key_size); values: (B, Lk, value_size)
        valid_lens: None, (B,) or (B, Lq), as for the layer
        returns: (B, H, Lq, D)

    The weights are the layer's in eval mode (no dropout).
    """
    _check_layer(mha)
    with eval_mode(mha):  # the weights without dropout
        _, weights = mha(queries, keys, values, valid_lens, need_weights=True)  # (B, H, Lq, Lk)
    _check_width(values, mha.W_v.in_features, "values", "value_size")
    W_OV = ov_circuits(mha).to(values.dtype)  # (H, D, Dv)
    # (B, H, Lq, Lk) @ (B, 1, Lk, Dv) @ (H, Dv, D) -> (B, H, Lq, D)
    return weights @ values[:, None] @ W_OV.transpose(-2, -1)


def composition_scores(earlier: MultiHeadAttention, later: MultiHeadAttention,
                       kind: str = "k") -> Tensor:
    """How much each head of ``later`` reads what each head of ``earlier`` writes, from weights.

    A head of ``earlier`` writes ``x W_OV^T`` into the residual stream; a head of ``later``
    reads the stream through its queries (Q-composition), its keys (K-composition, the
    mechanism of induction heads) or its values (V-composition). The score is the Frobenius
    norm of the product of the two circuits, divided by the product of their norms
    (Elhage et al., 2021): 1 when the writer's output lies where the reader looks, near
    ``1 / sqrt(D)``-ish values for unrelated random matrices.

    * ``kind="k"``: ``||W_QK^later W_OV^earlier|| / (||W_QK^later|| ||W_OV^earlier||)``;
    * ``kind="q"``: ``||W_OV^earlier^T W_QK^later|| / (...)``;
    * ``kind="v"``: ``||W_OV^later W_OV^earlier|| / (...)``.

    Shapes:
        returns: (H_later, H_earlier), row ``h2`` the reading head, column ``h1`` the writer.

    Raises:
        ValueError: layers that are not bias-free MultiHeadAttention, widths that do not
            match (the writer's output D must be the reader's input size), another kind.
    """
    if kind not in ("q", "k", "v"):
        raise ValueError(f"kind must be 'q', 'k' or 'v', got {kind!r}")
    _check_layer(earlier)
    _check_layer(later)
    reads = {"q": later.W_q, "k": later.W_k, "v": later.W_v}[kind].in_features
    if earlier.W_o.out_features != reads:
        raise ValueError(f"later's {kind} input size ({reads}) must equal earlier's output width "
                         f"({earlier.W_o.out_features}): the two layers share a residual stream")
    W_OV = ov_circuits(earlier)[None]  # (1, H1, D, Dv)
    if kind == "v":
        reader = ov_circuits(later)[:, None]  # (H2, 1, D, D)
        product = reader @ W_OV  # (H2, H1, D, Dv)
    elif kind == "k":
        reader = qk_circuits(later)[:, None]  # (H2, 1, Dq, D)
        product = reader @ W_OV  # (H2, H1, Dq, Dv)
    else:
        reader = qk_circuits(later)[:, None]  # (H2, 1, D, Dk)
        product = W_OV.transpose(-2, -1) @ reader  # (H2, H1, Dv, Dk)
    norms = torch.linalg.matrix_norm(reader) * torch.linalg.matrix_norm(W_OV)  # (H2, H1)
    return torch.linalg.matrix_norm(product) / norms


def _check_layer(mha: object) -> tuple[int, int]:
    """H and d of a MultiHeadAttention without biases, or a ValueError naming ``mha``."""
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"mha must be an mha_lib.MultiHeadAttention, got {type(mha).__name__}")
    if mha.W_q.bias is not None:
        raise ValueError("mha must have no biases (bias=False): a bias adds terms to the scores "
                         "and the writes that no circuit matrix holds")
    return mha.num_heads, mha.head_size


def _check_width(x: Tensor, width: int, name: str, setting: str) -> None:
    if x.shape[-1] != width:
        raise ValueError(f"{name} must have feature size {setting} = {width}, "
                         f"got shape {tuple(x.shape)}")
