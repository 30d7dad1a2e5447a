"""The FlexAttention route: any mask and score modification of the library, run by PyTorch's
``flex_attention`` (``torch.compile``-d), on the CPU and on CUDA.

Shape legend
    B    batch size
    H    number of (query) heads
    Hkv  number of key/value heads (dividing H)
    Lq   number of queries
    Lk   number of key-value pairs
    P    Lq or Lk rounded up to a whole number of FlexAttention's blocks (128)
    d    head size

An attention layer built with ``backend="flex"`` (``MultiHeadAttention``,
``GroupedQueryAttention``) sends its calls here; ``backend="auto"`` (the default, the book's)
keeps the fused kernel and the weights path. What the route does:

* a :class:`~mha_lib.masks.Mask` becomes a ``BlockMask`` through
  :meth:`~mha_lib.masks.Mask.flex_mask_mod` (each kind has its closed form; a mask of your
  own, a lookup in its dense mask), built once per mask object and shape
  (:func:`_cached_block_mask`: the mask, B, Lq, Lk, sinks, device; a mask made anew for every
  call, such as the layers' ``valid_lens``, is lowered at every call);
* a :class:`~mha_lib.scores.ScoreMod` becomes a ``score_mod`` through
  :meth:`~mha_lib.scores.ScoreMod.flex_score_mod` (settings as tensors: no compile per value);
* learned sink logits (gpt-oss) become one more key of zeros whose score is the sink logit,
  as in the fused kernel's path (FlexAttention's ``return_lse`` does not compile on the CPU);
* the compile is paid once per shape (and per kind of mask and modification), a few seconds
  to tens of seconds on a CPU (``python -m mha_lib.bench flex`` states it), then reused.

Lq and Lk are padded to whole blocks of 128 (keys past Lk hidden, queries past Lq dropped):
with torch 2.13's CPU kernel, a row of the last head came out zero at L = 40 (not at 39, 41,
64 or 128); padded to whole blocks it is right.

The calls that keep the layer's default paths: the weights (``need_weights=True``: FlexAttention
returns none), dropout in training mode (FlexAttention has none), decoding with a cache, no keys,
and inputs the layer's guards would change (non-finite values, scores that could overflow:
one value read to the host decides, as on the CPU's default path). Refused with a
``ValueError``: on the CPU, a call that autograd records (the compiled CPU kernel computes
inference only: run under ``torch.no_grad()``) and float64 inputs (float32, float16 and
bfloat16 only). Where ``torch.compile`` cannot build the kernel (no C++ compiler, no Triton),
:class:`FlexUnavailable`.
"""

from __future__ import annotations

import weakref
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib.attention import DotProductAttention, guards_change_nothing
from mha_lib.masks import Mask
from mha_lib.scores import ScoreMod

__all__ = ["FlexUnavailable", "attend_flex", "check_backend",
           "flex_attention_heads"]

#: The values of an attention layer's ``backend``: its default paths, or FlexAttention.
_BACKENDS = ("auto", "flex")
#: FlexAttention's block: queries and keys are padded to whole blocks.
_BLOCK = 128
#: How many kernels (shapes, kinds of mask and modification) the route compiles before
#: ``torch.compile`` gives up and runs FlexAttention unfused.
_RECOMPILE_LIMIT = 128

#: Per mask object (weakly: a mask dropped by its owner leaves the cache), its block masks by shape.
_BLOCK_MASKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: The block masks of calls without a mask (padding and sinks only), by shape.
_NO_MASK: dict = {}
#: ``torch.compile(flex_attention)``, made at the first call.
_COMPILED: dict[str, Callable] = {}


class FlexUnavailable(RuntimeError):
    """``torch.compile`` could not build FlexAttention's kernel on this machine."""


def check_backend(backend: object) -> str:
    """``backend`` if it is one of :data:`_BACKENDS`, else a ``ValueError`` naming it."""
    if not isinstance(backend, str) or backend not in _BACKENDS:
        raise ValueError(f'backend must be "auto" (the default paths) or "flex" (FlexAttention), '
                         f"got {backend!r}")
    return backend


def _compiled() -> Callable:
    if "fn" not in _COMPILED:
        from torch.nn.attention.flex_attention import flex_attention

        _COMPILED["fn"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["fn"]


def _padded(n: int) -> int:
    return max(_BLOCK, -(-n // _BLOCK) * _BLOCK)


def _cached_block_mask(mask: Mask | None, batch_size: int, num_queries: int, num_keys: int, *,
                      device: torch.device | str, sink: bool = False):
    """The ``BlockMask`` of ``mask`` for Lq queries and Lk keys at positions 0, 1, ..., padded
    to whole blocks (P_q, P_k): the keys past Lk hidden; with ``sink``, key Lk seen by every
    query (the sink key). Made once per mask object and (B, Lq, Lk, sink, device).

    Raises:
        ValueError: as :meth:`mha_lib.masks.Mask.dense` (data that does not fit the sizes).
    """
    from torch.nn.attention.flex_attention import create_block_mask

    key = (batch_size, num_queries, num_keys, sink, str(torch.device(device)))
    cache = _NO_MASK if mask is None else _BLOCK_MASKS.setdefault(mask, {})
    if key not in cache:
        Lk = torch.tensor(num_keys, device=device)  # (an input of the kernel, as the masks' settings)
        keep = (lambda b, h, i, j: True) if mask is None else mask.flex_mask_mod(
            batch_size, num_queries, num_keys, device=device)

        def inner(b, h, i, j):  # (the padded keys hidden)
            return (j < Lk) & keep(b, h, i, j)

        mask_mod = (lambda b, h, i, j: (j == Lk) | inner(b, h, i, j)) if sink else inner
        cache[key] = create_block_mask(mask_mod, batch_size, None, _padded(num_queries),
                                       _padded(Lk + sink), device=device)
    return cache[key]


def flex_attention_heads(q: Tensor, k: Tensor, v: Tensor, mask: Mask | None = None, *,
                         score_mod: ScoreMod | None = None, sinks: Tensor | None = None,
                         positions: Tensor | None = None) -> Tensor:
    """Attention of every head through FlexAttention: the same numbers as the layers' default
    paths (a query that sees no key gets zeros).

    Shapes:
        q: (B, H, Lq, d); k, v: (B, Hkv, Lk, d)
        mask: queries and keys at positions 0, 1, ...
        sinks: (H,) sink logits, or None
        positions: (B, L) the true positions the modification reads (a self-attention, with
            RoPE), or None (0, 1, ...)
        returns: (B, H, Lq, d)

    Raises:
        ValueError: on the CPU, a call autograd records or float64 inputs; a mask whose data
            does not fit; a modification without a FlexAttention form.
        FlexUnavailable: ``torch.compile`` cannot build the kernel here.
    """
    B, H, Lq, d = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    if q.device.type == "cpu":
        if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v, sinks) if x is not None):
            raise ValueError('backend="flex" on the CPU computes inference only (torch 2.13): call '
                             'under torch.no_grad(), or use backend="auto" to train')
        if q.dtype == torch.float64:
            raise ValueError('backend="flex" on the CPU takes float32, float16 or bfloat16 inputs, '
                             'got float64: use backend="auto" for float64')
    sink = sinks is not None
    block_mask = _cached_block_mask(mask, B, Lq, Lk, device=q.device, sink=sink)
    if sink:  # one more key of zeros (score: the sink logit, value 0): (B, Hkv, Lk + 1, d)
        zero = k.new_zeros(B, Hkv, 1, d)
        k, v = torch.cat([k, zero], 2), torch.cat([v, zero], 2)
    Pq, Pk = _padded(Lq), _padded(Lk + sink)
    q = F.pad(q, (0, 0, 0, Pq - Lq))  # (B, H, Lq, d) -> (B, H, Pq, d)
    k, v = (F.pad(x, (0, 0, 0, Pk - x.shape[2])) for x in (k, v))  # (B, Hkv, Lk (+1), d) -> (B, Hkv, Pk, d)
    # (a compiled kernel per shape and kind of mask and modification: more than dynamo's 8)
    patch = torch._dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT)
    try:
        with patch:
            out = _compiled()(q, k, v, score_mod=_score_mod(score_mod, sinks, positions, Lk, q.device),
                              block_mask=block_mask, enable_gqa=Hkv != H)  # (B, H, Pq, d)
    except torch._dynamo.exc.TorchDynamoException as err:  # (InductorError, BackendCompilerFailed)
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise FlexUnavailable(f'backend="flex": torch.compile cannot build FlexAttention on '
                              f'{q.device.type} here ({first}); use backend="auto"') from err
    return out[:, :, :Lq]  # (B, H, Pq, d) -> (B, H, Lq, d)


def _score_mod(score_mod: ScoreMod | None, sinks: Tensor | None, positions: Tensor | None,
               num_keys: int, device: torch.device) -> Callable | None:
    """FlexAttention's ``score_mod``: the modification at the true positions, and the sink key's
    score (key Lk: the head's sink logit); None when there is neither."""
    if score_mod is None and sinks is None:
        return None
    mod = None if score_mod is None else score_mod.flex_score_mod(device)
    if mod is not None and positions is not None:  # (B, L): index -> true position
        pos, last = positions.to(device), positions.shape[1] - 1
        inner = mod

        def mod(s, b, h, i, j):
            return inner(s, b, h, pos[b, i.clamp(max=last)], pos[b, j.clamp(max=last)])
    if sinks is None:
        return mod
    logits, Lk = sinks.detach().to(device), torch.tensor(num_keys, device=device)

    def with_sink(s, b, h, i, j):
        s_mod = s if mod is None else mod(s, b, h, i, j)
        return torch.where(j == Lk, logits[h].to(s.dtype), s_mod)

    return with_sink


def attend_flex(q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, attention: DotProductAttention, *,
                need_weights: bool = False, gates: Tensor | None = None, positions: Tensor | None = None,
                score_mod: ScoreMod | None = None, sinks: Tensor | None = None) -> Tensor | None:
    """An attention layer's call with ``backend="flex"`` (no cache): (B, H, Lq, d) from q
    (B, H, Lq, d), k, v (B, Hkv, Lk, d), times the head gates (B, H); or None where the call
    keeps the default paths (weights asked for, dropout in training, no keys, inputs the guards
    would change: see the module).

    Raises:
        as :func:`flex_attention_heads`.
    """
    if need_weights or k.shape[2] == 0 or (attention.training and attention.dropout.p > 0):
        return None
    if not bool(guards_change_nothing(q, k, v)):  # (one value read: the guards change something)
        return None
    out = flex_attention_heads(q, k, v, mask, score_mod=score_mod, sinks=sinks, positions=positions)
    return out if gates is None else out * gates[:, :, None, None]  # (B, H) -> (B, H, 1, 1)
