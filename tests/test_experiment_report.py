"""The experiment report: the model's number formatting and verdicts, the terminal table and
the standalone HTML report that render it, and the dashboard page as a package resource."""

from __future__ import annotations

import copy
import io
import re

import pytest
from experiment_documents import canned_status
from rich.console import Console

from reranker.experiments import report, report_model
from reranker.experiments.report_model import (
    DASH,
    format_bool,
    format_int,
    format_interval,
    format_p,
    format_rate,
    format_text,
)

#: A realistic status document (three arms, two pairs, some values not known yet), the one
#: the browser tests show too.
STATUS = canned_status()


#: An experiment that has not seen any traffic yet.
EMPTY = {
    "experiment": "fresh", "mode": "split", "status": "not started", "alpha": 0.05,
    "test": "mixture sequential probability ratio test (always valid)", "impressions": 0,
    "updated": None, "promoted": None,
    "arms": {
        "a": {"id": None, "learner": "preference_perceptron", "params": {},
              "model_version": None, "impressions": 0, "clicks": 0, "credited_clicks": 0,
              "status": "serving", "metrics": {"clicks_per_search": None, "mrr": {"value": None,
                                                                     "interval": None}},
              "curve": []},
        "b": {"id": None, "learner": "backend_order", "params": {}, "model_version": None,
              "impressions": None, "clicks": None, "credited_clicks": None, "status": None,
              "metrics": {}, "curve": [{"impressions": 50, "value": None}]},
    },
    "pairs": [],
}


def recorded(status: dict) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    report.render_table(status, console)
    return console.export_text()


def table_row(text: str, first_cell: str) -> list[str]:
    """The cells of the terminal table row whose first cell is ``first_cell``, with the
    lines the row continues on (a measure's interval) joined by a space."""
    row: list[str] | None = None
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if row is not None:
            if len(cells) != len(row) or cells[0]:
                return row
            row = [" ".join(part for part in pair if part) for pair in zip(row, cells, strict=True)]
        elif cells and cells[0] == first_cell:
            row = cells
    if row is None:
        raise AssertionError(f"no row {first_cell!r} in:\n{text}")
    return row


# ---- formatting ----

@pytest.mark.parametrize(("value", "expected"), [
    (0.6, "0.600"), (1, "1.000"), (0.12345, "0.123"), (0.3125, "0.313"), (0.4375, "0.438"),
    (-0.0, "0.000"), (None, DASH), (float("nan"), DASH), ("0.5", DASH), (True, DASH),
])
def test_format_rate(value, expected):
    assert format_rate(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (0.00001, "<0.001"), (0.0009999, "<0.001"), (0.001, "0.001"), (0.0004, "<0.001"),
    (0.04321, "0.043"), (1.0, "1.000"), (0, "<0.001"), (None, DASH),
])
def test_format_p(value, expected):
    assert format_p(value) == expected


def test_format_counts_intervals_and_labels():
    assert format_int(1234) == "1234"
    assert format_int(12.0) == "12"
    assert format_int(0) == "0"
    assert format_int(None) == DASH
    assert format_int(False) == DASH
    assert format_interval([0.56, 0.64]) == "[0.560, 0.640]"
    assert format_interval((0.5625, 0.6875)) == "[0.563, 0.688]"
    assert format_interval(None) == DASH
    assert format_interval([None, 0.64]) == DASH
    assert format_interval([0.5]) == DASH
    assert format_bool(True) == "yes"
    assert format_bool(False) == "no"
    assert format_bool(None) == DASH
    assert format_text("engine") == "engine"
    assert format_text(None) == DASH
    assert report_model.format_time(1790000000.0) == "2026-09-21 14:13:20 UTC"
    assert report_model.format_measure({"value": 0.8, "interval": [0.75, 0.85]}) == \
        "0.800 [0.750, 0.850]"
    assert report_model.format_measure({"value": 0.35, "interval": None}) == "0.350"
    assert report_model.format_measure(None) == DASH
    assert report_model.css_class("clicks_at_3") == "clicks-at-3"


# ---- the terminal table ----

def test_render_table_shows_the_pairs_arms_and_test():
    text = recorded(STATUS)
    assert table_row(text, "perceptron vs engine") == [
        "perceptron vs engine", "300", "200", "150", "0.600", "[0.560, 0.640]", "<0.001",
        "<0.001", "yes", "perceptron"]
    perceptron = table_row(text, "perceptron")
    assert perceptron[1:8] == ["preference_perceptron", "12", "610/1234", "1234", "800",
                               "450", "serving"]
    assert "0.800 [0.750, 0.850]" in perceptron
    assert "0.410 [0.390, 0.430]" in perceptron
    engine = table_row(text, "engine")
    assert engine[2:8] == ["0", DASH, "1234", "700", "350", "serving"]
    assert "0.350" in engine and "0.360 [0.340, 0.380]" in engine \
        and "0.438 [0.410, 0.460]" in engine
    assert DASH in table_row(text, "coactive")  # its unknown metrics
    header = text.splitlines()[0]
    assert "guarded-rollout" in header and "interleave" in header and "1234" in header
    assert "mixture sequential probability ratio test (always valid)" in text
    assert "alpha = 0.05" in text
    assert '"Significant" uses the always-valid' in text
    # the notes on the arms, in words
    assert "not learning: arm 'coactive' (coactive) took part in 21 pages" in \
        " ".join(text.split())
    assert "perceptron started at version 9" in text
    # the traffic share, and the history newest first
    assert "Traffic: 35% of 3521 searches (2287 outside the experiment; configured share " \
        "0.35)" in text
    held = table_row(text, report_model.format_time(1789995000.0))
    assert held[1:] == ["held", "coactive", "1100", "lost to engine"]
    assert text.index("lost to engine") < text.index("held back")


def test_render_table_without_data_yet():
    text = recorded(EMPTY)
    assert "No comparisons yet." in text
    assert table_row(text, "a")[1:8] == ["preference_perceptron", DASH, DASH, "0", "0", "0",
                                         "serving"]
    assert table_row(text, "b")[2:] == [DASH] * 8
    assert "fresh" in text.splitlines()[0]


def test_render_table_survives_a_bare_document():
    text = recorded({})
    assert "No comparisons yet." in text and "No arms." in text


def test_render_table_prints_labels_literally():
    status = copy.deepcopy(STATUS)
    status["arms"]["[bold]x[/bold]"] = status["arms"].pop("engine")
    status["pairs"][0]["arms"] = ["perceptron", "[bold]x[/bold]"]
    text = recorded(status)
    assert table_row(text, "perceptron vs [bold]x[/bold]")[1] == "300"
    assert table_row(text, "[bold]x[/bold]")[1] == "backend_order"


# ---- the HTML report ----

def assert_self_contained(text: str) -> None:
    assert "http://" not in text and "https://" not in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(?!["'#]|data:)""", text), "refers elsewhere"
    assert "@import" not in text and "url(//" not in text


def test_write_html_has_the_tables_and_plots(tmp_path):
    path = report.write_html(STATUS, tmp_path / "report.html")
    assert path == tmp_path / "report.html" and path.is_file()
    text = path.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert text.count("<svg") == 2
    row = re.search(r'<tr data-arms="perceptron\|engine">(.*?)</tr>', text, re.DOTALL).group(1)
    for cell in ('<td class="wins" data-value="300">300</td>',
                 '<td class="losses" data-value="200">200</td>',
                 '<td class="ties" data-value="150">150</td>',
                 '<td class="win-rate" data-value="0.6">0.600</td>',
                 '<td class="interval" data-value="0.56,0.64">[0.560, 0.640]</td>',
                 '<td class="p-value" data-value="1e-05">&lt;0.001</td>',
                 '<td class="always-valid-p" data-value="0.0004">&lt;0.001</td>',
                 '<td class="significant yes" data-value="true">yes</td>',
                 '<td class="winner text" data-value="perceptron">perceptron</td>'):
        assert cell in row
    arm = re.search(r'<tr data-arm="engine">(.*?)</tr>', text, re.DOTALL).group(1)
    assert '<td class="model-version" data-value="0">0</td>' in arm
    assert '<td class="impressions" data-value="1234">1234</td>' in arm
    assert 'class="clicks-at-3 measure"' in arm and "0.438" in arm
    assert "guarded-rollout" in text and "always-valid" in text
    assert '<td class="learned" data-value="610">610/1234</td>' in text
    assert '<li class="warning" data-arm="coactive">not learning: arm &#x27;coactive&#x27;' \
        in text
    history = re.search(r'<table id="history">(.*?)</table>', text, re.DOTALL).group(1)
    rows = re.findall(r'<tr data-action="([^"]+)">(.*?)</tr>', history, re.DOTALL)
    assert [action for action, _ in rows] == ["held", "held back"]
    assert '<td class="impressions" data-value="1100">1100</td>' in rows[0][1]
    assert '<dd id="experiment-traffic">35% of 3521 searches (2287 outside the experiment; ' \
        "configured share 0.35)</dd>" in text


def test_write_html_without_data_yet(tmp_path):
    text = report.write_html(EMPTY, str(tmp_path / "empty.html")).read_text(encoding="utf-8")
    assert_self_contained(text)
    assert "No comparisons yet." in text
    assert "No promotion or hold yet." in text
    assert "no pairs compared yet" in text and "no curve data yet" in text
    assert '<tr data-arm="b">' in text
    assert text.count("<svg") == 2


def test_write_html_escapes_every_text(tmp_path):
    status = copy.deepcopy(STATUS)
    hostile = '<script>alert("x")</script>$_a$'
    status["experiment"] = hostile
    status["arms"][hostile] = status["arms"].pop("engine")
    status["pairs"][0]["arms"] = ["perceptron", hostile]
    status["pairs"][0]["winner"] = hostile
    text = report.write_html(status, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<script" not in text
    assert "&lt;script&gt;" in text
    assert_self_contained(text)


# ---- the dashboard page ----

def test_dashboard_page_is_one_self_contained_page():
    page = report.dashboard_page()
    assert page.lstrip().lower().startswith("<!doctype html>")
    assert_self_contained(page)
    assert "innerHTML" not in page and "outerHTML" not in page and "insertAdjacentHTML" not in page
    for element in ('id="pairs"', 'id="arms"', 'id="curves"', 'id="last-refresh"', 'id="error"'):
        assert element in page
    assert 'new URL("experiments", window.location.href)' in page


# ---- the verdicts ----

def compared(outcomes: list[int]) -> dict:
    """A pair of arms a and b as the status document has it, from its outcomes."""
    from reranker.experiments.stats import compare

    result = compare(outcomes).to_dict()
    winner = result["winner"]
    return {"arms": ["a", "b"], **result, "winner": None if winner is None else "ab"[winner]}


def test_verdicts_follow_the_comparison():
    assert report_model.verdict(compared([0, 0]), 0.05)[:2] == ("undecided", None)
    assert report_model.verdict(compared([1, -1, 0]), 0.05)[:2] == ("even", None)
    kind, leader, sentence = report_model.verdict(compared([-1, -1, -1, 1]), 0.05)
    assert (kind, leader) == ("ahead", "b")
    assert sentence.startswith("b is ahead of a") and "not yet significant" in sentence
    losing = compared([-1] * 60)
    assert losing["significant"]
    kind, leader, sentence = report_model.verdict(losing, 0.05)
    assert (kind, leader) == ("beats", "b")
    assert sentence.startswith("b beats a") and "not" not in sentence


def test_each_pairs_sentence_has_the_numbers_of_its_row():
    model = report_model.build_report(STATUS)
    assert [pair.verdict for pair in model.pairs] == ["beats", "ahead"]
    for pair in model.pairs:
        cells = {cell.css.split()[0]: cell.text for cell in pair.cells}
        assert f"{cells['win-rate']}, 95% interval {cells['interval']}" in pair.sentence
        assert f"always-valid p {cells['always-valid-p']}" in pair.sentence
    text = " ".join(recorded(STATUS).split())
    assert all(pair.sentence in text for pair in model.pairs)
