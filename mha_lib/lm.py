"""A language model you can talk to: the book's Transformer blocks trained on the library's stories.

The model (:class:`StoryLM`), exactly (the in-page forward pass of the website reimplements it
from this description and :func:`mha_lib.lm_export.export`):

1. ``x = E[ids]``: token embedding, (B, L) -> (B, L, D); no position embedding.
2. N pre-LN blocks (:class:`mha_lib.block.TransformerBlock` with ``rope=True``), each::

       h = LayerNorm1(x)                               # eps 1e-5, weight and bias
       q = h W_q^T + b_q    (B, L, D)    -> H heads of size d = D / H
       k = h W_k^T + b_k    (B, L, Hkv*d) -> Hkv heads (Hkv = H unless grouped-query)
       v = h W_v^T + b_v    (B, L, Hkv*d) -> Hkv heads
       q, k = rotary(q), rotary(k)    # pair (2i, 2i+1) of a head at position p turns by the
                                      # angle p * 10000**(-2i/d): (a, b) -> (a cos - b sin,
                                      # a sin + b cos); positions count from 0
       weights = softmax(q k^T / sqrt(d))  over the keys 0 .. i of query i (causal), query
                                      # head h reading key/value head h // (H / Hkv)
       x = x + concat_h(weights_h v_{h // g}) W_o^T + b_o
       x = x + W_2 relu(W_1 LayerNorm2(x) + b_1) + b_2

   A padded batch (``valid_lens``) lets query i of example b see keys ``0 .. min(i, len_b - 1)``.
   With ``Config.pattern`` (one :class:`mha_lib.patterns.LayerKind` per layer, as Gemma 3 and
   Llama 4 have) layer n's query i sees only the keys its kind shows (a window: the last
   ``size``, ``i - size < j <= i``; a chunk: those of its chunk, ``j // size == i // size``;
   global: all of ``0 .. i``), the padding hidden as above, and rotates q and k with its own
   RoPE base or not at all (NoPE); its KV cache keeps only those keys (:meth:`StoryLM.new_cache`).
3. ``logits = LayerNorm(x) W_out^T + b_out``: (B, L, D) -> (B, L, V); position i scores the
   token at i + 1.

Linear weights are stored PyTorch's way, (out_features, in_features). Dropout is 0.

* :class:`Config`, :class:`StoryLM`, :func:`train`, :func:`save`, :func:`load_pretrained`,
  :func:`main`: the experiment convention (``python -m mha_lib.lm --out PATH`` retrains the
  shipped weights bit for bit from the seed, on one thread)
* :meth:`StoryLM.generate`: greedy, temperature and top-k decoding of a batch of prompts of
  any lengths, with the KV cache (:class:`mha_lib.decoding.KVCache`) or without it
* :meth:`StoryLM.new_cache`, :meth:`StoryLM.cache_bytes`: the cache of a model with a
  ``Config.pattern`` keeps per layer only what the layer reads, and what it holds in bytes
* :func:`check_plain_layers`: what runs every layer global (the page's export, GPT-NeoX)
  refuses a pattern by name
* :func:`tokens_per_second`: decoding speed with and without the cache
* measuring it on held-out stories (the loss, the accuracy at the linked positions) is
  :mod:`mha_lib.lm_eval`'s; the model as JSON-able data for the in-page forward pass,
  :mod:`mha_lib.lm_export`'s

Shape legend
    B   batch size
    L   sequence length (padded)
    N   number of layers
    H   heads per layer (query heads); Hkv key/value heads
    d   head size, D / H
    D   d_model
    V   vocabulary size
"""

from __future__ import annotations

import math
import numbers
import statistics
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator, Sequence, TextIO

import numpy as np
import torch
from torch import Tensor, nn

from mha_lib._checks import as_tensor, check_bool, check_device, check_not_meta, check_positive_int, check_size
from mha_lib._modes import eval_mode
from mha_lib.block import TransformerBlock
from mha_lib.checkpoints import load_checkpoint
from mha_lib.decoding import KVCache
from mha_lib.lm_eval import check_story_model, encode_stories, evaluate, held_out_stories
from mha_lib.patterns import LayerKind, cache_bytes, check_pattern, pattern_cache
from mha_lib.stories import Story, Tokenizer, sample_stories
from mha_lib.timing import time_paired
from mha_lib.training import (
    TrainResult,
    check_config,
    check_config_fields,
    run_main,
    save_result,
    train_loop,
    warmup_cosine,
)

__all__ = [
    "Config",
    "KIND",
    "PRETRAINED_PATH",
    "StoryLM",
    "check_model",
    "check_plain_layers",
    "load_pretrained",
    "main",
    "save",
    "tokens_per_second",
    "train",
]

KIND = "lm"
"""The ``kind`` of this experiment's checkpoints."""
PRETRAINED_PATH = Path(str(resources.files("mha_lib") / "data" / "lm_stories.pt"))
"""The shipped checkpoint."""
_STEPS_PER_SEED = 10**6
"""Training step s of a run with seed c reads ``sample_stories(batch_size, 2 * (c * 10**6 + s))``:
even seeds only, so the held-out stories (seed 1, :func:`mha_lib.lm_eval.held_out_stories`) are never seen."""
_MAX_NEW_TOKENS = 10_000
"""The most tokens :meth:`StoryLM.generate` adds (the stories are about 60 tokens long)."""
_SEEDS = 2**64
"""Seeds of torch's generators are integers in [0, 2**64)."""


@dataclass(frozen=True)
class Config:
    """The model's sizes and its training run (the defaults made the shipped weights).

    Training: AdamW, linear warm-up then cosine decay (:func:`mha_lib.training.warmup_cosine`),
    a fresh batch of stories every step; the loss and the accuracy at the linked positions of
    :func:`~mha_lib.lm_eval.held_out_stories` are logged every ``eval_every`` steps.
    """

    vocab_size: int = Tokenizer().vocab_size  # V
    d_model: int = 64  # D = H * d
    num_heads: int = 4  # H, per layer
    num_kv_heads: int = 4  # Hkv; < H gives grouped-query attention
    num_layers: int = 2  # N
    d_ff: int = 256  # hidden width of the feed-forward nets
    seed: int = 2  # among seeds 0-2, the run whose heads are the most specialised (see the report)
    steps: int = 1500
    batch_size: int = 16
    lr: float = 6e-3
    weight_decay: float = 0.01
    warmup: int = 100
    eval_every: int = 100
    eval_stories: int = 256
    num_threads: int = 1  # the model is tiny: extra threads mostly wait for each other
    pattern: tuple[LayerKind, ...] | None = None  # one kind per layer (None: all global, RoPE base 10000)

    def __post_init__(self) -> None:
        """Raise a ValueError naming the first field that is out of range (never clamp)."""
        check_config_fields(self)
        for name in ("vocab_size", "num_kv_heads", "num_layers", "d_ff", "eval_every", "eval_stories"):
            check_positive_int(getattr(self, name), f"config.{name}")
        check_size(self.warmup, "config.warmup")
        if self.seed >= _SEEDS:
            raise ValueError(f"config.seed must be < 2**64 (a seed of torch's generator), got {self.seed}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"config.num_kv_heads ({self.num_kv_heads}) must divide config.num_heads ({self.num_heads})")
        if (self.d_model // self.num_heads) % 2:
            raise ValueError(f"config needs an even head size d_model / num_heads for RoPE, got {self.d_model // self.num_heads}")
        if self.steps >= _STEPS_PER_SEED:
            raise ValueError(f"config.steps must be < {_STEPS_PER_SEED} (the seeds of the batches), got {self.steps}")
        if self.pattern is not None:
            object.__setattr__(self, "pattern", check_pattern(_kinds_from_plain(self.pattern), self.num_layers,
                                                              "config.pattern"))

    @property
    def kinds(self) -> tuple[LayerKind, ...]:
        """Each layer's :class:`~mha_lib.patterns.LayerKind`: the ``pattern``, or every layer
        global with RoPE at base 10000 (``LayerKind()``)."""
        return (LayerKind(),) * self.num_layers if self.pattern is None else self.pattern


def _kinds_from_plain(pattern: object) -> object:
    """A checkpoint stores the pattern as plain data (``dataclasses.asdict``: a dict per layer):
    its LayerKinds again; anything else as it is (for :func:`~mha_lib.patterns.check_pattern`)."""
    if isinstance(pattern, (list, tuple)):
        kinds = []
        for i, kind in enumerate(pattern):
            if isinstance(kind, dict):
                try:
                    kind = LayerKind(**kind)
                except TypeError as err:
                    raise ValueError(f"config.pattern[{i}] must be a LayerKind or its fields mask, size, "
                                     f"rope_base, got {kind!r}: {err}") from None
            kinds.append(kind)
        return kinds
    return pattern


class StoryLM(nn.Module):
    """Decoder-only language model: embedding, N pre-LN rotary blocks, LayerNorm, output layer.

    See the module docstring for the exact computation.

    Shapes:
        ids: (B, L) integers in [0, V); padded batches are padded on the right
        valid_lens: None or (B,), the number of real tokens of each row (1 .. L)
        head_mask: None or (N, H) gates in [0, 1] (1 keeps a head, 0 removes it)
        logits: (B, L, V); weights: (B, N, H, L, L)

    Args:
        config: the sizes (:class:`Config`).
    """

    def __init__(self, config: Config = Config()) -> None:
        super().__init__()
        self.config = check_config(config, Config)
        D = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size, D)
        self.blocks = nn.ModuleList(
            TransformerBlock(D, config.num_heads, config.d_ff, 0.0, norm_first=True,
                             num_kv_heads=config.num_kv_heads, rope=kind.rope)
            for kind in config.kinds
        )
        self.norm = nn.LayerNorm(D)
        self.unembedding = nn.Linear(D, config.vocab_size)

    def new_cache(self) -> KVCache:
        """An empty cache for :meth:`forward`: layer n keeps only what its kind reads (a window
        layer the last ``size - 1`` keys, a chunk layer those of the current chunk:
        :func:`mha_lib.patterns.pattern_cache`); without a pattern, every key of every layer."""
        return pattern_cache(self.config.kinds)

    def cache_bytes(self, length: int, B: int = 1) -> list[int]:
        """Bytes each layer's cache (:meth:`new_cache`) holds once ``length`` positions of ``B``
        sequences are decoded: keys and values, ``2 B Hkv kept d`` numbers of the model's dtype
        (:func:`mha_lib.patterns.cache_bytes`), one entry per layer."""
        cfg = self.config
        return cache_bytes(cfg.kinds, length, B=B, num_kv_heads=cfg.num_kv_heads,
                           head_size=cfg.d_model // cfg.num_heads, dtype=self.unembedding.weight.dtype)

    def forward(
        self, ids: Tensor, valid_lens: Tensor | Sequence[int] | None = None, *,
        need_weights: bool = False, head_mask: Tensor | None = None,
        cache: KVCache | None = None, positions: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Next-token scores at every position.

        Args:
            ids, valid_lens, head_mask: see the shapes.
            need_weights: also return every head's attention weights.
            cache: a :class:`~mha_lib.decoding.KVCache` of N layers (:meth:`new_cache`): ``ids``
                are new positions that attend to the cached ones (used by :meth:`generate`).
            positions: with a cache, the (B, L) positions of the new tokens (default: right
                after the cached ones; a window or chunk layer's cache only appends).

        Returns:
            logits (B, L, V), or ``(logits, weights)``.

        Raises:
            ValueError: ids not a (B, L) integer tensor in [0, V), valid lengths out of
                [1, L], a head_mask that is not (N, H), valid_lens together with a cache.
        """
        ids = self._check_ids(ids, "ids")
        check_bool(need_weights, "need_weights")
        cfg = self.config
        B, L = ids.shape
        gates = None
        if head_mask is not None:
            gates = as_tensor(head_mask, "head_mask", "a tensor of gates (N, H)")
            if (gates.dtype == torch.bool or gates.is_complex() or gates.shape != (cfg.num_layers, cfg.num_heads)
                    or not bool(((gates >= 0) & (gates <= 1)).all())):
                raise ValueError(f"head_mask must have shape (N, H) = ({cfg.num_layers}, {cfg.num_heads}) and real "
                                 f"gates in [0, 1], got {gates.dtype} of shape {tuple(gates.shape)}: {gates.tolist()!s:.60}")
            gates = gates.to(self.unembedding.weight.dtype)
        valid = None
        if cache is None:
            lens = torch.arange(1, L + 1, device=ids.device).expand(B, L)  # (B, L): causal, query i sees keys 0..i
            if valid_lens is not None:
                valid = _check_lens(valid_lens, B, L).to(ids.device)  # (B,)
                lens = torch.minimum(lens, valid[:, None])  # (B, L): and no padded key
        elif valid_lens is not None:
            raise ValueError("valid_lens cannot be combined with cache: give the positions instead")
        else:
            if not isinstance(cache, KVCache) or len(cache.layers) != cfg.num_layers:
                raise ValueError(f"cache must be a KVCache of num_layers = {cfg.num_layers} layers, got {cache!r}")
            if need_weights and len({(type(c), getattr(c, "window", None)) for c in cache.layers}) > 1:
                raise ValueError("need_weights cannot be combined with a cache whose layers keep different keys "
                                 "(config.pattern's windows and chunks: each layer's weights have their own "
                                 "width); run the whole sequence without the cache instead")
            lens = None
        x = self.token_embedding(ids)  # (B, L) -> (B, L, D)
        weights = []
        for n, (block, kind) in enumerate(zip(self.blocks, cfg.kinds)):
            # a global layer: causal and padding as (B, L) lengths; a window or chunk layer: its
            # mask (causal too) and the padding as (B,) lengths; with a cache, the mask alone
            local = kind.mask != "global"
            x = block(x, valid if local and cache is None else lens,
                      mask=kind.attention_mask if local else None,
                      head_mask=None if gates is None else gates[n],
                      cache=None if cache is None else cache[n], positions=positions,
                      need_weights=need_weights)
            if need_weights:
                x, w = x  # w: (B, H, L, L)
                weights.append(w)
        logits = self.unembedding(self.norm(x))  # (B, L, D) -> (B, L, V)
        if need_weights:
            return logits, torch.stack(weights, dim=1)  # N x (B, H, L, L) -> (B, N, H, L, L)
        return logits

    def _check_ids(self, ids: object, name: str) -> Tensor:
        V = self.config.vocab_size
        if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.is_complex() \
                or ids.dtype == torch.bool or 0 in ids.shape:
            got = f"{ids.dtype} of shape {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"{name} must be a non-empty integer tensor of shape (B, L), got {got}")
        check_not_meta(ids, name)
        device = self.unembedding.weight.device
        if ids.device != device:
            raise ValueError(f"{name} are on {ids.device} but the model is on {device}: move them with {name}.to({str(device)!r})")
        low, high = torch.stack([ids.min(), ids.max()]).tolist()  # (one host read)
        if low < 0 or high >= V:
            raise ValueError(f"{name} must hold token ids in [0, {V}), got values in [{low}, {high}]")
        return ids.long()

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float = 0.0,
        top_k: int | None = None, use_cache: bool = True, seed: int | None = None, *,
        head_mask: Tensor | None = None,
    ) -> list[list[int]]:
        """Continue each prompt by ``max_new_tokens`` tokens, all prompts as one batch.

        The prompts are padded on the right to the longest. With the cache, one call reads
        the padded prompts, then every step feeds one token per prompt at its own position
        (``len(prompt) + t``): its keys and values overwrite the prompt's padding, and the
        causal rule hides the slots not written yet. Without the cache, every step runs the
        whole padded sequences again with their valid lengths. Greedy decoding gives the same
        tokens either way, and the same as decoding each prompt alone. A model with a
        ``config.pattern`` decodes with :meth:`new_cache`, whose window and chunk layers only
        append: the prompts of each length share one such cache (no padding to overwrite),
        and every step still samples the whole batch at once.

        Args:
            prompts: lists of token ids (each non-empty, any lengths).
            max_new_tokens: how many tokens to add to each prompt (>= 0).
            temperature: 0 decodes greedily (the most likely token); > 0 samples from
                ``softmax(logits / temperature)``.
            top_k: sample only among the k most likely tokens (None: all).
            use_cache: decode with the KV cache.
            seed: seed of the sampling generator (None: torch's global generator).
            head_mask: (N, H) gates, as in :meth:`forward`, at every step.

        Returns:
            the new tokens of each prompt, ``max_new_tokens`` each.
        """
        prompts = self._check_prompts(prompts)
        steps = check_size(max_new_tokens, "max_new_tokens")
        if steps > _MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens must be at most {_MAX_NEW_TOKENS}, got {steps}")
        temperature = _check_temperature(temperature)
        if top_k is not None:
            top_k = min(check_positive_int(top_k, "top_k"), self.config.vocab_size)
        check_bool(use_cache, "use_cache")
        if seed is not None and check_size(seed, "seed") >= _SEEDS:
            raise ValueError(f"seed must be None or an integer in [0, 2**64), got {seed}")
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        B = len(prompts)
        device, P = self.unembedding.weight.device, max(len(p) for p in prompts)  # (made where the model is)
        lens = torch.tensor([len(p) for p in prompts], device=device)  # (B,)
        ids = torch.tensor([p + [Tokenizer.pad_id] * (P - len(p)) for p in prompts], device=device)  # (B, P)
        new = []
        rows = torch.arange(B, device=device)
        with eval_mode(self):
            cache = KVCache(self.config.num_layers) if use_cache else None
            grouped = use_cache and self.config.pattern is not None
            if grouped:  # prompt length -> (its rows (b,), their cache)
                groups = {n: (torch.nonzero(lens == n)[:, 0], self.new_cache()) for n in sorted(set(lens.tolist()))}
            for t in range(steps):
                if grouped:  # each length's rows: the prompts (b, n), then their last token (b, 1)
                    logits = torch.cat([self(ids[r, :n] if t == 0 else new[-1][r, None], cache=c,
                                             head_mask=head_mask)[:, -1] for n, (r, c) in groups.items()])
                    order = torch.cat([r for r, _ in groups.values()])  # (B,): the row of each logit
                    logits = logits[torch.argsort(order)]  # (B, V), in the prompts' order
                elif t == 0 or not use_cache:
                    logits = (self(ids, cache=cache, head_mask=head_mask) if use_cache
                              else self(ids, lens + t, head_mask=head_mask))
                    logits = logits[rows, lens + t - 1]  # (B, V): each row's last real position
                else:
                    positions = (lens + t - 1)[:, None]  # (B, 1): where the previous token sits
                    logits = self(new[-1][:, None], cache=cache, positions=positions,
                                  head_mask=head_mask)[:, 0]  # (B, V)
                token = _pick(logits, temperature, top_k, generator)  # (B,)
                new.append(token)
                if not use_cache:
                    ids = torch.cat([ids, ids.new_full((B, 1), Tokenizer.pad_id)], dim=1)  # (B, P + t + 1)
                    ids[rows, lens + t] = token
        return torch.stack(new, dim=1).tolist() if new else [[] for _ in prompts]

    def _check_prompts(self, prompts: object) -> list[list[int]]:
        V, arrays = self.config.vocab_size, (Tensor, np.ndarray)  # (prompts may be arrays, or lists of them)
        listed = lambda x: (check_not_meta(x, "prompts") if isinstance(x, Tensor) else x).tolist()  # noqa: E731
        prompts = listed(prompts) if isinstance(prompts, arrays) else prompts
        ok = isinstance(prompts, Sequence) and not isinstance(prompts, (str, bytes)) and len(prompts) > 0
        if ok:
            prompts = [listed(p) if isinstance(p, arrays) else list(p) if isinstance(p, Sequence) and not isinstance(p, (str, bytes)) else None for p in prompts]
            ok = all(isinstance(p, list) and p and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) and 0 <= i < V for i in p)
                     for p in prompts)
        if not ok:
            raise ValueError(f"prompts must be a non-empty list of non-empty lists of token ids in [0, {V}), got {prompts!r:.100}")
        return [[int(i) for i in p] for p in prompts]


def _check_lens(valid_lens: object, B: int, L: int) -> Tensor:
    lens = as_tensor(valid_lens, "valid_lens", f"(B,) = ({B},) integers in [1, L = {L}]")
    if lens.shape != (B,) or lens.is_floating_point() or lens.dtype == torch.bool \
            or (B and (int(lens.min()) < 1 or int(lens.max()) > L)):
        raise ValueError(f"valid_lens must be (B,) = ({B},) integers in [1, L = {L}], got {valid_lens!r:.80}")
    return lens.long()


def _check_temperature(temperature: object) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) \
            or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    return float(temperature)


def _pick(logits: Tensor, temperature: float, top_k: int | None, generator) -> Tensor:
    """The next token of each row of ``logits`` (B, V): argmax, or a sample."""
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    # the maximum first and float64: scores <= 0, so even temperature 1e-300 cannot overflow
    scores = (logits - logits.max(dim=-1, keepdim=True).values).double() / temperature  # (B, V)
    if top_k is not None:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest score
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (B, 1) -> (B,)


def check_model(model: object, *, interface: bool = False) -> StoryLM:
    """``model`` if it is a :class:`StoryLM` (with ``interface``: any nn.Module with its interface, config's num_layers,
    num_heads, vocab_size, as chapter 12b's) that reads the stories' vocabulary, else a ValueError
    (:func:`mha_lib.lm_eval.check_story_model`)."""
    return check_story_model(model, nn.Module if interface else StoryLM)


def check_plain_layers(model: StoryLM, consumer: str) -> StoryLM:
    """``model`` if every layer is global with RoPE at base 10000 (``config.pattern`` None or
    all ``LayerKind()``), else a ValueError naming ``config.pattern`` and ``consumer``, which
    runs every layer that way (no windows, chunks, other bases or NoPE)."""
    pattern = model.config.pattern
    if pattern is not None and any(kind != LayerKind() for kind in pattern):
        raise ValueError(f"model.config.pattern must be None (every layer global, RoPE base 10000) for {consumer}, "
                         f"got {pattern}")
    return model


def tokens_per_second(model: StoryLM, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
                      repeats: int = 5) -> dict[str, float]:
    """Greedy decoding speed with and without the KV cache, timed in turns (paired).

    Returns:
        ``{"cache": ..., "no cache": ...}``: new tokens (all prompts together) per second, the
        median over ``repeats`` paired repetitions (:func:`mha_lib.timing.time_paired`).
    """
    steps = check_positive_int(max_new_tokens, "max_new_tokens")
    prompts = check_model(model)._check_prompts(prompts)
    model.generate(prompts, 1)  # every argument checked before the clock starts
    runs = {name: (lambda c=cache: model.generate(prompts, steps, use_cache=c))
            for name, cache in (("cache", True), ("no cache", False))}
    times = time_paired(runs, repeats=check_positive_int(repeats, "repeats"), min_time=0.2, blocks=1)
    return {name: len(prompts) * steps / statistics.median(seconds) for name, seconds in times.items()}


# --- the experiment -------------------------------------------------------------------------------

def _batches(config: Config, tokenizer: Tokenizer) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless training batches ``(ids (B, L), valid_lens (B,))`` from even seeds only."""
    for step in range(config.steps + 1):
        yield encode_stories(tokenizer, sample_stories(config.batch_size, 2 * (config.seed * _STEPS_PER_SEED + step)))


def _batch_loss(model: StoryLM, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Next-token cross-entropy over the real tokens (padding predicts nothing)."""
    ids, lens = batch
    logits = model(ids, lens)  # (B, L, V)
    targets = ids[:, 1:].masked_fill(torch.arange(1, ids.shape[1], device=ids.device) >= lens[:, None], -100)  # (B, L-1)
    return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100)


def _held_out_metrics(model: StoryLM, stories: Sequence[Story]) -> dict[str, float]:
    """:func:`~mha_lib.lm_eval.evaluate`, its loss renamed ``held_out_loss`` (the progress bar also shows the training loss)."""
    return {("held_out_loss" if name == "loss" else name): value for name, value in evaluate(model, stories).items()}


def train(config: Config = Config(), *, progress: bool | TextIO = True,
          device: torch.device | str = "cpu", model: nn.Module | None = None) -> TrainResult:
    """Train a fresh model from ``config.seed`` on one CPU thread; the same config gives the same weights.

    Args:
        config: sizes and hyper-parameters.
        progress: a one-line progress bar to stderr (True), to a text stream, or none (False).
        device: where to train ('cpu', 'cuda', ...): the same initial weights and batches on
            every device (drawn on the CPU); the CPU by default.
        model: train this instead of a fresh StoryLM: any module with its interface (chapter 12b's).

    Returns:
        A :class:`~mha_lib.training.TrainResult` (model in eval mode); ``history`` holds
        ``train_loss`` (every step), ``eval_steps``, ``eval_held_out_loss`` and ``eval_<relation>`` (the
        accuracies of :func:`~mha_lib.lm_eval.evaluate` on held-out stories), ``cpu_seconds``,
        ``torch_version`` and ``vocab`` (the tokenizer's, which :func:`load_pretrained` rebuilds).
    """
    config = check_config(config, Config)
    tokenizer = Tokenizer()
    if config.vocab_size != tokenizer.vocab_size:
        raise ValueError(f"config.vocab_size must be the tokenizer's {tokenizer.vocab_size}, got {config.vocab_size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)  # the initialisation, without touching the caller's state
        model = (StoryLM(config) if model is None else model).to(check_device(device))  # (same weights anywhere)
    held_out = held_out_stories(config.eval_stories)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history = train_loop(
        model, _batch_loss, _batches(config, tokenizer), optimizer, steps=config.steps,
        schedule=lambda step: warmup_cosine(step, warmup=config.warmup, steps=config.steps),
        evaluate=lambda m: _held_out_metrics(m, held_out), eval_every=config.eval_every,
        num_threads=config.num_threads, progress=progress,
    )
    history["vocab"] = list(tokenizer.vocab)
    return TrainResult(model, config, history)


def save(result: TrainResult, path: str | Path, *, overwrite: bool = False) -> Path:
    """Save a :func:`train` result as a checkpoint of kind ``"lm"`` (refuses to overwrite an
    existing file unless ``overwrite``); returns the path."""
    return save_result(result, path, kind=KIND, model_class=StoryLM, overwrite=overwrite)


def load_pretrained(path: str | Path | None = None) -> tuple[StoryLM, Tokenizer]:
    """The shipped model (or the checkpoint at ``path``) in eval mode, and its tokenizer. Offline.

    The training record is ``load_checkpoint(PRETRAINED_PATH, kind=KIND)["extra"]``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a checkpoint of this experiment.
    """
    path = PRETRAINED_PATH if path is None else path
    ckpt = load_checkpoint(path, kind=KIND)
    try:
        config = Config(**ckpt["config"])
        tokenizer = Tokenizer(ckpt["extra"]["vocab"])
        model = StoryLM(config)
        model.load_state_dict(ckpt["state_dict"])
        if tokenizer.vocab_size != config.vocab_size:
            raise ValueError(f"its vocabulary has {tokenizer.vocab_size} tokens, its model {config.vocab_size}")
    except (TypeError, KeyError, RuntimeError, ValueError) as err:
        raise ValueError(f"path {str(path)!r} does not hold a StoryLM and its vocabulary: {err}") from None
    return model.eval(), tokenizer


def _summary(result: TrainResult) -> str:
    scores = evaluate(result.model, held_out_stories())
    return f"trained in {result.history['cpu_seconds']:.1f} s of CPU time; held-out " + ", ".join(
        f"{name} {value:.3f}" for name, value in scores.items())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mha_lib.lm --out PATH [--seed S] [--steps N] [--overwrite]``."""
    return run_main(
        argv, name="lm", config=Config(), train=train, save=save, summary=_summary,
        description="Train the story language model (the default Config reproduces the shipped "
        f"{PRETRAINED_PATH.name}) and save it.",
    )


if __name__ == "__main__":
    sys.exit(main())
