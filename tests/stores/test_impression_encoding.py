"""The compact encoding of impressions (reranker.stores.encoding), on every built-in store
(SQLite and a real PostgreSQL server): values come back bit for bit, a store of the previous
schema is migrated, and the trainer learns exactly the same from every encoding."""

from __future__ import annotations

import json

import numpy as np

from reranker.core.config import load_config
from reranker.features.clicks.counts import query_key
from reranker.serving.service import RerankerService
from reranker.stores import encoding
from reranker.stores.conformance import impression
from reranker.stores.events import Impression
from reranker.stores.sql import SCHEMA_VERSION
from tests.support import legacy_stores
from tests.support.configs import write_config
from tests.support.stores import served_like, store_rows


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(
        np.ascontiguousarray(a).view(np.int64), np.ascontiguousarray(b).view(np.int64))


# -- the encoding ------------------------------------------------------------------------------


def test_every_value_comes_back_bit_for_bit():
    rng = np.random.default_rng(3)
    edge = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e-300, 5e-324, 2.0 ** 53,
                     2.0 ** 60, 0.1, -123456.789, 1e12, 3.0, 1 / 3])
    matrices = [served_like(100, rng), served_like(1, rng),
                served_like(100, rng, rank_column=True), np.zeros((0, 7)), np.zeros((5, 0)),
                np.resize(edge, (15, 3)).T.copy().T, rng.standard_normal((300, 4)),
                np.round(rng.uniform(-1e6, 1e6, (50, 3)), 6), rng.integers(-2**40, 2**40, (9, 2))
                .astype(np.float64)]
    for X in matrices:
        assert same_bits(encoding.unpack_features(encoding.pack_features(X)), X)
    for n, propensities in ((0, None), (7, np.linspace(0, 1, 7)), (300, rng.random(300)),
                            (100, (rng.random(100) < 0.1) * 0.5)):
        ids = [f"doc-{i}-é\x00\"" for i in range(n)]
        ranking = rng.permutation(n)
        got_ids, got_ranking, got_propensities = encoding.unpack_candidates(
            encoding.pack_candidates(ids, ranking, propensities))
        assert got_ids == ids and np.array_equal(got_ranking, ranking)
        assert got_ranking.dtype == np.intp
        assert (got_propensities is None) if propensities is None \
            else same_bits(got_propensities, propensities)


def test_a_hundred_candidates_take_under_a_quarter_of_the_bytes_they_took():
    rng = np.random.default_rng(5)
    X = served_like(100, rng)
    ids = [f"d{i:05d}" for i in rng.choice(99999, 100, replace=False)]
    ranking, propensities = rng.permutation(100), (rng.random(100) < 0.1) * 0.5
    before = X.nbytes + len(json.dumps(ids)) + 4 * 100 + propensities.nbytes
    after = len(encoding.pack_features(X)) + len(
        encoding.pack_candidates(ids, ranking, propensities))
    assert after <= 0.25 * before, (after, before)


# -- stores of schema 3 ----------------------------------------------------------------------


def old_impressions() -> list[Impression]:
    rng = np.random.default_rng(1)
    first = impression("old0", 1.0, n=30, shown=10, arm="a", closed_seq=1, clicked=["d4"],
                       log_prob=-2.0, propensities=rng.random(30), context={"swapped": [2]})
    first.feature_names, first.features = [f"f{j}" for j in range(7)], served_like(
        30, rng, rank_column=True)
    first.ranking = rng.permutation(30)
    first.clicked = [first.shown_ids()[3]]
    second = impression("old1", 2.0, n=3, shown=2, arm="a")  # still open
    return [first, second]


def test_a_store_of_schema_3_is_migrated(store_section, open_store):
    old = old_impressions()
    if store_section["type"] == "sqlite":
        legacy_stores.sqlite_store(store_section["path"], old)
    else:
        legacy_stores.postgres_store(store_section["dsn"], old)
    store = open_store()
    for imp in old:
        got = store.get_impression(imp.id)
        assert got.doc_ids == imp.doc_ids and got.feature_names == imp.feature_names
        assert same_bits(got.features, imp.features) and got.clicked == (imp.clicked or [])
        assert np.array_equal(got.ranking, imp.ranking) and got.closed_seq == imp.closed_seq
        assert (got.propensities is None) == (imp.propensities is None)
        assert (got.log_prob, got.context, got.arm) == (imp.log_prob, imp.context, imp.arm)
    assert same_bits(store.get_impression("old0").propensities, old[0].propensities)
    # it takes new events: a click on the open page, a new page of the same feature set
    assert store.record_click("old1", "d2").position == 1
    new = impression("new", 3.0, n=30)
    new.feature_names, new.features = old[0].feature_names, old[0].features
    store.log_impression(new)
    assert same_bits(store.get_impression("new").features, new.features)
    assert store_rows(store, "SELECT COUNT(*) FROM feature_sets") == [(2,)]  # 7 names; a, b
    assert store_rows(store, "SELECT value FROM meta WHERE key = 'schema_version'") == [
        (str(SCHEMA_VERSION),)]
    assert store.close_impressions(10.0) == 2 and store.last_closed_seq() == 3


def test_the_trainer_learns_the_same_from_every_encoding(workdir, tmp_path):
    """Pages served and clicked, trained on from the store, from the same pages in a store
    of schema 3 migrated, and learned directly from the impressions as served: the same
    weights, bit for bit."""
    service = RerankerService(load_config(workdir / "config.yaml")).open()
    served: list[Impression] = []
    log = service.events.log_impression

    def log_and_keep(imp: Impression) -> None:
        served.append(imp)
        log(imp)

    service.events.log_impression = log_and_keep
    rng = np.random.default_rng(0)
    try:
        for i in range(40):
            page = service.search(["tea kettle", "espresso grinder", "hiking boots"][i % 3], 10)
            for j in rng.choice(len(page["hits"]), 2, replace=False):
                service.click(page["impression_id"], page["hits"][j]["id"])
        assert service.trainer.run_once(close_all=True).updates > 5
        trained = service.models.load_latest(service.arms[0].factory)[0]
        arm = service.arms[0]
        logged = [service.events.get_impression(imp.id) for imp in served]
    finally:
        service.close()
    direct = arm.factory.new()
    for imp, stored in zip(served, logged, strict=True):
        imp.clicked, imp.closed_seq = stored.clicked, stored.closed_seq
        X, feedback = arm.feedback(imp)
        query = query_key(imp.query)  # as the trainer learns: every query weighing alike
        if direct.balance.keeps(query, imp.id):
            feedback.query = query
            direct.learn(X, feedback)
    legacy_stores.sqlite_store(tmp_path / "old.sqlite", sorted(served, key=lambda i: i.closed_seq))
    path = write_config(tmp_path, store={"path": "old.sqlite", "models": "old-models"})
    again = RerankerService(load_config(path)).open()
    try:
        assert again.trainer.run_once().applied == len(served)
        migrated = again.models.load_latest(again.arms[0].factory)[0]
    finally:
        again.close()
    for model in (trained, migrated):
        assert same_bits(model.learner.weights(), direct.learner.weights())
        assert model.progress.clicks == 80
