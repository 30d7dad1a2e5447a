"""What each claim of :mod:`mha_lib.why` holds for, beside the run that could overturn it.

A claim is worded to what its runs measured, with its range of validity (size, steps,
learning rate); its *threat* (:data:`mha_lib.why.THREATS`) changes the first thing a sceptic
would change. :func:`lessons_table` is chapter 13's summary: the lesson, what would change it,
and the threat's result read from the shipped runs (mean ± half the range over the seeds, or the
range and the count of seeds that learned a relation, on the story model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mha_lib.why.results import learned_counts, load_results, shipped_metrics

__all__ = ["LESSONS", "lessons_table", "threat_stat"]


@dataclass(frozen=True)
class _Lesson:
    """One claim of chapter 13, worded to what its pair of runs shows.

    Attributes:
        shows: what the claim run and its threat show together, with where it holds.
        change: what would change it (the threat run, or the run nobody has made yet).
        threat: ``threat(results) -> str``, the threat's result from the shipped results.
    """

    shows: str
    change: str
    threat: Callable[[dict], str]


def threat_stat(name: str, variant: str, metric: str, results: dict | None = None) -> tuple[float, float, list[float]]:
    """``(mean, half the range, values)`` of ``metric`` of ``variant`` of run ``name`` over the shipped seeds."""
    runs = shipped_metrics(name, load_results() if results is None else results)
    values = [per[variant][metric] for per in runs.values()]
    return sum(values) / len(values), (max(values) - min(values)) / 2, values


def _pct(name: str, variant: str, metric: str, results: dict) -> str:
    mean, half, _ = threat_stat(name, variant, metric, results)
    return f"{mean:.0%} ± {half:.0%}"


def _num(name: str, variant: str, metric: str, results: dict, digits: int = 2) -> str:
    mean, half, _ = threat_stat(name, variant, metric, results)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def _heads(r: dict) -> str:
    one = (f"H=1 {_pct('heads_3x', 'H=1', 'accuracy', r)}, its weights "
           f"{_num('heads_3x', 'H=1', 'previous_weight', r)} / {_num('heads_3x', 'H=1', 'last_weight', r)}")
    return f"3000 steps: {one}; H=2 {_pct('heads_3x', 'H=2', 'accuracy', r)}"


def _scale(r: dict) -> str:
    t5, scaled = (sorted(threat_stat("scale_t5", v, "final_loss", r)[2]) for v in ("no scale, T5 init", "1/sqrt(d)"))
    solved = sum(v < 0.1 for v in scaled)
    return (f"T5 init: the scaled model's start, then a final loss of {t5[0]:.2f}-{t5[-1]:.2f} over "
            f"{len(t5)} seeds (unscaled {_range('scale_t5', 'no scale', 'final_loss', r)}; scaled "
            f"{scaled[0]:.2f}-{scaled[-1]:.2f}, below 0.1 on {solved} of {len(scaled)})")


def _positions(r: dict) -> str:
    long = (f"causal mask alone, 3000 steps: {_pct('positions_5x', 'causal', 'accuracy_1x', r)} "
            f"({_pct('positions_5x', 'causal', 'accuracy_2x', r)} at twice the length)")
    copy = ", ".join(f"{v} {_pct('positions_unseen', v, 'accuracy_unseen', r)}"
                     for v in ("rotary", "sinusoidal", "learned", "causal"))
    return (f"{long}; copying at offsets never trained (rotary "
            f"{_pct('positions_unseen', 'rotary', 'accuracy_seen', r)} at the trained ones): {copy}")


def _norm(r: dict) -> str:
    runs = shipped_metrics("norm_lr", r)
    parts = []
    for lr in ("0.003", "0.01", "0.03"):
        failed = {norm: sum(per[f"{norm}, {warm}, lr={lr}"]["final_loss"] > 1 for per in runs.values()
                            for warm in ("warm-up", "no warm-up"))
                  for norm in ("pre-LN", "post-LN")}
        parts.append(f"lr {lr}: pre-LN fails {failed['pre-LN']}, post-LN {failed['post-LN']} of {2 * len(runs)} runs")
    return "; ".join(parts)


def _range(name: str, variant: str, metric: str, results: dict) -> str:
    _, _, values = threat_stat(name, variant, metric, results)
    return f"{min(values):.2f}-{max(values):.2f}"


def _learned(name: str, variant: str, relation: str, results: dict) -> str:
    count = learned_counts(name, relation, results)[variant]
    return f"{count['learned']} of {count['seeds']} seeds"


def _kv(r: dict) -> str:
    return (f"story model, 1500 steps: loss MHA {_range('kv_story', 'MHA (Hkv=4)', 'loss', r)}, "
            f"MQA {_range('kv_story', 'MQA (Hkv=1)', 'loss', r)}; possession learned by MHA on "
            f"{_learned('kv_story', 'MHA (Hkv=4)', 'possession', r)}, by MQA on "
            f"{_learned('kv_story', 'MQA (Hkv=1)', 'possession', r)}")


def _output(r: dict) -> str:
    return (f"story model, 1500 steps: loss with W_o {_range('output_story', 'learned W_o', 'loss', r)}, "
            f"identity {_range('output_story', 'no W_o (identity)', 'loss', r)}; possession learned with W_o "
            f"on {_learned('output_story', 'learned W_o', 'possession', r)}, identity on "
            f"{_learned('output_story', 'no W_o (identity)', 'possession', r)}")


LESSONS: dict[str, _Lesson] = {
    "heads": _Lesson(
        shows="In the same 1000 steps one head of size 32 is worse than two, four or eight smaller "
              "heads with the same parameters, and its weights stay split between the two keys it "
              "needs; three times the steps buy it accuracy, not a second lookup. D = 32, 10^4 "
              "parameters, learning rate 0.003.",
        change="more steps: one head might catch up (`heads_3x`)",
        threat=_heads),
    "scale": _Lesson(
        shows="At d = 128 unscaled scores start the softmax nearly one-hot with half the gradient, "
              "and the model stays near chance for 300 steps at the learning rate 0.001. The factor "
              "folded into W_q's initialisation (T5) gives the scaled model's start, then ends above the "
              "scaled model on each of eight seeds (above 2 nats on seven): the factor sets the start "
              "and the size of W_q's steps.",
        change="fold the 1/sqrt(d) into W_q's initialisation instead, as T5 does (`scale_t5`)",
        threat=_scale),
    "positions": _Lesson(
        shows="Two layers of width 32, learning rate 0.003: without positions or a mask attention sees "
              "a set; the causal mask alone learns the two-back offset slowly (28 to 32% after 600 "
              "steps, 82 to 84% after 3000); learned, sinusoidal and rotary positions learn it in "
              "600, and rotary carries the trained offset to twice the length. At offsets never "
              "trained none carries over, rotary least.",
        change="more steps for the causal mask alone (`positions_5x`); offsets never seen in "
               "training (`positions_unseen`)",
        threat=_positions),
    "norm": _Lesson(
        shows="Six blocks of width 32, 300 steps: at the learning rate 0.03 pre-LN trains on every "
              "seed, post-LN fails on 8 of 8 seeds without a warm-up and on 5 of 8 with one; at 0.003 "
              "all four variants train. Pre-LN tolerates larger steps; at small ones the place of the "
              "LayerNorm made no difference.",
        change="other learning rates (`norm_lr`: 3e-3, 1e-2, 3e-2)",
        threat=_norm),
    "kv_heads": _Lesson(
        shows="On the digit task four and two key/value heads reach 100% on eight seeds of eight, "
              "one on seven (90% on the eighth, not learned in 1000 steps): at most a rare cost; the "
              "cache shrinks by exactly H / Hkv. On chapter 12's story model (1500 steps, 10^5 parameters, "
              "learning rate 0.006, eight seeds) one key/value head per layer lost the possession "
              "relation on most seeds, and with it held-out loss; pronouns it learns as well. Counts "
              "of seeds, not a law: the relation is learned in a jump, and with twice the steps "
              "(chapter 12c's mla_long, two seeds) one head learned it too: a cost in speed.",
        change="a task where one key/value head must serve several lookups (`kv_story`)",
        threat=_kv),
    "output": _Lesson(
        shows="In one layer followed by an MLP, fixing W_o at the identity changes nothing measurable "
              "on the digit task, where both variants reach 98.5 to 100% on eight seeds: a ceiling, "
              "where no cost can show. "
              "On the story model (two layers, eight seeds, no ceiling) the identity W_o learned the "
              "possession relation on 5 seeds against 7: a difference eight seeds cannot tell from "
              "chance. The MLP and the next layer read all heads' features anyway.",
        change="a task with no ceiling (`output_story`: the story model)",
        threat=_output),
}
"""claim -> its lesson, in the order of :data:`mha_lib.why.CLAIMS`."""


def lessons_table(results: dict | None = None) -> str:
    """Chapter 13's summary as a Markdown table: each claim as the runs support it, what would
    change it, and its threat's result from the shipped runs."""
    results = load_results() if results is None else results
    lines = ["| experiment | what the runs show, and where | what would change this | the threat's result |",
             "| --- | --- | --- | --- |"]
    for name, lesson in LESSONS.items():
        lines.append(f"| `{name}` | {lesson.shows} | {lesson.change} | {lesson.threat(results)} |")
    return "\n".join(lines)
