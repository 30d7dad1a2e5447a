"""What the explorers attend over, and the one function that computes their attention weights.

Both the live explorer (:mod:`mha_lib.viz.explorer`) and the kernel-free one
(:mod:`mha_lib.viz.static_explorer`) get their weights from :func:`attention_weights`, which
runs :class:`mha_lib.MultiHeadAttention` itself: the pictures show the library's real weights.

Shape legend
    B   number of examples
    Lq  number of queries
    Lk  number of key-value pairs
    H   number of heads
    D   the model width d_model = H*d
"""

from __future__ import annotations

import math
import numbers
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor

from mha_lib._checks import check_positive_int, check_tensor
from mha_lib._modes import eval_mode
from mha_lib.attention import check_qkv
from mha_lib.masking import check_valid_lens
from mha_lib.multihead import MultiHeadAttention
from mha_lib.viz.heatmaps import as_list, as_weights, example_labels, heatmap_parts, masked_keys

__all__ = ["Source", "attention_weights", "make_source", "seeded_model", "sentence_scene"]

_DEFAULT_SENTENCES = ("the cat sat on the mat", "dogs chase the cat")
_PAD = "<pad>"
_DEFAULT_D_MODEL = 8


@dataclass(frozen=True)
class _Scene:
    """Inputs of an explorer: queries, keys, values and their labels.

    Shapes:
        queries: (B, Lq, query_size)
        keys: (B, Lk, key_size)
        values: (B, Lk, value_size)
        query_tokens: B lists of Lq labels; key_tokens: B lists of Lk labels
        valid_lens: B initial valid lengths, each in [0, Lk]
    """

    queries: Tensor
    keys: Tensor
    values: Tensor
    query_tokens: tuple[tuple[str, ...], ...]
    key_tokens: tuple[tuple[str, ...], ...]
    valid_lens: tuple[int, ...]

    @property
    def batch_size(self) -> int:
        return self.queries.shape[0]

    @property
    def num_keys(self) -> int:
        return self.keys.shape[1]


def _make_scene(
    queries: Tensor,
    keys: Tensor | None = None,
    values: Tensor | None = None,
    *,
    tokens: object = None,
    query_tokens: object = None,
    key_tokens: object = None,
    valid_lens: object = None,
) -> _Scene:
    """Check explorer inputs and bundle them; keys and values default to the queries (self-attention).

    Args:
        tokens: labels for queries and keys alike (self-attention), one list or B lists.
        query_tokens, key_tokens: separate labels (cross-attention); override ``tokens``.
        valid_lens: B initial valid lengths (default Lk for every example).

    Raises:
        ValueError: inputs that are not finite 3-D float tensors agreeing on B and Lk, labels
            of the wrong length, or valid lengths outside [0, Lk].
    """
    check_tensor(queries, "queries", 3)
    keys = queries if keys is None else keys
    values = keys if values is None else values
    check_qkv(queries, keys, values)
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        if x.device.type == "meta":
            raise ValueError(f"{name} must hold numbers, got a tensor on the meta device")
        if (x.dtype, x.device) != (queries.dtype, queries.device):
            raise ValueError(
                f"{name} must have the dtype and device of the queries ({queries.dtype} on "
                f"{queries.device}), got {x.dtype} on {x.device}"
            )
        if not torch.isfinite(x).all():
            raise ValueError(f"{name} must be finite, got NaN or infinity")
    B, Lq, Lk = queries.shape[0], queries.shape[1], keys.shape[1]
    query_tokens = tokens if query_tokens is None else query_tokens
    key_tokens = tokens if key_tokens is None else key_tokens
    if valid_lens is None:
        valid_lens = [Lk] * B
    valid_lens = as_list(valid_lens, "valid_lens")
    if (isinstance(valid_lens, str) or not isinstance(valid_lens, Sequence)
            or len(valid_lens) != B
            or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v <= Lk
                       for v in valid_lens)):
        raise ValueError(f"valid_lens must be {B} integers in [0, {Lk}] (one per example), got {valid_lens!r}")
    return _Scene(
        queries=queries.detach(), keys=keys.detach(), values=values.detach(),
        query_tokens=example_labels(query_tokens, B, Lq, "query_tokens"),
        key_tokens=example_labels(key_tokens, B, Lk, "key_tokens"),
        valid_lens=tuple(int(v) for v in valid_lens),
    )


_MAX_WIDTH = 4096
"""The widest word vectors and projections of a scene (a picture of a few words, not a model)."""


def sentence_scene(
    sentences: Sequence[str] = _DEFAULT_SENTENCES,
    *,
    num_features: int = _DEFAULT_D_MODEL,
    seed: int = 0,
    scale: float = 3.0,
) -> _Scene:
    """Self-attention over a few short sentences with random word vectors (no training, no data).

    Each distinct word gets one random vector (seeded), so a repeated word ("the") has identical
    query, key and value vectors. Shorter sentences are padded with ``<pad>`` (a zero vector) to
    the longest, and their valid length is their number of words. ``scale`` multiplies the
    vectors: larger inputs give larger scores and so sharper attention.

    Returns:
        A :class:`_Scene` with B = len(sentences) and Lq = Lk = the longest sentence's length.
    """
    if isinstance(sentences, str) or not isinstance(sentences, Sequence) or not sentences or not all(
        isinstance(s, str) and s.split() for s in sentences
    ):
        raise ValueError(f"sentences must be a non-empty list of non-empty strings, got {sentences!r:.80}")
    if check_positive_int(num_features, "num_features") > _MAX_WIDTH:
        raise ValueError(f"num_features must be at most {_MAX_WIDTH}, got {num_features}")
    seed = _check_seed(seed)
    if (isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale)
            or scale <= 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    words = [s.split() for s in sentences]
    L = max(map(len, words))
    vocab = sorted({w for ws in words for w in ws})
    generator = torch.Generator().manual_seed(seed)
    table = scale * torch.randn(len(vocab), num_features, generator=generator)  # (V, D)
    X = torch.zeros(len(words), L, num_features)  # (B, L, D); padding stays 0
    for b, ws in enumerate(words):
        for t, w in enumerate(ws):
            X[b, t] = table[vocab.index(w)]
    tokens = [ws + [_PAD] * (L - len(ws)) for ws in words]
    return _make_scene(X, tokens=tokens, valid_lens=[len(ws) for ws in words])


def seeded_model(scene: _Scene, num_heads: int, d_model: int, seed: int) -> MultiHeadAttention:
    """A fresh (untrained) MultiHeadAttention for ``scene``, its parameters drawn from ``seed``.

    The model has the dtype and device of the scene's queries. The global random state is
    left untouched. For a fixed seed and ``d_model`` (D) the four projection matrices do not
    depend on ``num_heads`` (they are D x D either way): changing the head count only changes
    how the same projections are split into heads.

    Args:
        scene: from :func:`sentence_scene` (or an explorer's ``source.scene``).
        num_heads: H, a divisor of ``d_model``.
        d_model: D, the width of the projections.
        seed: integer >= 0.

    Raises:
        ValueError: a ``scene`` that is not one, ``num_heads`` or ``d_model`` not integers >= 1,
            ``num_heads`` not dividing ``d_model``, a seed that is not an integer >= 0.
    """
    _check_scene(scene)
    num_heads = check_positive_int(num_heads, "num_heads")
    if check_positive_int(d_model, "d_model") > _MAX_WIDTH:
        raise ValueError(f"d_model must be at most {_MAX_WIDTH}, got {d_model}")
    if d_model % num_heads:
        raise ValueError(f"num_heads must divide d_model = {d_model}, got {num_heads}")
    seed = _check_seed(seed)
    with torch.random.fork_rng(devices=[]), _single_thread():
        torch.manual_seed(seed)
        # key_size, query_size, value_size, D, H, dropout: positional (d2l's order)
        return MultiHeadAttention(
            scene.keys.shape[-1], scene.queries.shape[-1], scene.values.shape[-1], d_model,
            num_heads, 0.0,
        ).to(dtype=scene.queries.dtype, device=scene.queries.device).eval()


def _check_scene(scene: object) -> _Scene:
    if not isinstance(scene, _Scene):
        raise ValueError("scene must come from sentence_scene (or an explorer's source.scene), "
                         f"got {type(scene).__name__}")
    return scene


@contextmanager
def _single_thread():
    """Run torch on one thread inside the block, then restore the thread count.

    The explorers' tensors are tiny: waking torch's worker threads costs far more than the
    arithmetic (measured on a busy 2-core machine: a (4, 6, 6) softmax took 22 ms with 2
    threads, 0.004 ms with 1), and a slider must answer within a few milliseconds.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def attention_weights(mha: MultiHeadAttention, scene: _Scene, valid_lens: Sequence[int]) -> Tensor:
    """The per-head attention weights of ``mha`` on ``scene`` with the given valid lengths.

    Runs ``mha(queries, keys, values, valid_lens, need_weights=True)`` in eval mode (no dropout)
    without gradients, on one thread (:func:`_single_thread`), and puts the module back in the
    mode it was in.

    Returns:
        (B, H, Lq, Lk) weights; keys at or past ``valid_lens[b]`` are exactly 0.

    Raises:
        ValueError: ``mha`` not a MultiHeadAttention, a ``scene`` that is not one, or bad valid
            lengths (see :func:`mha_lib.masking.check_valid_lens`).
    """
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"mha must be a mha_lib.MultiHeadAttention, got {type(mha).__name__}")
    _check_scene(scene)
    queries = scene.queries
    lens = check_valid_lens(as_list(valid_lens, "valid_lens"), queries.shape[0],
                            queries.shape[1], scene.num_keys)
    with eval_mode(mha), torch.no_grad(), _single_thread():
        _, weights = mha(queries, scene.keys, scene.values, lens, need_weights=True)
    return weights


def _divisors(n: int) -> list[int]:
    """Head counts that split ``n`` features evenly."""
    return [h for h in range(1, n + 1) if n % h == 0]


def _check_seed(seed: object) -> int:
    """Return ``seed`` if it is an integer >= 0 (bools excluded), else raise a ValueError."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


@dataclass(frozen=True)
class Source:
    """Where an explorer's weights come from: a scene, the head counts offered, and the models.

    ``model(num_heads, seed)`` returns the MultiHeadAttention to run. For a given module it is
    that module whatever the arguments (its head count is fixed); otherwise a fresh seeded one.
    ``seed`` is the explorer's initial seed (of the word vectors and the projections).
    """

    scene: _Scene
    head_choices: tuple[int, ...]
    d_model: int
    fixed: MultiHeadAttention | None = None
    seed: int = 0
    _models: dict = field(default_factory=dict, compare=False, repr=False)

    def check_heads(self, num_heads: object) -> int:
        """Return ``num_heads`` if it is one of the head counts offered, else raise."""
        if (isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral)
                or num_heads not in self.head_choices):
            raise ValueError(f"num_heads must be one of {list(self.head_choices)}, got {num_heads!r}")
        return int(num_heads)

    def initial_heads(self, num_heads: object = None) -> int:
        """The head count an explorer starts with: ``num_heads`` checked, default 2 if offered."""
        if num_heads is None:
            return 2 if 2 in self.head_choices else self.head_choices[0]
        return self.check_heads(num_heads)

    def model(self, num_heads: int, seed: int) -> MultiHeadAttention:
        if self.fixed is not None:
            return self.fixed
        key = (num_heads, seed)
        if key not in self._models:
            self._models[key] = seeded_model(self.scene, num_heads, self.d_model, seed)
        return self._models[key]

    def weights(self, num_heads: int, valid_lens: Sequence[int], seed: int | None = None) -> Tensor:
        """(B, H, Lq, Lk) weights of the configuration (H, valid lengths, seed).

        ``seed`` draws the projections of a fresh model (default: :attr:`seed`).
        """
        seed = self.seed if seed is None else _check_seed(seed)
        return attention_weights(self.model(self.check_heads(num_heads), seed), self.scene,
                                 valid_lens)

    def parts(self, weights: Tensor, valid_lens: Sequence[int], max_cols: int,
              num_slots: int | None = None, narrow: bool = False) -> tuple[list[dict], dict]:
        """Traces and layout drawing ``weights`` of this source, masked keys from ``valid_lens``.

        Shapes:
            weights: (B, H, Lq, Lk), e.g. from :meth:`weights`.

        Args:
            num_slots: heads the figure has room for; default the largest head count offered,
                so that hidden slots stand ready for any other head count.
            narrow: the layout for a phone (see :func:`mha_lib.viz.heatmaps.heatmap_parts`).

        Raises:
            ValueError: weights not finite or outside [0, 1] (see
                :func:`mha_lib.viz.heatmaps.as_weights`), bad valid lengths.
        """
        scene = self.scene
        array = as_weights(weights)  # (B, H, Lq, Lk)
        B, _, Lq, Lk = array.shape
        masked = masked_keys(as_list(valid_lens, "valid_lens"), B, Lq, Lk)  # (B, Lq, Lk)
        return heatmap_parts(
            array, masked, query_labels=scene.query_tokens,
            key_labels=scene.key_tokens, max_cols=check_positive_int(max_cols, "max_cols"),
            num_slots=max(self.head_choices) if num_slots is None else num_slots,
            masked_note=True, narrow=narrow,
        )


def make_source(
    *,
    mha: MultiHeadAttention | None = None,
    queries: Tensor | None = None,
    keys: Tensor | None = None,
    values: Tensor | None = None,
    tokens: object = None,
    query_tokens: object = None,
    key_tokens: object = None,
    valid_lens: object = None,
    sentences: Sequence[str] = _DEFAULT_SENTENCES,
    d_model: int = _DEFAULT_D_MODEL,
    seed: int = 0,
    **unknown: object,
) -> Source:
    """Check an explorer's arguments and return its :class:`Source`.

    The arguments are those of :func:`mha_lib.viz.explore` and
    :func:`mha_lib.viz.static_explorer`, which pass them on here.

    Raises:
        ValueError: see :func:`mha_lib.viz.explore`; also for an argument of another name.
    """
    if unknown:
        known = ("mha", "queries", "keys", "values", "tokens", "query_tokens", "key_tokens",
                 "valid_lens", "sentences", "d_model", "seed")
        raise ValueError(f"unexpected argument {sorted(unknown)[0]!r}: the explorer's inputs are "
                         f"{', '.join(known)}")
    seed = _check_seed(seed)
    if mha is not None:
        if not isinstance(mha, MultiHeadAttention):
            raise ValueError(f"mha must be a mha_lib.MultiHeadAttention, got {type(mha).__name__}")
        if queries is None:
            raise ValueError("with a given mha, pass its inputs too: queries (and keys, values)")
    if queries is None:
        if any(x is not None for x in (keys, values, tokens, query_tokens, key_tokens)):
            raise ValueError("keys, values and tokens need queries: pass queries=... as well")
        d_model = check_positive_int(d_model, "d_model")
        scene = sentence_scene(sentences, num_features=d_model, seed=seed)
        if valid_lens is not None:
            scene = _make_scene(scene.queries, tokens=[list(t) for t in scene.query_tokens],
                                valid_lens=valid_lens)
    else:
        scene = _make_scene(queries, keys, values, tokens=tokens, query_tokens=query_tokens,
                            key_tokens=key_tokens, valid_lens=valid_lens)
    if mha is not None:
        mha.check_inputs(scene.queries, scene.keys, scene.values)  # sizes, dtype, device
        D = mha.num_heads * mha.head_size
        return Source(scene, (mha.num_heads,), D, fixed=mha, seed=seed)
    d_model = check_positive_int(d_model, "d_model")
    return Source(scene, tuple(_divisors(d_model)), d_model, seed=seed)
