"""The browser side: CORS on ``/search`` and ``/click`` as ``server.cors_origins`` says, the
click snippet at ``GET /reranker.js``, and the example page in a real headless Chromium on
another origin than the service: its searches reach the service, its clicks reach the event
store, and a page whose origin is not allowed gets an error and logs nothing.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from reranker.api.app import create_app
from reranker.core.config import config_from_dict, load_config
from reranker.core.errors import ConfigError
from reranker.serving.service import RerankerService
from tests.support.configs import write_config
from tests.support.headless import chromium, require_browser
from tests.support.paths import ROOT
from tests.support.servers import LiveServer

require_browser()

EXAMPLE = ROOT / "examples" / "browser"
SNIPPET = ROOT / "reranker" / "api" / "static" / "reranker.js"
PAGE = "https://shop.example.com"  # an allowed origin in the HTTP tests
OTHER = "https://evil.example.net"  # one that is not
WAIT = 10  # seconds, at most, for the page or the event store to show something


# -- the service, through the Flask test client ------------------------------------------

@pytest.fixture
def client_for(workdir) -> Iterator[Callable]:
    """``client_for(origins, max_age=600)``: a test client of the real app over the indexed
    corpus with those ``server.cors_origins``."""
    services: list[RerankerService] = []

    def make(origins: list[str], max_age: int = 600, **server):
        config = load_config(write_config(workdir, server={"cors_origins": origins,
                                                           "cors_max_age": max_age, **server}))
        service = RerankerService(config).open()
        services.append(service)
        return create_app(service=service).test_client()

    yield make
    for service in services:
        service.close()


def preflight(client, path: str, origin: str):
    return client.options(path, headers={"Origin": origin,
                                         "Access-Control-Request-Method": "POST",
                                         "Access-Control-Request-Headers": "content-type"})


def vary(response) -> set[str]:
    return {v.strip().lower() for v in response.headers.get("Vary", "").split(",") if v.strip()}


@pytest.mark.parametrize("path", ["/search", "/click"])
def test_preflight_from_an_allowed_origin(client_for, path):
    client = client_for([PAGE, "http://localhost:8080"], max_age=120)
    response = preflight(client, path, PAGE)
    assert response.status_code == 204 and response.data == b""
    assert response.headers["Access-Control-Allow-Origin"] == PAGE
    assert response.headers["Access-Control-Allow-Methods"] == "POST, OPTIONS"
    assert response.headers["Access-Control-Allow-Headers"] == "Content-Type"
    assert response.headers["Access-Control-Max-Age"] == "120"
    assert "origin" in vary(response)


def test_preflight_from_another_origin_gets_no_cors_headers(client_for):
    client = client_for([PAGE])
    for origin in (OTHER, "https://shop.example.com:8443", "http://shop.example.com", "null"):
        response = preflight(client, "/search", origin)
        assert response.status_code == 204
        assert not [h for h in response.headers.keys() if h.startswith("Access-Control-")]
        assert "origin" in vary(response)  # a cache must not reuse an allowed answer


def test_origins_compare_as_browsers_send_them(client_for):
    client = client_for(["https://Shop.Example.com"])
    response = preflight(client, "/click", PAGE)
    assert response.headers["Access-Control-Allow-Origin"] == PAGE


def test_any_origin_with_a_star(client_for):
    client = client_for(["*"])
    response = preflight(client, "/search", OTHER)
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    answer = client.post("/search", json={"query": "tea"}, headers={"Origin": OTHER})
    assert answer.status_code == 200 and answer.headers["Access-Control-Allow-Origin"] == "*"


def test_answers_and_errors_carry_the_allow_origin_header(client_for):
    client = client_for([PAGE])
    page = client.post("/search", json={"query": "espresso grinder"}, headers={"Origin": PAGE})
    assert page.status_code == 200
    assert page.headers["Access-Control-Allow-Origin"] == PAGE and "origin" in vary(page)
    hit = page.get_json()["hits"][0]["id"]
    click = client.post("/click", json={"impression_id": page.get_json()["impression_id"],
                                        "doc_id": hit}, headers={"Origin": PAGE})
    assert click.status_code == 202 and click.headers["Access-Control-Allow-Origin"] == PAGE
    for path, body, status in [("/search", {"query": "tea", "sise": 3}, 400),
                               ("/search", {"query": ""}, 400),
                               ("/click", {"impression_id": "nope", "doc_id": "d1"}, 403)]:
        error = client.post(path, json=body, headers={"Origin": PAGE})
        assert error.status_code == status, error.get_json()
        assert error.get_json()["error"]["status"] == status  # the page can read why
        assert error.headers["Access-Control-Allow-Origin"] == PAGE and "origin" in vary(error)
    wrong_method = client.get("/search", headers={"Origin": PAGE})
    assert wrong_method.status_code == 405
    assert wrong_method.headers["Access-Control-Allow-Origin"] == PAGE


def test_another_origin_gets_answers_without_cors_headers(client_for):
    client = client_for([PAGE])
    page = client.post("/search", json={"query": "tea"}, headers={"Origin": OTHER})
    assert page.status_code == 200  # the browser keeps it from the page
    assert "Access-Control-Allow-Origin" not in page.headers
    assert "Access-Control-Allow-Origin" not in client.post("/search", json={"query": "tea"}
                                                            ).headers


def test_explain_is_cross_origin_only_when_configured(client_for, caplog):
    closed = client_for([PAGE])
    with caplog.at_level(logging.WARNING, logger="reranker.api.browser"):
        assert "Access-Control-Allow-Origin" not in preflight(closed, "/explain", PAGE).headers
        answer = closed.post("/explain", json={"query": "tea"}, headers={"Origin": PAGE})
        closed.post("/explain", json={"query": "tea"})  # (not from a page: not counted)
    assert answer.status_code == 200 and "Access-Control-Allow-Origin" not in answer.headers
    # a listed origin that calls /explain while it is closed is refused, counted and logged
    assert refused(closed, "explain") == 2
    lines = [r.getMessage() for r in caplog.records if PAGE in r.getMessage()]
    assert len(lines) == 1 and "server.cors_explain" in lines[0]
    opened = client_for([PAGE], cors_explain=True)
    response = preflight(opened, "/explain", PAGE)
    assert response.status_code == 204 and response.headers["Access-Control-Allow-Origin"] == PAGE
    assert response.headers["Access-Control-Allow-Methods"] == "POST, OPTIONS"
    answer = opened.post("/explain", json={"query": "tea"}, headers={"Origin": PAGE})
    assert answer.status_code == 200 and answer.headers["Access-Control-Allow-Origin"] == PAGE
    assert answer.get_json()["hits"]
    # still only for the origins listed
    assert "Access-Control-Allow-Origin" not in preflight(opened, "/explain", OTHER).headers


def refused(client, endpoint: str) -> float:
    service = client.application.extensions["reranker"]
    return service.prometheus.registry.get_sample_value("reranker_cors_refused_total",
                                                        {"endpoint": endpoint}) or 0.0


def test_a_refused_origin_is_counted_and_logged_once_a_minute(client_for, caplog):
    client = client_for([PAGE])
    with caplog.at_level(logging.WARNING, logger="reranker.api.browser"):
        for _ in range(3):
            client.post("/search", json={"query": "tea"}, headers={"Origin": OTHER})
        preflight(client, "/click", OTHER)
        # neither an allowed origin, nor the service's own pages, nor a request without one
        client.post("/search", json={"query": "tea"}, headers={"Origin": PAGE})
        client.post("/search", json={"query": "tea"}, headers={"Origin": "http://localhost"})
        client.post("/search", json={"query": "tea"})
    assert refused(client, "search") == 3 and refused(client, "click") == 1
    lines = [r.getMessage() for r in caplog.records if OTHER in r.getMessage()]
    assert len(lines) == 1 and "server.cors_origins" in lines[0]
    assert not [r for r in caplog.records if PAGE in r.getMessage()]
    # with no origin allowed at all, a page elsewhere is refused all the same
    closed = client_for([])
    closed.post("/search", json={"query": "tea"}, headers={"Origin": PAGE})
    assert refused(closed, "search") == 1


def test_no_cors_headers_when_no_origin_is_configured(client_for):
    client = client_for([])
    response = preflight(client, "/search", PAGE)
    assert response.status_code == 204 and response.headers["Allow"] == "POST, OPTIONS"
    page = client.post("/search", json={"query": "tea"}, headers={"Origin": PAGE})
    error = client.post("/search", json={}, headers={"Origin": PAGE})
    for answer in (response, page, error):
        assert not [h for h in answer.headers.keys() if h.startswith("Access-Control-")]
        assert "Vary" not in answer.headers


def test_text_plain_clicks_only_from_an_allowed_origin(client_for):
    """Cross-origin, the snippet sends a click as text/plain (no preflight); the service
    takes such a body from an allowed origin only."""
    client = client_for([PAGE])
    page = client.post("/search", json={"query": "espresso grinder"}).get_json()
    doc = page["hits"][2]["id"]
    body = f'{{"impression_id": "{page["impression_id"]}", "doc_id": "{doc}"}}'
    for origin in (OTHER, None):
        refused = client.post("/click", data=body, content_type="text/plain;charset=UTF-8",
                              headers={"Origin": origin} if origin else {})
        assert refused.status_code == 400
        message = refused.get_json()["error"]["message"]
        assert "server.cors_origins" in message
        assert (repr(origin) if origin else "it sent no Origin header") in message
        assert "None" not in message
    accepted = client.post("/click", data=body, content_type="text/plain",
                           headers={"Origin": PAGE})
    assert accepted.status_code == 202 and accepted.get_json()["position"] == 3
    assert accepted.headers["Access-Control-Allow-Origin"] == PAGE
    not_json = client.post("/click", data="doc=3", content_type="text/plain",
                           headers={"Origin": PAGE})
    assert not_json.status_code == 400
    assert "must be JSON" in not_json.get_json()["error"]["message"]
    assert client_for([]).post("/click", data=body, content_type="text/plain",
                               headers={"Origin": PAGE}).status_code == 400


def test_the_snippet_is_served(client_for):
    client = client_for([PAGE])
    response = client.get("/reranker.js")
    assert response.status_code == 200
    assert response.mimetype == "application/javascript"
    assert "max-age=" in response.headers["Cache-Control"] and response.headers["ETag"]
    assert response.data == SNIPPET.read_bytes()
    assert b"window.reranker" in response.data and len(response.data) < 8192
    again = client.get("/reranker.js", headers={"If-None-Match": response.headers["ETag"]})
    assert again.status_code == 304
    cors = client.get("/reranker.js", headers={"Origin": PAGE})
    assert cors.headers["Access-Control-Allow-Origin"] == PAGE
    options = preflight(client, "/reranker.js", PAGE)
    assert options.status_code == 204
    assert options.headers["Access-Control-Allow-Methods"] == "GET, OPTIONS"


@pytest.mark.parametrize("origins, fragment", [
    (["https://shop.example.com/"], "'https://shop.example.com/' is not an origin"),
    (["shop.example.com"], "'shop.example.com' is not an origin"),
    (["https://shop.example.com/search"], "is not an origin"),
    (["*", PAGE], "'*' allows every origin; give it alone"),
    (["http://localhost:70000"], "outside 1-65535"),
    (["https://shop.example.com:443"], "drop ':443'"),
    ("https://shop.example.com", "server.cors_origins must be a list of non-empty strings"),
])
def test_bad_origins_are_config_errors(origins, fragment):
    with pytest.raises(ConfigError, match="server.cors_origins") as error:
        config_from_dict({"server": {"cors_origins": origins}})
    assert fragment in str(error.value)


def test_good_origins_and_their_defaults():
    config = config_from_dict({"server": {"cors_origins": [
        PAGE, "http://127.0.0.1:8080", "http://[::1]:3000", "http://localhost"]}})
    assert config.server.cors_origins[0] == PAGE
    defaults = config_from_dict({})
    assert defaults.server.cors_origins == () and defaults.server.cors_max_age == 600
    with pytest.raises(ConfigError, match="server.cors_max_age must be at least 0"):
        config_from_dict({"server": {"cors_max_age": -1}})


# -- the example page in a real browser ---------------------------------------------------

class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    """Files without a log line per request."""

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """``folder`` served over HTTP on a free loopback port: another origin than the
    service's."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietFiles, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, name="static-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[str]:
    """The example page beside a landing page that a clicked link can lead to."""
    folder = tmp_path_factory.mktemp("site")
    shutil.copy(EXAMPLE / "index.html", folder / "index.html")
    (folder / "landing.html").write_text("<!doctype html><title>landed</title><p>landed</p>")
    with static_site(folder) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium(WAIT) as driver:
        yield driver


@pytest.fixture
def service_for(workdir) -> Iterator[Callable[[list[str]], LiveServer]]:
    """``service_for(origins)``: the real service over HTTP with those CORS origins."""
    servers: list[LiveServer] = []

    def start(origins: list[str], **server) -> LiveServer:
        servers.append(LiveServer(write_config(workdir, server={"cors_origins": origins,
                                                               **server})))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def open_example(browser, site: str, service: LiveServer) -> None:
    browser.get(f"{site}/index.html?service={service.url}")
    WebDriverWait(browser, WAIT).until(
        lambda b: b.execute_script("return document.body.dataset.ready === 'true'"),
        "the example page did not load the snippet")


def type_query(browser, query: str) -> None:
    box = browser.find_element(By.ID, "query")
    box.clear()
    box.send_keys(query)
    browser.find_element(By.CSS_SELECTOR, "#search-form button").click()


def poll(check: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + WAIT
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"after {WAIT}s: {what}")
        time.sleep(0.05)


def test_the_example_page_searches_and_reports_clicks_across_origins(browser, site,
                                                                     service_for):
    server = service_for([site])
    open_example(browser, site, server)
    assert browser.execute_script("return window.reranker.endpoint") == server.url + "/"
    type_query(browser, "espresso grinder")
    links = poll(lambda: browser.find_elements(By.CSS_SELECTOR, "#results a[data-doc-id]"),
                 "no results on the page")
    assert browser.find_element(By.ID, "error").get_attribute("hidden") is not None
    impression_id = links[0].get_attribute("data-impression-id")
    logged = server.service.events.get_impression(impression_id)
    assert [link.get_attribute("data-doc-id") for link in links] == logged.shown_ids()

    # A click on a link that leaves the page: the report outlives it.
    third = links[2]
    doc = third.get_attribute("data-doc-id")
    browser.execute_script("arguments[0].href = '/landing.html'", third)
    third.click()
    poll(lambda: browser.current_url.endswith("/landing.html"), "the link did not navigate")
    poll(lambda: server.service.events.get_impression(impression_id).clicked == [doc],
         f"the click on {doc} did not reach the event store")

    # Back on the page: a new search, and a click on an in-page link.
    open_example(browser, site, server)
    type_query(browser, "tea")
    link = poll(lambda: browser.find_elements(By.CSS_SELECTOR, "#results a[data-doc-id]"),
                "no results for the second search")[0]
    second = link.get_attribute("data-impression-id")
    assert second != impression_id
    link.click()  # an in-page link: the page stays
    poll(lambda: server.service.events.get_impression(second).clicked
         == [link.get_attribute("data-doc-id")], "the in-page click did not reach the store")


def test_a_page_on_an_origin_not_allowed_gets_an_error(browser, site, service_for):
    server = service_for(["https://shop.example.com"])
    before = server.service.events.stats()["impressions"]
    open_example(browser, site, server)  # a <script src> needs no CORS: the snippet loads
    type_query(browser, "espresso grinder")
    error = poll(lambda: browser.find_element(By.ID, "error").get_attribute("hidden") is None
                 and browser.find_element(By.ID, "error").text, "the page shows no error")
    assert "Search failed" in error and "server.cors_origins" in error
    assert browser.find_elements(By.CSS_SELECTOR, "#results li") == []
    # The preflight was refused, so the search itself never reached the service.
    assert server.service.events.stats()["impressions"] == before
    assert server.service.prometheus.registry.get_sample_value(
        "reranker_cors_refused_total", {"endpoint": "search"}) >= 1


EXPLAIN_FROM_THE_PAGE = """
const [url, done] = arguments;
fetch(url + '/explain', {method: 'POST', headers: {'Content-Type': 'application/json'},
                         body: JSON.stringify({query: 'espresso grinder', size: 3})})
  .then(r => r.json()).then(body => done(body), error => done({failed: String(error)}));
"""


def test_a_why_this_result_panel_can_call_explain_from_another_origin(browser, site,
                                                                      service_for):
    """With server.cors_explain, a page on an allowed origin reads /explain (the preflight
    and the answer, in a real browser); without it, the browser keeps the answer away."""
    open_example(browser, site, service_for([site]))
    closed = service_for([site])
    answer = browser.execute_async_script(EXPLAIN_FROM_THE_PAGE, closed.url)
    assert "failed" in answer
    opened = service_for([site], cors_explain=True)
    answer = browser.execute_async_script(EXPLAIN_FROM_THE_PAGE, opened.url)
    assert "failed" not in answer, answer
    assert len(answer["hits"]) == 3 and answer["decided_by"]
    assert {"engine", "learned"} <= set(answer["hits"][0]["general_parts"])


def test_click_and_reward_answer_promises_and_a_refusal_reaches_the_error_hook(browser, site,
                                                                                service_for):
    """reranker.click() and reward() resolve to the service's answer; a click on a page
    whose feedback window has closed is refused with the reason (409, the window named), and
    the refusal reaches the onError hooks, the tracked clicks' too."""
    server = service_for([site])
    open_example(browser, site, server)
    type_query(browser, "espresso grinder")
    links = poll(lambda: browser.find_elements(By.CSS_SELECTOR, "#results a[data-doc-id]"),
                 "no results on the page")
    impression = links[0].get_attribute("data-impression-id")
    docs = [link.get_attribute("data-doc-id") for link in links]
    call = """
      const [name, args, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
      window.seen = window.seen || [];
      if (!window.hooked) {
        window.hooked = true;
        reranker.onError((error, what) => window.seen.push(
          {message: error.message, status: error.status, what}));
      }
      reranker[name](...args).then((body) => done({body}),
                                   (error) => done({error: error.message, status: error.status}));
    """
    clicked = browser.execute_async_script(call, "click", [impression, docs[1]])
    assert clicked["body"]["accepted"] is True and clicked["body"]["position"] == 2, clicked
    rewarded = browser.execute_async_script(call, "reward", [impression, 4.5])
    assert rewarded["body"]["accepted"] is True and rewarded["body"]["value"] == 4.5
    assert server.service.events.get_impression(impression).clicked == [docs[1]]

    server.service.trainer.run_once(close_all=True)  # the page's window closes
    late = browser.execute_async_script(call, "click", [impression, docs[2]])
    assert late["status"] == 409 and "no longer accepts clicks" in late["error"]
    assert "trainer.feedback_window" in late["error"]
    seen = browser.execute_script("return window.seen")
    assert seen == [{"message": late["error"], "status": 409,
                     "what": {"type": "click", "impression_id": impression, "doc_id": docs[2]}}]
    # a tracked click that is refused reaches the hook too, and the page goes on
    browser.execute_script("arguments[0].href = '#'", links[3])
    links[3].click()
    seen = poll(lambda: len(browser.execute_script("return window.seen")) == 2
                and browser.execute_script("return window.seen"), "the hook saw no refusal")
    assert seen[1]["what"]["doc_id"] == docs[3] and seen[1]["status"] == 409
    assert server.service.events.get_impression(impression).clicked == [docs[1]]
