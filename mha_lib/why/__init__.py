"""Why attention is built the way it is: one small controlled experiment per design choice.

Each experiment trains a few variants of one model that differ in one choice (the number of
heads, the 1/sqrt(d), positions, where the LayerNorm goes, key/value heads, ``W_o``), from the
same seed, for the same steps, on a task built so that the choice matters. Every claim's run
on the small tasks takes less than a minute of CPU on one thread, every threat's at most three;
a variant of chapter 12's story model takes one to three minutes (1500 steps):

* :data:`EXPERIMENTS`  name -> :class:`Experiment` (``.question``, ``.claim``, ``.variants``)
* :func:`run`          ``run(name, seed, steps=None) -> {variant: {metric: value}}``
* :func:`load_results` the runs shipped with the book (seeds 0-2 on the small tasks; seeds 0-7
  on the story model, whose links are learned or not in a phase change that can jump between
  seeds), with their curves
* ``python -m mha_lib.why NAME --seeds 0 1 2`` reruns one and prints mean and spread
* :data:`CLAIMS` the experiments that make a claim; :data:`THREATS` claim -> the runs that
  could overturn it (more steps, another initialisation, a learning-rate sweep, a harder
  task); :mod:`mha_lib.why.lessons` words each claim to what the pair shows; today's claims
  have threats too (``gated_lr``, ``mla_long``)
* :data:`TODAY` the experiments of today's attention (chapter 12c): ``sinks``, ``gated``,
  ``mla`` on the story model (:mod:`mha_lib.why.modern_runs`), and ``rope_length``, RoPE past
  its training length and position interpolation (:mod:`mha_lib.why.length_runs`)
* :data:`STATE` what softmax buys: ``linear``, the story model with linear attention, DeltaNet,
  Gated DeltaNet (:mod:`mha_lib.linear`) in every layer or below softmax, and its threat
  ``linear_deep`` (four layers, the 3:1 hybrid), in :mod:`mha_lib.why.linear_runs`

The results of a run are deterministic on one machine; on another CPU the numbers differ a
little (training amplifies the last bits of the kernels), the directions of the claims do not.
"""

from __future__ import annotations

from mha_lib.why._common import Experiment, Outcome, check_seed_and_steps
from mha_lib.why.digit_runs import heads_trial, kv_heads_trial, output_trial, scale_trial
from mha_lib.why.length_runs import LENGTH_VARIANTS, length_trial
from mha_lib.why.linear_runs import LINEAR_DEEP_VARIANTS, LINEAR_VARIANTS, linear_deep_trial, linear_trial
from mha_lib.why.modern_runs import (
    CACHES,
    GATE_LRS,
    gated_lr_trial,
    gated_trial,
    mla_long_trial,
    mla_trial,
    output_story_trial,
    sinks_trial,
)
from mha_lib.why.sequence_runs import norm_trial, positions_trial
from mha_lib.why.threats import (
    NORM_LRS,
    causal_long_trial,
    heads_long_trial,
    kv_story_trial,
    norm_lr_trial,
    scale_t5_trial,
    unseen_offsets_trial,
)

__all__ = ["CLAIMS", "EXPERIMENTS", "Experiment", "STATE", "THREATS", "TODAY", "load_results", "run", "run_outcomes"]

EXPERIMENTS: dict[str, Experiment] = {
    experiment.name: experiment
    for experiment in (
        Experiment(
            name="heads",
            question="Why several heads rather than one?",
            claim="On a task that needs two lookups at once, in the same 1000 steps one head of size "
                  "32 is worse than two, four or eight smaller heads with the same parameters, on "
                  "every seed: it splits its weight between the two keys instead of finding both "
                  "(D = 32, learning rate 0.003; with three times the steps see heads_3x).",
            variants=("H=1", "H=2", "H=4", "H=8"), metric="accuracy", higher_is_better=True,
            steps=1000, differs="nothing: W_q, W_k, W_v, W_o are D x D for every H (D = 32)",
            where="01_model", trial=heads_trial),
        Experiment(
            name="scale",
            question="Why divide the scores by sqrt(d)?",
            claim="At head size d = 128 without the scale (and the usual initialisation), the "
                  "softmax starts nearly one-hot, passes about half the gradient, and the model is "
                  "still near chance after 300 steps at the learning rate 0.001, when the scaled one "
                  "is right about two times in three (the factor in W_q's initialisation: scale_t5).",
            variants=("1/sqrt(d)", "no scale"), metric="final_loss", higher_is_better=False,
            steps=300, differs="nothing (the unscaled scores are q.k, the same parameters)",
            where="01_model", trial=scale_trial),
        Experiment(
            name="positions",
            question="Does a decoder need positions, and which kind?",
            claim="Without positions or a mask attention sees a set and fails; in the same 600 steps "
                  "a causal mask alone recovers a little of the order (more with more steps: "
                  "positions_5x); learned, sinusoidal and rotary positions solve the task at the "
                  "training length, and only rotary still solves it at twice the length, at an "
                  "offset seen in training (unseen offsets: positions_unseen).",
            variants=("none", "causal", "learned", "sinusoidal", "rotary"), metric="accuracy_2x",
            higher_is_better=True, steps=600,
            differs="learned positions add a 32 x 32 table; the others add no parameters",
            where="03b_positions_and_block", trial=positions_trial),
        Experiment(
            name="norm",
            question="Why pre-LN rather than the original post-LN?",
            claim="At depth 6, width 32 and the learning rate 0.03, pre-LN trains with or without "
                  "warm-up, while post-LN stays near chance (at 0.003 all four train: norm_lr).",
            variants=("pre-LN, warm-up", "pre-LN, no warm-up", "post-LN, warm-up", "post-LN, no warm-up"),
            metric="final_loss", higher_is_better=False, steps=300,
            differs="nothing (the same blocks, the LayerNorms in other places)",
            where="03b_positions_and_block", trial=norm_trial),
        Experiment(
            name="kv_heads",
            question="What do fewer key/value heads cost (GQA, MQA)?",
            claim="On the task of the heads experiment, four query heads sharing two key/value "
                  "heads, or one, learn it as well as four with their own (every seed reaches 100%, "
                  "so this task cannot show a cost) and about as fast, with a KV cache two or four "
                  "times smaller (where K/V capacity binds: kv_story).",
            variants=("MHA (Hkv=4)", "GQA (Hkv=2)", "MQA (Hkv=1)"), metric="learned_at",
            higher_is_better=False, steps=1000,
            differs="W_k and W_v shrink from D x D to D x Hkv*d (fewer parameters with fewer Hkv)",
            where="10_grouped_query_attention", trial=kv_heads_trial),
        Experiment(
            name="output",
            question="What is W_o for: does the layer need it?",
            claim="Fixing W_o at the identity (each head writes only its own d features) changes "
                  "little here: the MLP after the layer reads all heads anyway.",
            variants=("learned W_o", "no W_o (identity)"), metric="accuracy", higher_is_better=True,
            steps=1000, differs="the identity W_o is not trained: D x D = 1024 fewer parameters",
            where="01_model", trial=output_trial),
        # --- the threats: the run that could overturn each claim above ------------------------
        Experiment(
            name="heads_3x",
            question="Does one head catch up with more steps?",
            claim="(threat to heads) One head and two, trained three times as long.",
            variants=("H=1", "H=2"), metric="accuracy", higher_is_better=True, steps=3000,
            differs="nothing: W_q, W_k, W_v, W_o are D x D for every H (D = 32)",
            where="13_why", trial=heads_long_trial, threatens="heads"),
        Experiment(
            name="scale_t5",
            question="Does the scale matter if W_q starts 1/sqrt(d) smaller (as in T5)?",
            claim="(threat to scale) No 1/sqrt(d) in the scores, the factor folded into W_q's "
                  "initialisation instead.",
            variants=("1/sqrt(d)", "no scale", "no scale, T5 init"), metric="final_loss",
            higher_is_better=False, steps=300,
            differs="nothing (W_q's initial weights divided by sqrt(d) = 11.3 in the T5 variant)",
            where="13_why", trial=scale_t5_trial, threatens="scale"),
        Experiment(
            name="positions_5x",
            question="Does the causal mask alone learn exact offsets with more steps?",
            claim="(threat to positions) The causal-only and rotary decoders for five times the steps.",
            variants=("causal", "rotary"), metric="accuracy_1x", higher_is_better=True, steps=3000,
            differs="nothing (neither adds parameters)",
            where="13_why", trial=causal_long_trial, threatens="positions"),
        Experiment(
            name="positions_unseen",
            question="Do rotary positions carry over to offsets never seen in training?",
            claim="(threat to positions) Copy n tokens after a separator (the offset n back): "
                  "trained on n = 4 to 7 at length 16, measured on n = 4 to 7 and on n = 12 to 15 "
                  "at length 32, offsets never seen in training.",
            variants=("causal", "learned", "sinusoidal", "rotary"), metric="accuracy_unseen",
            higher_is_better=True, steps=600,
            differs="learned positions add a 32 x 32 table; the others add no parameters (17 "
                    "tokens: the separator is one more)",
            where="13_why", trial=unseen_offsets_trial, threatens="positions"),
        Experiment(
            name="norm_lr",
            question="Does post-LN fail at every learning rate, or only at a large one?",
            claim="(threat to norm) The four variants at the learning rates 3e-3, 1e-2 and 3e-2.",
            variants=tuple(f"{norm}, {warm}, lr={lr:g}" for lr in NORM_LRS for norm in ("pre-LN", "post-LN")
                           for warm in ("warm-up", "no warm-up")),
            metric="final_loss", higher_is_better=False, steps=300,
            differs="nothing (the same blocks, the LayerNorms in other places)",
            where="13_why", trial=norm_lr_trial, threatens="norm"),
        Experiment(
            name="kv_story",
            question="Do fewer key/value heads cost something where their capacity binds?",
            claim="(threat to kv_heads) Chapter 12's story model with one key/value head per "
                  "layer against four, over eight seeds.",
            variants=("MHA (Hkv=4)", "MQA (Hkv=1)"), metric="loss", higher_is_better=False,
            steps=1500, differs="W_k and W_v shrink from D x D to D x d in each layer (MQA)",
            where="12_language_model", trial=kv_story_trial, threatens="kv_heads"),
        # --- today's attention, on the story model (chapter 12c) ------------------------------
        Experiment(
            name="sinks",
            question="Does the story model park weight on its first token, and what do "
                     "StreamingLLM's first keys add to a sliding window?",
            claim="The story model (2 layers, D = 64, 1500 steps, eight seeds) has no attention "
                  "sink: the largest weight a head puts on the first token is 0.83 to 1.17 times an "
                  "even spread's. Decoding 56-token stories, a window of 8 nearly doubles the loss; "
                  "the first four keys win back 11% to 37% of the gap, by seed, and the first key "
                  "alone -5% to 1%: here the first tokens help as content (the cast's names), not as "
                  "a sink.",
            variants=tuple(CACHES), metric="loss", higher_is_better=False, steps=1500,
            differs="nothing: one trained model per seed, decoded with four caches (the same "
                    "held-out stories)",
            where="12c_attention_today", trial=sinks_trial),
        Experiment(
            name="gated",
            question="Does a gate on each head's output help the story model?",
            claim="On the story model (2 layers, D = 64, 1500 steps at the learning rate 0.006, "
                  "eight seeds) the plain model learned the possession links on 7 seeds, with a "
                  "gate per head on 1 and with a gate per feature on 3, and the gated models ended "
                  "with a higher held-out loss; the model had no sink for a gate to remove. One rate "
                  "and one budget (gated_lr moves both the rate and the gate's start).",
            variants=("no gate", "head gate", "element gate"), metric="loss",
            higher_is_better=False, steps=1500,
            differs="the gate's nn.Linear: D x H + H (head) or D x D + D (element) more parameters",
            where="12c_attention_today", trial=gated_trial),
        Experiment(
            name="mla",
            question="Does a latent keep more than one key/value head in the same cache?",
            claim="With the cache of multi-query attention (32 numbers per token and layer), a "
                  "latent of 32 (MLA, RoPE after the up-projection) kept the possession links on 4 "
                  "of 8 seeds and one shared key/value head on 1, against 7 of 8 with four key/value "
                  "heads and 6 with two (story model, 1500 steps). The links are learned in a jump or "
                  "not at all, and the loss follows them; counts of 8 this far apart arise by chance "
                  "28% of the time: a direction, not a result. Trained twice as long (mla_long, two "
                  "seeds) both small caches learned the links: at 1500 steps their cost is one of speed.",
            variants=("MHA (Hkv=4)", "GQA (Hkv=2)", "MQA (Hkv=1)", "MLA (r=32)"), metric="loss",
            higher_is_better=False, steps=1500,
            differs="W_k and W_v: D x Hkv*d each (GQA, MQA), or W_dkv D x r and W_uk, W_uv r x D (MLA)",
            where="12c_attention_today", trial=mla_trial),
        Experiment(
            name="rope_length",
            question="Does a RoPE model trained at length 16 work at 32 and 64, and do position "
                     "interpolation, NTK-aware scaling or YaRN repair it?",
            claim="Two layers (D = 32, H = 2) trained 600 steps at the learning rate 0.003 to copy 4 "
                  "to 7 tokens at length 16 with RoPE copy as well at lengths 32 and 64 (0.97 to "
                  "0.98) but fail at the offsets never trained (0.14 to 0.22; near chance from "
                  "n = 11), on 8 of 8 seeds. Without training, position interpolation lifts the new "
                  "offsets at length 32 to 0.49 to 0.62 and drops the trained ones to 0.54 to 0.68; "
                  "NTK-aware scaling keeps the trained offsets (0.88 to 0.97) and barely moves the "
                  "new ones (0.15 to 0.30); YaRN beats interpolation at the new offsets on 8 of 8 "
                  "seeds (0.69 to 0.77 at length 32, 0.44 to 0.48 at 64) and at the trained ones "
                  "of length 64. A 100-step fine-tune at length 64 (learning rate 0.003) with "
                  "interpolation reaches 0.82 to 0.91 at the new offsets, 0.06 to 0.14 above the "
                  "same fine-tune without it on 8 of 8 seeds; the causal mask alone and ALiBi fall "
                  "with the offset (0.25 to 0.38 and 0.33 to 0.41 at the new offsets of length 64).",
            variants=LENGTH_VARIANTS, metric="accuracy_64_new", higher_is_better=True, steps=600,
            differs="no variant adds parameters (ALiBi's slopes are fixed); the two fine-tunes train "
                    "100 steps more (steps // 6) on copies at length 64 (17 tokens: the separator)",
            where="12c_attention_today", trial=length_trial),
        # --- the threats to today's claims and to W_o's, on the story model ------------------
        Experiment(
            name="gated_lr",
            question="Does the gate pay off at another learning rate, or opened from the start?",
            claim="(threat to gated) No gate and a gate per head at the learning rates "
                  + " and ".join(f"{lr:g}" for lr in GATE_LRS) + ", and a gate per head whose bias "
                  "starts at +3 (sigmoid 0.95: open) at 0.006.",
            variants=tuple(f"{g}, lr={lr:g}" for lr in GATE_LRS for g in ("no gate", "head gate"))
            + ("head gate opened, lr=0.006",), metric="loss", higher_is_better=False, steps=1500,
            differs="the gate's nn.Linear: D x H + H more parameters",
            where="12c_attention_today", trial=gated_lr_trial, threatens="gated"),
        Experiment(
            name="mla_long",
            question="Does the latent catch up with twice the steps, or with twice the cache?",
            claim="(threat to mla) One and two key/value heads against a latent of 32 and of 64 "
                  "(the same caches: 32 and 64 numbers per token and layer), trained twice as long.",
            variants=("GQA (Hkv=2)", "MQA (Hkv=1)", "MLA (r=32)", "MLA (r=64)"), metric="loss",
            higher_is_better=False, steps=3000,
            differs="W_k and W_v: D x Hkv*d each (GQA, MQA), or W_dkv D x r and W_uk, W_uv r x D (MLA)",
            where="12c_attention_today", trial=mla_long_trial, threatens="mla"),
        Experiment(
            name="output_story",
            question="Is W_o still dispensable where the task is not solved by both?",
            claim="(threat to output) Chapter 12's story model with W_o learned, or fixed at the "
                  "identity in both layers (no model reaches a ceiling there).",
            variants=("learned W_o", "no W_o (identity)"), metric="loss", higher_is_better=False,
            steps=1500, differs="the identity W_o is not trained: 2 x (D x D + D) = 8,320 fewer parameters",
            where="13_why", trial=output_story_trial, threatens="output"),
        # --- what softmax buys: a fixed-size state in place of attention (mha_lib.linear) ---------
        Experiment(
            name="linear",
            question="What does softmax buy: which links does a fixed-size state lose?",
            claim="Chapter 12's story model with softmax attention, linear attention, DeltaNet or Gated "
                  "DeltaNet in both layers, or Gated DeltaNet below softmax (1:1, the two layers it has): "
                  "the held-out loss and the accuracy at each relation's links by the distance between "
                  "the linked tokens, against the bytes a story needs while decoding.",
            variants=tuple(LINEAR_VARIANTS), metric="recall", higher_is_better=True, steps=1500,
            differs="linear attention adds no parameter; DeltaNet adds W_beta (D x H + H = 260 a layer), "
                    "Gated DeltaNet W_beta and W_alpha (520 a layer); the linear layers have no RoPE (the "
                    "state reads the tokens in order)",
            where="12d_linear_attention", trial=linear_trial),
        Experiment(
            name="linear_deep",
            question="Does the 3:1 hybrid of 2025's models keep what softmax buys, four layers deep?",
            claim="(threat to linear) The story model with four layers: softmax in every layer, Gated "
                  "DeltaNet in every layer, and three Gated DeltaNet layers below one softmax layer "
                  "(Qwen3-Next's and Kimi Linear's ratio).",
            variants=tuple(LINEAR_DEEP_VARIANTS), metric="recall", higher_is_better=True, steps=1500,
            differs="four layers instead of two (about 100,000 parameters more); Gated DeltaNet adds 520 "
                    "parameters a layer",
            where="12d_linear_attention", trial=linear_deep_trial, threatens="linear"),
    )
}
"""Every experiment, by name: the claims, then their threats, then today's attention, then what
softmax buys."""

TODAY: tuple[str, ...] = ("sinks", "gated", "mla", "rope_length")
"""The experiments of chapter 12c (today's attention)."""

STATE: tuple[str, ...] = ("linear",)
"""What softmax buys: the story model with a fixed-size state (:mod:`mha_lib.linear`) in place of
attention, in every layer or below softmax (:mod:`mha_lib.why.linear_runs`)."""

CLAIMS: tuple[str, ...] = tuple(name for name, e in EXPERIMENTS.items()
                                if not e.threatens and name not in TODAY + STATE)
"""The design-choice experiments that make a claim (chapter 13's table)."""

THREATS: dict[str, tuple[str, ...]] = {
    claim: tuple(name for name, e in EXPERIMENTS.items() if e.threatens == claim) for claim in CLAIMS + TODAY + STATE
}
"""claim -> the threat runs that could overturn it (``output`` has none: its claim is worded to
what the run shows, that the MLP mixes the heads too)."""


def _experiment(name: object) -> Experiment:
    if not isinstance(name, str) or name not in EXPERIMENTS:
        raise ValueError(f"name must be one of {sorted(EXPERIMENTS)}, got {name!r}")
    return EXPERIMENTS[name]


def run_outcomes(name: str, seed: int, steps: int | None = None) -> dict[str, Outcome]:
    """Like :func:`run`, with each variant's training curve and figure data (an ``Outcome``)."""
    experiment = _experiment(name)
    seed, steps = check_seed_and_steps(seed, steps, experiment.steps)
    return experiment.trial(seed, steps)


def run(name: str, seed: int, steps: int | None = None) -> dict[str, dict[str, float]]:
    """Train every variant of experiment ``name`` from ``seed`` and measure it.

    Args:
        name: a key of :data:`EXPERIMENTS`.
        seed: the initialisation and the batches (an integer >= 0).
        steps: training steps of every variant (None: the experiment's default).

    Returns:
        ``{variant: {metric: value}}``, every variant with ``"params"`` (its trained parameters),
        ``"cpu_seconds"`` and the experiment's measures. Deterministic for a seed on one machine.

    Raises:
        ValueError: an unknown name, a seed that is not an integer >= 0, steps not an integer >= 1.
    """
    return {variant: outcome.metrics for variant, outcome in run_outcomes(name, seed, steps).items()}


from mha_lib.why.results import load_results  # noqa: E402  (uses EXPERIMENTS)
