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


def median_p99_us(samples_ns: list[int]) -> tuple[float, float]:
    """Median and 99th percentile in microseconds."""
    arr = np.asarray(samples_ns) / 1000.0
    return float(np.median(arr)), float(np.percentile(arr, 99))
