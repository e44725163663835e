"""Request validation and limits at the HTTP edge, over real HTTP (waitress) where the server
itself answers, and the OpenAPI document against the app's routes."""

from __future__ import annotations

import json
import socket
import threading
import time

import jsonschema
import numpy as np
import pytest
import requests
from flask import Flask

from reranker.api.app import blueprint, create_app
from reranker.api.validation import nesting_depth
from reranker.core.config import load_config
from reranker.core.errors import ConfigError
from reranker.serving.service import RerankerService
from tests.support.configs import write_config
from tests.support.servers import LiveServer

MIB = 1024 * 1024


def assert_error(response, status: int, field: str | None, *fragments: str) -> dict:
    assert response.status_code == status, response.text[:500]
    assert response.headers["Content-Type"].startswith("application/json")
    payload = response.json() if callable(response.json) else response.json  # requests/Flask
    error = payload["error"]
    assert error["status"] == status
    assert error.get("field") == field, error
    for fragment in fragments:
        assert fragment in error["message"], error["message"]
    return error


@pytest.fixture
def roomy(workdir):
    """A live server that reads bodies of up to 16 MiB, so the checks behind the body limit
    meet huge values."""
    server = LiveServer(write_config(workdir, server={"max_body_bytes": 16 * MIB}))
    yield server
    server.stop()


def test_a_body_over_the_limit_is_413_json_before_it_is_read(live):
    body = b'{"query": "' + b"tea " * (MIB // 4) + b'"}'
    headers = {"Content-Type": "application/json"}
    answer = requests.post(live.url + "/search", data=body, headers=headers, timeout=30)
    assert_error(answer, 413, None, "larger than 1048576 bytes", "server.max_body_bytes")
    # Without a Content-Length (chunked), the server stops reading at the limit too.
    chunks = (body[i:i + 65536] for i in range(0, len(body), 65536))
    answer = requests.post(live.url + "/search", data=chunks, headers=headers, timeout=30)
    assert_error(answer, 413, None, "server.max_body_bytes")
    assert live.post("/search", {"query": "tea"}).status_code == 200


def test_the_body_limit_holds_in_the_app_and_in_a_mounted_blueprint(workdir):
    config = load_config(write_config(workdir, server={"max_body_bytes": 4096}))
    service = RerankerService(config).open()
    try:
        host = Flask("host")  # the host application sets no limit of its own

        @host.post("/upload")
        def upload():
            from flask import request
            return {"bytes": len(request.get_data())}

        host.register_blueprint(blueprint(service), url_prefix="/rr")
        big = {"query": "tea " * 2000}
        for client, path in ((create_app(service=service).test_client(), "/search"),
                             (host.test_client(), "/rr/search")):
            assert_error(client.post(path, json=big), 413, None, "larger than 4096 bytes")
            assert client.post(path, json={"query": "tea"}).status_code == 200
        # The host's own routes keep their own (absent) limit.
        assert host.test_client().post("/upload", data=b"x" * 10000).get_json() == {
            "bytes": 10000}
    finally:
        service.close()


@pytest.mark.parametrize("depth", [33, 1000, 100000])
def test_deep_nesting_is_400_naming_the_limit(live, depth):
    body = '{"query": "tea", "filter": ' + "[" * depth + "]" * depth + "}"
    answer = requests.post(live.url + "/search", data=body, timeout=30,
                           headers={"Content-Type": "application/json"})
    assert_error(answer, 400, None, "more than 32 levels deep", "server.max_json_depth")


def reference_depth(text: str) -> int:
    """The nesting depth of a JSON text that parses, by walking the parsed value."""
    def depth(value):
        if isinstance(value, dict):
            return 1 + max(map(depth, value.values()), default=0)
        if isinstance(value, list):
            return 1 + max(map(depth, value), default=0)
        return 0
    return depth(json.loads(text))


def test_the_nesting_scan_agrees_with_the_parsed_depth_and_skips_every_string():
    """Random JSON whose strings hold brackets, quotes and backslashes escaped in every
    way: the scan's depth is the parsed value's."""
    rng = np.random.default_rng(3)
    pieces = ["[", "]", "{", "}", '"', "\\", "x", "\u005b"]

    def value(level):
        kind = rng.integers(4) if level < 40 else 3
        if kind == 0:
            return [value(level + 1) for _ in range(rng.integers(3))]
        if kind == 1:
            return {f"k{i}": value(level + 1) for i in range(rng.integers(3))}
        return "".join(rng.choice(pieces, size=rng.integers(6)))
    for _ in range(300):
        text = json.dumps(value(0))
        expected = reference_depth(text)
        assert nesting_depth(text.encode(), 0) == expected, text


def test_the_worst_body_costs_linear_time_and_a_neighbour_keeps_searching(live):
    """An unterminated string of escaped quotes followed by brackets (1 MB, the largest body
    server.max_body_bytes lets in) is refused 400 at once, while another client's searches
    on the same process keep answering (the old scan took minutes on it, holding the
    interpreter)."""
    worst = ('"' + '\\"' * 524_000 + "[" * 40).encode()
    assert len(worst) <= 1_048_576
    assert nesting_depth(worst, 32) == 0  # all of it inside the unterminated string
    latencies: list[float] = []
    done = threading.Event()

    def neighbour():
        with requests.Session() as session:
            while not done.is_set():
                started = time.perf_counter()
                answer = session.post(live.url + "/search", json={"query": "tea kettle"},
                                      timeout=30)
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200

    thread = threading.Thread(target=neighbour, daemon=True)
    thread.start()
    try:
        time.sleep(0.2)
        for _ in range(3):
            answer = requests.post(live.url + "/click", data=worst, timeout=30,
                                   headers={"Content-Type": "application/json"})
            assert answer.status_code == 400
            assert "must be JSON" in answer.json()["error"]["message"]
        time.sleep(0.2)
    finally:
        done.set()
        thread.join(30)
    assert len(latencies) >= 5
    assert float(np.median(latencies)) < 0.1, latencies


@pytest.mark.parametrize("path, body, field", [
    ("/search", '{"query": "tea", "filter": [{"range": {"popularity": {"gte": %s}}}]}',
     "filter[0].range.popularity.gte"),
    ("/search", '{"query": "tea", "size": %s}', "size"),
    ("/reward", '{"impression_id": "x", "value": %s}', "value"),
    ("/click", '{"impression_id": "x", "doc_id": "d", "user_id": %s}', "user_id"),
])
@pytest.mark.parametrize("number", ["9" * 400, "-" + "1" * 5000, "1e999", "2" + "0" * 308])
def test_a_number_beyond_a_floats_range_is_400_naming_its_field(live, path, body, field,
                                                                 number):
    answer = requests.post(live.url + path, data=body % number, timeout=30,
                           headers={"Content-Type": "application/json"})
    error = assert_error(answer, 400, field, "is a number beyond the range of a float")
    assert len(error["message"]) < 200  # the number is not echoed whole


def test_nesting_within_the_limit_and_brackets_inside_strings_are_not_refused(live):
    inside = live.post("/search", {"query": "tea " + "[{" * 500 + '\\"' + "]}" * 10})
    assert inside.status_code == 200, inside.text
    # 32 levels parse; the schema then names the field that holds them.
    body = '{"query": "tea", "filter": ' + "[" * 31 + "]" * 31 + "}"
    answer = requests.post(live.url + "/search", data=body, timeout=30,
                           headers={"Content-Type": "application/json"})
    assert_error(answer, 400, "filter[0]", "'filter'[0] must be an object with one of term")


@pytest.mark.parametrize("query, fragments", [
    ("tea " * 600, ["'query' is longer than 2048 bytes of UTF-8 (server.max_query_bytes)"]),
    ("\u00e9t\u00e9 " * 400, ["'query' is longer than 2048 bytes"]),  # 1,600 characters
    (" ".join(f"w{i}" for i in range(65)), ["'query' holds 65 words; at most 64",
                                            "server.max_query_terms"]),
    ("-".join(f"w{i}" for i in range(100)), ["'query' holds 100 words"]),
])
def test_over_long_queries_are_400_naming_query(live, query, fragments):
    assert_error(live.post("/search", {"query": query}), 400, "query", *fragments)
    assert_error(live.post("/explain", {"query": query}), 400, "query", *fragments)


def test_a_query_at_the_limits_is_served(live):
    at_terms = " ".join(f"w{i}" for i in range(63)) + " tea"
    assert live.post("/search", {"query": at_terms}).status_code == 200
    at_bytes = "tea " + "x" * 2044
    assert live.post("/search", {"query": at_bytes}).status_code == 200


@pytest.mark.parametrize("body, field", [
    ({"query": "tea", "size": "x" * 10_000_000}, "size"),
    ({"query": "tea", "user_id": ["y" * 10_000_000]}, "user_id"),
    ({"query": "tea", "z" * 10_000_000: 1}, "z" * 39 + "\u2026"),
    ({"query": "tea", "filter": [{"term": {"k" * 10_000_000: "tea"}}]}, "filter[0].term"),
])
def test_huge_values_are_not_echoed(roomy, body, field):
    answer = roomy.post("/search", body)
    error = assert_error(answer, 400, field)
    assert len(answer.content) < 500 and "\u2026" in error["message"], error


def test_a_nul_byte_in_a_header_gets_a_json_error(live):
    host, port = live.url.removeprefix("http://").split(":")
    request = (b"POST /search HTTP/1.1\r\nHost: x\r\nX-Trace: a\x00b\r\n"
               b"Content-Type: application/json\r\nContent-Length: 17\r\n"
               b"Connection: close\r\n\r\n" b'{"query": "tea"}\n')
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 400") or head.startswith(b"HTTP/1.1 400"), head
    assert b"Content-Type: application/json" in head
    assert requests.models.complexjson.loads(body) == {"error": {
        "status": 400, "message": 'the request is not valid HTTP: "Invalid header"'}}


@pytest.mark.parametrize("body, field, fragment", [
    ({"query": "tea", "filter": [{"range": {"popularity": {"gte": "5"}}}]},
     "filter[0].range.popularity.gte", "must be a finite number"),
    ({"query": "tea", "filter": [{"term": {"a": 1, "b": 2}}]}, "filter[0].term",
     "must be an object naming one field"),
    ({"query": "tea", "filter": [{"term": {"a": 1}}] * 33}, "filter",
     "'filter' holds 33 items; at most 32 (server.max_filter_clauses)"),
    ({"query": "tea", "from": 100}, "from", "'from' must be a non-negative integer below 100"),
    ({"query": "tea", "size": 1.5}, "size", "'size' must be an integer from 1 to 100"),
    ({"query": "tea", "session_id": "s" * 300}, "session_id",
     "'session_id' is 300 characters long; at most 256"),
    ({"query": "tea", "filter": [{"term": {"category": "tea"}}]}, "filter[0].term",
     "is not a filter field (filter fields: none: set backend.filter_fields)"),
])
def test_errors_name_the_field_as_a_json_path(live, body, field, fragment):
    assert_error(live.post("/search", body), 400, field, fragment)


def test_every_route_is_in_the_openapi_document(live):
    document = live.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    app = create_app(service=live.service)
    routes = {(rule.rule, method.lower()) for rule in app.url_map.iter_rules()
              for method in rule.methods - {"HEAD", "OPTIONS"}}
    described = {(path, method) for path, item in document["paths"].items() for method in item}
    assert routes == described
    for operation in (op for item in document["paths"].values() for op in item.values()):
        assert operation["responses"], operation["operationId"]
    for schema in document["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    search = document["components"]["schemas"]["SearchRequest"]
    assert search["properties"]["size"]["maximum"] == 100  # the limits in force
    assert "2048 bytes" in search["properties"]["query"]["description"]


def test_a_mounted_blueprint_describes_itself_under_its_prefix(live):
    host = Flask("host")
    host.register_blueprint(blueprint(live.service), url_prefix="/rr")
    document = host.test_client().get("/rr/openapi.json").get_json()
    assert document["servers"] == [{"url": "/rr"}] and "/search" in document["paths"]


@pytest.mark.parametrize("key, value, words", [
    ("max_json_depth", 2, "server.max_json_depth must be at least 5"),
    ("max_body_bytes", "1MB", "server.max_body_bytes must be an integer"),
    ("max_query_terms", 0, "server.max_query_terms must be at least 1"),
])
def test_limits_are_checked_in_the_config(tmp_path, key, value, words):
    path = write_config(tmp_path, server={key: value})
    with pytest.raises(ConfigError, match=words) as info:
        load_config(path)
    assert str(path) in info.value.message


@pytest.mark.parametrize("body, field", [({"query": "tea", "": 1}, ""),
                                         ({"query": "tea", "size ": 1}, "size ")])
def test_an_unknown_field_is_named_even_when_its_name_is_empty(body, field):
    from reranker.api.validation import RequestValidator
    from reranker.core.config import config_from_dict
    from reranker.core.errors import BadRequestError

    with pytest.raises(BadRequestError) as refused:
        RequestValidator(config_from_dict({})).check("search", body)
    assert refused.value.field == field and "unknown field" in refused.value.message
