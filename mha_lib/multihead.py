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

* :func:`attend_heads`, the attention of all heads at once, shared by every attention layer of
  the library (``MultiHeadAttention``, ``GroupedQueryAttention``, decoding with a cache): the
  fused kernel (fast path), or ``DotProductAttention`` on the folded heads when the weights are
  wanted;
* :func:`cached_keys_values`, decoding with a KV cache (chapter 9);
* :class:`mha_lib.attention.NonFiniteRule`, the rule for NaN and infinite inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib._checks import (
    as_tensor,
    check_bool,
    check_positive_int,
    check_probability,
    check_size,
    check_tensor,
    quiet_when_traced,
    tracing,
)
from mha_lib.attention import (
    DotProductAttention,
    FiniteDotProductAttention,
    NonFiniteRule,
    all_finite,
    check_qkv,
    fit_queries,
    guards_change_nothing,
)
from mha_lib.flex import attend_flex
from mha_lib.cached import AttentionCache, cached_keys_values, check_cached_attention, query_positions
from mha_lib.heads import gate_heads, merge_heads, split_heads
from mha_lib._settings import record
from mha_lib.masking import CheckedLens, Visible, as_mask, check_positions, read_valid_lens, visible
from mha_lib.masks import Mask
from mha_lib.options import AttentionOptions, Options, option_values, takes_options

__all__ = [
    "AttentionCache",
    "AttentionLayer",
    "MultiHeadAttention",
    "attend_heads",
    "cached_keys_values",
    "check_cached_attention",
    "check_head_shapes",
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
                                        gates=gates, nonfinite=nonfinite)  # out: (B, H, Lq, d)
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
        gates = _check_head_mask(head_mask, self.num_heads, B, queries)
        if cache is not None:  # (no rule for non-finite inputs with a cache)
            num_keys = check_cached_attention(cache, queries, keys, positions)
            valid_lens, _ = _read_lens_and_gates(valid_lens, B, Lq, num_keys, gates,
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
        valid_lens, finite = _read_lens_and_finite(queries, keys, values, valid_lens, gates)
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


def attend_heads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Visible | Mask | CheckedLens | Tensor | None,
    attention: DotProductAttention,
    *,
    need_weights: bool = False,
    gates: Tensor | None = None,
    nonfinite: NonFiniteRule | Callable[[], NonFiniteRule | None] | None = None,
) -> tuple[Tensor, Tensor | None]:
    """The attention of every head at once: the one computation all attention layers share.

    ``MultiHeadAttention``, ``GroupedQueryAttention`` and decoding with a KV cache project and
    split their inputs, then call this. Query head ``h`` reads key/value head ``h // g`` with
    ``g = H / Hkv`` (``g = 1``: multi-head attention). Two paths compute the same numbers:

    * ``need_weights=False``: PyTorch's fused ``F.scaled_dot_product_attention``, which never
      materialises the (B, H, Lq, Lk) weights (chapter 6);
    * ``need_weights=True``: ``attention`` (a :class:`~mha_lib.DotProductAttention`) on the
      heads folded into the batch (chapter 2), which returns the weights.

    A query that may attend to nothing (valid length 0, a mask that hides every key) gets a
    zero output (and zero weights).

    Shapes:
        q: (B, H, Lq, d)
        k, v: (B, Hkv, Lk, d), Hkv dividing H
        mask: the mask built by :func:`mha_lib.masking.visible` (the layers build theirs once),
            a :class:`~mha_lib.masks.Mask` (queries and keys at positions 0, 1, ...), or valid
            lengths, None, (B,) or (B, Lq) (a :class:`~mha_lib.masking.CheckedLens` is not read
            again)
        gates: None or (B, H), multiplying each head's output
        returns: out (B, H, Lq, d) and weights (B, H, Lq, Lk) (None without ``need_weights``)

    Args:
        attention: gives the dropout rate (in training mode), and computes the weights path.
        nonfinite: ``MultiHeadAttention``'s rule for NaN and infinite inputs (or a function
            that works it out, called only when needed: see :func:`_guards_after`), or None.

    Raises:
        ValueError: tensors of other shapes, dtypes or devices, ``attention`` not a
            ``DotProductAttention``, bad valid lengths or gates.
    """
    seen = _check_heads(q, k, v, mask, attention, need_weights, gates)
    if _read_first(q) and guards_change_nothing(q, k, v).item():  # (see _read_first)
        nonfinite = None
    else:  # the guards: NaN and inf reach only the rows that may attend to them; no overflow
        nonfinite = nonfinite() if callable(nonfinite) else nonfinite
        if nonfinite is not None:
            k, v = nonfinite.usable(k), nonfinite.usable(v)
        q = fit_queries(q, k)  # query rows whose scores could overflow: scaled down (see there)
    fast = None if need_weights else _attend_fused(q, k, v, seen, attention, nonfinite)
    out, weights = fast if fast is not None else _attend_folded(q, k, v, seen, attention, nonfinite)
    weights = weights if need_weights else None
    if gates is not None:
        out = out * gates[:, :, None, None]  # (B, H) -> (B, H, 1, 1)
    return out, weights


def _read_first(q: Tensor) -> bool:
    """Where the layer first asks whether its guards would change anything: on the CPU.

    The guards (:func:`~mha_lib.attention.fit_queries` against scores that overflow, the rule
    for NaN and infinite inputs) cost passes over the queries, keys and values: a third of a
    fast-path forward on a CPU. For finite inputs of ordinary size they change nothing
    (factors of exactly 1, zeros added): :func:`~mha_lib.attention.guards_change_nothing`
    tells in three reductions, and on the CPU its answer is read at no cost (nothing to wait
    for), so the guards run only when needed, with the same numbers either way. On a GPU
    reading it would wait for the device (a host synchronisation), and a graph being recorded
    cannot branch on a value: there the guards always run, on the device.
    """
    return q.device.type == "cpu" and not tracing()


def check_head_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise a ``ValueError`` unless q is (B, H, Lq, d) and k, v are (B, Hkv, Lk, d) with the
    queries' B and d and Hkv dividing H (Hkv = H for multi-head attention)."""
    check_tensor(q, "q", 4)
    check_tensor(k, "k", 4)
    check_tensor(v, "v", 4)
    B, H, _, d = q.shape
    Hkv = k.shape[1]
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != d or H % Hkv:
        raise ValueError(
            "k and v must both have shape (B, Hkv, Lk, d) with the queries' B and d and Hkv "
            f"dividing H: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )


@quiet_when_traced
def _check_heads(q, k, v, mask, attention, need_weights, gates) -> Visible:
    """The checks of :func:`attend_heads`; returns the mask as the paths use it."""
    check_head_shapes(q, k, v)
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype or x.device != q.device:
            raise ValueError(f"{name} is {x.dtype} on {x.device}, q is {q.dtype} on {q.device}")
    if not isinstance(attention, DotProductAttention):
        raise ValueError(
            f"attention must be a mha_lib.DotProductAttention, got {type(attention).__name__}"
        )
    check_bool(need_weights, "need_weights")
    if gates is not None and (not isinstance(gates, Tensor) or gates.shape != (B, H)):
        raise ValueError(f"gates must be a tensor of shape (B, H) = ({B}, {H}), got {gates!r}")
    if isinstance(mask, Visible):
        return mask
    if not isinstance(mask, Mask):  # valid lengths: checked here (one host read), or None
        mask, _ = read_valid_lens(mask, B, Lq, Lk, device=q.device)
        mask = as_mask(mask, None)
    return visible(mask, B, Lq, Lk, device=q.device)


def _attend_fused(q, k, v, seen, attention, nonfinite) -> tuple[Tensor, None] | None:
    """The fast path: ``F.scaled_dot_product_attention``, (B, H, Lq, d) -> (B, H, Lq, d), no
    weights; None when the kernel cannot take the call (:meth:`~mha_lib.masking.Visible.fused`)."""
    if _size(k, 2) == 0:  # no keys: nothing to attend to (the kernel would spread a NaN query)
        return q.new_zeros(*q.shape[:3], v.shape[-1]), None
    operands = seen.fused(q, k, v)  # k, v (a key more for sinks) and the kernel's mask
    if operands is None:
        return None
    k, v, attn_mask, is_causal = operands
    dropout_p = attention.dropout.p if attention.training else 0.0
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                         is_causal=is_causal, enable_gqa=_grouped(q, k))  # (B, H, Lq, d)
    # Write over the kernel's output, unless autograd keeps it (or a graph is being recorded)
    mine = not (out.requires_grad or tracing())
    empty = seen.with_heads().empty  # (B or 1, 1, Lq or 1, 1)
    if empty is not None:  # a query that sees nothing attended anywhere: zero it
        out = out.masked_fill_(empty, 0.0) if mine else out.masked_fill(empty, 0.0)
    return (out if nonfinite is None else nonfinite.spoil(out, inplace=mine)), None


@quiet_when_traced
def _grouped(q: Tensor, k: Tensor) -> bool:
    """Fewer key/value heads than query heads (a constant of the layer, also in a traced graph)."""
    return bool(k.shape[1] != q.shape[1])


@quiet_when_traced
def _size(x: Tensor, dim: int) -> int:
    """``x.shape[dim]`` as an int (a traced graph records the size of its example inputs)."""
    return int(x.shape[dim])


def _attend_folded(q, k, v, seen, attention, nonfinite) -> tuple[Tensor, Tensor]:
    """The weights path: ``attention`` on the heads folded into the batch axis (chapter 2).

    The g query heads of a group share one key/value head: they are laid one after another
    along the queries, (B*Hkv, g*Lq, d), so that they meet that head's keys without copying
    them. With g = 1 this is chapter 2's folding, (B*H, Lq, d).
    """
    if nonfinite is not None:  # a NaN query gives NaN scores, weights and output
        q = nonfinite.spoil(q)
    B, H, Lq, d = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = H // Hkv
    q = q.reshape(B * Hkv, g * Lq, d)  # (B, H, Lq, d) -> (B*Hkv, g*Lq, d)
    k = k.reshape(B * Hkv, Lk, d)  # (B, Hkv, Lk, d) -> (B*Hkv, Lk, d)
    v = v.reshape(B * Hkv, Lk, v.shape[-1])  # (B, Hkv, Lk, d) -> (B*Hkv, Lk, d)
    # row b*Hkv + j of the folded batch belongs to example b; its rows hold g heads' queries
    seen = seen.folded(lambda t: _fold_mask(t, B, Hkv, g), H)
    out, weights = attention(q, k, v, mask=seen, need_weights=True)
    # out: (B*Hkv, g*Lq, d) -> (B, H, Lq, d); weights: (B*Hkv, g*Lq, Lk) -> (B, H, Lq, Lk)
    return out.reshape(B, H, Lq, v.shape[-1]), weights.reshape(B, H, Lq, Lk)


def _fold_mask(t: Tensor, B: int, Hkv: int, g: int) -> Tensor:
    """A mask of the head layout folded like the queries: (B or 1, Lq or 1, n) -> (B*Hkv, g*Lq or 1, n)."""
    t = t.expand(B, *t.shape[1:])  # (B or 1, Lq or 1, n) -> (B, Lq or 1, n)
    if t.shape[1] == 1:
        return t.repeat_interleave(Hkv, dim=0)  # (B, 1, n) -> (B*Hkv, 1, n)
    Lq, n = t.shape[1], t.shape[2]
    # (B, Lq, n) -> (B, 1, 1, Lq, n) -> (B, Hkv, g, Lq, n) -> (B*Hkv, g*Lq, n)
    return t[:, None, None].expand(B, Hkv, g, Lq, n).reshape(B * Hkv, g * Lq, n)


def _check_head_mask(
    head_mask: object, num_heads: int, batch_size: int, like: Tensor
) -> Tensor | None:
    """Return the head gates as a (B, H) tensor of ``like``'s dtype and device, or None.

    Only type and shape are checked here; :func:`_read_lens_and_gates` checks that the gates are
    finite (reading them with the valid lengths, in one host read).

    Args:
        head_mask: None, or real numbers of shape (H,) or (B, H) (1 keeps a head, 0 removes it).

    Raises:
        ValueError: not numbers, booleans, on the meta device, or another shape.
    """
    H = num_heads
    if not tracing():  # (torch.jit.trace hands sizes over as tensors)
        check_positive_int(num_heads, "num_heads")
        check_size(batch_size, "batch_size")
    if not isinstance(like, Tensor) or not like.is_floating_point():
        raise ValueError(f"like must be a floating-point torch.Tensor, got {getattr(like, 'dtype', type(like).__name__)}")
    if head_mask is None:
        return None
    head_mask = as_tensor(head_mask, "head_mask", "a tensor of gates (numbers)")
    if head_mask.dtype == torch.bool or head_mask.is_complex():
        raise ValueError(f"head_mask must hold real numbers, got dtype {head_mask.dtype}")
    head_mask = head_mask.to(dtype=like.dtype, device=like.device)  # keeps its gradient
    if head_mask.shape not in ((H,), (batch_size, H)):
        raise ValueError(
            f"head_mask must have shape (H,) = ({H},) or (B, H) = ({batch_size}, {H}), "
            f"got {tuple(head_mask.shape)}"
        )
    return head_mask.expand(batch_size, H)  # (H,) or (B, H) -> (B, H)


def _read_lens_and_gates(
    valid_lens: object,
    batch_size: int,
    num_queries: int,
    num_keys: int,
    gates: Tensor | None,
    *also: Tensor,
    device: torch.device | None = None,
) -> tuple[CheckedLens | None, list[float | None]]:
    """Check the valid lengths' values and that the head gates are finite, in ONE host read.

    :func:`mha_lib.masking.read_valid_lens` with the gates of :func:`_check_head_mask`: an
    attention layer's forward reads values from the device at most once (not at all without
    valid lengths and head gates).

    Returns:
        The checked valid lengths (moved to ``device``) and the values of ``also``.

    Raises:
        ValueError: as :func:`mha_lib.masking.check_valid_lens`; gates that are not finite.
    """
    flags = () if gates is None else (torch.isfinite(gates).all(),)
    valid_lens, values = read_valid_lens(valid_lens, batch_size, num_queries, num_keys, *flags,
                                         *also, device=device)
    if flags and values[0] is not None and not values[0]:
        raise ValueError(f"head_mask must be finite, got {gates.tolist()}")
    return valid_lens, values[len(flags):]


def _read_lens_and_finite(
    queries: Tensor, keys: Tensor, values: Tensor, valid_lens: object, gates: Tensor | None
) -> tuple[CheckedLens | None, bool | None]:
    """:func:`_read_lens_and_gates` for an attention layer without a cache, and whether its
    inputs are finite (read together with the valid lengths: one host read; without valid
    lengths nothing is read and this is None: the rule for NaN and infinite inputs,
    :class:`NonFiniteRule`, is then worked out on the device).

    Shapes:
        queries: (B, Lq, .); keys, values: (B, Lk, .), the layer's inputs.
    """
    B, Lq, Lk = queries.shape[0], queries.shape[1], keys.shape[1]
    if valid_lens is None or _read_first(queries):  # (the CPU asks later, in attend_heads)
        valid_lens, _ = _read_lens_and_gates(valid_lens, B, Lq, Lk, gates, device=queries.device)
        return valid_lens, None
    valid_lens, (finite,) = _read_lens_and_gates(valid_lens, B, Lq, Lk, gates,
                                                all_finite(queries, keys, values),
                                                device=queries.device)
    return valid_lens, None if finite is None else bool(finite)
