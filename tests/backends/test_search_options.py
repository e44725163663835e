"""What a search asks of its hits besides their order: the fields returned, highlighted
fragments and a sort by a field, through the real HTTP API on the embedded engine and on
Elasticsearch (the protocol-level stand-in)."""

from __future__ import annotations

import json

import pytest

from reranker.backends.options import parse_highlight, parse_source
from reranker.stores.events import NOT_LEARNED
from tests.support.configs import write_config, write_docs
from tests.support.servers import LiveServer, run_cli


def search(server, **body):
    answer = server.post("/search", {"query": "shop", **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def refused(server, **body) -> dict:
    answer = server.post("/search", {"query": "shop", **body})
    assert answer.status_code == 400, answer.text
    return answer.json()["error"]


def test_a_search_returns_the_fields_it_asks_for(shop_server):
    server, products, _ = shop_server
    by_id = {p["id"]: p for p in products}
    page = search(server, size=8, source=["title", "price"])
    assert page["hits"]
    for hit in page["hits"]:
        assert hit["source"] == {k: by_id[hit["id"]][k] for k in ("title", "price")}
    page = search(server, size=8, source={"exclude": ["body", "t*"]})
    for hit in page["hits"]:
        kept = {k: v for k, v in by_id[hit["id"]].items()
                if k != "body" and not k.startswith("t")}
        assert hit["source"] == kept
    page = search(server, size=3, source=False)
    assert all("source" not in hit for hit in page["hits"]) and len(page["hits"]) == 3


def test_paths_reach_into_objects_and_exclusions_win():
    doc = {"title": "t", "author": {"name": "ann", "born": 1970, "secret": "x"},
           "tags": ["a"]}
    assert parse_source(["author.name"]).apply(doc) == {"author": {"name": "ann"}}
    assert parse_source({"include": ["author", "title"], "exclude": ["author.secret"]}) \
        .apply(doc) == {"title": "t", "author": {"name": "ann", "born": 1970}}
    assert parse_source({"exclude": ["author.*"]}).apply(doc) == \
        {"title": "t", "author": {}, "tags": ["a"]}
    assert parse_source(True) is None and parse_source(False).apply(doc) is None


def test_highlights_mark_the_matched_words_of_each_hit(shop_server):
    server, products, _ = shop_server
    by_id = {p["id"]: p for p in products}
    page = search(server, query="green tea", size=20, highlight=["body", "title"])
    marked = 0
    for hit in page["hits"]:
        body = by_id[hit["id"]]["body"]
        fragments = hit["highlight"].get("body", [])
        if "green" in body.split():
            assert any("<em>green</em>" in f for f in fragments), (body, fragments)
            marked += 1
        for fragment in fragments:  # the fragment's words are the document's
            assert fragment.replace("<em>", "").replace("</em>", "") in body
        if by_id[hit["id"]]["title"].startswith("tea "):
            assert hit["highlight"]["title"][0].startswith("<em>tea</em>")
    assert marked >= 3
    tagged = search(server, query="green", size=5,
                    highlight={"fields": ["body"], "pre_tag": "[", "post_tag": "]"})
    assert all("[green]" in hit["highlight"]["body"][0] for hit in tagged["hits"])


def test_a_highlight_is_html_escaped_on_the_embedded_engine(tmp_path):
    docs = [{"id": "x", "title": "tea <script>alert(1)</script> & cups", "body": "tea"}]
    path = write_config(tmp_path, features={"numeric_fields": []})
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, docs)))
    server = LiveServer(path)
    try:
        hit = search(server, query="tea cups", highlight=["title"])["hits"][0]
    finally:
        server.stop()
    assert hit["highlight"]["title"] == [
        "<em>tea</em> &lt;script&gt;alert(1)&lt;/script&gt; &amp; <em>cups</em>"]


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_a_sorted_search_is_the_engines_order_by_the_field(shop_server, order):
    server, products, _ = shop_server
    clauses = [{"term": {"category": "tea"}}]
    pages = [search(server, size=10, filter=clauses, sort=[{"price": order}], user_id="ann",
                    **{"from": start}) for start in (0, 10)]
    prices = [hit["source"]["price"] for page in pages for hit in page["hits"]]
    expected = sorted((p["price"] for p in products if p["category"] == "tea"),
                      reverse=order == "desc")
    assert prices == expected[:20]
    assert [hit["rank"] for page in pages for hit in page["hits"]] == list(range(1, 21))
    scores = [hit["score"] for hit in pages[0]["hits"]]
    assert scores == sorted(scores, reverse=True)  # ordered with the rank, as documented
    assert pages[0]["learner"] == "sorted" and pages[0]["model_version"] == -1  # no model


def test_a_sorted_page_teaches_no_learner_nor_the_click_counts(shop_server):
    server, products, _ = shop_server
    page = search(server, size=10, sort="popularity", user_id="ann")
    popularity = [hit["source"]["popularity"] for hit in page["hits"]]
    assert popularity == sorted(popularity)
    imp = server.service.events.get_impression(page["impression_id"])
    assert imp.context[NOT_LEARNED] == "sorted by popularity asc" and not imp.learned
    clicked = page["hits"][4]["id"]
    answer = server.post("/click", {"impression_id": page["impression_id"],
                                    "doc_id": clicked, "user_id": "ann"})
    assert answer.status_code == 202  # logged ...
    counts, (clicks, exposure) = server.service.events.click_counts("shop", [clicked])
    assert counts.sum() == clicks == exposure == 0  # ... but counts in no click feature
    learned = search(server, size=10, user_id="bob")  # a page the learner ranked
    server.post("/click", {"impression_id": learned["impression_id"],
                           "doc_id": learned["hits"][3]["id"], "user_id": "bob"})
    report = server.service.trainer.run_once(close_all=True)
    assert report.applied == 1 and report.clicks == 1, report  # the learned page only


BAD_OPTIONS = [
    ({"sort": "title"}, "sort", "is not a field a search can sort by"),
    ({"sort": [{"price": "up"}]}, "sort[0].price", "must be \"asc\" or \"desc\""),
    ({"sort": [{"price": "asc", "brand": "asc"}]}, "sort[0]", "FIELD"),
    ({"highlight": ["brand"]}, "highlight[0]", "one of the text fields"),
    ({"highlight": {"fields": ["body"], "size": 3}}, "highlight.size",
     "unknown highlight key 'size'"),
    ({"highlight": {"fields": ["body"], "fragment_size": 0}}, "highlight.fragment_size",
     "from 1 to"),
    ({"source": {"inclde": ["title"]}}, "source.inclde", "unknown source key 'inclde'"),
    ({"source": "title"}, "source", "true, false, a list of field paths"),
    ({"sorting": "price"}, "sorting", "unknown field 'sorting'"),
]


def test_bad_fields_highlights_and_sorts_are_400_naming_the_field(shop_server):
    server, _, _ = shop_server
    for body, field, problem in BAD_OPTIONS:  # (one server for all: each is refused alone)
        error = refused(server, **body)
        assert error["field"] == field and problem in error["message"], (body, error)


def test_the_library_checks_what_the_http_schema_checks(shop_server):
    """The service checks the same fields for callers that skip HTTP (the library API)."""
    server, _, _ = shop_server
    service = server.service
    for kwargs, field in [({"sort": "title"}, "sort"), ({"highlight": ["brand"]}, "highlight[0]"),
                          ({"source": {"exclude": "body"}}, "source.exclude")]:
        with pytest.raises(Exception) as caught:
            service.search("shop", **kwargs)
        assert getattr(caught.value, "status", None) == 400, caught.value
        assert getattr(caught.value, "field", None) == field, caught.value
    with pytest.raises(Exception) as caught:
        parse_highlight({"fields": ["body"], "pre_tag": 5}, ["body"])
    assert caught.value.field == "highlight.pre_tag"


def test_the_embedded_engine_sorts_by_one_field(tmp_path):
    path = write_config(tmp_path, backend={"filter_fields": ["brand", "price"]},
                        features={"numeric_fields": []})
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, [
        {"id": "a", "title": "tea", "body": "", "brand": "x", "price": 2}])))
    server = LiveServer(path)
    try:
        error = refused(server, query="tea", sort=["brand", "price"])
    finally:
        server.stop()
    assert error["field"] == "sort" and "sorts by one field" in error["message"]


def test_elasticsearch_sorts_and_highlights_with_its_own_request(shop_server):
    server, _, standin = shop_server
    if standin is None:
        pytest.skip("the Elasticsearch requests only")
    standin.bodies.clear()
    page = search(server, query="green", size=5, sort=[{"price": "desc"}, "brand"],
                  highlight={"fields": ["body"], "fragment_size": 40})
    bodies = [json.loads(raw or b"{}") for _, path, raw in standin.bodies
              if path.endswith("_search")]
    candidates, shown, marked = bodies
    assert candidates["sort"] == [{"price": {"order": "desc", "missing": "_last"}},
                                  {"brand": {"order": "asc", "missing": "_last"}}]
    assert candidates["track_scores"] is True
    assert set(shown["query"]) == set(marked["query"]) == {"ids"}
    highlight = marked["highlight"]
    assert highlight["encoder"] == "html" and "green" in json.dumps(highlight["highlight_query"])
    assert highlight["fields"] == {"body": {"fragment_size": 40, "number_of_fragments": 3}}
    assert marked["_source"] is False
    assert all("<em>green</em>" in hit["highlight"]["body"][0] for hit in page["hits"])
