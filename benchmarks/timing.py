"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


def time_calls(func: Callable[[], object], n: int, warmup: int = 200) -> list[int]:
    """Nanoseconds of ``n`` calls, after ``min(n, warmup)`` untimed ones."""
    for _ in range(min(n, warmup)):
        func()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        func()
        samples.append(time.perf_counter_ns() - start)
    return samples


def time_interleaved(cases: dict[str, Callable[[], object]], n: int, rounds: int = 10,
                     warmup: int = 50, settle: dict[str, Callable[[], object]] | None = None
                     ) -> dict[str, list[int]]:
    """Nanoseconds of ``n`` calls of every case, run in ``rounds`` alternating blocks so that
    a slow spell of the machine touches every case alike (for ratios measured side by
    side). ``settle[name]``, untimed, ends each block of that case (say, waiting for the
    work its calls left to a background thread), so that no case's leftover work runs
    in another case's block."""
    settle = settle or {}
    samples: dict[str, list[int]] = {name: [] for name in cases}
    for name, func in cases.items():
        for _ in range(min(n, warmup)):
            func()
        if name in settle:
            settle[name]()
    block = max(1, n // rounds)
    for _ in range(rounds):
        for name, func in cases.items():
            out = samples[name]
            for _ in range(block):
                start = time.perf_counter_ns()
                func()
                out.append(time.perf_counter_ns() - start)
            if name in settle:
                settle[name]()
    return samples


def median_p99_us(samples_ns: list[int]) -> tuple[float, float]:
    """Median and 99th percentile in microseconds."""
    arr = np.asarray(samples_ns) / 1000.0
    return float(np.median(arr)), float(np.percentile(arr, 99))


def mq2008_benchmark_args(description: str, impressions: int, click_model: str):
    """The command line of the simulator benchmarks (``--data``, ``--impressions``,
    ``--repeats``, ``--click-model``) and MQ2008 fold 1 loaded for the simulator; exits with
    a message when the data is not there."""
    import argparse
    import sys
    from pathlib import Path

    from reranker.offline.simulation import prepare

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "data"
                        / "letor4-mq2008", help="folder with MQ2008's S1..S5.txt.gz")
    parser.add_argument("--impressions", type=int, default=impressions)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--click-model", default=click_model)
    args = parser.parse_args()
    if not (args.data / "S1.txt.gz").is_file():
        sys.exit(f"MQ2008 not found in {args.data}; pass --data")
    data = prepare([args.data / f"S{i}.txt.gz" for i in (1, 2, 3)], args.data / "S5.txt.gz")
    return args, data


def simulation_speeds(data, cases: dict, settings, repeats: int) -> dict[str, dict]:
    """Run every case (a label and a ``LearnerSpec``) ``repeats`` times, interleaved so that
    a slow spell of the machine touches them all alike; per case the median and best
    impressions per second and the median share of time in learner code."""
    import statistics

    from reranker.offline.simulation import run_one

    timings: dict[str, list[dict]] = {name: [] for name in cases}
    for repeat in range(repeats):
        for name, spec in cases.items():
            cpu = time.process_time()
            timing = run_one(data, spec, settings, repeat)[1]
            # per CPU-second of this process too: what other processes take of the machine
            # slows the wall clock, not this
            timing["cpu_speed"] = settings.impressions / max(time.process_time() - cpu, 1e-9)
            timings[name].append(timing)
    out = {}
    for name, runs in timings.items():
        speeds = [t["impressions_per_second"] for t in runs]
        cpu_speeds = [t["cpu_speed"] for t in runs]
        out[name] = {"median": statistics.median(speeds), "best": max(speeds),
                     "cpu_median": statistics.median(cpu_speeds),
                     "share": statistics.median(t["learner_seconds"] / t["seconds"]
                                                for t in runs)}
    return out
