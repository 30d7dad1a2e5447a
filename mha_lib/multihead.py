"""Multi-head attention: H scaled dot-product attentions on learned projections, concatenated.

Shape legend
    B    batch size
    H    number of (query) heads
    Hkv  number of key/value heads: H here, fewer in :mod:`mha_lib.gqa`
    Lq   number of queries
    Lk   number of key-value pairs
    n    new positions of a decoding step (Lq = n with a cache)
    d    head size, D / H
    D    d_model, the width of the projections and of the output

:meth:`MultiHeadAttention.forward` is the idea and nothing else: project, split into heads,
attend with the mask, merge the heads, ``W_o``. Everything around it has a name of its own:

* :func:`mha_lib.attend.attend_heads`, the attention of all heads at once, shared by every
  attention layer of the library (``MultiHeadAttention``, ``GroupedQueryAttention``, decoding
  with a cache): the fused kernel (fast path), or ``DotProductAttention`` on the folded heads
  when the weights are wanted, and the guards around them;
* :func:`cached_keys_values`, decoding with a KV cache (chapter 9);
* :class:`mha_lib.attention.NonFiniteRule`, the rule for NaN and infinite inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import torch
from torch import Tensor, nn

from mha_lib._checks import check_bool, check_positive_int, check_probability, quiet_when_traced
from mha_lib.attend import attend_heads, check_head_mask, read_lens_and_finite, read_lens_and_gates
from mha_lib.attention import FiniteDotProductAttention, NonFiniteRule, check_qkv
from mha_lib.flex import attend_flex
from mha_lib.cached import AttentionCache, cached_keys_values, check_cached_attention, query_positions
from mha_lib.heads import gate_heads, merge_heads, split_heads
from mha_lib._settings import record
from mha_lib.masking import as_mask, check_positions, visible
from mha_lib.masks import Mask
from mha_lib.options import AttentionOptions, Options, option_values, takes_options

__all__ = [
    "AttentionCache",
    "AttentionLayer",
    "MultiHeadAttention",
    "cached_keys_values",
    "check_cached_attention",
]


class AttentionLayer(AttentionOptions):
    """What ``MultiHeadAttention`` and ``GroupedQueryAttention`` share: ONE forward, and the
    options (:class:`~mha_lib.options.AttentionOptions`: score modification, sink logits, gate,
    the queries' and keys' pipeline ``qk``); ``mha_lib.gqa`` adds RoPE and fewer K/V heads."""

    #: The names of the inputs' feature sizes, in the error messages of :meth:`check_inputs`.
    _input_sizes = ("query_size", "key_size", "value_size")

    def check_inputs(self, queries: Tensor, keys: Tensor, values: Tensor) -> None:
        """Raise a ``ValueError`` unless the inputs fit this module.

        They must be 3-D floating-point tensors with one batch size, as many keys as values,
        the configured feature sizes, and the dtype and device of the module's weights.
        """
        check_qkv(queries, keys, values)
        weight = self.W_q.weight
        expected = zip(("queries", "keys", "values"), (queries, keys, values),
                       self._input_features(), self._input_sizes)
        for name, x, size, setting in expected:
            if x.shape[-1] != size:
                raise ValueError(
                    f"{name} must have feature size {setting} = {size}, "
                    f"got {x.shape[-1]} (shape {tuple(x.shape)})"
                )
            if x.dtype != weight.dtype or x.device != weight.device:
                raise ValueError(
                    f"{name} are {x.dtype} on {x.device} but the module's weights are "
                    f"{weight.dtype} on {weight.device}: convert one with .to(...)"
                )

    def _input_features(self) -> tuple[int, int, int]:  # the sizes of queries, keys, values
        return self.W_q.in_features, self.W_k.in_features, self.W_v.in_features

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | Sequence[float] | None = None,
        *,
        mask: Mask | None = None,
        need_weights: bool = False,
        head_mask: Tensor | None = None,
        cache=None,
        positions: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from every query to the valid keys, in every head.

        ``mask`` (a :class:`mha_lib.masks.Mask`: ``causal()``, ``sliding_window(w)``,
        ``document(doc_ids)``, ... combined with ``&`` and ``|``) says which keys each query
        may see; ``valid_lens`` is one kind of mask, ``padding(valid_lens)``, and both apply.
        A query that may see no key gets a zero output (zero weights).

        ``need_weights=True`` also returns the weights; otherwise PyTorch's fused kernel
        computes the same output without them (see :func:`attend_heads`). ``head_mask``
        multiplies each head's output before ``W_o`` (1 keeps a head, 0 removes it).

        ``cache`` (a ``mha_lib.decoding.KVCache``, or one layer of it) decodes step by step:
        the queries are n new positions (keys and values: the same positions) that attend
        causally to the cached ones and to themselves. ``positions`` (n,) or (B, n) places
        them (default: right after the cached ones; without a cache, with RoPE, they place the
        queries and keys of a self-attention); ``valid_lens`` then count the keys from the
        first cached position, as :func:`cached_keys_values` explains.

        A NaN or infinite input reaches only the output rows (and weights) of the queries that
        may attend to it: those rows are NaN (see :class:`NonFiniteRule`).

        Returns:
            output (B, Lq, D), or ``(output, weights)`` with weights (B, H, Lq, Lk).
        """
        mask, gates, finite, positions = self._check_forward(
            queries, keys, values, valid_lens, mask, need_weights, head_mask, cache, positions)
        q = split_heads(self.W_q(queries), self.num_heads)  # (B, Lq, D) -> (B, H, Lq, d)
        k = split_heads(self.W_k(keys), self.num_kv_heads)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
        v = split_heads(self.W_v(values), self.num_kv_heads)  # (B, Lk, Hkv*d) -> (B, Hkv, Lk, d)
        q, k = self.qk(q, k, *self._rope_positions(q, k, cache, positions))  # QK-norm, RoPE
        out = weights = None
        if self.backend == "flex" and cache is None:  # FlexAttention (mha_lib.flex); None: it declines
            out = attend_flex(q, k, v, mask, self.attention, need_weights=need_weights, gates=gates,
                              positions=positions if self.rope else None, **self._scores())
        if out is None:
            if cache is not None:  # decoding (chapter 9): the cached positions are keys too
                k, v, seen = cached_keys_values(cache, k, v, mask, positions, **self._scores())
            else:  # the mask (and score modification) at the positions of the queries and keys
                seen = self._visible(mask, queries, keys, positions)
            nonfinite = None if finite else lambda: NonFiniteRule.of(queries, keys, values, seen)
            out, weights = attend_heads(q, k, v, seen, self.attention, need_weights=need_weights,
                                        gates=gates, nonfinite=nonfinite, fresh_q=True)  # out: (B, H, Lq, d)
        if self.gate is not None:  # gated attention: each head's output times a sigmoid gate
            out = gate_heads(out, self.gate(queries))  # (B, H, Lq, d)
        output = self.W_o(merge_heads(out))  # (B, H, Lq, d) -> (B, Lq, D)
        return (output, weights) if need_weights else output

    def _rope_positions(self, q: Tensor, k: Tensor, cache, positions) -> tuple[Tensor | None, Tensor | None]:
        """The positions RoPE rotates queries (B, H, Lq, d) and keys (B, Hkv, Lk, d) by: the
        cached step's, ``positions`` (checked by :meth:`_check_forward`), or 0, 1, ...;
        (None, None) without RoPE."""
        if not self.rope:
            return None, None
        B, _, Lq, _ = q.shape
        Lk = k.shape[2]
        if cache is not None:  # the positions the mask of the step reads too
            positions = query_positions(cache, positions, B, Lq, q.device)  # (1 or B, Lq)
        elif positions is None:
            positions = torch.arange(Lq, device=q.device)[None]  # (1, Lq)
        positions = positions.expand(B, Lq)  # (1 or B, Lq) -> (B, Lq)
        return positions, positions if Lk == Lq else torch.arange(Lk, device=k.device)

    def _scores(self) -> dict:
        """What changes the scores besides the mask (the context's ``score_mod`` and ``sinks``)."""
        return {"score_mod": self.score_mod, "sinks": self.sink_logits}

    def _visible(self, mask, queries: Tensor, keys: Tensor, positions: Tensor | None):
        """The context of a call without a cache: the mask at the queries and keys 0, 1, ...
        (valid lengths count them); the modification at the true positions, ``positions``
        (B, Lq) of a self-attention when given (with RoPE)."""
        seen = visible(mask, *queries.shape[:2], keys.shape[1], device=queries.device,
                       **self._scores())
        if positions is None or seen.q_positions is None:
            return seen
        return replace(seen, q_positions=positions, k_positions=positions)

    @quiet_when_traced
    def _check_forward(self, queries, keys, values, valid_lens, mask, need_weights, head_mask,
                       cache, positions):
        """The checks of :meth:`forward`, with at most one host read (the valid lengths' values,
        the head gates, whether the inputs are finite); returns the mask (valid lengths included,
        or None), the head gates (B, H) or None, whether the inputs are finite (None: not read)
        and the positions ((B, Lq) on the queries' device, or None)."""
        self.check_inputs(queries, keys, values)
        check_bool(need_weights, "need_weights")
        B, Lq, _ = queries.shape
        gates = check_head_mask(head_mask, self.num_heads, B, queries)
        if cache is not None:  # (no rule for non-finite inputs with a cache)
            num_keys = check_cached_attention(cache, queries, keys, positions)
            valid_lens, _ = read_lens_and_gates(valid_lens, B, Lq, num_keys, gates,
                                                device=queries.device)
            return as_mask(valid_lens, mask), gates, True, positions
        if positions is not None:
            if not self.rope:
                raise ValueError("positions are used with rope=True or with a cache, got neither "
                                 "(positions place new tokens in a cache: pass cache= too)")
            positions = check_positions(positions, B, Lq).to(queries.device)  # (B, Lq)
            if keys.shape[1] != Lq:
                raise ValueError(
                    "positions place the queries and, in self-attention, the keys: with "
                    f"{Lq} queries but {keys.shape[1]} keys, leave positions=None"
                )
        valid_lens, finite = read_lens_and_finite(queries, keys, values, valid_lens, gates)
        return as_mask(valid_lens, mask), gates, finite, positions


class MultiHeadAttention(AttentionLayer):
    """Multi-head attention with the d2l.ai chapter's signature (PyTorch edition).

    Each head ``h`` attends with its own slice of the projections ``W_q``, ``W_k``, ``W_v``;
    the H head outputs are concatenated and mixed by ``W_o``.

    Shapes:
        queries: (B, Lq, query_size)
        keys: (B, Lk, key_size)
        values: (B, Lk, value_size)
        valid_lens: None, (B,) or (B, Lq)
        head_mask: None, (H,) or (B, H)
        output: (B, Lq, D); weights: (B, H, Lq, Lk)

    Args:
        key_size: feature size of the keys.
        query_size: feature size of the queries.
        value_size: feature size of the values.
        d_model: D, the projection width; must be divisible by ``num_heads``.
        num_heads: H.
        dropout: dropout rate on the attention weights, in [0, 1).
        bias: whether the four projections have a bias.
        output_size: the width of the output (default D; a module whose heads were pruned
            keeps its output width, with fewer heads).
        score_mod, sink_logits, gate, qk_norm, backend: the layer's options, by name (a
            score modification, learned sink logits, an output gate, QK-norm, the FlexAttention
            route), each explained in :class:`mha_lib.options.Options`, the one record of them.

    ``module.settings`` holds these arguments (a :class:`MultiHeadAttention.Settings`): code
    that rebuilds the module changed (pruning, conversions) starts from it and keeps the rest.
    """

    @dataclass(frozen=True)
    class _Sizes:
        """The constructor's arguments beside the options (positional in ``Settings``)."""

        key_size: int
        query_size: int
        value_size: int
        d_model: int
        num_heads: int
        dropout: float
        bias: bool = False
        output_size: int | None = None  # None: D

    @dataclass(frozen=True)
    class Settings(Options, _Sizes):
        """The constructor's arguments, by name: the sizes, then the options (see the class)."""

        def __post_init__(self) -> None:
            if self.output_size == self.d_model:  # one way to say "the default"
                object.__setattr__(self, "output_size", None)

    @takes_options(Options)
    def __init__(
        self,
        key_size: int,
        query_size: int,
        value_size: int,
        d_model: int,
        num_heads: int,
        dropout: float,
        bias: bool = False,
        *,
        output_size: int | None = None,
        **options,
    ) -> None:
        super().__init__()
        sizes = {"key_size": key_size, "query_size": query_size, "value_size": value_size,
                 "d_model": d_model, "output_size": d_model if output_size is None else output_size}
        for name, size in sizes.items():
            check_positive_int(size, name)
        check_bool(bias, "bias")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        # Returns the weights when asked (DotProductAttention in fewer passes; see forward)
        self.attention = FiniteDotProductAttention(check_probability(dropout, "dropout"))
        self.W_q = nn.Linear(query_size, d_model, bias=bias)
        self.W_k = nn.Linear(key_size, d_model, bias=bias)
        self.W_v = nn.Linear(value_size, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, sizes["output_size"], bias=bias)
        options = self._init_options(query_size, options)  # (checked and built: AttentionOptions)
        self.settings = record(self.Settings, locals(), dropout=float(dropout),
                               **option_values(Options, options))

    @property
    def num_kv_heads(self) -> int:
        """Hkv = H: every query head has its own key/value head."""
        return self.num_heads

    @property
    def d_model(self) -> int:
        """H*d, the width of the query/key/value projections (D, unless heads were pruned)."""
        return self.W_q.out_features

    @property
    def head_size(self) -> int:
        """d = D / H."""
        return self.d_model // self.num_heads
