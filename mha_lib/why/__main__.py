"""``python -m mha_lib.why NAME [--seeds 0 1 2] [--steps N]``: rerun one experiment, print its table.

``--record PATH`` also writes the runs (metrics, curves, figure data) to PATH, as the shipped
``mha_lib/data/why_results.json`` was written.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import torch

from mha_lib.why import EXPERIMENTS, run_outcomes
from mha_lib.why.results import record, summary_rows

__all__ = ["main"]


def _bar(done: int, total: int, text: str, width: int = 30) -> None:
    filled = width * done // total
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {text:<40}")
    sys.stderr.write("\n" if done == total else "")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the experiment for every seed, print mean and spread per variant."""
    parser = argparse.ArgumentParser(prog="python -m mha_lib.why",
                                     description="Rerun one of the book's 'why' experiments.")
    parser.add_argument("name", choices=sorted(EXPERIMENTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="default: 0")
    parser.add_argument("--steps", type=int, default=None, help="default: the experiment's own")
    parser.add_argument("--record", default=None, help="also write the runs to this JSON file")
    args = parser.parse_args(argv)
    if any(seed < 0 for seed in args.seeds) or (args.steps is not None and args.steps < 1):
        parser.error("--seeds must be integers >= 0 and --steps an integer >= 1")
    experiment = EXPERIMENTS[args.name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if args.record:
            record([args.name], args.seeds, args.record,
                   progress=lambda name, seed: _bar(args.seeds.index(seed), len(args.seeds), f"seed {seed}"))
            from mha_lib.why.results import load_results

            runs = {s: {v: r["metrics"] for v, r in per.items()}
                    for s, per in load_results(args.record)["experiments"][args.name]["seeds"].items()}
        else:
            runs = {}
            for i, seed in enumerate(args.seeds):
                _bar(i, len(args.seeds), f"seed {seed}: training {len(experiment.variants)} variants")
                start = time.process_time()
                runs[seed] = {v: o.metrics for v, o in run_outcomes(args.name, seed, args.steps).items()}
                runs[seed]["_cpu"] = {"seconds": time.process_time() - start}
        _bar(len(args.seeds), len(args.seeds), "done")
    finally:
        torch.set_num_threads(threads)
    cpu = [r.pop("_cpu")["seconds"] for r in runs.values() if "_cpu" in r]
    print(f"{experiment.name}: {experiment.question}")
    print(f"claim: {experiment.claim}")
    print(f"{len(runs)} seed(s); mean ± half the range over seeds; parameters differ: {experiment.differs}")
    metrics = [m for m in next(iter(next(iter(runs.values())).values())) if m not in ("params", "cpu_seconds")]
    header = f"{'variant':<22}{'params':>9}" + "".join(f"{m:>24}" for m in metrics)
    print(header)
    columns = {m: summary_rows(runs, m) for m in metrics}
    for i, variant in enumerate(experiment.variants):
        cells = "".join(f"{columns[m][i][2]:>15.3f} ± {columns[m][i][3]:<6.3f}" for m in metrics)
        print(f"{variant:<22}{int(columns[metrics[0]][i][1]):>9}{cells}")
    if cpu:
        print(f"CPU time per run (all variants): {min(cpu):.0f}-{max(cpu):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
