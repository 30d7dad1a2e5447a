"""What softmax buys: the story model of chapter 12 with a fixed-size state in place of attention.

* :func:`linear_trial`: the story model (two layers) with softmax attention in both layers,
  linear attention, DeltaNet or Gated DeltaNet in both (:mod:`mha_lib.linear`), and a hybrid
  with Gated DeltaNet below and softmax above (1:1: two layers are all the model has; the
  models of 2025 put one softmax layer above three Gated DeltaNet layers);
* :func:`linear_deep_trial`, its threat: four layers, softmax in every one, Gated DeltaNet in
  every one, and the 3:1 hybrid of Qwen3-Next and Kimi Linear (three Gated DeltaNet layers, then
  softmax).

Each variant: the held-out loss, the accuracy at each relation's links, by the distance between
the two linked tokens (:data:`_DISTANCES`), when each link was learned, and the bytes a story
needs while decoding (the KV cache of the softmax layers, the fixed states of the others).
Every variant starts from the plain model's weights where they share them (``W_q``, ``W_k``,
``W_v``, ``W_o``, the rest of the model); the new layers' own parameters (``W_beta``,
``W_alpha``) come from a generator of their own, and every variant reads the same batches.

* :func:`load_hybrid`: the hybrid 1:1 of one seed (:data:`_HYBRID_SEED`, the seed of the eight
  whose hybrid reads possession best), shipped in ``data/lm_hybrid.pt`` for chapter 12d's
  explorer; :func:`_train_hybrid` retrains it (``python -c "from mha_lib.why.linear_runs import
  _train_hybrid; _train_hybrid('mha_lib/data/lm_hybrid.pt')"``, the run of the experiment).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Sequence

import torch

from mha_lib._modes import eval_mode
from mha_lib.linear import DeltaNet, GatedDeltaNet, LinearAttention, state_bytes
from mha_lib.lm import Config, StoryLM
from mha_lib.lm_eval import encode_stories, evaluate, held_out_stories
from mha_lib.stories import RELATIONS, Story, Tokenizer
from mha_lib.training import TrainResult, load_model, save_result
from mha_lib.why._common import Outcome, parameter_count, summarise_curve
from mha_lib.why.modern_runs import learned_at, link_curves, story_config, story_run

__all__ = ["HYBRID_PATH", "LINEAR_DEEP_VARIANTS", "LINEAR_VARIANTS", "linear_deep_trial", "linear_trial", "load_hybrid"]

_LAYERS = {"linear": LinearAttention, "DeltaNet": DeltaNet, "Gated DeltaNet": GatedDeltaNet}

#: variant -> the attention of each of the story model's two layers, lowest first.
LINEAR_VARIANTS: dict[str, tuple[str, ...]] = {
    "softmax": ("softmax", "softmax"),
    "linear": ("linear", "linear"),
    "DeltaNet": ("DeltaNet", "DeltaNet"),
    "Gated DeltaNet": ("Gated DeltaNet", "Gated DeltaNet"),
    "hybrid 1:1 (GDN, softmax)": ("Gated DeltaNet", "softmax"),
}

#: The threat's variants: four layers.
LINEAR_DEEP_VARIANTS: dict[str, tuple[str, ...]] = {
    "softmax x4": ("softmax",) * 4,
    "Gated DeltaNet x4": ("Gated DeltaNet",) * 4,
    "hybrid 3:1 (GDN x3, softmax)": ("Gated DeltaNet",) * 3 + ("softmax",),
}

_DISTANCES = ((1, 15), (16, 31), (32, 79))
"""The bins of the distance ``i - j`` between a linked token ``i`` and its source ``j`` (the
held-out stories are 34 to 79 tokens long; recall links span 16 to 52 tokens, possession 6 to
49, antecedents 3 to 7). A bin is reported for a relation when at least 20 links fall in it."""
_MIN_LINKS = 20
_EVAL_STORIES = 256
_HYBRID = "hybrid 1:1 (GDN, softmax)"
_HYBRID_SEED, _HYBRID_STEPS = 6, 1500
_HYBRID_KIND = "lm_hybrid"
HYBRID_PATH = Path(str(resources.files("mha_lib") / "data" / "lm_hybrid.pt"))
"""The shipped hybrid (Gated DeltaNet below softmax), a run of the ``linear`` experiment."""


def linear_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The story model (two layers) with each attention of :data:`LINEAR_VARIANTS`."""
    config = story_config(seed, steps)
    return {name: _measured(config, layers) for name, layers in LINEAR_VARIANTS.items()}


def linear_deep_trial(seed: int, steps: int) -> dict[str, Outcome]:
    """The story model with four layers and each attention of :data:`LINEAR_DEEP_VARIANTS`."""
    config = story_config(seed, steps, num_layers=4)
    return {name: _measured(config, layers) for name, layers in LINEAR_DEEP_VARIANTS.items()}


def _measured(config: Config, layers: Sequence[str]) -> Outcome:
    """The story model trained with these layers (the plain one is shared through
    :func:`story_run`), then measured on the held-out stories."""
    if all(layer == "softmax" for layer in layers):
        result, cpu = story_run(config)
    else:
        result, cpu = story_run(config, "layers: " + ", ".join(layers), _with_layers(config, layers))
    stories = held_out_stories(_EVAL_STORIES)
    model = result.model
    metrics = {"params": float(parameter_count(model)), **evaluate(model, stories)}
    by_distance = _accuracy_by_distance(model, stories)
    for relation, counts in by_distance.items():
        for low, high in _DISTANCES:
            right, total = (sum(counts[d][k] for d in counts if low <= d <= high) for k in (0, 1))
            if total >= _MIN_LINKS:
                metrics[f"{relation} {low}-{high}"] = right / total
    lengths = [len(s.tokens) for s in stories]
    metrics["decode_bytes_per_story"] = sum(state_bytes(model, n)["total"] for n in lengths) / len(lengths)
    metrics["decode_bytes_at_1000"] = float(state_bytes(model, 1000)["total"])
    metrics["cpu_seconds"] = cpu
    return Outcome(metrics, summarise_curve(torch.as_tensor(result.history["train_loss"])),
                   {"learned_at": learned_at(result.history), "links": link_curves(result.history),
                    "by_distance": {r: {str(d): c for d, c in sorted(counts.items())} for r, counts in by_distance.items()}})


def _with_layers(config: Config, layers: Sequence[str]):
    """A ``change`` for :func:`story_run`: block n's attention becomes ``layers[n]`` (built from a
    generator of its own), with the plain layer's ``W_q``, ``W_k``, ``W_v``, ``W_o``."""
    D, H = config.d_model, config.num_heads

    def change(model: StoryLM) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(10_000 + config.seed)
            built = [None if kind == "softmax" else _LAYERS[kind](D, H) for kind in layers]
        for block, layer in zip(model.blocks, built, strict=True):
            if layer is not None:
                layer.load_state_dict(block.attention.state_dict(), strict=False)  # (W_q, W_k, W_v, W_o)
                block.attention = layer
    return change


@torch.no_grad()
def _accuracy_by_distance(model: StoryLM, stories: Sequence[Story]) -> dict[str, dict[int, list[int]]]:
    """Per relation and distance ``i - j``: ``[right, links]``, how many of its linked tokens the
    model predicts as its most likely next token (from the tokens before it), and how many."""
    ids, lens = encode_stories(Tokenizer(), stories)  # (B, L), (B,)
    with eval_mode(model):
        predicted = model(ids, lens).argmax(-1)  # (B, L, V) -> (B, L): the token predicted after each position
    out: dict[str, dict[int, list[int]]] = {}
    for relation in RELATIONS:
        counts = out.setdefault(relation, {})
        for b, story in enumerate(stories):
            for i, j in story.links.get(relation, ()):
                count = counts.setdefault(i - j, [0, 0])
                count[0] += int(predicted[b, i - 1] == ids[b, i])
                count[1] += 1
    return out


# --- the hybrid shipped for chapter 12d's explorer ----------------------------------------------

def _train_hybrid(path: str | Path | None = None, *, overwrite: bool = False) -> TrainResult:
    """Train the hybrid of :data:`_HYBRID_SEED` as the experiment does (:func:`story_run`); save
    it at ``path`` (a checkpoint of kind ``"lm_hybrid"``) when given."""
    config = story_config(_HYBRID_SEED, _HYBRID_STEPS)
    layers = LINEAR_VARIANTS[_HYBRID]
    result, _ = story_run(config, "layers: " + ", ".join(layers), _with_layers(config, layers))
    if path is not None:
        save_result(result, path, kind=_HYBRID_KIND, model_class=StoryLM, overwrite=overwrite)
    return result


def load_hybrid(path: str | Path | None = None) -> tuple[StoryLM, Tokenizer]:
    """The shipped hybrid (or the checkpoint of :func:`_train_hybrid` at ``path``) in eval mode,
    and its tokenizer (the stories'): a :class:`~mha_lib.lm.StoryLM` whose block 0 attends
    through a :class:`~mha_lib.linear.GatedDeltaNet`, block 1 through softmax. Offline.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a checkpoint of the hybrid.
    """
    def hybrid(config: Config) -> StoryLM:
        model = StoryLM(config)
        _with_layers(config, LINEAR_VARIANTS[_HYBRID])(model)
        return model

    path = HYBRID_PATH if path is None else path
    return load_model(path, kind=_HYBRID_KIND, config_class=Config, model_class=hybrid), Tokenizer()
