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

import torch
from torch import nn

from mha_lib.gqa import GroupedQueryAttention
from mha_lib.latent import LatentAttention
from mha_lib.lm import Config, StoryLM, encode_stories, evaluate, held_out_stories, train
from mha_lib.lm_sinks import sink_mass, streaming_losses
from mha_lib.stories import Tokenizer, sample_stories
from mha_lib.why._common import Outcome, parameter_count, summarise_curve

__all__ = ["CACHES", "gated_trial", "mla_trial", "sinks_trial"]

#: The caches of the sinks experiment: name -> (window, num_sinks); None: the full cache.
CACHES = {"full cache": (None, 0), "window 8": (8, 0), "window 8 + first 4": (8, 4),
          "window 8 + first 1": (8, 1)}
_DECODED = 56  # the tokens decoded: seven windows of 8
_EVAL_STORIES = 256


def sinks_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """Train the story model from ``seed`` (``steps`` long), then decode the same held-out
    stories (200 of seed 1: odd, never trained on) with each cache of :data:`CACHES`."""
    start = time.process_time()
    model = _train(_config(seed, steps), None).model
    trained = time.process_time() - start
    return _decode_with_caches(model, trained)


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


def _train(config: Config, attention: dict[str, nn.Module] | None):
    """Train the story model, its attention layers replaced by ``attention`` (None: as they
    are): the layers' shared weights are copied from the plain model's, the rest keeps its own."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = StoryLM(config)
    for block, layer in zip(model.blocks, (attention or {}).values()):
        layer.load_state_dict(block.attention.state_dict(), strict=False)  # (W_q, W_o, ...)
        block.attention = layer
    return train(config, progress=False, model=model)


def _trained(config: Config, attention: dict[str, nn.Module] | None) -> Outcome:
    """:func:`_train`, then the held-out loss, the links' accuracies and the first-token weight."""
    start = time.process_time()
    result = _train(config, attention)
    metrics = evaluate(result.model, held_out_stories(_EVAL_STORIES))
    metrics["first_token_weight_max"] = float(sink_mass(result.model, held_out_stories(64))["first"].max())
    return Outcome({"params": float(parameter_count(result.model)), **metrics,
                    "cpu_seconds": time.process_time() - start},
                   summarise_curve(torch.as_tensor(result.history["train_loss"])))


def _config(seed: int, steps: int, **changes) -> Config:
    return replace(Config(), seed=seed, steps=steps, eval_every=steps, **changes)


def _layers(seed: int, num_layers: int, build) -> dict[str, nn.Module]:
    """``build()`` once per layer, from a generator of their own (seeded by ``seed``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(10_000 + seed)
        return {f"layer {n}": build() for n in range(num_layers)}


def gated_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The story model without an output gate, with a gate per head, with a gate per feature."""
    config = _config(seed, steps)
    D, H, N = config.d_model, config.num_heads, config.num_layers
    outcomes = {"no gate": _trained(config, None)}
    for name, gate in (("head gate", "head"), ("element gate", "element")):
        layers = _layers(seed, N, lambda: GroupedQueryAttention(D, H, H, 0.0, bias=True, rope=True, gate=gate))
        outcomes[name] = _trained(config, layers)
    return outcomes


def mla_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The story model with 4, 2 and 1 key/value heads, and with a latent of 32 numbers (the
    cache of one key/value head of size 16, keys and values)."""
    outcomes = {}
    for Hkv in (4, 2, 1):
        config = _config(seed, steps, num_kv_heads=Hkv)
        outcome = _trained(config, None)
        outcome.metrics["cache_numbers_per_token"] = 2.0 * Hkv * (config.d_model // config.num_heads)
        outcomes[f"{'MHA' if Hkv == 4 else 'GQA' if Hkv == 2 else 'MQA'} (Hkv={Hkv})"] = outcome
    config = _config(seed, steps)
    D, H, N, rank = config.d_model, config.num_heads, config.num_layers, 32
    layers = _layers(seed, N, lambda: LatentAttention(D, D, D, D, H, 0.0, bias=True, rank=rank, rope=True))
    outcome = _trained(config, layers)
    outcome.metrics["cache_numbers_per_token"] = float(rank)
    outcomes[f"MLA (r={rank})"] = outcome
    return outcomes
