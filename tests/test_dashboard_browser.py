"""The live dashboard in a real headless Chromium: it shows the numbers of the experiment
status document exactly, follows the experiment as it changes and reports a failing server.

The tests only see the server through the ``experiment_server`` fixture (its address and a
way to read the live status) and ``advance_experiment`` (make the experiment move on); both
are implemented here with a canned status document.
"""

from __future__ import annotations

import contextlib
import copy
import html
import io
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from experiment_documents import canned_status
from flask import Flask, Response, jsonify
from headless import chromium, require_browser
from rich.console import Console
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_experiment_report import table_row
from werkzeug.serving import make_server

from reranker.experiments.report import dashboard_page, html_report, render_table
from reranker.experiments.report_model import (
    DASH,
    build_report,
    format_bool,
    format_int,
    format_interval,
    format_learned,
    format_p,
    format_rate,
    format_text,
    format_time,
    format_traffic,
    with_report,
)

require_browser()

WAIT = 15  # seconds, at most, for the page to show something

#: Everything the tests read from the page, in one round trip.
READ_PAGE = """
const cells = row => {
  const out = {};
  for (const cell of row.children) {
    if (cell.classList.length) {
      out[cell.classList[0]] = {text: cell.textContent.trim(),
                                value: cell.getAttribute("data-value")};
    }
  }
  return out;
};
// the cells' texts in their order (the forest plot aside)
const texts = row => Array.from(row.children).filter(
  cell => !cell.classList.contains("forest-cell")).map(cell => cell.textContent.trim());
const stamp = document.getElementById("last-refresh");
const error = document.getElementById("error");
return {
  updated: stamp.getAttribute("data-updated"),
  fetches: stamp.getAttribute("data-fetches"),
  error: error.hidden ? null : error.textContent,
  name: document.getElementById("experiment-name").textContent,
  mode: document.getElementById("experiment-mode").textContent,
  status: document.getElementById("experiment-status").textContent,
  impressions: document.getElementById("experiment-impressions").textContent,
  traffic: document.getElementById("experiment-traffic").textContent,
  history: Array.from(document.querySelectorAll("#history tbody tr[data-action]"), row => ({
    action: row.getAttribute("data-action"), cells: cells(row)})),
  pairs: Array.from(document.querySelectorAll("#pairs tbody tr[data-arms]"), row => ({
    arms: row.getAttribute("data-arms"), cells: cells(row), texts: texts(row),
    forest: row.querySelectorAll("svg.forest").length})),
  arms: Array.from(document.querySelectorAll("#arms tbody tr[data-arm]"), row => ({
    arm: row.getAttribute("data-arm"), cells: cells(row), texts: texts(row)})),
  curves: Array.from(document.querySelectorAll("#curves path.curve, #curves polyline.curve"),
                     line => line.getAttribute("data-arm")),
  legend: Array.from(document.querySelectorAll("#curves .legend-item"),
                     item => item.getAttribute("data-arm")),
  ticks: document.querySelectorAll("#curves .tick-label").length,
  notes: Array.from(document.querySelectorAll("#arm-notes li"), item => ({
    arm: item.getAttribute("data-arm"), kind: item.className, text: item.textContent})),
  verdicts: Array.from(document.querySelectorAll("#verdicts li"), item => ({
    arms: item.getAttribute("data-arms"), verdict: item.className, text: item.textContent})),
};
"""


class CannedExperiment:
    """The canned status document, which the tests can move on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status = canned_status()

    def reset(self) -> None:
        with self._lock:
            self._status = canned_status()

    def status(self) -> dict:
        with self._lock:
            return copy.deepcopy(self._status)

    def advance(self) -> None:
        """More traffic: more wins for the first arm of every pair, a later computation."""
        with self._lock:
            for pair in self._status["pairs"]:
                pair["wins"] += 25
                decided = pair["wins"] + pair["losses"]
                pair["win_rate"] = pair["wins"] / decided
            self._status["impressions"] += 100
            self._status["updated"] += 60.0


@contextlib.contextmanager
def serving(app: Flask) -> Iterator[str]:
    """``app`` on 127.0.0.1 and a free port in a background thread; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="dashboard-test-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()


def dashboard_app(status: Callable[[], Any]) -> Flask:
    """The dashboard at ``/dashboard`` and ``status()`` (a body, or a (body, code) pair) at
    ``/experiments``."""
    app = Flask("dashboard-test")
    app.json.sort_keys = False  # the arms' order is the experiment's order

    @app.get("/dashboard")
    def dashboard() -> Response:
        return Response(dashboard_page(), mimetype="text/html")

    @app.get("/experiments")
    def experiments() -> Any:
        answer = status()
        if isinstance(answer, tuple):
            return jsonify(answer[0]), answer[1]
        return jsonify(with_report(answer))  # as the experiment's status carries it

    return app


@pytest.fixture(scope="module")
def canned() -> CannedExperiment:
    return CannedExperiment()


@pytest.fixture(scope="module")
def experiment_server(canned) -> Iterator[tuple[str, Callable[[], dict]]]:
    """``(base_url, get_status)``: a server with the dashboard at ``/dashboard`` and the
    experiment's status at ``/experiments``, and a function reading that live status."""
    with serving(dashboard_app(canned.status)) as base_url:
        def get_status() -> dict:
            response = requests.get(base_url + "/experiments", timeout=5)
            response.raise_for_status()
            return response.json()

        yield base_url, get_status


@pytest.fixture
def advance_experiment(canned) -> Iterator[Callable[[], None]]:
    """Make the experiment move on (as more traffic would)."""
    yield canned.advance
    canned.reset()


@pytest.fixture(scope="module")
def failing_server() -> Iterator[str]:
    """A server whose ``/experiments`` fails with the service's JSON error."""
    body = {"error": {"status": 500, "message": "x"}}
    with serving(dashboard_app(lambda: (body, 500))) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def hostile_server() -> Iterator[tuple[str, dict]]:
    """A server whose status document has markup in every label."""
    status = canned_status()
    label = '<img src="missing.png" onerror="document.title=1">'
    status["experiment"] = label
    status["arms"] = {label if name == "engine" else name: arm
                      for name, arm in status["arms"].items()}
    for pair in status["pairs"]:
        pair["arms"] = [label if arm == "engine" else arm for arm in pair["arms"]]
    status["pairs"][1]["winner"] = label
    with serving(dashboard_app(lambda: status)) as base_url:
        yield base_url, status


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    with chromium(WAIT, "--window-size=1280,1000", console_log=True) as browser:
        yield browser


# ---- reading and comparing the page ----

def read_page(driver: webdriver.Chrome) -> dict:
    return driver.execute_script(READ_PAGE)


def open_dashboard(driver: webdriver.Chrome, url: str) -> dict:
    """Open the dashboard and wait for its first successful refresh; the page as read."""
    driver.get_log("browser")  # forget what earlier pages logged
    driver.get(url)
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_element(By.ID, "last-refresh").get_dom_attribute("data-updated")
        is not None)
    return read_page(driver)


def decoded(raw: str | None, like: Any) -> Any:
    """A ``data-value`` attribute as the JSON value it stands for (``like`` gives the type)."""
    if raw is None:
        return None
    if isinstance(like, bool):
        return {"true": True, "false": False}.get(raw, raw)
    if isinstance(like, list):
        return [None if bound == "" else float(bound) for bound in raw.split(",")]
    if isinstance(like, (int, float)):
        return float(raw)
    return raw


PAIR_CELLS = {  # cell class -> (JSON key, formatting)
    "wins": ("wins", format_int),
    "losses": ("losses", format_int),
    "ties": ("ties", format_int),
    "win-rate": ("win_rate", format_rate),
    "interval": ("interval", format_interval),
    "p-value": ("p_value", format_p),
    "always-valid-p": ("always_valid_p", format_p),
    "significant": ("significant", format_bool),
    "winner": ("winner", format_text),
}


def pair_mismatches(page: dict, status: dict) -> list[str]:
    """How the page's pairs table differs from the status document (empty when it agrees)."""
    problems = []
    rows = {row["arms"]: row for row in page["pairs"]}
    if len(rows) != len(status["pairs"]):
        problems.append(f"{len(rows)} pair rows for {len(status['pairs'])} pairs")
    for pair in status["pairs"]:
        key = "|".join(pair["arms"])
        row = rows.get(key)
        if row is None:
            problems.append(f"no row for the pair {key}")
            continue
        for css, (name, formatted) in PAIR_CELLS.items():
            cell = row["cells"].get(css)
            if cell is None:
                problems.append(f"{key}: no {css} cell")
                continue
            if decoded(cell["value"], pair[name]) != pair[name]:
                problems.append(f"{key}: {css} data-value {cell['value']!r} for {pair[name]!r}")
            if cell["text"] != formatted(pair[name]):
                problems.append(f"{key}: {css} shows {cell['text']!r} for {pair[name]!r}")
    return problems


def _html_cells(row: str) -> list[str]:
    """The texts of an HTML report row's cells, as a reader sees them."""
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", inner)).split())
            for inner in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.DOTALL)]


def renderings_disagree(page: dict, status: dict) -> list[str]:
    """How the dashboard as read differs from the terminal table and the HTML report of the
    same status document: every pair's and arm's cells, and every verdict's sentence
    (empty when all three say the same)."""
    console = Console(record=True, width=1000, file=io.StringIO())
    render_table(status, console)
    terminal = console.export_text()
    report_html = html_report(status)
    problems = []
    rows = [(f'<tr data-arms="{html.escape(row["arms"])}">', row) for row in page["pairs"]] + \
        [(f'<tr data-arm="{html.escape(row["arm"])}">', row) for row in page["arms"]]
    for start, row in rows:
        shown = row["texts"]
        if table_row(terminal, shown[0]) != shown:
            problems.append(f"terminal {table_row(terminal, shown[0])} != dashboard {shown}")
        at = report_html.find(start)
        found = _html_cells(report_html[at:report_html.index("</tr>", at)]) if at >= 0 else []
        if found != shown:
            problems.append(f"HTML report {found} != dashboard {shown}")
    lines = {" ".join(line.split()) for line in terminal.splitlines()}
    items = dict(re.findall(r'<li class="[^"]*" data-arms="([^"]*)">(.*?)</li>', report_html))
    for verdict in page["verdicts"]:
        if verdict["text"] not in lines:
            problems.append(f"the terminal does not say {verdict['text']!r}")
        if html.unescape(items.get(html.escape(verdict["arms"]), "")) != verdict["text"]:
            problems.append(f"the HTML report does not say {verdict['text']!r}")
    if len(page["verdicts"]) != len(status["pairs"]):
        problems.append(f"{len(page['verdicts'])} verdicts for {len(status['pairs'])} pairs")
    return problems


def settled(driver: webdriver.Chrome, get_status: Callable[[], dict]) -> tuple[dict, dict]:
    """The live status and the page once they agree (the page refreshes on its own), or the
    last of both after a while, for the assertions to report the difference."""
    deadline = time.monotonic() + WAIT
    while True:
        status = get_status()
        page = read_page(driver)
        if not pair_mismatches(page, status) or time.monotonic() > deadline:
            return status, page
        time.sleep(0.2)


def severe_console_entries(driver: webdriver.Chrome) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


# ---- the tests ----

def test_dashboard_shows_the_status_document(driver, experiment_server):
    base_url, get_status = experiment_server
    open_dashboard(driver, base_url + "/dashboard?refresh=1")
    status, page = settled(driver, get_status)
    assert status["pairs"], "the experiment has no pairs to show"

    assert pair_mismatches(page, status) == []
    assert all(row["forest"] == 1 for row in page["pairs"])
    assert page["error"] is None
    assert page["name"] == status["experiment"]
    assert page["mode"] == status["mode"]
    assert page["status"] == status["status"]

    arms = {row["arm"]: row["cells"] for row in page["arms"]}
    assert list(arms) == list(status["arms"])
    for label, arm in status["arms"].items():
        for css, name in (("model-version", "model_version"), ("impressions", "impressions")):
            assert arms[label][css]["text"] == format_int(arm[name])
            assert decoded(arms[label][css]["value"], arm[name]) == arm[name]
        assert arms[label]["learned"]["text"] == format_learned(arm)
        for key, metric in arm["metrics"].items():
            cell = arms[label][key.replace("_", "-")]
            value = metric["value"] if metric else None
            assert cell["text"].split(" ")[0] == format_rate(value)
    # what the results say about the arms in words, warnings marked as such
    assert page["notes"] == [{"arm": note["arm"], "kind": note["kind"], "text": note["text"]}
                             for note in status["notes"]]
    assert any(note["kind"] == "warning" for note in page["notes"])
    # the traffic share, and the promotions and holds, newest first
    assert page["traffic"] == format_traffic(status)
    assert [row["action"] for row in page["history"]] == \
        [entry["action"] for entry in reversed(status["history"])]
    for row, entry in zip(page["history"], reversed(status["history"]), strict=True):
        assert row["cells"]["at"]["text"] == format_time(entry["at"])
        assert row["cells"]["arm"]["text"] == entry["arm"]
        assert row["cells"]["impressions"]["text"] == format_int(entry["impressions"])
        assert row["cells"]["because"]["text"] == entry["because"]

    with_curve = [label for label, arm in status["arms"].items()
                  if any(point["value"] is not None for point in arm["curve"])]
    assert sorted(page["curves"]) == sorted(with_curve)
    assert sorted(page["legend"]) == sorted(with_curve)
    assert page["ticks"] >= 4
    assert severe_console_entries(driver) == []


def test_dashboard_formats_the_canned_numbers(driver, experiment_server):
    """The formatting rules on known values of the canned document, without the helpers."""
    base_url, _ = experiment_server
    page = open_dashboard(driver, base_url + "/dashboard")
    rows = {row["arms"]: row["cells"] for row in page["pairs"]}
    first = {css: cell["text"] for css, cell in rows["perceptron|engine"].items()
             if css != "forest-cell"}
    assert first == {"arms": "perceptron vs engine", "wins": "300", "losses": "200",
                     "ties": "150", "win-rate": "0.600", "interval": "[0.560, 0.640]",
                     "p-value": "<0.001", "always-valid-p": "<0.001", "significant": "yes",
                     "winner": "perceptron"}
    second = rows["coactive|engine"]
    assert second["interval"]["text"] == "[0.313, 0.789]"
    assert second["interval"]["value"] == "0.3125,0.7890625"
    assert second["always-valid-p"] == {"text": DASH, "value": None}
    assert second["significant"] == {"text": "no", "value": "false"}
    assert second["winner"] == {"text": DASH, "value": None}
    arms = {row["arm"]: row["cells"] for row in page["arms"]}
    assert arms["engine"]["clicks-at-3"]["text"] == "0.438 [0.410, 0.460]"
    assert arms["engine"]["abandonment"]["text"] == "0.350"
    assert arms["coactive"]["mrr"]["text"] == DASH
    assert page["traffic"] == "35% of 3521 searches (2287 outside the experiment; " \
                              "configured share 0.35)"
    assert page["history"][0]["cells"]["impressions"]["text"] == "1100"
    assert severe_console_entries(driver) == []


def test_dashboard_terminal_and_html_report_say_the_same(driver, experiment_server,
                                                         advance_experiment):
    """One experiment state, one report model, three renderings: the dashboard in Chromium,
    the terminal table and the HTML report show the same numbers, verdicts and sentences,
    before and after the experiment moves on."""
    base_url, get_status = experiment_server
    open_dashboard(driver, base_url + "/dashboard?refresh=1")
    for moved in (False, True):
        if moved:
            advance_experiment()
        status, page = settled(driver, get_status)
        assert pair_mismatches(page, status) == []
        assert renderings_disagree(page, status) == []
        model = build_report(status)
        assert [(v["arms"], v["verdict"]) for v in page["verdicts"]] == \
            [("|".join(pair.arms), pair.verdict) for pair in model.pairs]
    assert {verdict["verdict"] for verdict in page["verdicts"]} >= {"beats", "ahead"}
    assert severe_console_entries(driver) == []


def test_dashboard_follows_the_experiment(driver, experiment_server, advance_experiment):
    base_url, get_status = experiment_server
    before = open_dashboard(driver, base_url + "/dashboard?refresh=1")
    advance_experiment()
    status = get_status()
    pair = status["pairs"][0]
    key = "|".join(pair["arms"])
    shown = {row["arms"]: row["cells"]["wins"]["text"] for row in before["pairs"]}
    assert shown[key] != format_int(pair["wins"]), "the experiment did not move on"

    def shows_new_wins(d: webdriver.Chrome) -> bool:
        rows = {row["arms"]: row for row in read_page(d)["pairs"]}
        return key in rows and rows[key]["cells"]["wins"]["text"] == format_int(pair["wins"])

    WebDriverWait(driver, WAIT, poll_frequency=0.1).until(shows_new_wins)
    page = read_page(driver)
    assert int(page["fetches"]) > int(before["fetches"])
    assert page["error"] is None
    assert severe_console_entries(driver) == []


def test_dashboard_shows_a_failing_server(driver, failing_server):
    driver.get_log("browser")
    driver.get(failing_server + "/dashboard")
    error = driver.find_element(By.ID, "error")
    WebDriverWait(driver, WAIT).until(lambda d: error.is_displayed())
    assert "500" in error.text and "x" in error.text
    stamp = driver.find_element(By.ID, "last-refresh")
    assert stamp.get_dom_attribute("data-updated") is None
    assert driver.find_elements(By.CSS_SELECTOR, "#pairs tbody tr[data-arms]") == []


def test_dashboard_shows_labels_as_text(driver, hostile_server):
    base_url, status = hostile_server
    page = open_dashboard(driver, base_url + "/dashboard")
    label = status["experiment"]
    assert page["name"] == label
    assert f"coactive|{label}" in {row["arms"] for row in page["pairs"]}
    assert label in {row["arm"] for row in page["arms"]}
    assert driver.find_elements(By.CSS_SELECTOR, "main img, header img") == []
    assert driver.title != "1"
    assert severe_console_entries(driver) == []


def test_dashboard_of_a_running_experiment_reads_what_experiments_returns(driver, workdir,
                                                                           corpus):
    """The real service: an interleaved experiment with its trainer running while simulated
    users search and click; the page served by the service shows the numbers the service's
    ``/experiments`` returns, and follows them as traffic flows."""
    from conftest import LiveServer
    from test_experiments import ENGINE, RANDOM, experiment_config, users_search

    from reranker.api.app import start_trainer

    server = LiveServer(experiment_config(workdir, arms={"engine": ENGINE, "random": RANDOM},
                                          window=20, trainer={"feedback_window": 0.5}))
    _, stop = start_trainer(server.service, 0.05)
    try:
        users_search(server, corpus, 60)
        time.sleep(1.0)  # the trainer closes the impressions (feedback window 0.5 s)

        def get_status() -> dict:
            return server.get("/experiments").json()

        before = open_dashboard(driver, server.url + "/dashboard?refresh=1")
        status, page = settled(driver, get_status)
        assert status["impressions"] >= 40 and status["pairs"][0]["wins"] > 0
        assert pair_mismatches(page, status) == []
        arms = {row["arm"]: row["cells"] for row in page["arms"]}
        for label, arm in status["arms"].items():
            assert arms[label]["impressions"]["text"] == format_int(arm["impressions"])
            assert arms[label]["model-version"]["text"] == format_int(arm["model_version"])
        assert sorted(page["curves"]) == ["engine", "random"]
        users_search(server, corpus, 40, seed=1)  # more traffic: the page moves on
        time.sleep(1.0)
        status, page = settled(driver, get_status)
        assert status["impressions"] >= 80 and pair_mismatches(page, status) == []
        assert renderings_disagree(page, status) == []
        assert int(page["fetches"]) > int(before["fetches"])
        assert severe_console_entries(driver) == []
    finally:
        stop.set()
        server.stop()


def test_dashboard_behind_the_operator_token_shows_traffic_and_the_guards_holds(driver,
                                                                               workdir,
                                                                               corpus):
    """The real service with security.reports_access: operator. Without the token the page
    is refused with a Basic challenge; with it (the browser sending it, as it does once the
    user typed it) the page shows the share of the searches the experiment counted and
    the guard's hold of the losing arm, as /experiments says."""
    from conftest import LiveServer, write_config
    from test_experiments import ENGINE, RANDOM, users_search

    path = write_config(workdir, experiment={
        "mode": "interleave", "name": "trial", "arms": {"engine": ENGINE, "random": RANDOM},
        "share": 0.5, "promote": "auto", "control": "engine", "min_impressions": 50,
        "min_duration": 0}, security={"reports_access": "operator"},
        server={"admin_token": "ops-token"})
    server = LiveServer(path)
    try:
        users_search(server, corpus, 300)
        server.service.trainer.run_once(close_all=True)
        server.service.trainer.run_pass()  # the guard runs after each training pass
        token = {"Authorization": "Bearer ops-token"}
        status = server.get("/experiments", headers=token).json()
        assert status["held"] == ["random"]
        traffic = status["traffic"]
        assert traffic["searches"] == 300 and 100 < traffic["in_experiment"] < 200
        assert traffic["outside"] == 300 - traffic["in_experiment"]
        assert status["history"][-1]["action"] == "held"

        driver.get(server.url + "/dashboard")
        assert driver.find_elements(By.ID, "experiment-name") == []  # refused: no page
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": token})
        try:
            page = open_dashboard(driver, server.url + "/dashboard")
        finally:
            driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
        assert page["error"] is None
        assert page["traffic"] == format_traffic(status)
        assert page["traffic"].endswith(f"of 300 searches ({traffic['outside']} outside the "
                                        f"experiment; configured share 0.5)")
        (held,) = page["history"]
        assert held["action"] == "held" and held["cells"]["arm"]["text"] == "random"
        assert held["cells"]["because"]["text"].startswith("lost to engine (win rate ")
        assert held["cells"]["impressions"]["text"] == format_int(
            status["history"][-1]["impressions"])
    finally:
        server.stop()
