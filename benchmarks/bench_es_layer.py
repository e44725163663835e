"""The time reranker adds on top of the Elasticsearch call, per search, for 100 candidates:
turning the search response into features (with the click features read from the event
store), ranking, and logging the impression (with its exposures).

The response is a realistic ``_search`` answer (100 hits with ``_source`` and the
``matched_queries`` score map of Elasticsearch 8.8+), built in memory so that the figure is
the layer's alone; the same run times a bare numpy ``argsort(-(X @ w))`` as the floor.

Run: python benchmarks/bench_es_layer.py [--requests N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from timing import median_p99_us, time_calls

from reranker.core.config import config_from_dict
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.features.clicks import click_lifts
from reranker.features.extraction import FeatureSpec
from reranker.models.model import ModelFactory
from reranker.stores.events import Impression
from reranker.stores.sqlite import SQLiteStore


def response(rng: np.random.Generator, n: int) -> dict:
    scores = np.sort(rng.gamma(2.0, 3.0, size=n))[::-1]
    hits = []
    for i, score in enumerate(scores):
        title, body = rng.gamma(1.5, 2.0, size=2)
        hits.append({"_index": "products", "_id": f"doc-{i}", "_score": float(score),
                     "_source": {"id": f"doc-{i}", "title": f"title {i}",
                                 "body": "some body text " * 20,
                                 "popularity": float(rng.uniform(0, 100))},
                     "matched_queries": {"backend_score": float(score),
                                         "field_score:title": float(title),
                                         "field_score:body": float(body)}})
    return {"took": 3, "timed_out": False,
            "hits": {"total": {"value": 5000, "relation": "eq"}, "max_score": float(scores[0]),
                     "hits": hits}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--candidates", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        config = config_from_dict({
            # the answer below carries every candidate's _source, as with fetch_sources:
            # candidates, so that the shown documents need no request
            "backend": {"type": "elasticsearch", "index": "products", "fields": ["title", "body"],
                        "fetch_sources": "candidates"},
            "features": {"numeric_fields": ["popularity"]},
            "store": {"path": "events.sqlite"}}, tmp)
        pm = get_plugin_manager()
        backend = backend_class(pm, "elasticsearch")(config)  # no connection is made
        spec = FeatureSpec.from_config(config)
        model = ModelFactory.from_config(config, pm).new()
        model.learner.w_ = rng.normal(size=len(spec.names))
        events = SQLiteStore(Path(tmp) / "events.sqlite")
        answer = response(rng, args.candidates)

        def features_and_rank():
            candidates = backend.candidates_from_response(answer)
            clicks = click_lifts(events.click_counts("q", candidates.ids), 5.0)
            X = spec.build(candidates, clicks)
            result = model.rank(X, 10)
            candidates.load_sources(result.ranking[:10].tolist())
            return candidates, X, result

        def layer():
            candidates, X, result = features_and_rank()
            events.log_impression(Impression(
                id=uuid.uuid4().hex, created=time.time(), query="q", user_id=None,
                learner=model.learner_name, model_version=0, doc_ids=candidates.ids,
                feature_names=list(spec.names), features=X, ranking=result.ranking,
                n_shown=10))

        X, w = features_and_rank()[1], model.learner.w_
        results = {
            "features (with click features) + ranking": median_p99_us(
                time_calls(features_and_rank, args.requests)),
            "... + impression logging (SQLite): the layer": median_p99_us(
                time_calls(layer, args.requests)),
            "floor: bare numpy argsort(-(X @ w))": median_p99_us(
                time_calls(lambda: np.argsort(-(X @ w)), args.requests)),
        }
        events.close()
    print(f"Time added on top of the Elasticsearch call, {args.candidates} candidates, "
          f"{args.requests} searches (python {sys.version.split()[0]}, numpy {np.__version__})")
    print(f"{'case':<48}{'median us':>12}{'p99 us':>12}")
    for name, (median, p99) in results.items():
        print(f"{name:<48}{median:>12.1f}{p99:>12.1f}")
    layer_median = results["... + impression logging (SQLite): the layer"][0]
    floor = results["floor: bare numpy argsort(-(X @ w))"][0]
    print(f"layer / floor (median): {layer_median / floor:.0f}x")


if __name__ == "__main__":
    main()
