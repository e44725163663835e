"""What a reranked search asks of its engine: per-field scores and ids of the candidates
without loading their stored documents (the embedded index), the stored documents of the
shown results only, and one request per search to Elasticsearch."""

import json

import numpy as np
import pytest
import tantivy
from conftest import write_config
from es_scenarios import backend_for, index_corpus
from es_standin import Standin

from reranker.backends import Candidates, embedded
from reranker.config import load_config
from reranker.features import FeatureSpec
from reranker.plugins import backend_class, get_plugin_manager
from reranker.service import RerankerService


class CountingSearcher:
    """A Tantivy searcher that counts the stored documents read through it."""

    def __init__(self, searcher):
        self.searcher = searcher
        self.docs_read = 0

    def doc(self, address):
        self.docs_read += 1
        return self.searcher.doc(address)

    def __getattr__(self, name):
        return getattr(self.searcher, name)


def previous_method(backend, query: str, n: int) -> tuple[list[str], np.ndarray]:
    """Ids and per-field scores as the embedded backend computed them before: each
    candidate's stored document read for its id, and per field a search restricted to the
    candidates by a term set of their ids."""
    searcher = backend._current_searcher()
    terms = backend._terms(query)
    hits = searcher.search(backend._field_query(backend.fields, terms), n).hits
    addresses = [a for _, a in hits]
    ids = [searcher.doc(a)["_id"][0] for a in addresses]
    slot = {(a.segment_ord, a.doc): i for i, a in enumerate(addresses)}
    scores = np.zeros((len(ids), len(backend.fields)))
    if not ids:
        return ids, scores
    only = tantivy.Query.const_score_query(
        tantivy.Query.term_set_query(backend._schema, "_id", ids), 0.0)
    for j, f in enumerate(backend.fields):
        q = tantivy.Query.boolean_query([(tantivy.Occur.Must, backend._field_query([f], terms)),
                                         (tantivy.Occur.Must, only)])
        for score, a in searcher.search(q, len(ids), count=False).hits:
            scores[slot[(a.segment_ord, a.doc)], j] = score
    return ids, scores


def test_per_field_scores_and_ids_equal_the_previous_method(workdir, corpus):
    backend = backend_class(get_plugin_manager(), "embedded")(
        load_config(workdir / "config.yaml"))
    backend.open()
    assert backend.id_words == embedded.ID_WORDS
    for query in [q for q, _ in corpus.queries[:20]] + ["no such words zzz"]:
        candidates = backend.search(query, 100)
        ids, scores = previous_method(backend, query, 100)
        assert candidates.ids == ids
        assert np.array_equal(candidates.field_scores, scores)  # exactly, not approximately
    backend.close()


@pytest.mark.parametrize("id_words", [embedded.ID_WORDS, 0])
def test_ids_of_any_length_and_script_come_back_exactly(tmp_path, monkeypatch, id_words):
    """Ids the fast columns hold, ids too long for them or holding a NUL byte (read from the
    stored document), and an index built without the columns (as before them)."""
    monkeypatch.setattr(embedded, "ID_WORDS", id_words)
    odd = ["7", "é-ü-日本", "x" * 32, "y" * 33, "nul\x00inside", "emoji-🫖"]
    documents = [{"id": doc_id, "title": f"kettle number {i}", "body": "a tea kettle"}
                 for i, doc_id in enumerate(odd)]
    config = load_config(write_config(tmp_path))
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents((("test", d) for d in documents), recreate=True)
    meta = json.loads((tmp_path / "index" / embedded.META_FILE).read_text())
    assert meta["id_words"] == id_words
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.open()
    candidates = backend.search("kettle", 100)
    assert sorted(candidates.ids) == sorted(odd)
    sources = candidates.load_sources(range(len(candidates)))
    assert [s["id"] for s in sources] == candidates.ids
    backend.close()


def test_an_index_without_id_columns_still_takes_new_documents(tmp_path, monkeypatch):
    config = load_config(write_config(tmp_path))
    monkeypatch.setattr(embedded, "ID_WORDS", 0)
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents([("a", {"id": "a", "title": "tea kettle", "body": ""})],
                            recreate=True)
    monkeypatch.undo()
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents([("b", {"id": "b", "title": "tea pot", "body": ""})])
    backend.open()
    assert sorted(backend.search("tea", 10).ids) == ["a", "b"]
    backend.close()


def test_a_search_reads_the_stored_documents_of_the_shown_results_only(workdir):
    service = RerankerService(load_config(workdir / "config.yaml")).open()
    try:
        counting = CountingSearcher(service.backend._current_searcher())
        service.backend._current_searcher = lambda: counting
        search, retrieved = service.backend.search, []
        service.backend.search = lambda *args: retrieved.append(search(*args)) or retrieved[-1]
        page = service.search("tea kettle", 10)
        assert len(page["hits"]) == 10 and len(retrieved[0]) > 20
        assert counting.docs_read == 10
        assert all(hit["source"]["id"] == hit["id"] for hit in page["hits"])
    finally:
        service.close()


def test_the_layer_ranks_as_the_checked_path_does(workdir):
    """The service's ranking skips re-validating the features it built; the ranking and
    everything logged is what the validating public path gives."""
    service = RerankerService(load_config(workdir / "config.yaml")).open()
    try:
        candidates = service.backend.search("tea kettle", 100)
        X = service.spec.build(candidates, service.events.click_features(
            "tea kettle", candidates.ids, 5.0))
        model = service.model
        checked = model.rank(X, 10, np.random.default_rng(3))
        trusted = model.rank(X, 10, np.random.default_rng(3), check=False)
        for name in ("ranking", "scores", "propensities", "shown_propensities"):
            assert np.array_equal(getattr(checked, name), getattr(trusted, name)), name
        assert (checked.log_prob, checked.context) == (trusted.log_prob, trusted.context)
    finally:
        service.close()


def test_features_with_a_nan_score_are_refused():
    spec = FeatureSpec(fields=("title",))
    candidates = Candidates(ids=["a", "b"], scores=np.array([1.0, np.nan]),
                            field_scores=np.ones((2, 1)), numeric=np.empty((2, 0)),
                            load_sources=lambda indices: [])
    with pytest.raises(ValueError, match="NaN"):
        spec.build(candidates)
    candidates.scores = np.array([1.0, np.inf])  # infinities are clipped, as before
    assert spec.build(candidates)[1, 0] == FeatureSpec.LIMIT


def test_one_request_per_search_to_elasticsearch(tmp_path, corpus):
    server = Standin("8.15.1")
    try:
        index, path = index_corpus(tmp_path, server.url, corpus)
        backend = backend_for(path)
        backend.open()
        before = len(server.requests)
        candidates = backend.search("espresso grinder", 100)
        assert [(method, where.rsplit("/", 1)[-1]) for method, where, _ in
                server.requests[before:]] == [("POST", "_search")]
        assert len(candidates) > 10
        backend.close()
    finally:
        server.stop()
