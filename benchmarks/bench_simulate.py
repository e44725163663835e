"""Simulation throughput: impressions per second of the Preference Perceptron on MQ2008
(fold 1, informational clicks), in a single process, and the share of time spent in
learner code (its rank and update rules) versus simulation code (users, metrics, data).
Two configurations: the default, which perturbs the shown pairs (a coin per pair and the
pair feedback), and ``swap_probability=0``, the paper's pure argmax learner.

For a floor in the same run, the same simulation with ``backend_order`` (a learner that
only sorts by one feature and never learns) shows the cost of the simulation alone.

Run: python benchmarks/bench_simulate.py [--data DIR] [--impressions N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from reranker.simulation import LearnerSpec, Settings, best_single_feature, prepare, run_one

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "letor4-mq2008"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="folder with MQ2008's S1..S5.txt.gz")
    parser.add_argument("--impressions", type=int, default=30000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--click-model", default="informational")
    args = parser.parse_args()
    if not (args.data / "S1.txt.gz").is_file():
        sys.exit(f"MQ2008 not found in {args.data}; pass --data")
    data = prepare([args.data / f"S{i}.txt.gz" for i in (1, 2, 3)], args.data / "S5.txt.gz")
    settings = Settings(impressions=args.impressions, click_model=args.click_model)
    cases = {"preference_perceptron": LearnerSpec("preference_perceptron"),
             "  argmax (swap_probability=0)": LearnerSpec("preference_perceptron",
                                                          {"swap_probability": 0.0}),
             "floor: backend_order": LearnerSpec("backend_order",
                                                 {"feature": best_single_feature(data)})}
    results: dict[str, list[dict]] = {name: [] for name in cases}
    for repeat in range(args.repeats):
        for name, spec in cases.items():
            results[name].append(run_one(data, spec, settings, repeat)[1])
    print(f"MQ2008 fold 1, {args.click_model} clicks, {args.impressions} impressions per run, "
          f"{args.repeats} runs, one process (python {sys.version.split()[0]}, "
          f"numpy {np.__version__})")
    print(f"{'learner':<32}{'median imp/s':>14}{'best imp/s':>12}{'learner share':>15}")
    medians = {}
    for name, timings in results.items():
        speeds = [t["impressions_per_second"] for t in timings]
        share = statistics.median(t["learner_seconds"] / t["seconds"] for t in timings)
        medians[name] = statistics.median(speeds)
        print(f"{name:<32}{medians[name]:>14,.0f}{max(speeds):>12,.0f}{share:>14.0%}")
    floor = medians["floor: backend_order"]
    for name in list(cases)[:2]:
        print(f"{name.strip()} / floor (median): {medians[name] / floor:.2f}")
    print("(learner share: time inside the learner's rank and update rules; the rest is "
          "simulated users, metrics and data handling, including the offline evaluations at "
          "40 checkpoints)")


if __name__ == "__main__":
    main()
