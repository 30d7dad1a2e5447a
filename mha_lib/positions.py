"""Where position comes from: sinusoidal position tables and rotary position embeddings (RoPE).

Attention alone treats its inputs as a set (permuting the tokens permutes the output). A model
learns about order only if positions enter the computation:

* :func:`sinusoidal` the (L, D) table of Vaswani et al. (2017), added to the token embeddings;
* :func:`rotary`     RoPE (Su et al., RoFormer): rotate queries and keys by angles proportional
  to their position, so that the score of query position m and key position n depends on m - n;
* :func:`rope_permutation` the permutation of the features that turns one RoPE convention into
  the other;
* :class:`Rope` what a layer rotates by, held once (its ``qk`` pipeline, :mod:`mha_lib.qk`):
  the base, position interpolation, NTK-aware scaling, YaRN, partial rotation.

Two conventions say which features form a rotated pair (the angles are the same):

* ``pairs="interleaved"`` (this book's default): pairs ``(2i, 2i+1)``, the RoFormer paper's
  convention, also GPT-J's (``rotate_every_two``) and Meta's original LLaMA code (a complex
  number per pair, ``torch.view_as_complex``);
* ``pairs="halves"``: pairs ``(i, i + d/2)``, the convention of GPT-NeoX and of Hugging Face
  ``transformers`` (``rotate_half``; its Llama checkpoints are Meta's with the rows of W_q and
  W_k permuted, by :func:`rope_permutation`).

A model trained with one convention and run with the other computes wrong scores. Permuting
the output features of W_q and W_k (head by head) with :func:`rope_permutation` converts the
weights: the rotated queries and keys are then the same vectors with their features permuted,
and every score q . k is the same.

Shape legend
    B   batch size
    H   number of heads
    L   sequence length (Lq for queries, Lk for keys)
    d   head size (even for RoPE)
    D   model width (even for the sinusoidal table)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor

from mha_lib._checks import as_tensor, check_positive_int, check_tensor

__all__ = ["Rope", "check_rope_scale", "frequencies", "rope_permutation", "rotary", "sinusoidal"]

_PAIRS = ("interleaved", "halves")


def frequencies(width: int, base: float = 10000.0, *, device: torch.device | None = None) -> Tensor:
    """The width/2 angular frequencies ``base ** (-2i / width)``, i = 0, 1, ..., shape (width/2,).

    Raises:
        ValueError: width not an even integer >= 2, or base not a finite number > 1.
    """
    if isinstance(width, bool) or not isinstance(width, numbers.Integral) or not 2 <= width < 2**63 or width % 2:
        raise ValueError(f"width must be an even integer >= 2 (one frequency per pair), got {width!r}")
    _check_base(base)
    return float(base) ** (-torch.arange(0, width, 2, dtype=torch.float64, device=device) / width)


def sinusoidal(L: int, D: int, base: float = 10000.0) -> Tensor:
    """The sinusoidal position table of Vaswani et al.: sine on even columns, cosine on odd.

    ``P[pos, 2i] = sin(pos / base**(2i/D))`` and ``P[pos, 2i+1] = cos(pos / base**(2i/D))``.
    Column pair i turns like a clock hand at its own speed; low i fast, high i slowly.

    Shapes:
        returns: (L, D), float32. Add it to token embeddings of shape (B, L, D).

    Args:
        L: number of positions, >= 0.
        D: model width, even and >= 2.
        base: the wavelength scale, > 1 (10000 in the paper).
    """
    _check_table_args(L, D, base)
    angles = torch.arange(L, dtype=torch.float64)[:, None] * frequencies(D, base)  # (L, D/2)
    table = torch.empty(L, D, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()
    return table.float()


def rotary(x: Tensor, positions: Tensor, base: float = 10000.0, *,
           pairs: str = "interleaved", scale: float = 1.0, freqs: Tensor | None = None) -> Tensor:
    """Rotary position embedding (RoPE, Su et al.): rotate queries or keys by their positions.

    Feature pair i at position p is rotated by the angle ``scale * p * base**(-2i/d)``,
    i = 0 .. d/2 - 1 (``scale = 1``: plain RoPE).
    Rotations preserve lengths, and the dot product of a query rotated to position m with a key
    rotated to position n depends only on m - n. Which features form pair i is a convention:

    * ``pairs="interleaved"`` (default): features ``(2i, 2i+1)``, as in the RoFormer paper,
      GPT-J and Meta's original LLaMA code;
    * ``pairs="halves"``: features ``(i, i + d/2)``, as GPT-NeoX and Hugging Face
      ``transformers`` (``rotate_half``, its Llama models) rotate.

    ``rotary(x[..., perm], p, pairs="halves") == rotary(x, p)[..., perm]`` with
    ``perm = rope_permutation(d)``: see :func:`rope_permutation`.

    *Position interpolation* (Chen et al., 2023) runs a model trained on sequences of length L
    at a longer length L' with ``scale = L / L'``: position p gets the angles of position
    p * L / L', so every angle stays inside the range seen in training (the positions become
    fractions; the offsets between them shrink by the same factor). Hugging Face's ``"linear"``
    RoPE scaling with ``factor`` f is ``scale = 1 / f``.

    Shapes:
        x: (B, H, L, d), d even (queries or keys, after the heads are split)
        positions: (L,) the same for every example, (B, L) one row per example (shared by the
            heads), or a 3-D integer tensor that broadcasts to (B, H, L)
        returns: (B, H, L, d), same dtype as ``x``

    Args:
        x: queries or keys.
        positions: the position of every row of ``x`` (integers; e.g. an offset past a KV cache).
        base: the wavelength scale, > 1.
        pairs: ``"interleaved"`` or ``"halves"``, the convention above.
        scale: a finite number > 0 multiplying every angle (position interpolation: L / L').
        freqs: the d/2 frequencies (float64) instead of ``base**(-2i/d)`` (NTK, YaRN:
            :class:`Rope`); None: those.
    """
    positions = _check_rotary_args(x, positions, base)
    scale = check_rope_scale(scale)
    if pairs not in _PAIRS:
        raise ValueError(f"pairs must be one of {_PAIRS}, got {pairs!r}")
    if positions.dim() == 2:
        positions = positions[:, None]  # (B, L) -> (B, 1, L): the same for every head
    d = x.shape[-1]
    freqs = frequencies(d, base, device=x.device) if freqs is None else freqs.to(x.device)
    angles = positions[..., None].double() * freqs  # (..., L, d/2)
    if scale != 1.0:  # (scale 1: the same bits as plain RoPE)
        angles = angles * scale
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if pairs == "halves":
        first, second = x[..., : d // 2], x[..., d // 2 :]  # (B, H, L, d) -> 2 x (B, H, L, d/2)
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (B, H, L, d) -> 2 x (B, H, L, d/2)
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)  # (B, H, L, d/2, 2) -> (B, H, L, d), pairs back in place


def rope_permutation(d: int, num_heads: int = 1) -> Tensor:
    """The permutation of the features that maps the interleaved RoPE convention onto halves.

    Interleaved feature ``2i`` becomes halves feature ``i`` and ``2i+1`` becomes ``i + d/2``:
    ``perm = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]``, and ``x[..., perm]`` puts interleaved pairs
    where the halves convention expects them, so that
    ``rotary(x[..., perm], p, pairs="halves") == rotary(x, p, pairs="interleaved")[..., perm]``.
    Permuting both queries and keys leaves every score q . k unchanged, so a model converts
    from interleaved to halves by permuting the output features (rows) of W_q and W_k:
    ``W.weight[perm]`` (and ``W.bias[perm]``); W_v and W_o stay as they are. This is what
    Hugging Face's script ``convert_llama_weights_to_hf.py`` does to Meta's checkpoints.
    ``torch.argsort(perm)`` is the permutation the other way (halves to interleaved).

    Shapes:
        returns: (H*d,) ``torch.long``, each head's d features permuted within the head
        (index ``h*d + j``), so that it indexes the D = H*d outputs of W_q or W_k directly.

    Args:
        d: the head size, even and >= 2.
        num_heads: H, the number of heads; 1 permutes one head's d features.
    """
    d = check_positive_int(d, "d")
    if d % 2:
        raise ValueError(f"d must be an even integer >= 2 (features are rotated in pairs), got {d}")
    H = check_positive_int(num_heads, "num_heads")
    one_head = torch.arange(d).reshape(d // 2, 2).T.reshape(d)  # (d/2, 2) -> (2, d/2) -> (d,)
    return (torch.arange(H)[:, None] * d + one_head).reshape(H * d)  # (H, d) -> (H*d,)


@dataclass(frozen=True)
class Rope:
    """What a layer rotates its queries and keys by: a position spec, held once by the layer.

    ``Rope()`` is plain RoPE at base 10000 (:func:`rotary`); each other field changes one thing:

    * ``base``: the wavelength scale (Llama 3: 500000; Gemma 3: one base per kind of layer);
    * ``scale``: position interpolation (Chen et al., 2023, arXiv:2306.15595): every angle times
      ``scale = L / L'`` to run at length L' a model trained at length L;
    * ``ntk``: NTK-aware scaling (bloc97, 2023; Peng et al., 2023, section 3.1) for ``ntk``
      times the length: the base becomes ``base * ntk ** (r / (r - 2))`` (r: the rotated
      features), so the slowest pair is interpolated and the fastest barely changes;
    * ``yarn``: YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large
      Language Models", arXiv:2309.00071) for ``yarn = s`` times ``original_length``: pair i,
      whose wavelength fits ``rotations = original_length * freq_i / (2 pi)`` times in the
      trained length, keeps its frequency above ``beta_fast`` rotations, is interpolated
      (``freq_i / s``) below ``beta_slow``, and ramps in between, linearly in i as the
      paper's code and ``transformers`` do (:meth:`frequencies`); cos and sin are multiplied
      by ``attention_factor`` (default ``0.1 ln s + 1``), the scores by its square;
    * ``partial``: the fraction of each head's features rotated (the first ``partial * d``,
      as GPT-NeoX's ``rotary_pct``); the others pass unrotated.

    No RoPE at all (NoPE) is ``rope=False`` (None) on the layer.
    """

    base: float = 10000.0
    scale: float = 1.0
    ntk: float = 1.0
    yarn: float = 1.0
    original_length: int | None = None
    attention_factor: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    partial: float = 1.0

    def __post_init__(self) -> None:
        _check_base(self.base)
        for name in ("scale", "ntk", "yarn", "beta_fast", "beta_slow", "partial"):
            object.__setattr__(self, name, check_rope_scale(getattr(self, name), f"rope.{name}"))
        if sum(getattr(self, name) != 1.0 for name in ("scale", "ntk", "yarn")) > 1:
            raise ValueError(f"rope scales one way: at most one of scale, ntk, yarn differs from 1, got {self}")
        if self.partial > 1:
            raise ValueError(f"rope.partial must be in (0, 1] (the fraction rotated), got {self.partial}")
        if self.yarn != 1.0 and self.original_length is None:
            raise ValueError("rope.original_length (the trained length) is needed with yarn != 1")
        if self.original_length is not None:
            check_positive_int(self.original_length, "rope.original_length")
        if self.attention_factor is not None:
            object.__setattr__(self, "attention_factor",
                               check_rope_scale(self.attention_factor, "rope.attention_factor"))

    def rotated(self, d: int) -> int:
        """r, the features of a head of size d that rotate: ``int(d * partial)``, even, >= 2
        (>= 4 with ``ntk``); a ValueError naming ``rope`` otherwise."""
        r = int(d * self.partial)
        if r < 2 or r % 2 or (self.ntk != 1.0 and r < 4):
            raise ValueError(f"rope rotates pairs: d * partial = {d} * {self.partial} must be an "
                             f"even integer >= {4 if self.ntk != 1.0 else 2}, got {r}")
        return r

    def factor(self) -> float:
        """The factor of cos and sin: YaRN's attention factor, else 1."""
        if self.attention_factor is not None:
            return self.attention_factor
        return 0.1 * math.log(self.yarn) + 1.0 if self.yarn > 1 else 1.0

    def frequencies(self, d: int, device: torch.device | None = None) -> Tensor:
        """The r/2 angular frequencies of a head of size d (float64), after NTK or YaRN."""
        r = self.rotated(d)
        if self.ntk != 1.0:
            return frequencies(r, self.base * self.ntk ** (r / (r - 2)), device=device)
        theta = frequencies(r, self.base, device=device)  # (r/2,)
        if self.yarn == 1.0:
            return theta

        def pair(rotations: float) -> float:  # the i where the trained length holds `rotations` turns
            return r * math.log(self.original_length / (rotations * 2 * math.pi)) / (2 * math.log(self.base))

        low, high = max(math.floor(pair(self.beta_fast)), 0), min(math.ceil(pair(self.beta_slow)), r - 1)
        i = torch.arange(r // 2, dtype=torch.float64, device=device)
        ramp = ((i - low) / (high - low if high != low else 1e-3)).clamp(0, 1)  # 0: keep, 1: interpolate
        return theta / self.yarn * ramp + theta * (1 - ramp)

    def __call__(self, x: Tensor, positions: Tensor, pairs: str = "interleaved") -> Tensor:
        """``x`` (B, H, L, d) rotated at ``positions`` (as :func:`rotary`'s), the first r
        features; returns (B, H, L, d)."""
        _check_rotary_args(x, positions, self.base)
        d = x.shape[-1]
        r = self.rotated(d)
        turned = rotary(x[..., :r], positions, self.base, pairs=pairs, scale=self.scale,
                        freqs=self.frequencies(d, x.device))  # (B, H, L, r)
        if self.factor() != 1.0:  # (YaRN: cos and sin times the factor)
            turned = turned * self.factor()
        return turned if r == d else torch.cat([turned, x[..., r:]], dim=-1)  # (B, H, L, d)


def check_rope_scale(scale: object, name: str = "scale") -> float:
    """``scale`` as a float, checked to be a finite number > 0 (a ValueError naming ``name``)."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not 0 < scale < math.inf:
        raise ValueError(f"{name} must be a finite number > 0 (the factor of every RoPE angle), "
                         f"got {scale!r}")
    return float(scale)


def _check_base(base: object) -> None:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not 1 < base < math.inf:
        raise ValueError(f"base must be a finite number > 1, got {base!r}")


def _check_table_args(L: object, D: object, base: object) -> None:
    if isinstance(L, bool) or not isinstance(L, numbers.Integral) or not 0 <= L < 2**63:
        raise ValueError(f"L must be an integer >= 0 (the number of positions), got {L!r}")
    if isinstance(D, bool) or not isinstance(D, numbers.Integral) or not 2 <= D < 2**63 or D % 2:
        raise ValueError(
            f"D must be an even integer >= 2 (sine and cosine columns come in pairs), got {D!r}"
        )
    _check_base(base)


def _check_rotary_args(x: object, positions: object, base: object) -> Tensor:
    """Check the arguments of :func:`rotary`; return the positions as a tensor on x's device."""
    check_tensor(x, "x", 4)
    d = x.shape[-1]
    if d % 2:
        raise ValueError(
            f"x must have an even head size d (features are rotated in pairs), "
            f"got d = {d} (shape {tuple(x.shape)})"
        )
    positions = as_tensor(positions, "positions", "a tensor of integers")  # (not on meta)
    if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
        raise ValueError(f"positions must hold integers, got dtype {positions.dtype}")
    B, H, L, _ = x.shape
    if positions.dim() == 0 or positions.dim() > 3 or positions.shape[-1] != L:
        raise ValueError(
            f"positions must have shape (L,) = ({L},), (B, L) = ({B}, {L}) or broadcast to "
            f"(B, H, L) = ({B}, {H}, {L}), got {tuple(positions.shape)}"
        )
    per_head = positions[:, None] if positions.dim() == 2 else positions  # (B, L) -> (B, 1, L)
    try:
        fits = torch.broadcast_shapes(per_head.shape, (B, H, L)) == (B, H, L)
    except RuntimeError:
        fits = False
    if not fits:
        want = f"(B, L) = ({B}, {L})" if positions.dim() == 2 else f"(B, H, L) = ({B}, {H}, {L})"
        raise ValueError(f"positions of shape {tuple(positions.shape)} do not broadcast to {want}")
    _check_base(base)
    return positions.to(x.device)
