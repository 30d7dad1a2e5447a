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

With a token embedding ``E`` (V, D) and an unembedding ``U`` (V, D) the circuits become
V x V tables that can be read token by token (Elhage et al., 2021):

* :func:`token_k_composition`: ``E W_QK^h2 W_OV^h1 E^T / sqrt(d)``, the score a later
  head ``h2`` adds when its query holds token ``a`` and its key holds what an earlier head
  ``h1`` wrote after reading token ``b``;
* :func:`token_ov_circuits`: ``E W_OV^h^T U^T``, how much the head, reading token ``b``,
  raises the logit of each token;
* :func:`diagonal_scores` and :func:`copying_scores` say how much such a table matches a
  token with itself.

Shapes in the book's notation (:mod:`mha_lib`): B batch, H heads, Lq queries, Lk key-value
pairs, d head size, D = H*d = ``d_model``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from mha_lib._checks import check_tensor
from mha_lib._modes import eval_mode
from mha_lib.attention import check_qkv
from mha_lib.multihead import MultiHeadAttention

__all__ = [
    "circuit_ranks",
    "composition_scores",
    "copying_scores",
    "diagonal_scores",
    "head_writes",
    "ov_circuits",
    "qk_circuits",
    "scores_from_circuits",
    "token_k_composition",
    "token_ov_circuits",
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


def token_k_composition(earlier: MultiHeadAttention, later: MultiHeadAttention,
                        embedding: Tensor) -> Tensor:
    """K-composition token by token: the score ``later``'s heads add for what ``earlier`` wrote.

    Head ``h1`` of ``earlier`` reads the embedding ``E[b]`` of a token ``b`` as its value and
    writes ``E[b] W_OV^h1^T`` into the stream; head ``h2`` of ``later`` reads that through its
    keys and compares it with a query that holds token ``a``:

        ``table[h2, h1, a, b] = E[a] W_QK^h2 W_OV^h1 E[b]^T / sqrt(d)``

    the part of the score (before the softmax) that this path adds, in the units of the layer's
    scores. A head that matches a token with "the token before the key", written by a
    previous-token head ``h1``, has a table with a large diagonal (Elhage et al., 2021).
    Only this path is in the table: the query's and key's own positions and tokens add more
    terms to the score.

    Shapes:
        embedding: (V, D_in), ``E``, one row per token, read by earlier's values and later's queries
        returns: (H_later, H_earlier, V, V): queries' tokens ``a`` on rows, the token ``b``
            the writer read on columns.

    Raises:
        ValueError: layers that are not bias-free MultiHeadAttention, an embedding that is not
            a 2-D floating-point tensor, or widths that do not match.
    """
    _check_layer(earlier)
    _, d = _check_layer(later)
    E = _check_embedding(embedding, "embedding", earlier.W_v.in_features, "earlier's value_size")
    _check_embedding(embedding, "embedding", later.W_q.in_features, "later's query_size")
    if earlier.W_o.out_features != later.W_k.in_features:
        raise ValueError(f"later's key_size ({later.W_k.in_features}) must equal earlier's output "
                         f"width ({earlier.W_o.out_features}): the two layers share a residual stream")
    QK = qk_circuits(later).to(E.dtype)[:, None]  # (H2, 1, Dq, D)
    OV = ov_circuits(earlier).to(E.dtype)[None]  # (1, H1, D, Dv)
    # (V, Dq) @ (H2, 1, Dq, D) @ (1, H1, D, Dv) @ (Dv, V) -> (H2, H1, V, V)
    return E @ QK @ OV @ E.T / math.sqrt(d)


def token_ov_circuits(mha: MultiHeadAttention, embedding: Tensor, unembedding: Tensor) -> Tensor:
    """Every head's OV circuit token by token: ``E W_OV^h^T U^T``.

    Row ``b`` of head ``h`` is what the head adds to the logits (``U``'s bias left out) when
    it puts all its weight on a value holding token ``b``. A *copying* head raises the
    logit of ``b`` itself: its table has a large diagonal and mostly positive eigenvalues
    (:func:`copying_scores`).

    Shapes:
        embedding: (V, value_size), ``E``; unembedding: (V_out, D), ``U`` (``nn.Linear(D, V_out).weight``)
        returns: (H, V, V_out): the token read on rows, the logit raised on columns.

    Raises:
        ValueError: as :func:`qk_circuits`, or tables that are not 2-D floating-point
            tensors of the layer's widths.
    """
    _check_layer(mha)
    E = _check_embedding(embedding, "embedding", mha.W_v.in_features, "value_size")
    U = _check_embedding(unembedding, "unembedding", mha.W_o.out_features, "the output width D")
    OV = ov_circuits(mha).to(E.dtype)  # (H, D, Dv)
    # (V, Dv) @ (H, Dv, D) @ (D, V_out) -> (H, V, V_out)
    return E @ OV.transpose(-2, -1) @ U.to(E.dtype).T


class _DiagonalScores(NamedTuple):
    """How much square tables single out their diagonal, each of shape (...,)."""

    top_fraction: Tensor
    """Fraction of rows whose diagonal entry is larger than every other entry of the row."""
    z_score: Tensor
    """Mean over the rows of ``(diagonal - row mean) / row standard deviation`` (0 for a
    constant row)."""


def diagonal_scores(tables: Tensor) -> _DiagonalScores:
    """How strongly each square table matches a row with its own column.

    Shapes:
        tables: (..., V, V), e.g. from :func:`token_k_composition` or :func:`token_ov_circuits`
        returns: two (...,) tensors, see the fields.

    Raises:
        ValueError: tables that are not floating-point, square (V >= 2) and finite.
    """
    T = _check_square(tables)
    diagonal = T.diagonal(dim1=-2, dim2=-1)  # (..., V)
    eye = torch.eye(T.shape[-1], dtype=torch.bool)  # (V, V)
    others = T.masked_fill(eye, -math.inf).amax(dim=-1)  # (..., V): each row's largest off the diagonal
    top = (diagonal > others).to(T.dtype).mean(dim=-1)  # (..., V) -> (...,)
    mean, std = T.mean(dim=-1), T.std(dim=-1)  # (..., V) each
    z = torch.where(std > 0, (diagonal - mean) / std.clamp(min=torch.finfo(T.dtype).tiny), 0.0)
    return _DiagonalScores(top, z.mean(dim=-1))


def copying_scores(tables: Tensor) -> Tensor:
    """Elhage et al.'s copying score of square tables: ``sum(eigenvalues) / sum(|eigenvalues|)``.

    1 when every eigenvalue is positive (the table maps each token mostly onto itself), -1
    when every one is negative (it pushes the token it reads *down*), near 0 for a random
    table. The numerator is the trace, the denominator at least as large (0 for a zero table,
    whose score is 0). Computed in float64.

    Shapes:
        tables: (..., V, V), e.g. from :func:`token_ov_circuits`; returns (...,)

    Raises:
        ValueError: as :func:`diagonal_scores`.
    """
    T = _check_square(tables)
    eigenvalues = torch.linalg.eigvals(T.double())  # (..., V) complex
    total = eigenvalues.abs().sum(dim=-1)  # (...,)
    score = torch.where(total > 0, eigenvalues.real.sum(dim=-1) / total.clamp(min=1e-300), 0.0)
    return score.to(T.dtype)


def _check_square(tables: object) -> Tensor:
    T = check_tensor(tables, "tables", tuple(range(2, 9)))
    if T.shape[-1] != T.shape[-2] or T.shape[-1] < 2:
        raise ValueError(f"tables must be square (..., V, V) with V >= 2, got shape {tuple(T.shape)}")
    if not torch.isfinite(T).all():
        raise ValueError("tables must be finite, got NaN or infinity")
    return T.detach()


def _check_embedding(table: object, name: str, width: int, setting: str) -> Tensor:
    """A (V, width) floating-point table (an embedding's or unembedding's weight), detached."""
    E = check_tensor(table, name, 2)
    if E.shape[1] != width or E.shape[0] < 1:
        raise ValueError(f"{name} must have shape (V, {width}) with {width} = {setting}, "
                         f"got {tuple(E.shape)}")
    return E.detach()


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
