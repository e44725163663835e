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

import sys

import numpy as np
from timing import mq2008_benchmark_args, simulation_speeds

from reranker.offline.simulation import LearnerSpec, Settings, best_single_feature


def main() -> None:
    args, data = mq2008_benchmark_args(__doc__.splitlines()[0], 30000, "informational")
    settings = Settings(impressions=args.impressions, click_model=args.click_model)
    cases = {"preference_perceptron": LearnerSpec("preference_perceptron"),
             "  argmax (swap_probability=0)": LearnerSpec("preference_perceptron",
                                                          {"swap_probability": 0.0}),
             "floor: backend_order": LearnerSpec("backend_order",
                                                 {"feature": best_single_feature(data)})}
    speeds = simulation_speeds(data, cases, settings, args.repeats)
    print(f"MQ2008 fold 1, {args.click_model} clicks, {args.impressions} impressions per run, "
          f"{args.repeats} runs, one process (python {sys.version.split()[0]}, "
          f"numpy {np.__version__})")
    print(f"{'learner':<32}{'median imp/s':>14}{'best imp/s':>12}{'learner share':>15}")
    medians = {name: entry["median"] for name, entry in speeds.items()}
    for name, entry in speeds.items():
        print(f"{name:<32}{entry['median']:>14,.0f}{entry['best']:>12,.0f}"
              f"{entry['share']:>14.0%}")
    floor = medians["floor: backend_order"]
    for name in list(cases)[:2]:
        print(f"{name.strip()} / floor (median): {medians[name] / floor:.2f}")
    print("(learner share: time inside the learner's rank and update rules; the rest is "
          "simulated users, metrics and data handling, including the offline evaluations at "
          "40 checkpoints)")


if __name__ == "__main__":
    main()
