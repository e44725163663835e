"""How soon a serving process learns of a model version or a pin saved by another process,
with the models in PostgreSQL (``store.model_store: database``): by notification
(``LISTEN/NOTIFY``), against the fallback that reads the models every second while the
listening connection is down, in one run.

A throwaway cluster (or the server ``--postgres-dsn`` names) holds the models. Another
process (a trainer, or ``reranker models pin``) saves ``--events`` changes one at a time,
alternately a new version and a pin, each when this process asks for it, and sends back the
moment its transaction committed. This process, as a serving process does before each
search, reads its store's stamp (from memory: no query) in a loop until it changes; the
delay from the commit to the changed stamp is the figure (both clocks are this machine's).
Then the same with this process's listening connection stopped: the stamp then moves every
second, and a serving process reads the models again at the next search after that.

Run: python benchmarks/bench_model_notify.py [--events 200] [--postgres-dsn DSN]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

from throwaway_postgres import postgres_databases

from reranker.models.database_store import ModelDatabase
from reranker.models.model import ModelFactory

ARM = "bench-arm"


def factory() -> ModelFactory:
    from reranker_plugins.preference_perceptron import PreferencePerceptron

    from reranker.learners.featuremap import FeatureMap

    return ModelFactory(PreferencePerceptron, {}, FeatureMap(10), ["a", "b", "c"],
                        "per_query_minmax")


def saver(dsn: str, asks, answers) -> None:
    """The other process: on each ask, a new version (even asks) or a pin of the newest
    version but one (odd asks); answers the moment its transaction committed."""
    database = ModelDatabase(dsn)
    store = database.store(ARM)
    made = factory()
    version = 1
    model = made.new()
    model.version = version
    store.save(model)
    answers.send(time.time())
    while True:
        k = asks.recv()
        if k is None:
            break
        if k % 2 == 0:
            version += 1
            model.version = version
            store.save(model)
        else:
            store.pin(version - 1)
        answers.send(time.time())
    database.close()


def delays(store, asks, answers, events: int, offset: int) -> list[float]:
    out = []
    for k in range(events):
        stamp = store.stamp()
        asks.send(offset + k)
        committed = answers.recv()
        while store.stamp() == stamp:
            time.sleep(0.0002)
        out.append(time.time() - committed)
    return out


def wait_listening(database: ModelDatabase, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while database._down and time.monotonic() < deadline:  # noqa: SLF001 -- no public flag
        time.sleep(0.01)
    if database._down:  # noqa: SLF001
        raise SystemExit("the listening connection did not come up")


def describe(name: str, values: list[float]) -> str:
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
    return (f"{name:<44}{statistics.median(values) * 1000:>10.1f}{p99 * 1000:>10.1f}"
            f"{values[-1] * 1000:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200,
                        help="changes timed by notification (half as many by the fallback)")
    parser.add_argument("--postgres-dsn", default=os.environ.get("RERANKER_BENCH_POSTGRES_DSN"))
    args = parser.parse_args()
    with postgres_databases(args.postgres_dsn) as databases:
        db_dsn = databases.create()
        context = multiprocessing.get_context("spawn")
        asks, their_asks = context.Pipe()
        their_answers, answers = context.Pipe()
        other = context.Process(target=saver, args=(db_dsn, their_asks, their_answers))
        other.start()
        answers.recv()  # (its first version saved)
        database = ModelDatabase(db_dsn)
        store = database.store(ARM)
        store.stamp()
        wait_listening(database)
        notified = delays(store, asks, answers, args.events, 0)
        # the fallback: no listening connection, the stamp moves every second
        database._stop.set()  # noqa: SLF001 -- the outage, as a broken connection makes it
        database._listener.join()  # noqa: SLF001
        database._down = True  # noqa: SLF001
        polled = delays(store, asks, answers, max(10, args.events // 2), args.events)
        asks.send(None)
        other.join(30)
        database.close()
        print(f"PostgreSQL at {database.location}; {args.events} changes (versions and pins "
              f"in turn) saved by another process")
        print(f"{'from the commit to the changed stamp':<44}{'median ms':>10}{'p99 ms':>10}"
              f"{'max ms':>10}")
        print(describe("by notification (LISTEN/NOTIFY)", notified))
        print(describe("the fallback, read every second", polled))
        print(f"ratio: {statistics.median(polled) / statistics.median(notified):.0f} (medians; "
              f"{sum(d < 1.0 for d in notified)} of {len(notified)} notified within a second)")


if __name__ == "__main__":
    main()
