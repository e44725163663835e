"""Per-search filters, paging and facets through the real HTTP API, on the embedded engine
and on Elasticsearch (the protocol-level stand-in)."""

from __future__ import annotations

import json

import pytest

from reranker.backends.filters import parse_filters
from reranker.core.errors import BadRequestError
from tests.support.configs import write_config, write_docs
from tests.support.es_scenarios import unique_index
from tests.support.es_standin import Standin
from tests.support.servers import LiveServer, run_cli
from tests.support.shop import FILTER_FIELDS, index_in_process, remote_standin, shop


def passes(product: dict, clauses: list[dict]) -> bool:
    for clause in clauses:
        (kind, spec), = clause.items()
        (field, value), = spec.items()
        have = product[field] if isinstance(product[field], list) else [product[field]]
        if kind == "term" and value not in have:
            return False
        if kind == "terms" and not set(value) & set(have):
            return False
        if kind == "range":
            checks = {"gte": lambda a, b: a >= b, "gt": lambda a, b: a > b,
                      "lte": lambda a, b: a <= b, "lt": lambda a, b: a < b}
            if not all(checks[k](product[field], v) for k, v in value.items()):
                return False
    return True


FILTERS = [{"term": {"category": "tea"}}, {"terms": {"brand": ["acme", "zeta"]}},
           {"range": {"price": {"gte": 5, "lte": 40}}}, {"term": {"in_stock": True}}]


def search(server, **body):
    answer = server.post("/search", {"query": "shop", **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_filters_keep_only_matching_products(shop_server):
    server, products, _ = shop_server
    page = search(server, size=50, filter=FILTERS)
    expected = {p["id"] for p in products if passes(p, FILTERS)}
    assert expected and page["total"] == len(expected)
    assert {hit["id"] for hit in page["hits"]} == expected
    for hit in page["hits"]:
        assert passes(hit["source"], FILTERS)
    tagged = search(server, size=50, filter=[{"term": {"tags": "eco"}},
                                             {"range": {"price": {"gt": 30}}}])
    assert tagged["total"] == sum("eco" in p["tags"] and p["price"] > 30 for p in products)


def test_facets_count_every_matching_product(shop_server):
    server, products, _ = shop_server
    clauses = [{"term": {"in_stock": True}}]
    page = search(server, size=5, filter=clauses, facets=["category", "brand", "in_stock",
                                                          "tags"])
    matching = [p for p in products if passes(p, clauses)]
    for field in ("category", "brand", "tags"):
        counts: dict[str, int] = {}
        for p in matching:
            for value in p[field] if isinstance(p[field], list) else [p[field]]:
                counts[value] = counts.get(value, 0) + 1
        assert page["facets"][field] == counts, field
    assert page["facets"]["in_stock"] == {"true": len(matching)}
    assert len(page["hits"]) == 5 and page["total"] == len(matching)


def test_pages_continue_the_first_without_repeating_or_losing_a_hit(shop_server):
    server, products, _ = shop_server
    pages = [search(server, size=10, user_id="ann", filter=[{"term": {"in_stock": True}}],
                    **{"from": start}) for start in (0, 10, 20)]
    ids = [hit["id"] for page in pages for hit in page["hits"]]
    assert len(ids) == len(set(ids)) == 30
    assert [hit["rank"] for page in pages for hit in page["hits"]] == list(range(1, 31))
    first = server.service.events.get_impression(pages[0]["impression_id"])
    assert ids == [first.doc_ids[i] for i in first.ranking[:30]]  # one ranking, cut in three
    # the scores are on one scale, ordered with the rank except where a pair was swapped
    hits = [hit for page in pages for hit in page["hits"]]
    kept = [hit["score"] for hit in hits if not hit.get("randomised")]
    assert kept == sorted(kept, reverse=True)
    assert [hit["score"] for hit in pages[1]["hits"]] != [-float(r) for r in range(10, 20)]
    assert max(hit["score"] for hit in pages[1]["hits"]) <= pages[0]["hits"][0]["score"]
    later = server.service.events.get_impression(pages[1]["impression_id"])
    assert later.offset == 10 and later.page_key == first.page_key
    # a click on page 2 is at its rank in the whole ranking; the trainer learns first pages
    answer = server.post("/click", {"impression_id": pages[1]["impression_id"],
                                    "doc_id": pages[1]["hits"][2]["id"], "user_id": "ann"})
    assert answer.status_code == 202 and answer.json()["position"] == 13
    server.post("/click", {"impression_id": pages[0]["impression_id"],
                           "doc_id": pages[0]["hits"][4]["id"], "user_id": "ann"})
    report = server.service.trainer.run_once(close_all=True)
    assert report.applied == 1 and report.clicks == 1, report


def test_a_page_beyond_the_results_is_empty(shop_server):
    server, products, _ = shop_server
    clauses = [{"term": {"category": "kettle"}}]
    total = sum(passes(p, clauses) for p in products)
    last = search(server, size=10, filter=clauses, **{"from": total - 3})
    assert len(last["hits"]) == 3 and last["hits"][-1]["rank"] == total
    beyond = search(server, size=10, filter=clauses, **{"from": total + 5})
    assert beyond["hits"] == [] and beyond["total"] == total


BAD_REQUESTS = [
    ({"filter": {"term": {"category": "tea"}}}, "'filter' must be a list"),
    ({"filter": [{"match": {"category": "tea"}}]}, "'filter'[0]: unknown clause 'match'"),
    ({"filter": [{"term": {"title": "tea"}}]},
     "'filter'[0].term: \"title\" is not a filter field (filter fields: category, brand"),
    ({"filter": [{"term": {"category": {"value": "tea"}}}]},
     "'filter'[0].term.category must be a string, a number or true/false"),
    ({"filter": [{"terms": {"brand": []}}]}, "'filter'[0].terms.brand must be a non-empty"),
    ({"filter": [{"range": {"price": {"gte": "5"}}}]},
     "'filter'[0].range.price.gte must be a finite number or an ISO 8601 date"),
    ({"filter": [{"range": {"price": {"gte": "2010-01-01"}}}]},
     "'filter'[0].range.price.gte is a date, and 'price' is a number field"),
    ({"filter": [{"range": {"price": {"form": 5}}}]},
     "'filter'[0].range.price: unknown bound 'form' (known: gt, gte, lt, lte)"),
    ({"filter": [{"range": {"price": {}}}]}, "'filter'[0].range.price must be an object"),
    ({"facets": "category"}, "'facets' must be a list"),
    ({"facets": ["colour"]}, "'facets'[0]: \"colour\" is not a filter field"),
    ({"from": -1}, "'from' must be a non-negative integer"),
    ({"from": 95, "size": 10}, "'from' + 'size' is 105, more than the 100 candidates"),
]


def test_bad_filters_paging_and_facets_are_400_naming_the_field(shop_server):
    server, _, _ = shop_server
    for body, message in BAD_REQUESTS:  # (one server for all: each is refused alone)
        answer = server.post("/search", {"query": "shop", **body})
        assert answer.status_code == 400, body
        assert message in answer.json()["error"]["message"], (body, answer.text)


def test_an_unknown_range_bound_is_named_without_the_request_schema_too():
    """The library's search checks its filters without the HTTP request's schema."""
    with pytest.raises(BadRequestError) as caught:
        parse_filters([{"range": {"price": {"gte": 1, "lte_": 2}}}], ("price",))
    assert caught.value.field == "filter[0].range.price.lte_"
    assert "unknown bound 'lte_'; did you mean 'lte'" in str(caught.value)


def test_a_range_on_a_keyword_field_is_refused_on_every_backend(shop_server):
    """Elasticsearch would answer it as a range of strings, and no brand is one: 0 hits and
    no word why. Both backends refuse it, naming the clause and the field's type."""
    server, _, _ = shop_server
    for field, kind in (("brand", "keyword"), ("in_stock", "boolean")):
        answer = server.post("/search", {"query": "shop",
                                         "filter": [{"range": {field: {"gte": 1}}}]})
        error = answer.json()["error"]
        assert answer.status_code == 400 and error["field"] == f"filter[0].range.{field}"
        assert f"cannot match: {field!r} is a {kind} field" in error["message"]


def test_a_facet_answers_as_many_values_as_asked(shop_server):
    """A facet's size keeps its most frequent values; a field without one keeps up to 100;
    a bad entry is named."""
    server, products, _ = shop_server
    full = search(server, facets=["brand"])["facets"]["brand"]
    assert len(full) > 2
    page = search(server, facets=[{"field": "brand", "size": 2}, "category"])
    top = page["facets"]["brand"]
    assert list(top) == list(full)[:2] and min(top.values()) >= max(
        count for value, count in full.items() if value not in top)
    assert set(page["facets"]["category"]) == {p["category"] for p in products}
    for entry, field, problem in [
            ({"field": "brand", "size": 0}, "facets[0].size", "from 1 to 100"),
            ({"field": "brand", "top": 3}, "facets[0].top", "unknown facet key 'top'"),
            ({"field": "colour"}, "facets[0].field", "is not a filter field")]:
        answer = server.post("/search", {"query": "shop", "facets": [entry]})
        error = answer.json()["error"]
        assert answer.status_code == 400 and error["field"] == field, error
        assert problem in error["message"], error["message"]


def test_elasticsearch_gets_structured_clauses_and_aggregations(tmp_path):
    standin = Standin("8.15.1")
    try:
        path = write_config(tmp_path, backend={"type": "elasticsearch",
                                               "hosts": [standin.url], "index": unique_index(),
                                               "fields": ["title", "body"],
                                               "filter_fields": FILTER_FIELDS})
        run_cli("index", "-c", str(path), str(write_docs(tmp_path, shop())))
        server = LiveServer(path)
        try:
            standin.bodies.clear()
            text = '"} ] } tea OR category:coffee'
            server.post("/search", {"query": text, "filter": FILTERS, "facets": ["brand"]})
        finally:
            server.stop()
        searches = [body for method, path_, body in _bodies(standin) if path_.endswith("_search")]
        body, shown = searches  # the candidates' search, then the shown documents' by id
        assert set(shown["query"]) == {"ids"}  # the filters chose the candidates already
        filters = body["query"]["bool"]["filter"]
        assert filters[1:] == FILTERS  # the clauses as given, after the features' clause
        assert body["aggs"] == {"reranker_facet:brand": {"terms": {"field": "brand", "size": 100}}}
        assert text not in str(filters[1:]) and text not in str(body["aggs"])
    finally:
        standin.stop()


def _bodies(standin):
    for method, path, raw in standin.bodies:
        yield method, path, json.loads(raw or b"{}")


def test_a_feature_that_is_always_zero_is_reported(tmp_path, caplog):
    products = shop(30)
    for product in products:
        product["popularity"] = 0.0  # a field that never says anything
    path = write_config(tmp_path, backend={"fields": ["title", "body"]},
                        features={"numeric_fields": ["price", "popularity"]})
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, products)))
    server = LiveServer(path)
    try:
        search(server, size=5)
        health = server.get("/healthz").json()
        assert health["features"]["searches_watched"] == 1, health["features"]
        assert "field_value:popularity" in health["features"]["constant_zero"]
        assert "field_value:price" not in health["features"]["constant_zero"]
        for _ in range(120):
            search(server, size=5)
        health = server.get("/healthz").json()
        assert health["features"]["searches_watched"] == 100
        assert "field_value:popularity" in health["features"]["constant_zero"]
    finally:
        server.stop()
    assert "field_value:popularity" in caplog.text and "first 100 searches" in caplog.text


WRONG_TYPES = [
    ({"terms": {"brand": ["x", True]}}, "filter[1].terms.brand[1]",
     "true is not a keyword value"),
    ({"term": {"in_stock": 1}}, "filter[1].term.in_stock", "1 is not a boolean value"),
    ({"term": {"price": "y" * 300}}, "filter[1].term.price", "\u2026 is not a number value"),
    ({"range": {"brand": {"gte": 1}}}, "filter[1].range.brand", "is a keyword field"),
]


def test_a_filter_value_of_the_wrong_type_names_its_place(tmp_path):
    """On the embedded engine (Elasticsearch checks the values itself, with its own 400)."""
    path = write_config(tmp_path, backend={"type": "embedded", "path": "index",
                                           "fields": ["title", "body"],
                                           "filter_fields": FILTER_FIELDS},
                        features={"numeric_fields": ["price", "popularity"]})
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, shop())))
    server = LiveServer(path)
    try:
        for clause, field, shown in WRONG_TYPES:
            answer = server.post("/search", {"query": "shop", "filter": [
                {"term": {"in_stock": True}}, clause]})
            error = answer.json()["error"]
            assert answer.status_code == 400 and error["field"] == field, (clause, error)
            assert shown in error["message"], (clause, error)
    finally:
        server.stop()
    assert len(error["message"]) < 200  # a long value is cut, not echoed


# -- dates ---------------------------------------------------------------------------------

BOOKS = [{"id": f"b{i}", "title": f"book {i}", "body": "a book about tea",
          "published": published, "pages": 100 + i}
         for i, published in enumerate(["1999-09-09", "2005-06-01", "2010-01-01",
                                        "2012-03-04T10:30:00Z", "2020-12-31", "2024-02-29"])]


@pytest.fixture(params=["embedded", "elasticsearch", "opensearch"])
def book_server(request, tmp_path):
    """The books on either backend, their publication date a filter field whose type
    neither is told: the embedded engine infers a date from the ISO 8601 text, and
    ``reranker index`` maps it as one on Elasticsearch."""
    sections = {"features": {"numeric_fields": ["pages"]}}
    backend = {"fields": ["title", "body"], "filter_fields": ["published"]}
    standin = None
    if request.param == "embedded":
        path = write_config(tmp_path, backend={"type": "embedded", "path": "index", **backend},
                            **sections)
    else:
        standin = remote_standin(request.param)
        path = write_config(tmp_path, backend={"type": request.param, "hosts": [standin.url],
                                               "index": unique_index(), **backend}, **sections)
    indexed = index_in_process(path, write_docs(tmp_path, BOOKS))
    server = LiveServer(path)
    yield server, indexed
    server.stop()
    if standin is not None:
        standin.stop()


def published(server, clause) -> list[str]:
    page = server.post("/search", {"query": "book", "size": 10, "filter": [clause]})
    assert page.status_code == 200, page.text
    return sorted(hit["id"] for hit in page.json()["hits"])


def test_range_filters_take_iso_dates_and_epoch_milliseconds(book_server):
    server, _ = book_server
    assert published(server, {"range": {"published": {"gte": "2010-01-01"}}}) == \
        ["b2", "b3", "b4", "b5"]
    assert published(server, {"range": {"published": {"gt": "2010-01-01",
                                                       "lt": "2020-12-31"}}}) == ["b3"]
    # a date and time with an offset: 10:30 UTC is 12:30 at +02:00
    assert published(server, {"range": {"published": {
        "gte": "2012-03-04T12:30:00+02:00", "lte": "2012-03-04T10:30:00Z"}}}) == ["b3"]
    # epoch milliseconds: 2005-06-01 is 1117584000000
    assert published(server, {"range": {"published": {"lte": 1117584000000}}}) == ["b0", "b1"]
    assert published(server, {"term": {"published": "2024-02-29"}}) == ["b5"]


def test_a_clause_that_cannot_match_a_date_field_names_itself(book_server):
    server, _ = book_server
    for clause, field, problem in [
            ({"term": {"published": "last year"}}, "filter[0].term.published",
             "'published' is a date field, and \"last year\" is not a date"),
            ({"range": {"published": {"gte": "2010-13-01"}}},
             "filter[0].range.published.gte", "must be a finite number or an ISO 8601 date")]:
        answer = server.post("/search", {"query": "book", "filter": [clause]})
        error = answer.json()["error"]
        assert answer.status_code == 400 and error["field"] == field, error
        assert problem in error["message"], error["message"]


def test_a_date_field_is_reported_and_faceted_as_dates(book_server):
    server, indexed = book_server
    assert "filter fields, typed from the documents: published (date)" in indexed
    if "elasticsearch" in server.get("/healthz").text:
        return  # (Elasticsearch keeps its own date facets)
    page = server.post("/search", {"query": "book", "facets": ["published"]}).json()
    assert page["facets"]["published"] == {
        "1999-09-09": 1, "2005-06-01": 1, "2010-01-01": 1, "2012-03-04T10:30:00Z": 1,
        "2020-12-31": 1, "2024-02-29": 1}


def test_a_date_in_a_numeric_feature_field_gets_the_right_hint(tmp_path):
    path = write_config(tmp_path, backend={"type": "embedded", "path": "index",
                                           "fields": ["title", "body"]},
                        features={"numeric_fields": ["published"]})
    result = run_cli("index", "-c", str(path), str(write_docs(tmp_path, BOOKS)), check=False)
    text = result.stdout + result.stderr
    assert "numeric field 'published' holds '1999-09-09', a date" in text
    assert "epoch milliseconds" in text and "backend.filter_fields" in text


def test_a_facet_counts_ranges_and_gives_min_and_max(shop_server):
    """Range buckets (from included, to excluded) and stats over every matching product,
    on both backends; ranges and stats of a keyword field are refused, naming the facet."""
    server, products, _ = shop_server
    clauses = [{"term": {"category": "coffee"}}]
    matching = [p["price"] for p in products if passes(p, clauses)]
    page = search(server, size=3, filter=clauses, facets=[
        {"field": "price", "ranges": [{"to": 10}, {"from": 10, "to": 30, "key": "mid"},
                                      {"from": 30}]},
        "brand"])
    assert page["facets"]["price"] == {
        "*-10": sum(v < 10 for v in matching), "mid": sum(10 <= v < 30 for v in matching),
        "30-*": sum(v >= 30 for v in matching)}
    assert sum(page["facets"]["brand"].values()) == len(matching)
    stats = search(server, filter=clauses,
                   facets=[{"field": "price", "stats": True}])["facets"]["price"]
    assert stats["count"] == len(matching)
    assert stats["min"] == pytest.approx(min(matching))
    assert stats["max"] == pytest.approx(max(matching))
    assert stats["avg"] == pytest.approx(sum(matching) / len(matching))
    assert stats["sum"] == pytest.approx(sum(matching))
    nothing = search(server, query="absent", facets=[{"field": "price", "stats": True}])
    assert nothing["facets"]["price"]["count"] == 0 and nothing["facets"]["price"]["min"] is None
    for entry, field, problem in [
            ({"field": "brand", "stats": True}, "facets[0].stats",
             "needs a number or date field, and 'brand' is a keyword field"),
            ({"field": "price", "ranges": [{"from": "2010-01-01"}]}, "facets[0].ranges[0].from",
             "is a date, and 'price' is a number field"),
            ({"field": "price", "ranges": []}, "facets[0].ranges", "1 to 100 ranges"),
            ({"field": "price", "ranges": [{"below": 3}]}, "facets[0].ranges[0].below",
             "unknown range key 'below'"),
            ({"field": "price", "ranges": [{"to": 5}, {"to": 5}]}, "facets[0].ranges[1]",
             "has the key '*-5' of an earlier range"),
            ({"field": "price", "stats": True, "size": 3}, "facets[0]",
             "asks for size and stats")]:
        answer = server.post("/search", {"query": "shop", "facets": [entry]})
        error = answer.json()["error"]
        assert answer.status_code == 400 and error["field"] == field, error
        assert problem in error["message"], error["message"]


def test_a_date_facet_counts_ranges_of_dates_and_gives_the_first_and_last(book_server):
    server, _ = book_server
    page = server.post("/search", {"query": "book", "facets": [
        {"field": "published", "ranges": [{"to": "2010-01-01", "key": "before 2010"},
                                          {"from": "2010-01-01"}]}]}).json()
    assert page["facets"]["published"] == {"before 2010": 2, "2010-01-01-*": 4}
    page = server.post("/search", {"query": "book", "facets": [
        {"field": "published", "stats": True}]}).json()
    assert page["facets"]["published"] == {"count": 6, "min": "1999-09-09",
                                           "max": "2024-02-29"}


def test_a_date_in_a_filter_field_typed_as_numbers_gets_the_right_hint(tmp_path):
    path = write_config(tmp_path, backend={"type": "embedded", "path": "index",
                                           "fields": ["title", "body"],
                                           "filter_fields": ["published"]},
                        features={"numeric_fields": ["pages"]})
    books = [{**book, "published": 2001} if i == 0 else book for i, book in enumerate(BOOKS)]
    result = run_cli("index", "-c", str(path), str(write_docs(tmp_path, books)), check=False)
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert "filter field 'published' holds '" in text and "a date, but the index keeps it " \
        "as a number" in text and "ISO 8601 dates" in text
