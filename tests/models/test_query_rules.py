"""Query rules on their own: which searches a rule matches, where pins land, the file."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from reranker.core.errors import BadRequestError, ModelStoreError, NotFoundError
from reranker.models.rules import RELOAD_SECONDS, Rule, RuleBook, ServedRules, plan_for


@pytest.mark.parametrize("match, query, matched, missed", [
    ("is", "Summer Sale!", ["summer sale", "SUMMER   sale."], ["summer sale shoes", "sale"]),
    ("contains", "summer sale", ["big summer sale now", "summer sale"], ["summer", "sale summer"]),
    ("starts_with", "summer", ["summer dress", "Summer"], ["late summer", "summertime"]),
])
def test_a_rule_matches_searches_by_their_words(match, query, matched, missed):
    rule = Rule("r1", query, match, hide=("d1",))
    for text in matched:
        assert plan_for([rule], text).rules == [rule], text
    for text in missed:
        assert not plan_for([rule], text), text


def test_pins_land_at_their_ranks_and_the_rest_keep_their_order():
    ids = [f"d{i}" for i in range(6)]
    ranking = np.array([5, 4, 3, 2, 1, 0])
    plan = plan_for([Rule("r1", "q", pins=(("d0", 1), ("d3", 4)))], "q")
    pinned, ranks = plan.pin(ranking, ids)
    assert [ids[i] for i in pinned] == ["d0", "d5", "d4", "d3", "d2", "d1"]
    assert ranks == {"d0": 1, "d3": 4}
    # a rank beyond the candidates puts the document last; an absent document is no pin
    plan = plan_for([Rule("r1", "q", pins=(("d5", 50), ("zz", 1)))], "q")
    pinned, ranks = plan.pin(ranking, ids)
    assert [ids[i] for i in pinned] == ["d4", "d3", "d2", "d1", "d0", "d5"]
    assert ranks == {"d5": 6}
    described = plan.describe(ranks)[0]["pin"]
    assert described[0] == {"id": "d5", "rank": 50, "shown_at": 6}
    assert "nor found by its id" in described[1]["not_applied"]


def test_exact_rules_come_first_then_older_ones():
    ids = ["a", "b", "c", "d"]
    rules = [Rule("r1", "tea", "contains", pins=(("a", 1), ("b", 2))),
             Rule("r2", "green tea", "is", pins=(("c", 1), ("a", 3)), hide=("d",))]
    plan = plan_for(rules, "green tea")
    assert [r.id for r in plan.rules] == ["r2", "r1"]
    ranking, ranks = plan.pin(np.arange(4), ids)
    # r2 pins c at 1 and a at 3; r1's pin of a loses to r2's; its b at 2 holds
    assert ranks == {"c": 1, "b": 2, "a": 3}
    assert plan.hidden == {"d"}
    r1 = plan.describe(ranks)[1]["pin"]
    assert r1[0]["not_applied"] == "pinned by rule r2" and r1[1]["shown_at"] == 2
    # two pins of one rank: the first rule's takes it, the next the rank below
    plan = plan_for([Rule("r1", "q", pins=(("c", 1),)), Rule("r2", "q", pins=(("d", 1),))], "q")
    ranking, ranks = plan.pin(np.arange(4), ids)
    assert ranks == {"c": 1, "d": 2} and list(ranking) == [2, 3, 0, 1]


def test_the_book_adds_and_removes_and_never_reuses_an_id(tmp_path):
    book = RuleBook(tmp_path / "models")
    assert book.read() == []
    first = book.add("tea", pins=[("d1", 1)], note="launch")
    second = book.add("coffee", match="starts_with", hide=["d2"])
    assert [r.id for r in book.read()] == ["r1", "r2"] and first.note == "launch"
    book.remove("r2")
    assert book.add("kettle", hide=["d3"]).id == "r3"  # r2 is gone, its id is not reused
    assert [r.query for r in book.read()] == ["tea", "kettle"]
    assert second.match == "starts_with"
    with pytest.raises(NotFoundError, match="no query rule 'r9'.*rules: r1, r3"):
        book.remove("r9")


@pytest.mark.parametrize("kwargs, problem", [
    ({"pins": [("d1", 1), ("d1", 2)]}, "pins a document twice"),
    ({"pins": [("d1", 1), ("d2", 1)]}, "pins two documents at one rank"),
    ({"pins": [("d1", 1)], "hide": ["d1"]}, "both pins and hides 'd1'"),
    ({}, "neither pins nor hides"),
    ({"pins": [("d1", 0)]}, "must be an integer from 1"),
    ({"match": "like", "hide": ["d1"]}, "match must be one of is, contains, starts_with"),
])
def test_a_bad_rule_is_refused_naming_the_problem(tmp_path, kwargs, problem):
    book = RuleBook(tmp_path)
    with pytest.raises(BadRequestError, match=problem):
        book.add("tea", **kwargs)
    assert book.read() == []
    with pytest.raises(BadRequestError, match="at least one word"):
        book.add("?!", hide=["d1"])


@pytest.mark.parametrize("content, problem", [
    ("{not json", "is not a rules file"),
    ('{"format": 2, "rules": []}', "must be {\"format\": 1"),
    ('{"format": 1, "rules": [{"id": "r1", "query": "tea", "pin": [{"id": "a", "rank": -1}]}]}',
     "rules\\[0\\]: the rank of 'a' must be an integer from 1"),
    ('{"format": 1, "rules": [{"id": "r1", "query": "t", "hide": ["a"]}, '
     '{"id": "r1", "query": "u", "hide": ["b"]}]}', "two rules have one id"),
])
def test_a_damaged_file_is_named_and_the_served_rules_are_kept(tmp_path, content, problem,
                                                               caplog):
    book = RuleBook(tmp_path)
    book.add("tea", pins=[("d1", 1)])
    served = ServedRules(tmp_path).load()
    assert served.plan("tea").pins == [("d1", 1, "r1")]
    book.path.write_text(content, encoding="utf-8")
    with pytest.raises(ModelStoreError, match=problem) as caught:
        book.read()
    assert str(book.path) in str(caught.value)
    served._checked -= RELOAD_SECONDS  # (as a second later)
    assert served.plan("tea").pins == [("d1", 1, "r1")]  # the last good rules keep applying
    assert served.error is not None and str(book.path) in served.error
    assert any(str(book.path) in r.getMessage() for r in caplog.records)
    with pytest.raises(ModelStoreError):  # a service starting on it refuses, naming it
        ServedRules(tmp_path).load()


def test_a_serving_process_reads_a_change_within_a_second(tmp_path):
    book = RuleBook(tmp_path)
    served = ServedRules(tmp_path).load()
    assert not served.plan("tea")
    book.add("tea", hide=["d1"])
    stat = book.path.stat()
    os.utime(book.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    served._checked -= RELOAD_SECONDS
    assert served.plan("tea").hidden == {"d1"}
    assert json.loads(book.path.read_text())["last"] == 1
