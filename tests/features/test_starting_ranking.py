"""The starting ranking follows the engine's own scores (docs/algorithms.md, "Safe start"):
a new model ranks as the engine does; a result users prefer rises past those the engine
scored just above it by as much as the engine's margin; and the ``backend_score`` column
carries the engine's order even when the engine's hits are not in the order of their
scores (a sorted search, or an application's scores out of order)."""

import numpy as np
import pytest

from reranker.backends.elasticsearch import ElasticsearchBackend
from reranker.core.config import load_config
from reranker.core.plugins import get_plugin_manager, learner_class
from reranker.features.extraction import FeatureSpec, engine_prior, engine_scores
from reranker.learners.featuremap import FeatureMap
from reranker.library import Reranker
from reranker.models.model import ModelFactory
from tests.support.configs import write_config
from tests.support.servers import LiveServer


def scores_in_order(page, ids):
    """The learner's scores of the hits ``ids``, in that order."""
    scores = {hit["id"]: hit["score"] for hit in page["hits"]}
    return [scores[i] for i in ids]


def non_increasing(values):
    return all(a >= b for a, b in zip(values, values[1:], strict=False))


def test_scores_in_the_engines_order_are_kept():
    scores = np.array([12.5, 12.5, 9.0, 3.25, 0.0])
    np.testing.assert_array_equal(engine_scores(scores), scores)
    # float32 rounding of a sum (a rise of a ten-millionth) is not another order
    rounded = np.array([7.0, 7.0000005, 6.0])
    np.testing.assert_array_equal(engine_scores(rounded), rounded)


def test_scores_out_of_the_engines_order_fall_with_the_rank():
    np.testing.assert_array_equal(engine_scores(np.array([1.0, 3.0, 2.0, 5.0])),
                                  [4.0, 3.0, 2.0, 1.0])
    np.testing.assert_array_equal(engine_scores(np.array([4.0])), [4.0])


def test_a_new_model_ranks_as_the_engine_does(workdir, corpus):
    server = LiveServer(workdir / "config.yaml")
    try:
        for query, _ in corpus.queries[::4]:
            engine = server.service.backend.search(query, 11)  # a pair reaches the 11th
            page = server.post("/search", {"query": query, "size": 10}).json()
            ids = {hit["id"] for hit in page["hits"]}
            assert ids <= set(engine.ids) and len(ids) >= 5, query
            shown = [i for i in engine.ids if i in ids]
            assert non_increasing(scores_in_order(page, shown)), query
            # the learner's scores separate what the engine's scores separate
            tied = {float(s) for i, s in zip(engine.ids, engine.scores, strict=True) if i in ids}
            assert len({round(s, 9) for s in scores_in_order(page, shown)}) == len(tied), query
    finally:
        server.stop()


@pytest.mark.parametrize("given", ["rising scores", "no scores"])
def test_application_candidates_keep_the_applications_order(tmp_path, given):
    """Candidates the application ranked itself, with scores that rise down its list (it
    sorted on something else) or none: a new model keeps the application's order."""
    config = write_config(tmp_path, backend={"type": "none", "fields": ["title"]},
                          features={"numeric_fields": []})
    candidates = [{"id": f"p{i}"} | ({"score": float(i)} if given == "rising scores" else {})
                  for i in range(12)]
    with Reranker(config) as reranker:
        page = reranker.rerank("anything", candidates, size=10)
    shown = [f"p{i}" for i in range(11) if f"p{i}" in {hit["id"] for hit in page["hits"]}]
    scores = scores_in_order(page, shown)
    assert non_increasing(scores) and len(set(scores)) == len(scores)


def test_a_sorted_elasticsearch_search_without_scores_keeps_its_order(tmp_path):
    config = load_config(write_config(tmp_path, backend={"type": "elasticsearch",
                                                         "index": "products"}))
    backend = ElasticsearchBackend(config)
    hits = [{"_id": f"d{i}", "_score": None, "_source": {"popularity": i}} for i in range(5)]
    candidates = backend.candidates_from_response({"hits": {"hits": hits}})
    np.testing.assert_array_equal(candidates.scores, [5.0, 4.0, 3.0, 2.0, 1.0])


def test_a_preferred_result_rises_past_a_small_engine_margin_first():
    """Equal click lifts carry a result past a neighbour the engine scored a little above it,
    not past one it scored far above: the engine's margin is what the clicks must outweigh."""
    spec = FeatureSpec(fields=("title",), numeric_fields=(), missing_value=0.0,
                       query_features=(), click_features=True)
    names = list(spec.names)
    factory = ModelFactory(learner_class(get_plugin_manager(), "preference_perceptron"), {},
                           FeatureMap(), names, "per_query_minmax")
    assert factory.prior.tolist() == engine_prior(names).tolist()
    assert [names[j] for j in np.flatnonzero(factory.prior)] == ["backend_score",
                                                                 "click_lift:query_doc"]
    model = factory.new()
    X = np.zeros((4, len(names)))
    X[:, names.index("backend_score")] = [10.0, 9.8, 5.0, 0.0]
    X[:, names.index("click_lift:query_doc")] = 1.0
    assert model.rank(X, 4).scores.argsort()[::-1].tolist() == [0, 1, 2, 3]
    lifted = X.copy()
    lifted[1, names.index("click_lift:query_doc")] = 1.2  # 0.2 above: more than 0.02
    lifted[2, names.index("click_lift:query_doc")] = 1.2  # not more than 0.48
    scores = model.rank(lifted, 4).scores
    assert scores[1] > scores[0] and scores[2] < scores[1] and scores[2] < scores[0]


def test_a_model_of_the_rank_feature_set_carries_over_to_the_engines_score():
    """A model saved when the features had the engine's rank (and its starting ranking was
    on it) is carried onto today's features with today's starting ranking: the engine's part
    is not lost with the dropped column, and the learned weights on shared features stay."""
    spec = FeatureSpec(fields=("title",), numeric_fields=(), missing_value=0.0,
                       query_features=(), click_features=True)
    names = list(spec.names)
    old_names = names[:1] + ["backend_reciprocal_rank"] + names[1:]
    old_prior = np.zeros(len(old_names))
    old_prior[[1, old_names.index("click_lift:query_doc")]] = 1.0
    pm = get_plugin_manager()
    old_factory = ModelFactory(learner_class(pm, "preference_perceptron"), {}, FeatureMap(),
                               old_names, "per_query_minmax", prior=old_prior)
    old = old_factory.new()
    old.learner.w_ = np.arange(1.0, len(old_names) + 1)
    old.learner.steps_, old.learner.step_sum_ = 4, 10.0
    factory = ModelFactory(learner_class(pm, "preference_perceptron"), {}, FeatureMap(), names,
                           "per_query_minmax")
    carried = factory.carry_over(old)
    assert carried.learner.prior_.tolist() == engine_prior(names).tolist()
    shared = [old_names.index(name) for name in names]
    assert carried.learner.w_.tolist() == old.learner.w_[shared].tolist()
    assert (carried.learner.steps_, carried.learner.step_sum_) == (4, 10.0)
