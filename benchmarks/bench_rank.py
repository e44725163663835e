"""Per-request cost of feature building plus ranking, for 100 candidates.

Measures, in one run:
  * layer:  FeatureSpec.build (backend hits and click features -> raw features) +
            normalisation + learner.rank, i.e. what reranker adds to a search in process;
  * floor:  a bare numpy ``np.argsort(-(X @ w))`` on the same matrix;
and, for context, a whole ``RerankerService.search`` on the embedded backend (Tantivy search,
click features read from the event store, features, ranking, impression and exposures
logged in SQLite), with the click features on and off, and the event store's click-feature
read alone.

Run: python benchmarks/bench_rank.py [--requests N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from timing import median_p99_us, time_calls

from reranker.backends import Candidates
from reranker.core.config import config_from_dict
from reranker.core.plugins import get_plugin_manager
from reranker.features.clicks import click_lifts
from reranker.features.extraction import FeatureSpec
from reranker.models.model import ModelFactory


def fake_candidates(rng: np.random.Generator, n: int, fields: int, numeric: int) -> Candidates:
    scores = np.sort(rng.gamma(2.0, 3.0, size=n))[::-1]
    return Candidates(ids=[f"doc{i}" for i in range(n)], scores=scores,
                      field_scores=rng.gamma(1.5, 2.0, size=(n, fields)),
                      numeric=rng.uniform(0, 100, size=(n, numeric)),
                      load_sources=lambda idx: [{} for _ in idx])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000, help="timed requests per case")
    parser.add_argument("--candidates", type=int, default=100)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        config = config_from_dict({"features": {"numeric_fields": ["popularity"]}}, tmp)
        spec = FeatureSpec.from_config(config)
        model = ModelFactory.from_config(config, get_plugin_manager()).new()
        model.learner.w_ = rng.normal(size=len(spec.names))
        candidates = fake_candidates(rng, args.candidates, len(spec.fields), 1)
        clicks = rng.gamma(4.0, 0.25, size=(args.candidates, 2))  # lifts around 1
        X = spec.build(candidates, clicks)
        w = model.learner.w_

        def layer():
            model.rank(spec.build(candidates, clicks), 10)

        def floor():
            np.argsort(-(X @ w))

        results = {"layer": median_p99_us(time_calls(layer, args.requests)),
                   "floor": median_p99_us(time_calls(floor, args.requests))}
        n = min(args.requests, 2000)
        for click_features in (True, False):
            folder = Path(tmp) / f"service-{click_features}"
            timings = service_search(folder, rng, n, click_features)
            for key, samples in timings.items():
                results[f"{key}-{click_features}"] = median_p99_us(samples)

    print(f"Per-request cost, {args.candidates} candidates, {len(spec.names)} features, "
          f"{args.requests} requests (python {sys.version.split()[0]}, numpy {np.__version__})")
    print(f"{'case':<52}{'median us':>12}{'p99 us':>12}")
    labels = {"layer": "features + normalisation + preference_perceptron rank",
              "floor": "floor: bare numpy argsort(-(X @ w))",
              "service-True": "whole search, embedded backend, click features on",
              "clicks-True": "  of which: reading the click features",
              "service-False": "whole search, click features off"}
    for key, label in labels.items():
        median, p99 = results[key]
        print(f"{label:<52}{median:>12.1f}{p99:>12.1f}")
    layer_median, floor_median = results["layer"][0], results["floor"][0]
    print(f"layer / floor (median): {layer_median / floor_median:.1f}x")
    print(f"whole search, click features on / off (median): "
          f"{results['service-True'][0] / results['service-False'][0]:.2f}x")


def service_search(folder: Path, rng: np.random.Generator, n: int,
                   click_features: bool) -> dict[str, list[int]]:
    """Whole searches: Tantivy retrieval with per-field scores, features, ranking, logging,
    after 1,000 searches with a click on every other one (untimed, so that the click counts
    are those of a store in use); and the event store's click-feature read alone."""
    from reranker.core.plugins import backend_class
    from reranker.offline.democorpus import generate_corpus
    from reranker.serving.service import RerankerService

    folder.mkdir()
    corpus = generate_corpus(7)
    config = config_from_dict({"backend": {"path": "index"},
                               "features": {"numeric_fields": ["popularity"],
                                            "click_features": click_features},
                               "store": {"path": "events.sqlite"}}, folder)
    backend_class(get_plugin_manager(), "embedded")(config).index_documents(
        ((str(i), d) for i, d in enumerate(corpus.documents)), recreate=True)
    service = RerankerService(config).open()
    queries = [q for q, _ in corpus.queries]

    def search():
        return service.search(queries[rng.integers(len(queries))], 10)

    try:
        for i in range(1000):
            page = search()
            if page["hits"] and i % 2:
                hit = page["hits"][int(rng.integers(len(page["hits"])))]
                service.click(page["impression_id"], hit["id"])
        timings = {"service": time_calls(search, n)}
        ids = service.backend.search(queries[0], 100).ids
        timings["clicks"] = time_calls(
            lambda: click_lifts(service.events.click_counts(queries[0], ids), 5.0), n)
        return timings
    finally:
        service.close()


if __name__ == "__main__":
    main()
