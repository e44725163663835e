"""An experiment's arms applied one after the other, then in processes of their own
(``reranker train --jobs N``), on one event store, in one run: impressions applied per second
of wall-clock time, and the ratio.

The store is built as ``bench_trainer.py`` builds one (the demo's configuration over six
copies of its corpus, 100 candidates per search, Zipf-distributed queries, a cascade user
clicking ``--click-share`` of the pages), but served by an interleaving experiment of the
``--arms`` learners, so that every arm learns from every page. Every impression is closed
first; then, ``--repeats`` times each, alternating, one pass of the trainer as ``reranker
train`` runs it (``Trainer.from_config``, ``run_once``, from a new model folder) applies the
whole store to every arm: in this process, and in ``--jobs`` processes (their start, a fresh
interpreter each, is inside the time measured, as it is in a ``reranker train --jobs N``
run). The saved models of both are compared: the arms must end with the same counts.

With the defaults a run takes about five minutes on two cores.

Run: python benchmarks/bench_parallel_arms.py [--impressions 100000] [--click-share 0.2]
     [--arms preference_perceptron,pdgd] [--jobs 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_impression_bytes import hundred_candidates
from bench_trainer import add_traffic_arguments, build_store, settings_of

from reranker.commands.console import progress_bar
from reranker.core.config import config_from_dict
from reranker.models.trainer import Trainer
from reranker.stores import open_event_store


def experiment_of(learners: list[str]) -> dict:
    return {"mode": "interleave", "name": "bench",
            "arms": {name: {"name": name} for name in learners}}


def one_pass(config, jobs: int, models: Path) -> tuple[float, dict[str, tuple[int, int]]]:
    """Seconds of one pass over the whole store into a new ``models`` folder, and per arm
    the impressions it applied and its model's update count."""
    shutil.rmtree(models, ignore_errors=True)
    events = open_event_store(config)
    try:
        start = time.perf_counter()
        trainer = Trainer.from_config(config, events)
        try:
            trainer.train_in_processes(config, jobs)
            report = trainer.run_once()
        finally:
            trainer.close()
        seconds = time.perf_counter() - start
        if report.errors:
            raise SystemExit(f"the pass failed: {report.errors}")
        counts = {}
        for arm in trainer.arms:
            model, _ = arm.models.load_latest(arm.factory)
            counts[arm.label] = (report.arms[arm.label].applied, model.progress.updates)
    finally:
        events.close()
    return seconds, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impressions", type=int, default=100_000)
    parser.add_argument("--click-share", type=float, default=0.2,
                        help="share of the pages with clicks")
    parser.add_argument("--arms", default="preference_perceptron,pdgd",
                        help="the experiment's learners, one arm each")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes of the parallel passes")
    parser.add_argument("--repeats", type=int, default=2, help="passes of each kind")
    add_traffic_arguments(parser)
    args = parser.parse_args()
    learners = args.arms.split(",")
    experiment = experiment_of(learners)
    with tempfile.TemporaryDirectory(prefix="bench-parallel-arms-") as name:
        tmp = Path(name)
        index = tmp / "index"
        hundred_candidates(config_from_dict(settings_of(learners[0], index), tmp))
        with progress_bar("building the event store", args.impressions) as advance:
            built = build_store(learners[0], args.click_share, index, tmp / "store", args,
                                advance, experiment=experiment)
        folder = tmp / "store"
        config = config_from_dict(settings_of(learners[0], index, "measured",
                                              experiment=experiment), folder)
        events = open_event_store(config)
        try:
            events.close_impressions(float("inf"))
        finally:
            events.close()
        print(f"an event store of {args.impressions:,} impressions ({built['clicked_pages']:,} "
              f"with clicks), served by an interleaving experiment of {len(learners)} arms "
              f"({', '.join(learners)}), built in {built['wall']:.0f} s; {os.cpu_count()} "
              f"cores")
        seconds: dict[int, list[float]] = {1: [], args.jobs: []}
        counts: dict[int, dict] = {}
        for _ in range(args.repeats):
            for jobs in (1, args.jobs):
                took, counts[jobs] = one_pass(config, jobs, folder / "measured")
                seconds[jobs].append(took)
                print(f"  {jobs} process(es): {took:.1f} s")
        if counts[1] != counts[args.jobs]:
            raise SystemExit(f"the passes disagree: {counts[1]} against {counts[args.jobs]}")
        applied = sum(n for n, _ in counts[1].values())
        base, fast = statistics.median(seconds[1]), statistics.median(seconds[args.jobs])
        print(f"{'':<28}{'wall s':>8}{'impressions per s':>19}")
        print(f"{'arms one after the other':<28}{base:>8.1f}{applied / base:>19,.0f}")
        print(f"{f'arms in {args.jobs} processes':<28}{fast:>8.1f}{applied / fast:>19,.0f}")
        print(f"ratio: {base / fast:.2f} (medians of {args.repeats} passes each; "
              f"{applied:,} arm-impressions per pass, the same counts and updates per arm "
              f"both ways)")


if __name__ == "__main__":
    main()
