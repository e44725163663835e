"""PDGD and DBGD in the simulator: impressions per second on MQ2008 (fold 1) under the
reference implementation's schedule (HarrieO/OnlineLearningToRank: an offline NDCG@10 on the
test fold every 10 impressions, clicks with a stop coin at every examined position, models
from zero, no click features), beside the Preference Perceptron's and the floor's (a
learner that only sorts, for the cost of the simulation alone), in one process.

The reference code does about 1,500 impressions per CPU-second with that schedule; the last
column divides this process's impressions per CPU-second (median) by it.

Run: python benchmarks/bench_pdgd.py [--data DIR] [--impressions N] [--repeats R]
"""

from __future__ import annotations

import sys

import numpy as np
from timing import mq2008_benchmark_args, simulation_speeds

from reranker.offline.simulation import LearnerSpec, Settings, best_single_feature

REFERENCE = 1500.0  # impressions per CPU-second of the reference implementation


def main() -> None:
    args, data = mq2008_benchmark_args(__doc__.splitlines()[0], 10000, "informational-every")
    settings = Settings(impressions=args.impressions, click_model=args.click_model,
                        start="zero", click_features=False,
                        checkpoints=args.impressions // 10,
                        checkpoint_spacing="even")  # an evaluation every 10
    cases = {"pdgd": LearnerSpec("pdgd"), "dbgd": LearnerSpec("dbgd"),
             "preference_perceptron": LearnerSpec("preference_perceptron"),
             "floor: backend_order": LearnerSpec("backend_order",
                                                 {"feature": best_single_feature(data)})}
    speeds = simulation_speeds(data, cases, settings, args.repeats)
    print(f"MQ2008 fold 1, {args.click_model} clicks, {args.impressions} impressions per run, "
          f"offline NDCG@10 every 10, {args.repeats} runs, one process (python "
          f"{sys.version.split()[0]}, numpy {np.__version__})")
    print(f"{'learner':<26}{'median imp/s':>14}{'best imp/s':>12}{'imp/CPU-s':>11}"
          f"{'learner share':>15}{'x reference':>13}")
    for name, entry in speeds.items():
        print(f"{name:<26}{entry['median']:>14,.0f}{entry['best']:>12,.0f}"
              f"{entry['cpu_median']:>11,.0f}{entry['share']:>14.0%}"
              f"{entry['cpu_median'] / REFERENCE:>13.1f}")

if __name__ == "__main__":
    main()
