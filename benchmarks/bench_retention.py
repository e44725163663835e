"""The event store's size under steady traffic, with retention and without, side by side.

The same traffic runs twice against a SQLite store, in process: searches at a steady rate
(``--rate`` per second; the demo's configuration over the six copies of its corpus that
``bench_impression_bytes.py`` indexes, 100 candidates per search), a click on every other
page, and the background trainer
(``trainer.interval`` 1 s, ``trainer.feedback_window`` 1 s) learning from them. Once with
``store.retention`` at ``--retention`` seconds (checked every second), once without. Every
``--every`` seconds the store's size on disk (the database and its write-ahead log) and its
impressions are printed for both runs: with retention the size stops growing once the first
impressions reach the retention age, without it grows with the traffic.

Run: python benchmarks/bench_retention.py [--seconds 120] [--retention 20] [--rate 50]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_impression_bytes import hundred_candidates

from reranker.api.app import start_trainer
from reranker.commands.demo import demo_config
from reranker.core.config import config_from_dict
from reranker.serving.service import RerankerService


def run(folder: Path, retention: float | None, seconds: float, rate: float,
        every: float) -> list[tuple[float, int, int]]:
    """``(elapsed seconds, bytes on disk, impressions)`` every ``every`` seconds of a run."""
    settings = demo_config("preference_perceptron")
    settings["store"].update(retention=retention, retention_interval=1.0)
    settings["trainer"].update(interval=1.0, feedback_window=1.0)
    folder.mkdir()
    config = config_from_dict(settings, folder)
    queries = hundred_candidates(config)
    service = RerankerService(config).open()
    _, stop = start_trainer(service, config.trainer.interval)
    rng = np.random.default_rng(0)
    samples = []
    try:
        start = time.monotonic()
        searches = 0
        while (elapsed := time.monotonic() - start) < seconds:
            if elapsed >= len(samples) * every:
                samples.append((elapsed, service.events.disk_bytes(),
                                service.events.stats()["impressions"]))
            if searches >= elapsed * rate:  # ahead of the steady rate
                time.sleep(0.002)
                continue
            page = service.search(queries[searches % len(queries)], 10)
            if searches % 2 and page["hits"]:
                service.click(page["impression_id"],
                              page["hits"][int(rng.integers(len(page["hits"])))]["id"])
            searches += 1
        samples.append((time.monotonic() - start, service.events.disk_bytes(),
                        service.events.stats()["impressions"]))
    finally:
        stop.set()
        service.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--retention", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=50.0, help="searches per second")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for label, retention in ((f"retention {args.retention:g} s", args.retention),
                                 ("no retention", None)):
            runs[label] = run(Path(tmp) / label.replace(" ", "-"), retention, args.seconds,
                              args.rate, args.every)
    print(f"{args.rate:g} searches/s (a click on every other page), SQLite; store size on "
          f"disk (database + write-ahead log) and impressions kept")
    print(f"{'seconds':>8}" + "".join(f"{label:>28}" for label in runs))
    for rows in zip(*runs.values(), strict=False):
        print(f"{rows[0][0]:>8.0f}" + "".join(f"{size / 1e6:>17.2f} MB {kept:>7,}"
                                                 for _, size, kept in rows))


if __name__ == "__main__":
    main()
