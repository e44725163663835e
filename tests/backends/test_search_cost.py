"""What a reranked search asks of its engine: per-field scores and ids of the candidates
without loading their stored documents (the embedded index), the stored documents of the
shown results only; from Elasticsearch, the candidates' features in one request and the shown
results' documents in a second (or every candidate's with the first)."""

import json
import time

import numpy as np
import pytest
import tantivy

from reranker.backends import Candidates, embedded
from reranker.core.config import load_config
from reranker.core.errors import BackendUnavailableError
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.features.clicks import click_lifts
from reranker.features.extraction import FeatureSpec
from reranker.serving.service import RerankerService
from tests.support.configs import write_config, write_docs
from tests.support.es_scenarios import backend_for, es_config, index_corpus
from tests.support.es_standin import Standin
from tests.support.servers import run_cli


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
    matched_one_field = 0
    for query in [q for q, _ in corpus.queries[:20]] + ["no such words zzz"]:
        candidates = backend.search(query, 100)
        ids, scores = previous_method(backend, query, 100)
        assert candidates.ids == ids
        # Every field but the last exactly; the last, the search's score less the others',
        # to float32 rounding, and 0 exactly where the field did not match.
        assert np.array_equal(candidates.field_scores[:, :-1], scores[:, :-1])
        np.testing.assert_allclose(candidates.field_scores[:, -1], scores[:, -1], rtol=1e-6,
                                   atol=1e-6 * max(candidates.scores.max(initial=0), 1))
        assert np.array_equal(candidates.field_scores[:, -1] == 0, scores[:, -1] == 0)
        matched_one_field += np.sum((scores == 0).any(axis=1) & (scores > 0).any(axis=1))
    assert matched_one_field > 0  # the corpus has candidates that match in one field only
    backend.close()


@pytest.mark.parametrize("fields", [["body"], ["body", "title", "summary"]])
def test_per_field_scores_for_one_field_and_three(tmp_path, corpus, fields):
    """One field: its score is the search's (no search of its own); three: the first two
    searched, the last the search's score less theirs."""
    documents = [{**d, "summary": d["title"].split()[0]} for d in corpus.documents]
    config = load_config(write_config(tmp_path, backend={"fields": fields}))
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents(((d["id"], d) for d in documents), recreate=True)
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.open()
    for query in [q for q, _ in corpus.queries[:10]]:
        candidates = backend.search(query, 100)
        ids, scores = previous_method(backend, query, 100)
        assert candidates.ids == ids and len(ids) > 10
        np.testing.assert_allclose(candidates.field_scores, scores, rtol=1e-6, atol=1e-5)
        assert np.array_equal(candidates.field_scores == 0, scores == 0)
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
        service.backend._view = service.backend._new_view(counting)
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
        X = service.spec.build(candidates, click_lifts(service.events.click_counts(
            "tea kettle", candidates.ids), 5.0))[:, service.arms[0].columns(service.spec.names)]
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
    # a NaN among scores out of order is refused as well, not hidden by the ranks that
    # stand for the order of such scores
    rising = Candidates(ids=["a", "b", "c"], scores=np.array([np.nan, 1.0, 2.0]),
                        field_scores=np.ones((3, 1)), numeric=np.empty((3, 0)),
                        load_sources=lambda indices: [])
    with pytest.raises(ValueError, match="NaN"):
        spec.build(rising)
    rising.scores = np.array([0.5, 1.0, 2.0])
    assert spec.build(rising)[:, 0].tolist() == [3.0, 2.0, 1.0]


@pytest.fixture
def es8():
    server = Standin("8.15.1")
    yield server
    server.stop()


def subfolder(folder, name: str):
    """A new folder in ``folder`` (for another config file)."""
    (folder / name).mkdir()
    return folder / name


def requested(server: Standin, before: int) -> list[tuple[str, str]]:
    """The requests the stand-in received since the first ``before``: method and what they
    asked (a search for candidates, or for documents by id)."""
    out = []
    for method, where, raw in server.bodies[before:]:
        action = where.rsplit("/", 1)[-1]
        if action == "_search":
            action = "ids" if "ids" in json.loads(raw).get("query", {}) else "candidates"
        out.append((method, action))
    return out


def test_elasticsearch_answers_the_candidates_numeric_fields_then_the_shown_documents(
        es8, tmp_path, corpus):
    index, path = index_corpus(tmp_path, es8.url, corpus)
    backend = backend_for(path)
    backend.open()
    docs = {d["id"]: d for d in corpus.documents}
    before = len(es8.requests)
    candidates = backend.search("espresso grinder", 100)
    assert requested(es8, before) == [("POST", "candidates")]  # one request for the features
    assert json.loads(es8.bodies[-1][2])["_source"] == ["popularity"]
    assert len(candidates) > 10
    assert candidates.numeric[:, 0].tolist() == [docs[i]["popularity"] for i in candidates.ids]
    sources = candidates.load_sources([3, 0, 7])  # the page shown, in its order
    assert requested(es8, before) == [("POST", "candidates"), ("POST", "ids")]
    asked = json.loads(es8.bodies[-1][2])
    assert es8.requests[-1][1] == f"/{index}/_search"  # the index the candidates came from
    assert asked["query"] == {"ids": {"values": [candidates.ids[i] for i in (3, 0, 7)]}}
    assert sources == [docs[candidates.ids[i]] for i in (3, 0, 7)]
    assert candidates.load_sources([]) == []
    assert len(es8.requests) == before + 2  # nothing shown, nothing read
    backend.close()


def test_without_numeric_fields_the_candidates_come_without_source(es8, tmp_path, corpus):
    index, path = index_corpus(tmp_path, es8.url, corpus)
    config = es_config(subfolder(tmp_path, "plain"), es8.url, index, sections={
        "features": {"numeric_fields": []}})
    backend = backend_for(config)
    backend.open()
    candidates = backend.search("espresso grinder", 50)
    assert json.loads(es8.bodies[-1][2])["_source"] is False
    assert candidates.numeric.shape == (len(candidates), 0)
    docs = {d["id"]: d for d in corpus.documents}
    assert candidates.load_sources([1]) == [docs[candidates.ids[1]]]
    backend.close()


def test_dotted_numeric_fields_are_read_from_the_filtered_source(es8, tmp_path):
    documents = [{"id": f"p{i}", "title": "espresso grinder", "body": "burr grinder",
                  "price": {"amount": 10.0 + i, "currency": "EUR"}} for i in range(5)]
    config = es_config(tmp_path, es8.url, "shop", sections={
        "features": {"numeric_fields": ["price.amount"]}})
    run_cli("index", "-c", str(config), str(write_docs(tmp_path, documents)))
    backend = backend_for(config)
    backend.open()
    candidates = backend.search("espresso", 10)
    assert json.loads(es8.bodies[-1][2])["_source"] == ["price.amount"]
    by_id = dict(zip(candidates.ids, candidates.numeric[:, 0].tolist(), strict=True))
    assert by_id == {f"p{i}": 10.0 + i for i in range(5)}
    shown = candidates.load_sources([0])[0]
    assert shown["price"] == {"amount": by_id[shown["id"]], "currency": "EUR"}  # the whole
    backend.close()


def test_a_template_s_source_is_not_what_the_search_asks_for(es8, tmp_path, corpus):
    index, _ = index_corpus(tmp_path, es8.url, corpus)
    template = ('{"query": {"match": {"title": "{{query}}"}}, "_source": ["title"], '
                '"size": 3}')
    path = es_config(subfolder(tmp_path, "template"), es8.url, index, template=template)
    backend = backend_for(path)
    backend.open()
    candidates = backend.search("espresso", 20)
    sent = json.loads(es8.bodies[-1][2])
    assert sent["_source"] == ["popularity"] and sent["size"] == 20
    docs = {d["id"]: d for d in corpus.documents}
    assert candidates.load_sources([0]) == [docs[candidates.ids[0]]]  # whole documents
    backend.close()


def test_a_search_with_the_sources_of_every_candidate_is_one_request(es8, tmp_path, corpus):
    index, path = index_corpus(tmp_path, es8.url, corpus, fetch_sources="candidates")
    backend = backend_for(path)
    backend.open()
    before = len(es8.requests)
    candidates = backend.search("espresso grinder", 100)
    assert "_source" not in json.loads(es8.bodies[-1][2])  # every document, as it is
    docs = {d["id"]: d for d in corpus.documents}
    assert candidates.load_sources([3, 0]) == [docs[candidates.ids[i]] for i in (3, 0)]
    assert requested(es8, before) == [("POST", "candidates")]
    backend.close()


def test_the_service_shows_the_same_documents_either_way_and_shown_reads_fewer_bytes(
        es8, tmp_path, corpus):
    index, path = index_corpus(tmp_path, es8.url, corpus)
    docs = {d["id"]: d for d in corpus.documents}
    received, matches = {}, None
    for fetch in ("shown", "candidates"):
        service = RerankerService(load_config(es_config(
            subfolder(tmp_path, fetch), es8.url, index, fetch_sources=fetch))).open()
        try:
            matches = matches or service.backend.search("espresso grinder", 100).ids
            before, answered = len(es8.requests), es8.answered_bytes
            page = service.search("espresso grinder", 10)
            assert len(page["hits"]) == 10
            assert all(hit["source"] == docs[hit["id"]] for hit in page["hits"])
            assert requested(es8, before) == [("POST", "candidates")] + (
                [("POST", "ids")] if fetch == "shown" else [])
            received[fetch] = es8.answered_bytes - answered
            left_out = set(matches) - {hit["id"] for hit in page["hits"]}
        finally:
            service.close()
    # The shown way saves the documents of the candidates left out, less the wrapping of
    # the second search's answer and each candidate's numeric fields (the demo's documents
    # are short: about 300 bytes)
    assert len(left_out) >= 10
    saved = sum(len(json.dumps(docs[i])) for i in left_out)
    assert saved - 200 * len(matches) < received["candidates"] - received["shown"] < saved


def test_a_document_deleted_before_it_is_read_is_shown_without_its_source(es8, tmp_path,
                                                                          corpus):
    index, path = index_corpus(tmp_path, es8.url, corpus)
    backend = backend_for(path)
    backend.open()
    candidates = backend.search("espresso grinder", 20)
    gone = candidates.ids[1]
    es8.resolve(index).docs.pop(gone)
    sources = candidates.load_sources([0, 1, 2])
    assert sources[1] == {}
    assert sources[0]["id"] == candidates.ids[0] and sources[2]["id"] == candidates.ids[2]
    backend.close()


def test_through_an_alias_the_shown_documents_are_read_through_the_alias(es8, tmp_path,
                                                                         corpus):
    index, _ = index_corpus(tmp_path, es8.url, corpus)
    es8.aliases["products"] = index  # a key may be allowed to read the alias alone
    path = es_config(subfolder(tmp_path, "alias"), es8.url, "products")
    backend = backend_for(path)
    backend.open()
    candidates = backend.search("espresso grinder", 20)
    sources = candidates.load_sources([2, 0])
    assert [where for _, where, _ in es8.requests[-2:]] == ["/products/_search"] * 2
    docs = {d["id"]: d for d in corpus.documents}
    assert sources == [docs[candidates.ids[i]] for i in (2, 0)]
    backend.close()


def test_reading_the_shown_documents_takes_what_is_left_of_the_request_timeout(
        es8, tmp_path, corpus):
    index, path = index_corpus(tmp_path, es8.url, corpus, request_timeout=1.0,
                               max_retries=0)
    backend = backend_for(path)
    backend.open()
    candidates = backend.search("espresso grinder", 20)
    time.sleep(0.6)  # ranking, say
    es8.faulty, es8.delay = {"ids"}, 0.8  # within the timeout alone, not what is left of it
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match="reading the shown documents"):
        candidates.load_sources([0])
    assert time.monotonic() - started < 0.7
    es8.delay = 0.0
    time.sleep(0.5)
    with pytest.raises(BackendUnavailableError, match="did not answer within 1s"):
        candidates.load_sources([0])  # nothing left
    backend.close()


def test_the_read_of_the_shown_documents_reuses_a_client_per_hundredth_of_a_second_left(
        es8, tmp_path, corpus):
    """The client's ``options()`` builds a client anew (about 0.1 ms): the read of the
    shown documents keeps one per hundredth of a second of its timeout, rounded down (never
    longer than what is left, never 10 ms shorter), and below a tenth asks for exactly what
    is left."""
    index, path = index_corpus(tmp_path, es8.url, corpus, request_timeout=2.0)
    backend = backend_for(path)
    backend.open()
    first = backend._with_timeout(1.987)
    assert backend._with_timeout(1.981) is first
    assert first._request_timeout == pytest.approx(1.98)  # (the client's own option)
    assert backend._with_timeout(1.979) is not first
    for left in (0.3, 1.9, 2.0, 0.57):  # round values stay whole
        assert backend._with_timeout(left)._request_timeout == pytest.approx(left)
    assert backend._with_timeout(0.05)._request_timeout == 0.05
    assert backend._with_timeout(0.05) is not backend._with_timeout(0.05)
    candidates = backend.search("espresso grinder", 20)
    before = len(backend._timeout_clients)
    started = time.monotonic()
    for _ in range(5):
        assert candidates.load_sources([0, 1])
    # one client per hundredth of a second that passed (plus the one it started in), not
    # one per read (the reads take a few ms each; more on a busy machine)
    hundredths = int((time.monotonic() - started) / 0.01)
    assert len(backend._timeout_clients) - before <= min(5, hundredths + 2)
    backend.close()


def test_a_cluster_failing_to_read_the_shown_documents_is_503_counted_and_logs_nothing(
        es8, tmp_path, corpus):
    index, path = index_corpus(tmp_path, es8.url, corpus, max_retries=0)
    service = RerankerService(load_config(path)).open()
    try:
        service.search("espresso grinder", 10)
        service.events.flush()
        logged = service.events.stats()["impressions"]
        errors = service.prometheus.backend_errors._value.get()
        es8.faulty, es8.fail_status = {"ids"}, 503  # the candidates come, their documents not
        before = len(es8.requests)
        with pytest.raises(BackendUnavailableError, match="reading the shown documents"):
            service.search("espresso grinder", 10)
        assert requested(es8, before) == [("POST", "candidates"), ("POST", "ids")]
        assert service.prometheus.backend_errors._value.get() == errors + 1
        service.events.flush()
        assert service.events.stats()["impressions"] == logged
        es8.fail_status = None
        assert len(service.search("espresso grinder", 10)["hits"]) == 10
    finally:
        service.close()


# -- the embedded backend's cache of repeated searches ------------------------------------------

def shop_backend(tmp_path, cache_size: int = 1000, document_cache_mb: float = 32.0):
    """An embedded index of a small shop with filter fields, searched with ``cache_size``
    and ``document_cache_mb``."""
    from tests.support.shop import FILTER_FIELDS, shop

    tmp_path.mkdir(exist_ok=True)
    config = load_config(write_config(tmp_path, backend={
        "fields": ["title", "body"], "filter_fields": FILTER_FIELDS, "cache_size": cache_size,
        "document_cache_mb": document_cache_mb}, features={"numeric_fields": ["price"]}))
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents(((p["id"], p) for p in shop()), recreate=True)
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.open()
    return config, backend


def same_candidates(a: Candidates, b: Candidates) -> bool:
    return (a.ids == b.ids and a.total == b.total and a.facets == b.facets
            and all(np.array_equal(x, y, equal_nan=True) for x, y in (
                (a.scores, b.scores), (a.field_scores, b.field_scores),
                (a.numeric, b.numeric))))


def test_a_repeated_search_is_answered_from_the_cache_as_the_engine_answers(tmp_path):
    """The same candidates, facets and stored documents as a backend without the cache, for
    repeated searches with and without filters and facets; each distinct search (terms,
    number of candidates, filters, facets) runs the engine once."""
    from reranker.backends.filters import parse_facets, parse_filters

    config, cached = shop_backend(tmp_path / "a")
    _, plain = shop_backend(tmp_path / "b", cache_size=0)
    tea = parse_filters([{"term": {"category": "tea"}}], config.backend.filter_fields)
    brand = tuple(parse_facets(["brand"], config.backend.filter_fields))
    searches = [("shop", 100, (), ()), ("Shop!", 100, (), ()), ("shop", 10, (), ()),
                ("shop", 100, tea, ()), ("shop", 100, (), brand), ("steel glass", 100, (), ())]
    for _ in range(3):
        for query, n, filters, facets in searches:
            got, want = cached.search(query, n, filters, facets), plain.search(
                query, n, filters, facets)
            assert same_candidates(got, want)
            assert got.load_sources([0, 3]) == want.load_sources([0, 3])
    # "shop" and "Shop!" are the same terms: five distinct searches, each run once
    assert (cached._view.searches.misses, cached._view.searches.hits) == (5, 13)
    assert (plain._view.searches.misses, plain._view.searches.hits) == (0, 0)


def test_what_the_cache_hands_out_cannot_change_what_it_keeps(tmp_path):
    _, backend = shop_backend(tmp_path)
    first = backend.search("shop", 100)
    with pytest.raises(ValueError):
        first.scores[0] = 99.0
    with pytest.raises(ValueError):
        first.field_scores[:] = 0.0
    first.ids.reverse()
    assert backend.search("shop", 100).ids == list(reversed(first.ids))


def test_the_cache_keeps_the_latest_searches_and_forgets_a_changed_index(tmp_path):
    from tests.support.shop import shop

    _, backend = shop_backend(tmp_path, cache_size=2)
    for query in ("tea", "coffee", "kettle"):  # "tea" is pushed out
        backend.search(query, 100)
    backend.search("kettle", 100)
    backend.search("tea", 100)
    searches = backend._view.searches
    assert (searches.misses, searches.hits) == (4, 1)
    # a new document, indexed by another backend object (as `reranker index` would)
    writer = backend_class(get_plugin_manager(), "embedded")(backend.config)
    new = dict(shop()[0], id="p999", title="tea kettle tea")
    writer.index_documents([("p999", new)])
    assert "p999" in backend.search("tea", 100).ids
    assert backend._view.searches is not searches  # the engine ran again, on the new index
    assert (backend._view.searches.misses, backend._view.searches.hits) == (1, 0)


# -- the embedded backend's cache of stored documents -------------------------------------------

def test_a_document_shown_again_comes_from_the_cache_as_the_index_holds_it(tmp_path):
    """The same documents as a backend without the cache, each read from the index once;
    each read hands out a document of its own."""
    _, cached = shop_backend(tmp_path / "a")
    _, plain = shop_backend(tmp_path / "b", document_cache_mb=0)
    for query in ("tea", "shop", "tea", "kettle", "shop"):
        got, want = cached.search(query, 100), plain.search(query, 100)
        shown = list(range(min(5, len(got.ids))))
        assert got.load_sources(shown) == want.load_sources(shown)
    documents = cached._view.documents
    assert documents.hits > 0 and documents.misses == len(documents)
    assert len(plain._view.documents) == 0
    first = cached.search("tea", 100).load_sources([0])[0]
    first["title"] = "changed by the caller"
    assert cached.search("tea", 100).load_sources([0])[0] == plain.search(
        "tea", 100).load_sources([0])[0]


def test_the_document_cache_keeps_the_latest_within_its_budget_and_forgets_a_changed_index(
        tmp_path):
    _, backend = shop_backend(tmp_path, document_cache_mb=4e-3)  # about 4,000 bytes
    documents = backend._view.documents
    for query in ("tea", "shop", "kettle"):
        found = backend.search(query, 100)
        found.load_sources(list(range(len(found.ids))))
        assert 0 < documents.weight <= documents.capacity
        assert documents.weight == sum(embedded._stored_size(stored) for stored, _ in
                                       documents._entries.values())
    assert len(documents) < len(backend.search("shop", 100).ids)  # some were let go
    latest = backend.search("kettle", 100)
    misses = documents.misses
    latest.load_sources([len(latest.ids) - 1])  # the last read: still kept
    assert documents.misses == misses
    # the first document shown, changed by another backend object (as `reranker index` would)
    old = backend.search("tea", 100)
    doc_id, before = old.ids[0], old.load_sources([0])[0]
    writer = backend_class(get_plugin_manager(), "embedded")(backend.config)
    writer.index_documents([(doc_id, dict(before, title=before["title"] + " (new)"))])
    new = backend.search("tea", 100)
    at = new.ids.index(doc_id)
    assert new.load_sources([at])[0]["title"] == before["title"] + " (new)"


def test_documents_read_again_after_the_index_is_rebuilt_are_the_new_index_s(tmp_path):
    """Rebuilt, the index holds other documents at the same addresses: none is read from
    the cache of the old one."""
    from tests.support.shop import shop

    _, backend = shop_backend(tmp_path)
    for query in ("tea", "shop", "kettle"):
        found = backend.search(query, 100)
        found.load_sources(list(range(len(found.ids))))
    writer = backend_class(get_plugin_manager(), "embedded")(backend.config)
    writer.index_documents(((p["id"], p) for p in reversed(shop())), recreate=True)
    for query in ("tea", "shop", "kettle"):
        found = backend.search(query, 100)
        assert [d["id"] for d in found.load_sources(list(range(len(found.ids))))] == found.ids
