"""Score modifications: what today's models do to ``Q K^T / sqrt(d)`` before the mask.

Shape legend
    B   batch size (1 where every example has the same positions)
    H   number of (query) heads
    Lq  number of queries
    Lk  number of key-value pairs

A mask says which keys a query may see; a *score modification* changes the score of a pair it
may see, from the score itself, the head and the TRUE positions of the query and the key (with a
KV cache: their absolute positions). Every attention path computes

    scores = Q K^T / sqrt(d)  ->  modification  ->  mask  ->  softmax

through one context (:class:`mha_lib.masking.Visible`), which also decides whether PyTorch's
fused kernel can take the call: an *additive* modification (ALiBi) becomes a float bias of
the kernel's ``attn_mask``; any other (soft-capping) needs the scores, so the call takes the
weights path.

* :func:`alibi` (BLOOM, MPT; Press et al., 2022): ``score - slope_h * (i - j)``, additive.
  FlexAttention: ``score_mod = lambda s, b, h, q, k: s - slope[h] * (q - k)``.
* :func:`softcap` (Gemma 2): ``cap * tanh(score / cap)``, not additive.
  FlexAttention: ``score_mod = lambda s, b, h, q, k: cap * torch.tanh(s / cap)``.
* :func:`temperature` (Llama 4): ``score * (1 + scale * log(floor((i + 1) / floor_scale) + 1))``,
  sharper for later queries, not additive. FlexAttention: ``score_mod = lambda s, b, h, q, k:
  s * (1 + scale * torch.log(torch.floor((q + 1) / floor_scale) + 1))``.
* ``first >> then``: both, ``first`` first (additive when both are).

:meth:`ScoreMod.flex_score_mod` gives that ``score_mod`` (``backend="flex"`` of the layers,
:mod:`mha_lib.flex`). A modification of your own subclasses :class:`ScoreMod` (override :meth:`ScoreMod.__call__`,
or :meth:`ScoreMod.bias` with ``additive = True``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from mha_lib._checks import check_positive_int, check_positive_number

__all__ = ["ScoreMod", "alibi", "softcap", "temperature"]


class ScoreMod:
    """A score modification (see the module docstring).

    Attributes:
        num_heads: H when it depends on the head (the layer's H must match), else None.
        additive: True when it is ``score + bias(q_idx, kv_idx)``: the fused kernel can then
            take it as a float mask.

    Shapes (of :meth:`__call__` and :meth:`bias`):
        scores: (B or 1, H, Lq, Lk), float
        q_idx: (B or 1, 1, Lq, 1) long, the queries' true positions
        kv_idx: (B or 1, 1, 1, Lk) long, the keys' true positions
        returns: broadcastable to (B, H, Lq, Lk)
    """

    num_heads: int | None = None
    additive: bool = False

    def __call__(self, scores: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        """The modified scores (a new tensor)."""
        return scores + self.bias(q_idx, kv_idx).to(scores.dtype)

    def bias(self, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        """The additive part, for ``additive`` modifications (float32)."""
        raise NotImplementedError(f"{type(self).__name__} is not additive")

    def for_heads(self, heads: Sequence[int]) -> "ScoreMod":
        """The modification of the heads ``heads`` alone (a layer whose heads were pruned)."""
        if self.num_heads is None:
            return self
        raise NotImplementedError(f"{type(self).__name__} cannot keep some of its heads")

    def flex_score_mod(self, device: torch.device | str | None = None) -> Callable:
        """The modification as FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx)`` (0-d
        tensors: one score, its example, head, query and key position), its settings captured
        as tensors on ``device``. A modification of your own that reads no head is called on
        the one score; one that reads the head overrides this method.

        Raises:
            ValueError: a modification that reads the head without a FlexAttention form.
        """
        if self.num_heads is not None:
            raise ValueError(f"score_mod {self!r} reads the head and has no FlexAttention form: "
                             "override ScoreMod.flex_score_mod")
        return lambda s, b, h, i, j: self(s, i, j)

    def __rshift__(self, then: "ScoreMod") -> "ScoreMod":
        """``self`` first, then ``then``."""
        if not isinstance(then, ScoreMod):
            raise ValueError(f"a ScoreMod composes with a ScoreMod, got {type(then).__name__}")
        return _Composed(self, then)


class _Composed(ScoreMod):
    """Two modifications, one after the other."""

    def __init__(self, first: ScoreMod, then: ScoreMod) -> None:
        heads = {m.num_heads for m in (first, then)} - {None}
        if len(heads) > 1:
            raise ValueError(f"the modifications disagree on the number of heads: {sorted(heads)}")
        self.first, self.then = first, then
        self.num_heads = heads.pop() if heads else None
        self.additive = first.additive and then.additive

    def __call__(self, scores: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return self.then(self.first(scores, q_idx, kv_idx), q_idx, kv_idx)

    def bias(self, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return self.first.bias(q_idx, kv_idx) + self.then.bias(q_idx, kv_idx)

    def for_heads(self, heads: Sequence[int]) -> ScoreMod:
        return _Composed(self.first.for_heads(heads), self.then.for_heads(heads))

    def flex_score_mod(self, device=None):
        first, then = self.first.flex_score_mod(device), self.then.flex_score_mod(device)
        return lambda s, b, h, i, j: then(first(s, b, h, i, j), b, h, i, j)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Composed) and (self.first, self.then) == (other.first, other.then)

    __hash__ = None  # (equal by value)

    def __repr__(self) -> str:
        return f"{self.first!r} >> {self.then!r}"


class _Alibi(ScoreMod):
    additive = True

    def __init__(self, slopes: Tensor) -> None:
        self.slopes, self.num_heads = slopes, slopes.shape[0]
        self._numbers = slopes.tolist()  # (made on the positions' device: no copy of a tensor)

    def bias(self, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        slopes = torch.tensor(self._numbers, device=q_idx.device)[None, :, None, None]  # (1, H, 1, 1)
        return -slopes * (q_idx - kv_idx)  # (B or 1, H, Lq, Lk)

    def for_heads(self, heads: Sequence[int]) -> ScoreMod:
        return _Alibi(self.slopes[list(heads)])

    def flex_score_mod(self, device=None):
        slopes = self.slopes.to(device)  # (H,) float32, as the bias
        return lambda s, b, h, i, j: s + (-slopes[h] * (i - j)).to(s.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Alibi) and torch.equal(self.slopes, other.slopes)

    __hash__ = None  # (equal by value)

    def __repr__(self) -> str:
        return f"alibi({self.num_heads}, slopes={self.slopes.tolist()})"


def alibi(num_heads: int, slopes: Sequence[float] | Tensor | None = None) -> ScoreMod:
    """ALiBi: head h adds ``-slope_h * (i - j)`` to the score of query position i and key j.

    A query then prefers near keys, each head at its own distance scale. Default slopes
    ``2^(-8h/H)``, h = 1..H (Press et al., 2022).

    A trap: with a KV cache, a wrong query offset shifts i by a constant c in every row, which
    adds ``-slope_h * c`` to the whole row: the softmax does not change. So ALiBi cannot reveal
    a wrong cache offset; only a modification that reads the absolute position can.

    Raises:
        ValueError: num_heads not a positive int; slopes not H finite numbers.
    """
    H = check_positive_int(num_heads, "num_heads")
    if slopes is None:
        slopes = torch.exp2(-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    try:
        slopes = torch.as_tensor(slopes, dtype=torch.float64).detach().cpu()
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"slopes must be H = {H} numbers, got {slopes!r}") from None
    if slopes.shape != (H,) or not torch.isfinite(slopes).all():
        raise ValueError(f"slopes must be H = {H} finite numbers, got {slopes.tolist()}")
    return _Alibi(slopes.float())


class _Softcap(ScoreMod):
    def __init__(self, cap: float) -> None:
        self.cap = cap

    def __call__(self, scores: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        capped = scores / self.cap  # (a new tensor: tanh and the product may write over it)
        return capped.tanh_().mul_(self.cap) if not capped.requires_grad else capped.tanh() * self.cap

    def flex_score_mod(self, device=None):
        # (a tensor: an input of the compiled kernel, not a constant compiled per cap)
        cap = torch.tensor(self.cap, dtype=torch.float64, device=device)
        return lambda s, b, h, i, j: torch.tanh(s / cap.to(s.dtype)) * cap.to(s.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Softcap) and self.cap == other.cap

    __hash__ = None  # (equal by value)

    def __repr__(self) -> str:
        return f"softcap({self.cap})"


def softcap(cap: float) -> ScoreMod:
    """Logit soft-capping (Gemma 2): ``score = cap * tanh(score / cap)``, every score in
    (-cap, cap); near 0 it changes nothing, and as cap grows it becomes the identity.

    Raises:
        ValueError: cap not a positive finite number.
    """
    return _Softcap(check_positive_number(cap, "cap"))


class _Temperature(ScoreMod):
    def __init__(self, floor_scale: float, scale: float) -> None:
        self.floor_scale, self.scale = floor_scale, scale

    def __call__(self, scores: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        steps = torch.floor((q_idx + 1).to(scores.dtype) / self.floor_scale)  # (B or 1, 1, Lq, 1)
        return scores * (1 + self.scale * torch.log1p(steps))

    def flex_score_mod(self, device=None):
        floor_scale, scale = (torch.tensor(x, dtype=torch.float64, device=device)
                              for x in (self.floor_scale, self.scale))

        def score_mod(s, b, h, i, j):
            steps = torch.floor((i + 1).to(s.dtype) / floor_scale.to(s.dtype))
            return s * (1 + scale.to(s.dtype) * torch.log1p(steps))

        return score_mod

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Temperature) and (self.floor_scale, self.scale) == (other.floor_scale, other.scale)

    __hash__ = None  # (equal by value)

    def __repr__(self) -> str:
        return f"temperature({self.floor_scale}, {self.scale})"


def temperature(floor_scale: float = 8192.0, scale: float = 0.1) -> ScoreMod:
    """Llama 4's temperature by position: the scores of query position i are multiplied by
    ``1 + scale * log(floor((i + 1) / floor_scale) + 1)``, 1 for the first ``floor_scale - 1``
    positions and growing slowly after: a query far into a long context keeps a sharp softmax
    over many keys. It reads the query's absolute position, so a wrong cache offset changes it.

    Raises:
        ValueError: floor_scale or scale not a positive finite number.
    """
    return _Temperature(check_positive_number(floor_scale, "floor_scale"), check_positive_number(scale, "scale"))
