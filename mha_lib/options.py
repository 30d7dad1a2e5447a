"""An attention layer's options, declared once: what a layer holds besides its projections.

Every option of :class:`~mha_lib.multihead.MultiHeadAttention` and
:class:`~mha_lib.gqa.GroupedQueryAttention` beside their sizes is a name in
:attr:`AttentionOptions.OPTIONS`, with its default. One method builds what the options ask for
(:meth:`AttentionOptions._init_options`); ``TransformerBlock`` passes them on by those names;
and a converter to another library refuses, through one check (:meth:`check_options`), each
option it does not map, by name. A new option is one entry here and one branch of
``_init_options``: nothing downstream can forget it silently.

* ``score_mod``: a :class:`~mha_lib.scores.ScoreMod` (ALiBi, soft-capping, ...);
* ``sink_logits``: a learned logit per head that joins every softmax (gpt-oss);
* ``gate``: each head's output times a sigmoid gate, per head or per feature;
* ``qk_norm``: RMSNorm of queries and keys, per head or over the width (:mod:`mha_lib.qk`);
* ``rope``, ``rope_scale`` (``GroupedQueryAttention``): positions, a
  :class:`~mha_lib.positions.Rope` (``True``: ``Rope(scale=rope_scale)``).
"""

from __future__ import annotations

import torch
from torch import nn

from mha_lib._checks import check_bool
from mha_lib.positions import Rope, check_rope_scale
from mha_lib.qk import QKTransform
from mha_lib.scores import ScoreMod

__all__ = ["AttentionOptions"]


class AttentionOptions(nn.Module):
    """The options part of an attention layer (see the module); the layer sets ``num_heads``,
    ``num_kv_heads`` and ``head_size`` before calling :meth:`_init_options`."""

    #: Every option beside the sizes, with its default (``GroupedQueryAttention`` adds RoPE's).
    OPTIONS = {"score_mod": None, "sink_logits": False, "gate": None, "qk_norm": None}
    rope = False  # (whether the layer rotates queries and keys)

    def _init_options(self, query_size: int, *, score_mod: ScoreMod | None = None,
                      sink_logits: bool = False, gate: str | None = None, qk_norm: str | None = None,
                      rope: bool | Rope = False, rope_scale: float = 1.0) -> None:
        """Build what the options ask for: ``self.score_mod``; ``self.sink_logits``, a
        parameter (H,) or None; ``self.gate``, an ``nn.Linear`` from the queries' input
        (``query_size`` features) to a logit per head (``"head"``) or per feature
        (``"element"``), or None; ``self.qk``, the queries' and keys' pipeline
        (:class:`~mha_lib.qk.QKTransform`: ``qk_norm``, then positions)."""
        if score_mod is not None and not isinstance(score_mod, ScoreMod):
            raise ValueError("score_mod must be a mha_lib.scores.ScoreMod (alibi(H), softcap(cap), "
                             f"...) or None, got {type(score_mod).__name__}")
        if score_mod is not None and score_mod.num_heads not in (None, self.num_heads):
            raise ValueError(f"score_mod is for {score_mod.num_heads} heads, the layer has "
                             f"num_heads = {self.num_heads}")
        self.score_mod = score_mod
        self.sink_logits = nn.Parameter(torch.zeros(self.num_heads)) if check_bool(
            sink_logits, "sink_logits") else None
        if gate not in (None, "head", "element"):
            raise ValueError(f'gate must be None, "head" or "element", got {gate!r}')
        width = self.num_heads if gate == "head" else self.num_heads * self.head_size
        self.gate = None if gate is None else nn.Linear(query_size, width)
        spec = _rope_spec(rope, rope_scale, self.head_size)
        self.qk = QKTransform(qk_norm, spec, self.num_heads, self.num_kv_heads, self.head_size)
        self.rope = spec is not None

    def check_options(self, target: str, maps: tuple[str, ...] = (), name: str = "the layer") -> None:
        """Raise a ``ValueError`` naming the first option that is not its default and not in
        ``maps``: a converter to ``target`` refuses, by name, each option it does not map
        (``name``: the converter's argument)."""
        for option, default in type(self).OPTIONS.items():
            value = getattr(self.settings, option)
            if option not in maps and value != default:
                raise ValueError(f"{target} has no {option}: {name} must have {option}={default!r}, "
                                 f"got {option}={value!r}")


def _rope_spec(rope: bool | Rope, rope_scale: float, head_size: int) -> Rope | None:
    """The layer's position spec: ``rope=True`` is ``Rope(scale=rope_scale)``, a ``Rope`` is
    itself (``rope_scale`` 1), False is None (``rope_scale`` 1)."""
    scale = check_rope_scale(rope_scale, "rope_scale")
    if isinstance(rope, Rope):
        if scale != 1.0:
            raise ValueError(f"rope_scale must be 1 with rope=Rope(...) (say Rope(scale=...)), got {rope_scale!r}")
        return rope
    if not check_bool(rope, "rope"):
        if scale != 1.0:
            raise ValueError(f"rope_scale scales the RoPE angles: it must be 1 without rope=True, "
                             f"got rope_scale={rope_scale!r} with rope=False")
        return None
    if head_size % 2:
        raise ValueError(f"rope=True rotates pairs of features: it needs an even head size "
                         f"d = d_model / num_heads, got {head_size}")
    return Rope(scale=scale)
