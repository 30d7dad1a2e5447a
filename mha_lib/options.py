"""An attention layer's options, declared once: what a layer holds besides its projections.

Every option of :class:`~mha_lib.multihead.MultiHeadAttention`,
:class:`~mha_lib.gqa.GroupedQueryAttention` and :class:`~mha_lib.block.TransformerBlock`
beside their sizes is a field of one record, :class:`Options` (and :class:`RopeOptions`, the
same with positions), with its default. Everything else reads that record:

* each layer's ``Settings`` is its sizes plus the record (``class Settings(Options, _Sizes)``),
  and its constructor takes the options by name (``**options``, shown in its signature);
* :meth:`AttentionOptions._init_options` checks them and builds what they ask for, in one place;
* ``OPTIONS`` (name: default) is derived from the record; ``TransformerBlock`` passes the options
  on by those names, ``gqa_from_mha`` and pruning keep them (:mod:`mha_lib._settings`);
* a converter to another library refuses, through one check (:meth:`check_options`), each
  option it does not map, by name.

A new option is one field here and its branch of ``_init_options``: nothing downstream can
forget it silently.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from mha_lib._checks import check_bool
from mha_lib.flex import check_backend
from mha_lib.positions import Rope, check_rope_scale
from mha_lib.qk import QKTransform
from mha_lib.scores import ScoreMod

__all__ = ["AttentionOptions", "Options", "RopeOptions", "changed_options", "option_values",
           "take_options", "takes_options"]

#: A field's metadata: the option says how the layer computes, not what (a converter keeps the
#: numbers without it: nothing to refuse).
_SAME_NUMBERS = {"same_numbers": True}


@dataclass(frozen=True, kw_only=True)
class Options:
    """The options of an attention layer, by name, with their defaults.

    Args:
        score_mod: a :class:`mha_lib.scores.ScoreMod` applied to every score before the mask
            (``alibi(H)``, ``softcap(cap)``, ...), or None.
        sink_logits: a learned logit per head, ``module.sink_logits`` (H,), joins every
            query's softmax and is dropped (the weights then sum to less than 1; gpt-oss).
        gate: ``"head"`` or ``"element"``: each head's output is multiplied by
            ``sigmoid(module.gate(queries))`` (an ``nn.Linear``: one gate per head, or one per
            feature), before ``W_o`` (gated attention); None: no gate.
        qk_norm: ``"head"`` or ``"width"``: RMSNorm of the queries and keys, per head or over
            the projection's width, before the scores (:mod:`mha_lib.qk`; ``"l2"``: per head,
            without a weight); None: none.
        backend: ``"auto"`` (the fused kernel, or the weights path) or ``"flex"``
            (FlexAttention, the same numbers: :mod:`mha_lib.flex`).
    """

    score_mod: ScoreMod | None = None
    sink_logits: bool = False
    gate: str | None = None
    qk_norm: str | None = None
    backend: str = field(default="auto", metadata=_SAME_NUMBERS)


@dataclass(frozen=True, kw_only=True)
class _Positions:
    """RoPE's options (first among :class:`RopeOptions`' fields, as in the constructors)."""

    rope: bool | Rope = False
    rope_scale: float = 1.0


@dataclass(frozen=True, kw_only=True)
class RopeOptions(Options, _Positions):
    """:class:`Options` and positions (``GroupedQueryAttention``, ``TransformerBlock``).

    Args:
        rope: rotate queries and keys by their positions after the projections: True (plain
            RoPE, :func:`mha_lib.positions.rotary`; needs an even head size d), a
            :class:`~mha_lib.positions.Rope` (its base, interpolation, NTK, YaRN, partial
            rotation), or False (no positions). QK-norm comes before RoPE.
        rope_scale: the factor of every RoPE angle with ``rope=True`` (``rotary``'s ``scale``;
            position interpolation from length L to L' is L / L'); a finite number > 0, else 1.
        score_mod, sink_logits, gate, qk_norm, backend: as in :class:`Options`.
    """


def option_values(record: type[Options], source: Any) -> dict[str, Any]:
    """``{name: value}`` of every option of ``record``, read from ``source`` (a settings object,
    or a record)."""
    return {f.name: getattr(source, f.name) for f in dataclasses.fields(record)}


def changed_options(options: Options) -> list[str]:
    """The names of the options not at their default (a bool default: only itself)."""
    def same(value, default) -> bool:
        return value is default or (not isinstance(default, bool) and value == default)
    return [f.name for f in dataclasses.fields(options) if not same(getattr(options, f.name), f.default)]


def take_options(record: type[Options], given: dict[str, Any], owner: str) -> Options:
    """``record(**given)``, an unknown name refused as Python refuses an unknown keyword."""
    names = [f.name for f in dataclasses.fields(record)]
    for name in given:
        if name not in names:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r} (its options: "
                            f"{', '.join(names)})")
    return record(**given)


def takes_options(record: type[Options]) -> Callable:
    """A decorator of a constructor that takes ``record``'s options as ``**options``: its
    signature (``help``, ``inspect.signature``) lists each option by name, with its default."""
    def sign(init: Callable) -> Callable:
        signature = inspect.signature(init)
        params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        named = {p.name for p in params}
        params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                     annotation=f.type)
                   for f in dataclasses.fields(record) if f.name not in named]
        init.__signature__ = signature.replace(parameters=params)
        return init
    return sign


class AttentionOptions(nn.Module):
    """The options part of an attention layer (see the module); the layer sets ``num_heads``,
    ``num_kv_heads`` and ``head_size`` before calling :meth:`_init_options`."""

    #: The layer's options record (``GroupedQueryAttention``: :class:`RopeOptions`).
    Options = Options
    #: Every option beside the sizes, with its default: the fields of ``Options``.
    OPTIONS = {f.name: f.default for f in dataclasses.fields(Options)}
    rope = False  # (whether the layer rotates queries and keys)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.OPTIONS = {f.name: f.default for f in dataclasses.fields(cls.Options)}

    def _init_options(self, query_size: int, options: dict[str, Any]) -> Options:
        """Check the options (by name: ``type(self).Options``) and build what they ask for:
        ``self.score_mod``; ``self.sink_logits``, a parameter (H,) or None; ``self.gate``, an
        ``nn.Linear`` from the queries' input (``query_size`` features) to a logit per head
        (``"head"``) or per feature (``"element"``), or None; ``self.qk``, the queries' and
        keys' pipeline (:class:`~mha_lib.qk.QKTransform`: ``qk_norm``, then positions);
        ``self.backend``. Returns the options as the layer keeps them (in its settings)."""
        o = take_options(type(self).Options, options, type(self).__name__)
        self.backend = check_backend(o.backend)
        if o.score_mod is not None and not isinstance(o.score_mod, ScoreMod):
            raise ValueError("score_mod must be a mha_lib.scores.ScoreMod (alibi(H), softcap(cap), "
                             f"...) or None, got {type(o.score_mod).__name__}")
        if o.score_mod is not None and o.score_mod.num_heads not in (None, self.num_heads):
            raise ValueError(f"score_mod is for {o.score_mod.num_heads} heads, the layer has "
                             f"num_heads = {self.num_heads}")
        self.score_mod = o.score_mod
        self.sink_logits = nn.Parameter(torch.zeros(self.num_heads)) if check_bool(
            o.sink_logits, "sink_logits") else None
        if o.gate not in (None, "head", "element"):
            raise ValueError(f'gate must be None, "head" or "element", got {o.gate!r}')
        width = self.num_heads if o.gate == "head" else self.num_heads * self.head_size
        self.gate = None if o.gate is None else nn.Linear(query_size, width)
        positions = isinstance(o, _Positions)  # (MultiHeadAttention: none)
        spec = _rope_spec(o.rope, o.rope_scale, self.head_size) if positions else None
        self.qk = QKTransform(o.qk_norm, spec, self.num_heads, self.num_kv_heads, self.head_size)
        self.rope = spec is not None
        return dataclasses.replace(o, rope_scale=float(o.rope_scale)) if positions else o

    def check_options(self, target: str, maps: tuple[str, ...] = (), name: str = "the layer") -> None:
        """Raise a ``ValueError`` naming the first option that is not its default and not in
        ``maps``: a converter to ``target`` refuses, by name, each option it does not map
        (``name``: the converter's argument). An option that changes no number (``backend``)
        has nothing to refuse."""
        fields = {f.name: f for f in dataclasses.fields(type(self).Options)}
        options = type(self).Options(**option_values(type(self).Options, self.settings))
        for option in changed_options(options):
            if option not in maps and not fields[option].metadata.get("same_numbers"):
                value, default = getattr(options, option), fields[option].default
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
