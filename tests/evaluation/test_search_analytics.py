"""Search analytics on a store filled with known pages and clicks, on SQLite and a real
PostgreSQL server (the ``store`` fixture): every figure, the lists, the window, the arm and
the batches the store reads them in."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reranker.core.errors import BadRequestError
from reranker.evaluation.analytics import (
    SECTIONS,
    arm_names,
    check_window,
    moved_from_engine,
    search_analytics,
)
from tests.support.analytics import DAY, ESPRESSO, TEA, ZZZ, fill_pages

NOW = 1_000_000.0


def test_the_figures_of_a_known_window(store):
    fill_pages(store, NOW)
    report = search_analytics(store, 7, now=NOW).to_dict()
    assert report["totals"] == {"searches": 4, "pages": 5, "clicks": 4, "ctr": 0.75,
                                "mean_click_rank": 2.5, "no_result": 1, "no_click": 1,
                                # (2.4 + 0 + 5.2) / 3
                                "moved": round(7.6 / 3, 4), "queries": 3}
    assert report["top_queries"] == [TEA, ESPRESSO, ZZZ]
    assert report["no_result"] == [ZZZ]
    assert report["no_click"] == [TEA]
    assert report["moved"] == [ESPRESSO, TEA]
    assert report["click_ranks"] == [{"rank": 1, "clicks": 2}, {"rank": 2, "clicks": 0},
                                     {"rank": 3, "clicks": 1}, {"rank": 4, "clicks": 0},
                                     {"rank": 5, "clicks": 1}]
    assert (report["since"], report["until"], report["days"]) == (
        "1970-01-05T13:46:40Z", "1970-01-12T13:46:40Z", 7)
    assert json.loads(json.dumps(report, allow_nan=False)) == report


def test_an_arm_a_longer_window_and_the_top(store):
    fill_pages(store, NOW)
    arm_a = search_analytics(store, 7, arms=("a",), arm="A", now=NOW).to_dict()
    assert arm_a["arm"] == "A"
    assert [(q["query"], q["searches"], q["pages"], q["clicks"]) for q in arm_a["top_queries"]] \
        == [("tea kettle", 1, 2, 3)]
    assert arm_a["totals"]["no_result"] == 0  # the empty page was a mixed list (arm None)
    longer = search_analytics(store, 8.5, now=NOW, top=1).to_dict()
    assert longer["totals"]["searches"] == 5 and longer["totals"]["clicks"] == 5
    assert [q["query"] for q in longer["top_queries"]] == ["tea kettle"]
    assert all(len(longer[section.key]) <= 1 for section in SECTIONS)
    assert search_analytics(store, 1, now=NOW - 5 * DAY).to_dict()["totals"]["pages"] == 0


def test_pages_are_read_a_batch_at_a_time(store, monkeypatch):
    fill_pages(store, NOW)
    whole = search_analytics(store, 7, now=NOW).to_dict()
    monkeypatch.setattr("reranker.stores.sql.PAGE_BATCH", 2)
    assert search_analytics(store, 7, now=NOW).to_dict() == whole


def test_an_empty_store_has_nothing_to_show(store):
    report = search_analytics(store, 7).to_dict()
    assert report["totals"]["pages"] == 0 and report["totals"]["ctr"] is None
    assert report["top_queries"] == [] and report["click_ranks"] == []


def test_moved_is_the_mean_displacement_of_the_served_top():
    assert moved_from_engine(np.arange(20)) == 0.0
    assert moved_from_engine(np.array([1, 0, 2])) == pytest.approx(2 / 3)
    # only the top 10 count: a deep result brought to the top moves far
    assert moved_from_engine(np.array([30, *range(29)])) == pytest.approx((30 + 9) / 10)
    assert moved_from_engine(np.array([], dtype=int)) is None


@pytest.mark.parametrize("days, top, field", [
    (0, 5, "days"), (-1, 5, "days"), ("x", 5, "days"), (float("inf"), 5, "days"),
    (7, 0, "top"), (7, 1001, "top"), (7, "many", "top")])
def test_a_bad_window_names_its_field(days, top, field):
    with pytest.raises(BadRequestError) as caught:
        check_window(days, top)
    assert caught.value.field == field


def test_the_defaults_and_the_arm_labels():
    assert check_window(None, None) == (7.0, 20)
    assert check_window("0.5", "3") == (0.5, 3)

    class Arm:
        def __init__(self, labels, names):
            self.labels, self._names = labels, names

        def names(self):
            return self._names

    arms = [Arm(["engine"], ("backend_order-1",)), Arm(["learned"], ("pp-2", "pp-1"))]
    assert arm_names(arms, None) is None
    assert arm_names(arms, "learned") == ("pp-2", "pp-1")
    with pytest.raises(BadRequestError, match="configured arms: engine, learned") as caught:
        arm_names(arms, "nope")
    assert caught.value.field == "arm"
