"""What a query's own clicks add to a search in process: the default learner's page of 100
candidates (features normalised, ranked, its randomised pairs) against the same search of a
query whose clicks judge a result (the judgment against the query's other results, the
specialised page and the judgments on the general model's adjacent pairs,
:func:`reranker.learners.specialization.specialise`), and of a query with clicks that judge nothing
yet (the judgment looked for, the general model's page kept), timed side by side in
alternating blocks.

Run: python benchmarks/bench_specialization.py [--searches N]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import median_p99_us, time_interleaved

from reranker.core.plugins import get_plugin_manager, learner_class
from reranker.features.extraction import engine_prior, kernels
from reranker.learners.featuremap import FeatureMap
from reranker.learners.specialization import QueryEvidence, specialise
from reranker.models.model import ModelFactory

N, K = 100, 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=20_000)
    args = parser.parse_args()
    kernels().warm_up()
    rng = np.random.default_rng(0)
    names = ["backend_score", "field_score:title", "field_score:body", "click_lift:doc"]
    factory = ModelFactory(learner_class(get_plugin_manager(), "preference_perceptron"), {},
                           FeatureMap(10), names, "per_query_minmax", engine_prior(names))
    model = factory.new()
    X = np.asfortranarray(np.column_stack([np.sort(rng.random(N))[::-1],
                                           rng.random((N, 2)), np.ones(N)]))
    lift = np.ones(N)
    exposure = np.zeros(N)
    exposure[:12] = np.linspace(12.0, 3.0, 12)  # a query searched a dozen times
    judged = QueryEvidence(np.where(np.arange(N) == 5, 6.0, 0.0), exposure)
    unjudged = QueryEvidence(np.where(np.arange(N) == 5, 1.0, 0.0), exposure)
    lift[5] = 1.6
    assert judged.strongest() is not None and unjudged.strongest() is None

    def plain():
        return model.rank(X, K, rng, check=False)

    def with_clicks(evidence):
        def search():
            return specialise(model.rank(X, K, rng, check=False), lift, evidence, K, rng)
        return search

    samples = time_interleaved({"general model's page": plain,
                                "clicks that judge nothing yet": with_clicks(unjudged),
                                "a specialised page": with_clicks(judged)}, args.searches)
    base = np.median(samples["general model's page"])
    print(f"{N} candidates, page of {K}, median (p99) microseconds per search, "
          f"{args.searches:,} searches each:")
    for name, values in samples.items():
        median, p99 = median_p99_us(values)
        print(f"  {name:32s} {median:7.1f} ({p99:7.1f})   x{np.median(values) / base:.2f}")


if __name__ == "__main__":
    main()
