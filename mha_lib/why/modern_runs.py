"""The experiments of today's attention on the story model of chapter 12 (chapter 12c).

* :func:`sinks_trial`: the story model trained from a seed decodes held-out stories with the
  full cache, a window of 8, the window and the first 4 keys (StreamingLLM), the window and
  the first key; the loss, the cache's bytes, and the weight on the first token and on the
  punctuation (the largest head's, beside an even spread's).
* :func:`gated_trial`: the story model trained without an output gate, with one gate per head
  and with one per feature (gated attention): the held-out loss, the links' accuracies and
  the weight on the first token.
* :func:`mla_trial`: the story model trained with 4, 2 and 1 key/value heads and with a latent
  of 32 (MLA, the cache of multi-query attention): the held-out loss and the accuracy at the
  recall links, against the bytes each cache keeps per token.

Every trained variant starts from the same initial weights where the architectures share them
(one seed; a variant's own parameters from a generator of their own) and reads the same batches.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import torch
from torch import nn

from mha_lib.gqa import GroupedQueryAttention
from mha_lib.latent import LatentAttention
from mha_lib.lm import Config, StoryLM, train
from mha_lib.lm_eval import encode_stories, evaluate, held_out_stories
from mha_lib.lm_sinks import sink_mass, streaming_losses
from mha_lib.stories import RELATIONS, Tokenizer, sample_stories
from mha_lib.why._common import Outcome, parameter_count, summarise_curve
from mha_lib.why.results import LEARNED

__all__ = ["CACHES", "GATE_LRS", "gated_lr_trial", "gated_trial", "learned_at", "link_curves", "mla_long_trial",
           "mla_trial", "output_story_trial", "reused_seconds", "sinks_trial", "story_config", "story_run"]

#: The caches of the sinks experiment: name -> (window, num_sinks); None: the full cache.
CACHES = {"full cache": (None, 0), "window 8": (8, 0), "window 8 + first 4": (8, 4),
          "window 8 + first 1": (8, 1)}
_DECODED = 56  # the tokens decoded: seven windows of 8
_EVAL_STORIES = 256


def sinks_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """Train the story model from ``seed`` (``steps`` long), then decode the same held-out
    stories (200 of seed 1: odd, never trained on) with each cache of :data:`CACHES`."""
    result, trained = story_run(story_config(seed, steps))
    return _decode_with_caches(result.model, trained)


def _decode_with_caches(model: StoryLM, train_seconds: float = 0.0) -> dict[str, Outcome]:
    """The sinks experiment's measurements of one trained model (``train_seconds`` of CPU to
    train it, counted in every variant's ``cpu_seconds``: the caches share the model)."""
    stories = sample_stories(200, 1)
    _, lens = encode_stories(Tokenizer(), stories)  # (B,)
    stories = [s for s, n in zip(stories, lens.tolist()) if n >= _DECODED]
    mass = sink_mass(model, stories)
    shared = {"params": float(parameter_count(model)), "first_token_weight_max": float(mass["first"].max()),
              "first_token_weight_even": float(mass["first_even"]),
              "punctuation_weight_max": float(mass["punctuation"].max()),
              "punctuation_weight_even": float(mass["punctuation_even"]), "stories": float(len(stories))}
    outcomes = {}
    for name, (window, num_sinks) in CACHES.items():
        start = time.process_time()
        losses, nbytes = streaming_losses(model, stories, length=_DECODED, window=window,
                                          num_sinks=num_sinks)  # (B, 55)
        outcomes[name] = Outcome({
            **shared, "loss": float(losses.mean()), "loss_past_window": float(losses[:, 8:].mean()),
            "cache_bytes_per_story": nbytes / len(stories),
            "cpu_seconds": train_seconds + time.process_time() - start})
    return outcomes


_EVAL_EVERY, _EVAL_DURING = 100, 64  # the links' accuracy on 64 held-out stories every 100 steps
_RUNS: dict[tuple, tuple] = {}
"""The story models this process trained, by (config, kind): the experiments share them (the
plain model is ``mla``'s MHA, ``kv_story``'s MHA, ``gated``'s no gate, ``sinks``' model)."""
_KEPT_RUNS = 24
_REUSED = [0.0]  # the CPU seconds of the runs handed out again (see reused_seconds)


def reused_seconds() -> float:
    """The CPU seconds this process did not spend again because :func:`story_run` handed out a
    run it had trained (a record adds them back to the experiment that reused the run)."""
    return _REUSED[0]


def story_run(config: Config, kind: str = "", change: Callable[[StoryLM], None] | None = None):
    """The story model trained from ``config``: ``(TrainResult, cpu_seconds)``.

    ``change(model)`` alters the fresh model before training (its attention layers replaced,
    ``W_o`` frozen, ...) and ``kind`` names the change (``""``: none); a run is trained once
    per process for each ``(config, kind)`` and shared by the experiments that need it.
    """
    key = (config, kind)
    if key not in _RUNS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            model = StoryLM(config)
        if change is not None:
            change(model)
        start = time.process_time()
        result = train(config, progress=False, model=model)
        if len(_RUNS) >= _KEPT_RUNS:
            del _RUNS[next(iter(_RUNS))]
        _RUNS[key] = (result, time.process_time() - start)
    else:
        _REUSED[0] += _RUNS[key][1]
    return _RUNS[key]


def _replace_attention(seed: int, build: Callable[[], nn.Module]) -> Callable[[StoryLM], None]:
    """A ``change`` for :func:`story_run`: every block's attention replaced by ``build()`` (from a
    generator of their own, seeded by ``seed``); the weights the layers share (W_q, W_o, ...)
    copied from the plain model's, the rest kept as built."""
    def change(model: StoryLM) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(10_000 + seed)
            layers = [build() for _ in model.blocks]
        for block, layer in zip(model.blocks, layers):
            layer.load_state_dict(block.attention.state_dict(), strict=False)  # (W_q, W_o, ...)
            block.attention = layer
    return change


def learned_at(history: dict) -> dict[str, int | None]:
    """Per relation, the first step at which the held-out accuracy at its links reached
    :data:`~mha_lib.why.results.LEARNED` (None: never, in this run), from a :func:`train` history."""
    steps = [int(s) for s in history["eval_steps"]]
    out = {}
    for relation in RELATIONS:
        hits = [s for s, acc in zip(steps, history[f"eval_{relation}"].tolist()) if acc >= LEARNED]
        out[relation] = hits[0] if hits else None
    return out


def link_curves(history: dict) -> dict[str, list]:
    """The held-out accuracy at each relation's links during training (every 100 steps)."""
    return {"steps": [int(s) for s in history["eval_steps"]],
            **{r: [round(float(a), 4) for a in history[f"eval_{r}"]] for r in RELATIONS}}


def _trained(config: Config, kind: str = "", change: Callable[[StoryLM], None] | None = None) -> Outcome:
    """:func:`story_run`, then the held-out loss, the links' accuracies, the first-token weight,
    and when each link was learned (``extra``: ``learned_at`` and the ``links`` curves)."""
    result, cpu = story_run(config, kind, change)
    metrics = evaluate(result.model, held_out_stories(_EVAL_STORIES))
    metrics["first_token_weight_max"] = float(sink_mass(result.model, held_out_stories(64))["first"].max())
    return Outcome({"params": float(parameter_count(result.model)), **metrics, "cpu_seconds": cpu},
                   summarise_curve(torch.as_tensor(result.history["train_loss"])),
                   {"learned_at": learned_at(result.history), "links": link_curves(result.history)})


def story_config(seed: int, steps: int, **changes) -> Config:
    """The story model's Config for a run of ``steps`` from ``seed`` (the links' accuracy logged
    every 100 steps on 64 held-out stories), with ``changes``."""
    return replace(Config(), seed=seed, steps=steps, eval_every=min(_EVAL_EVERY, steps),
                   eval_stories=_EVAL_DURING, **changes)


def gated_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The story model without an output gate, with a gate per head, with a gate per feature."""
    config = story_config(seed, steps)
    outcomes = {"no gate": _trained(config)}
    for name, gate in (("head gate", "head"), ("element gate", "element")):
        outcomes[name] = _trained(config, f"{gate} gate", _gated(seed, config, gate))
    return outcomes


def _gated(seed: int, config: Config, gate: str, opened: bool = False) -> Callable[[StoryLM], None]:
    """Gated attention in every layer; ``opened``: each gate's bias starts at +3 (sigmoid 0.95,
    the head's output passed almost whole) instead of nn.Linear's small values (sigmoid 0.5)."""
    D, H = config.d_model, config.num_heads

    def build() -> nn.Module:
        layer = GroupedQueryAttention(D, H, H, 0.0, bias=True, rope=True, gate=gate)
        if opened:
            with torch.no_grad():
                layer.gate.bias.fill_(_OPEN_GATE)
        return layer
    return _replace_attention(seed, build)


def mla_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The story model with 4, 2 and 1 key/value heads, and with a latent of 32 numbers (the
    cache of one key/value head of size 16, keys and values)."""
    return _kv_and_latent(seed, steps, (4, 2, 1), (32,))


def _kv_and_latent(seed: int, steps: int, kv_heads: tuple[int, ...], ranks: tuple[int, ...]) -> dict[str, Outcome]:
    """The story model with each number of key/value heads, then with a latent of each rank."""
    outcomes = {}
    for Hkv in kv_heads:
        config = story_config(seed, steps, num_kv_heads=Hkv)
        outcome = _trained(config)
        outcome.metrics["cache_numbers_per_token"] = 2.0 * Hkv * (config.d_model // config.num_heads)
        outcomes[f"{'MHA' if Hkv == 4 else 'GQA' if Hkv == 2 else 'MQA'} (Hkv={Hkv})"] = outcome
    config = story_config(seed, steps)
    D, H = config.d_model, config.num_heads
    for rank in ranks:
        change = _replace_attention(seed, lambda: LatentAttention(D, D, D, D, H, 0.0, bias=True, rank=rank, rope=True))
        outcome = _trained(config, f"latent {rank}", change)
        outcome.metrics["cache_numbers_per_token"] = float(rank)
        outcomes[f"MLA (r={rank})"] = outcome
    return outcomes


# --- the threats to 12c's claims: a learning-rate sweep and an open gate, a longer budget and a
# wider latent, and W_o where nothing sits at a ceiling -------------------------------------------

GATE_LRS = (1.2e-2, 2.4e-2)
"""The learning rates of the gate's threat: two and four times the story model's 6e-3 (gated
attention was reported to tolerate larger rates than plain attention)."""
_OPEN_GATE = 3.0


def gated_lr_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """No gate and a gate per head at the learning rates of :data:`GATE_LRS`, and a gate per head
    initialised open (bias +3) at the story model's own rate."""
    outcomes = {}
    for lr in GATE_LRS:
        config = story_config(seed, steps, lr=lr)
        outcomes[f"no gate, lr={lr:g}"] = _trained(config)
        outcomes[f"head gate, lr={lr:g}"] = _trained(config, "head gate", _gated(seed, config, "head"))
    config = story_config(seed, steps)
    outcomes[f"head gate opened, lr={config.lr:g}"] = _trained(config, "head gate opened",
                                                                _gated(seed, config, "head", opened=True))
    return outcomes


def mla_long_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """Two and one key/value heads against a latent of 32 and of 64 (their caches' sizes),
    ``steps`` long (the threat's default: twice the story model's budget)."""
    return _kv_and_latent(seed, steps, (2, 1), (32, 64))


def _frozen_identity_output(model: StoryLM) -> None:
    """W_o fixed at the identity (no bias), not trained: each head writes only its own d features."""
    for block in model.blocks:
        W_o = block.attention.W_o
        with torch.no_grad():
            W_o.weight.copy_(torch.eye(W_o.out_features))
            if W_o.bias is not None:
                W_o.bias.zero_()
        W_o.requires_grad_(False)


def output_story_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The story model with ``W_o`` learned, or fixed at the identity in both layers."""
    config = story_config(seed, steps)
    return {"learned W_o": _trained(config),
            "no W_o (identity)": _trained(config, "identity W_o", _frozen_identity_output)}
