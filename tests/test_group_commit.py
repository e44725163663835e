"""Clicks that share a commit (group commit), on SQLite and a real PostgreSQL server: every
click gets its own exact answer, and each caller returns only after the commit holding its
click; and the trainer's leadership, which one process of many holds."""

import threading
import time

import pytest
from test_events import impression

from reranker.core.errors import ConflictError, NotFoundError, StoreError, UnprocessableError
from reranker.features.clicks import click_lifts
from reranker.stores.events import ClickResult
from reranker.stores.group_commit import GroupCommit


def test_writes_that_queue_during_a_commit_share_the_next_one():
    """The first write is committed alone; the three that arrive while it is being written
    go together into the next batch, and each caller gets its own outcome."""
    release = threading.Event()
    batches = []

    def write_batch(items):
        batches.append(list(items))
        if len(batches) == 1:
            release.wait(10)
        return [ValueError(item) if item == "bad" else item.upper() for item in items]

    group = GroupCommit(write_batch)
    results = {}

    def submit(item):
        try:
            results[item] = group.submit(item)
        except ValueError as exc:
            results[item] = exc

    first = threading.Thread(target=submit, args=("a",))
    first.start()
    while not batches:
        time.sleep(0.001)
    others = [threading.Thread(target=submit, args=(item,)) for item in ("b", "bad", "d")]
    for thread in others:
        thread.start()
    while len(group._queue) < 3:
        time.sleep(0.001)
    assert results == {}  # nobody is answered before the commit that holds their write
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert [len(batch) for batch in batches] == [1, 3]
    assert results["a"] == "A" and results["b"] == "B" and results["d"] == "D"
    assert isinstance(results["bad"], ValueError)


def test_a_failed_commit_fails_every_write_in_it():
    group = GroupCommit(lambda items: (_ for _ in ()).throw(StoreError("disk full")))
    with pytest.raises(StoreError, match="disk full"):
        group.submit("x")
    assert group.batches == 1


def test_clicks_in_one_transaction_keep_their_own_answers(store):
    """404, 422, 409, a duplicate (also within the batch) and new clicks, written together."""
    store.log_impression(impression("open", 1.0))
    store.log_impression(impression("closed", 0.5))
    store.record_click("closed", "d3")
    store.close_impressions(before=0.9)
    outcomes = store.record_clicks([("open", "d4", 2.0), ("nope", "d4", 2.0),
                                    ("open", "d0", 2.0), ("closed", "d4", 2.0),
                                    ("closed", "d3", 2.0), ("open", "d4", 2.0),
                                    ("open", "d3", 2.0)])
    assert outcomes[0] == ClickResult("open", "d4", 1, duplicate=False)
    assert isinstance(outcomes[1], NotFoundError) and "'nope'" in outcomes[1].message
    assert isinstance(outcomes[2], UnprocessableError)  # d0 was not shown
    assert isinstance(outcomes[3], ConflictError)  # a new click on a closed page
    assert outcomes[4] == ClickResult("closed", "d3", 2, duplicate=True)
    assert outcomes[5] == ClickResult("open", "d4", 1, duplicate=True)
    assert outcomes[6] == ClickResult("open", "d3", 2, duplicate=False)
    assert store.get_impression("open").clicked == ["d4", "d3"]
    assert store.stats()["clicks"] == 3


def test_concurrent_clicks_are_all_stored_once_with_exact_errors(store, open_store):
    """Sixteen threads click at once through two store objects (as two processes would):
    every new click is stored once and counted once; the bad ones get their own errors."""
    pages = [f"p{i}" for i in range(40)]
    for page in pages:
        store.log_impression(impression(page, 1.0, n=10, shown=5))
    store.flush()  # written behind: another object sees them once written
    other = open_store()
    outcomes, lock = [], threading.Lock()
    clicks = [(page, f"d{d}") for page in pages for d in range(5, 10)]  # the shown ones
    clicks += [("unknown", "d9")] * 8 + [(pages[0], "d0")] * 8 + clicks[:40]  # errors, repeats

    def click(chunk, target):
        for impression_id, doc_id in chunk:
            try:
                outcome = target.record_click(impression_id, doc_id)
            except (NotFoundError, UnprocessableError) as exc:
                outcome = exc
            with lock:
                outcomes.append(((impression_id, doc_id), outcome))

    threads = [threading.Thread(target=click, args=(clicks[i::16], (store, other)[i % 2]))
               for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == len(clicks)
    for (impression_id, doc_id), outcome in outcomes:
        if impression_id == "unknown":
            assert isinstance(outcome, NotFoundError)
        elif doc_id == "d0":
            assert isinstance(outcome, UnprocessableError)
        else:
            assert isinstance(outcome, ClickResult)
    new = [o for _, o in outcomes if isinstance(o, ClickResult) and not o.duplicate]
    assert len(new) == 200 and store.stats()["clicks"] == 200
    assert click_lifts(store.click_counts("q", ["d5"]), 5.0).shape == (1, 2)
