"""Serving and training together: the trainer's lag behind the searches, as ``/metrics``
shows it, while simulated users search and click as fast as they can.

The demo corpus is served by ``reranker serve --workers 2 --no-trainer`` with a
``reranker train --follow`` beside it (the production set-up's split, on one machine, the
SQLite store), ``trainer.feedback_window`` of ``--window`` seconds. ``--users`` threads of
simulated users (the demo's cascade click model on the corpus's hidden labels) search and
click through HTTP for ``--seconds`` seconds; every second the benchmark reads
``reranker_trainer_lag_seconds`` (the age of the oldest closed page the trainer has not
applied) and ``reranker_impressions_queued`` from ``/metrics``. Printed: the searches per
second served, and the lag over the run (its median and maximum), beside the feedback
window: a trainer that keeps up holds the lag under about one training interval, one that
does not lets it grow without bound.

Run: python benchmarks/bench_serve_and_train.py [--seconds 60] [--users 4] [--window 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_load import Served, prepare_workdir  # noqa: E402

from reranker.offline.click_models import cascade_model  # noqa: E402
from reranker.offline.democorpus import generate_corpus  # noqa: E402
from reranker.testing import cli_env, reranker_command  # noqa: E402


def metric(text: str, name: str) -> float | None:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and not line.startswith("#")]
    return max(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--users", type=int, default=4, help="threads of simulated users")
    parser.add_argument("--window", type=float, default=2.0, help="trainer.feedback_window")
    parser.add_argument("--interval", type=float, default=1.0, help="trainer.interval")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-serve-train-"))
    config = prepare_workdir(folder, trainer={"feedback_window": args.window,
                                              "interval": args.interval})
    corpus = generate_corpus(seed=7)
    server = Served(config, "--workers", "2", "--no-trainer")
    follower = subprocess.Popen([*reranker_command(), "train", "--follow", "-c", str(config)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=cli_env())
    stop = threading.Event()
    searches = [0] * args.users

    def user(k: int) -> None:
        rng, clicks = np.random.default_rng(k), cascade_model("navigational", 3)
        session = requests.Session()
        while not stop.is_set():
            query, topic = corpus.queries[rng.integers(len(corpus.queries))]
            page = session.post(server.url + "/search", json={"query": query},
                                timeout=30).json()
            ids = [hit["id"] for hit in page["hits"]]
            labels = np.array([corpus.label(topic, d) for d in ids])
            for j in np.flatnonzero(clicks.clicks(labels, rng)):
                session.post(server.url + "/click", json={
                    "impression_id": page["impression_id"], "doc_id": ids[j]}, timeout=30)
            searches[k] += 1

    try:
        while requests.get(server.url + "/readyz", timeout=30).status_code != 200:
            time.sleep(0.2)
        threads = [threading.Thread(target=user, args=(k,), daemon=True)
                   for k in range(args.users)]
        for thread in threads:
            thread.start()
        started, lags = time.monotonic(), []
        print(f"{'second':>6} {'searches/s':>10} {'trainer lag s':>13} {'queued':>7}")
        last = 0
        while time.monotonic() - started < args.seconds:
            time.sleep(1.0)
            text = requests.get(server.url + "/metrics", timeout=30).text
            lag = metric(text, "reranker_trainer_lag_seconds")
            queued = metric(text, "reranker_impressions_queued")
            done = sum(searches)
            lags.append(lag or 0.0)
            second = time.monotonic() - started
            if int(second) % 5 == 0 or second >= args.seconds:
                print(f"{second:6.0f} {done - last:10d} {lag or 0.0:13.2f} "
                      f"{queued or 0.0:7.0f}")
            last = done
        stop.set()
        for thread in threads:
            thread.join(30)
        elapsed = time.monotonic() - started
        settled = lags[len(lags) // 4:]  # after the first quarter of the run
        print(f"{sum(searches):,} searches in {elapsed:.0f} s ({sum(searches) / elapsed:.0f} "
              f"per second, with clicks, {args.users} simulated users); the trainer's lag "
              f"after the first quarter: median {np.median(settled):.2f} s, max "
              f"{max(settled):.2f} s, against a feedback window of {args.window:g} s and a "
              f"training interval of {args.interval:g} s (ratio of the maximum to window + "
              f"interval: {max(settled) / (args.window + args.interval):.2f})")
    finally:
        stop.set()
        follower.terminate()
        follower.wait(60)
        server.stop()


if __name__ == "__main__":
    main()
