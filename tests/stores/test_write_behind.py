"""Impressions written behind the search: the queue and its writer thread, the count cache
that keeps click features exact within a process, and clicks that reach another process
before their impression is written."""

import dataclasses
import threading
import time

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.core.errors import StoreError
from reranker.features.clicks import click_lifts, lifts_from_counts, query_key
from reranker.serving.service import RerankerService
from reranker.stores.count_cache import ALL_DOCS, ALL_QUERIES, EXPOSURE, CountCache
from reranker.stores.events import Impression
from reranker.stores.write_behind import WriteBehind
from tests.support.configs import write_config
from tests.support.stores import store_rows


class Sink:
    """A batch writer that records its batches; ``gate`` holds a batch until set, ``fail``
    raises a store error while set."""

    def __init__(self):
        self.batches: list[list] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.fail = threading.Event()
        self.crash_on = None

    def __call__(self, batch):
        self.entered.set()
        self.gate.wait(10)
        if self.fail.is_set():
            raise StoreError("event store x failed: disk full")
        if self.crash_on in batch:
            raise TypeError("a bug")
        self.batches.append(list(batch))


def test_put_returns_at_once_and_what_queues_meanwhile_is_written_in_one_batch():
    sink = Sink()
    log = WriteBehind(sink, name="w", what="items")
    sink.gate.clear()
    log.put(0)
    assert sink.entered.wait(5)  # the writer has taken it, and waits at the gate
    for i in range(1, 6):
        log.put(i)  # returns at once
    assert log.pending == 6 and sink.batches == []
    sink.gate.set()
    log.flush(5)
    assert log.pending == 0
    assert sink.batches == [[0], [1, 2, 3, 4, 5]]
    assert (log.batches, log.items) == (2, 6)
    log.close(5)


def test_a_failing_store_fails_the_flush_and_loses_nothing_once_it_recovers():
    sink = Sink()
    log = WriteBehind(sink, name="w", what="items", max_pending=3)
    sink.fail.set()
    log.put("a")
    with pytest.raises(StoreError, match="disk full"):
        log.flush(5)
    log.put("b")
    log.put("c")
    with pytest.raises(StoreError, match="3 items wait for the event store"):
        log.put("d")  # beyond max_pending while it fails: refused, not queued
    sink.fail.clear()
    log.flush(5)  # asks for a try at once, which now succeeds
    assert [x for batch in sink.batches for x in batch] == ["a", "b", "c"]
    log.put("e")
    log.flush(5)
    assert sink.batches[-1] == ["e"]
    log.close(5)


def test_a_flush_gives_up_after_its_timeout():
    sink = Sink()
    log = WriteBehind(sink, name="w", what="impressions")
    sink.gate.clear()
    log.put(1)
    started = time.monotonic()
    with pytest.raises(StoreError, match="not written 1 queued impressions within 0.2s"):
        log.flush(0.2)
    assert time.monotonic() - started < 2
    sink.gate.set()
    log.close(5)
    assert sink.batches == [[1]]


def test_a_batch_that_is_not_the_stores_fault_is_dropped_and_the_rest_go_on(caplog):
    sink, dropped = Sink(), []
    log = WriteBehind(sink, name="w", what="items", dropped=dropped.extend)
    sink.crash_on = "bad"
    log.put("bad")
    log.flush(5)
    log.put("good")
    log.flush(5)
    assert dropped == ["bad"] and sink.batches == [["good"]] and log.dropped == 1
    assert "dropped 1 items after an error" in caplog.text
    log.close(5)


def test_an_item_the_store_refuses_is_dropped_alone_and_the_queue_goes_on(caplog):
    """A value the database refuses (a permanent store error) fails its batch: the items
    are written one by one, and only the refused one is dropped."""
    written, dropped = [], []

    def write_batch(batch):
        if "bad" in batch:
            error = StoreError("event store x failed: invalid byte sequence")
            error.permanent = True
            raise error
        written.extend(batch)

    log = WriteBehind(write_batch, name="w", what="items", linger=0.2, dropped=dropped.extend)
    for item in ("a", "bad", "b"):
        log.put(item)  # one batch: the writer lingers for them
    log.flush(5)
    assert written == ["a", "b"] and dropped == ["bad"] and log.pending == 0
    assert "dropped 1 items that the event store refuses" in caplog.text
    log.put("c")
    log.flush(5)
    assert written[-1] == "c"
    log.close(5)


def test_close_writes_what_is_queued_and_takes_no_more():
    sink = Sink()
    log = WriteBehind(sink, name="w", what="items")
    sink.gate.clear()
    for i in range(3):
        log.put(i)
    threading.Timer(0.2, sink.gate.set).start()
    log.close(5)
    assert [x for batch in sink.batches for x in batch] == [0, 1, 2]
    with pytest.raises(StoreError, match="closed"):
        log.put(3)


def test_close_tries_again_while_the_store_fails_for_up_to_its_timeout(caplog):
    sink = Sink()
    log = WriteBehind(sink, name="w", what="items")
    sink.fail.set()
    for i in range(3):
        log.put(i)
    threading.Timer(0.3, sink.fail.clear).start()  # a passing failure
    log.close(5)
    assert [x for batch in sink.batches for x in batch] == [0, 1, 2] and log.pending == 0
    failing = WriteBehind(Sink(), name="w2", what="items")
    failing._write_batch.fail.set()
    failing.put("x")
    started = time.monotonic()
    failing.close(0.3)  # a store that stays down: given up after the timeout, and said
    assert time.monotonic() - started < 3 and failing.pending == 1
    assert "w2: 1 items lost at close: event store x failed: disk full" in caplog.text


# -- the count cache ---------------------------------------------------------------------------

def impression(i, query, docs, rng):
    ranking = rng.permutation(len(docs))
    return Impression(id=f"i{i}", created=float(i), query=query, user_id=None,
                      learner="preference_perceptron", model_version=0, doc_ids=docs,
                      feature_names=["x"], features=np.zeros((len(docs), 1)),
                      ranking=ranking, n_shown=min(5, len(docs)))


def replay(mine, fresh, search, n, rng):
    """``n`` searches ``search(i, rng) -> (query, candidates)`` logged by ``mine``, with a
    click on an earlier page after half of them (while that page may still be queued):
    before each, ``mine``'s click features are those of a ``fresh`` read of the store once
    its queue is written."""
    logged = []
    for i in range(n):
        query, candidates = search(i, rng)
        seen = click_lifts(mine.click_counts(query, candidates), 5.0)
        mine.flush()
        assert np.array_equal(seen, click_lifts(fresh.click_counts(query, candidates), 5.0)), i
        imp = impression(i, query, candidates, rng)
        mine.log_impression(imp)
        logged.append(imp)
        if rng.random() < 0.5:
            earlier = logged[int(rng.integers(len(logged)))]
            mine.record_click(earlier.id, earlier.shown_ids()[int(rng.integers(5))])


def test_click_features_within_a_process_are_those_of_every_write_before_them(open_store):
    """A store object that keeps its counts (a long refresh) and writes behind answers, at
    every step of a random stream of impressions and clicks over repeated queries, what a
    fresh read of the store gives once its queue is written."""
    cached = open_store()
    cached.click_refresh = 3600.0
    fresh = open_store()
    fresh.click_refresh = 0.0
    docs = {q: [f"{q[:3]}{i}" for i in range(12)] + ["shared1", "shared2"]
            for q in ("tea kettle", "coffee", "teapot")}

    def search(i, rng):
        query = ["tea kettle", "coffee", "teapot"][int(rng.integers(3))]
        return query, list(rng.permutation(docs[query]))

    replay(cached, fresh, search, 60, np.random.default_rng(4))
    assert cached._counts.hits > 30  # most searches read no database at all


def tea_read_after_anothers_impression(open_store):
    """``(mine, other, fresh, now, docs)``: three store objects; ``mine`` keeps its counts
    for 10 s (its clock at ``now[0]``), ``fresh`` reads them on every search; ``other`` has
    logged an impression of "tea" with ``docs``, and ``mine`` has read the query's counts
    since."""
    mine, other, fresh = open_store(), open_store(), open_store()
    mine.click_refresh, fresh.click_refresh = 10.0, 0.0
    now = [0.0]
    mine._counts.clock = lambda: now[0]
    docs = [f"d{i}" for i in range(6)]
    other.log_impression(impression(1, "tea", docs, np.random.default_rng(0)))
    other.flush()
    click_lifts(mine.click_counts("tea", docs), 5.0)
    return mine, other, fresh, now, docs


def test_a_query_searched_with_other_candidates_keeps_only_the_cells_of_its_last_read(
        open_store):
    """A document left out of a query's last read (a filter, a changed index) is read again
    when it comes back, with what another process wrote meanwhile."""
    mine, other, fresh, now, docs = tea_read_after_anothers_impression(open_store)
    clicked = other.get_impression("i1").shown_ids()[0]
    other.record_click("i1", clicked)
    now[0] = 100.0
    click_lifts(mine.click_counts("tea", [d for d in docs if d != clicked]), 5.0)
    for at in (101.0, 200.0):
        now[0] = at
        assert np.array_equal(click_lifts(mine.click_counts("tea", docs), 5.0),
                              click_lifts(fresh.click_counts("tea", docs), 5.0)), at


def test_a_refresh_time_of_0_reads_the_store_on_every_search(open_store):
    store = open_store()
    store.click_refresh = 0.0
    docs = [f"d{i}" for i in range(6)]
    for _ in range(3):
        click_lifts(store.click_counts("tea", docs), 5.0)
    assert (store._counts.reads, store._counts.checks) == (3, 0)


def test_a_lone_writer_keeps_its_counts_past_the_refresh_time_and_they_stay_exact(open_store):
    """With no other process writing, a query's cells are confirmed by a lookup of the
    total once per refresh time instead of read again, and still match a fresh read."""
    mine, fresh = open_store(), open_store()
    mine.click_refresh, fresh.click_refresh = 1.0, 0.0
    now = [0.0]
    mine._counts.clock = lambda: now[0]
    docs = [f"d{i}" for i in range(6)]
    rng = np.random.default_rng(1)
    for i in range(12):
        now[0] = 1.5 * i
        assert np.array_equal(click_lifts(mine.click_counts("tea", docs), 5.0),
                              click_lifts(fresh.click_counts("tea", docs), 5.0)), i
        mine.log_impression(impression(i, "tea", docs, rng))
        mine.record_click(f"i{i}", mine.get_impression(f"i{i}").shown_ids()[i % 5])
    assert mine._counts.reads == 1 and mine._counts.checks == 11


def test_another_processes_writes_count_once_the_refresh_time_has_passed(open_store):
    mine, other = open_store(), open_store()
    mine.click_refresh = 10.0
    now = [0.0]
    mine._counts.clock = lambda: now[0]
    docs = [f"d{i}" for i in range(6)]
    rng = np.random.default_rng(0)
    other.log_impression(impression(1, "tea", docs, rng))
    before = click_lifts(mine.click_counts("tea", docs), 5.0)
    shown = other.get_impression("i1").shown_ids()
    other.record_click("i1", shown[0])
    now[0] = 9.0
    assert np.array_equal(click_lifts(mine.click_counts("tea", docs), 5.0), before)  # not yet
    now[0] = 10.5
    after = click_lifts(mine.click_counts("tea", docs), 5.0)
    assert after[docs.index(shown[0]), 0] > before[docs.index(shown[0]), 0]


def reader(cache, db):
    """A ``read`` for the cache over a dict standing for the database."""
    calls = []

    def read(key, doc_ids, keep):
        with cache.gate.shared():
            calls.append(dict(db))
            keep({c: v for c, v in db.items()
                  if c[0] in (key, ALL_QUERIES) and (c[1] in doc_ids or c[1] == ALL_DOCS)})
    return read, calls


ROWS = [("tea", "a", 0.5), (ALL_QUERIES, "a", 0.5), (ALL_QUERIES, ALL_DOCS, 0.5)]


def commit_exposures(cache, db, held=0.0):
    """A commit of the queued impression (its rows ``ROWS``), holding the gate ``held``
    seconds before the database takes it."""
    with cache.committing():
        time.sleep(held)
        for key, doc, weight in ROWS:
            db[key, doc] = (db[key, doc][0], db[key, doc][1] + weight)
        cache.committed({(k, d): w for k, d, w in ROWS}, EXPOSURE, ["i"])


@pytest.mark.parametrize("read_first", [True, False])
def test_a_read_and_a_commit_of_the_same_object_never_overlap(read_first):
    """A read that comes while a commit of this object is under way waits for it and sees
    it; a commit that comes during a read waits for the read and adds itself after. Either
    way the queued impression counts once, before, during and after its commit."""
    db = {("tea", "a"): (1.0, 4.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, ALL_DOCS): (1.0, 4.0)}
    # Read first: the cells are kept after (what the commit adds to them is checked);
    # commit first: every search reads.
    cache = CountCache(60.0 if read_first else 0.0)
    read, calls = reader(cache, db)
    cache.queue("i", ROWS)
    assert cache.counts("tea", ["a"], read)[0].tolist() == [[1.0, 4.5, 1.0, 4.5]]
    if read_first:
        cache.forget()  # the next search reads
        slow, answers = threading.Event(), []

        def slow_read(key, doc_ids, keep):
            with cache.gate.shared():
                snapshot = dict(db)  # the database as the read finds it
                slow.set()
                time.sleep(0.2)  # the commit waits meanwhile
                keep(snapshot)
        other = threading.Thread(target=lambda: answers.append(
            cache.counts("tea", ["a"], slow_read)))
        other.start()
        assert slow.wait(5)
        started = time.monotonic()
        commit_exposures(cache, db)
        assert time.monotonic() - started >= 0.15
        other.join()
        (counts, total), = answers  # before the commit: the impression counted from the queue
        assert counts.tolist() == [[1.0, 4.5, 1.0, 4.5]] and total == (1.0, 4.5)
        reads = len(calls)
    else:
        committing = threading.Thread(target=commit_exposures, args=(cache, db, 0.2))
        committing.start()
        time.sleep(0.05)
        started = time.monotonic()
        counts, total = cache.counts("tea", ["a"], read)
        assert time.monotonic() - started >= 0.1  # it waited for the commit
        committing.join()
        assert counts.tolist() == [[1.0, 4.5, 1.0, 4.5]] and total == (1.0, 4.5)
    counts, total = cache.counts("tea", ["a"], read)
    assert counts.tolist() == [[1.0, 4.5, 1.0, 4.5]] and total == (1.0, 4.5)
    if read_first:  # from the kept cells, the commit added to them after the read
        assert len(calls) == reads


def test_a_kept_cell_adds_the_commits_of_its_object():
    db = {("tea", "a"): (1.0, 4.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, ALL_DOCS): (1.0, 4.0)}
    cache = CountCache(60.0)
    read, calls = reader(cache, db)
    cache.counts("tea", ["a"], read)
    cache.queue("i", ROWS)
    commit_exposures(cache, db)
    counts, total = cache.counts("tea", ["a"], read)
    assert len(calls) == 1  # kept: no read
    assert counts.tolist() == [[1.0, 4.5, 1.0, 4.5]] and total == (1.0, 4.5)


def total_reader(cache, db):
    """A ``read_total`` for the cache over a dict standing for the database."""
    def read_total(compare):
        with cache.gate.shared():
            compare(db.get((ALL_QUERIES, ALL_DOCS), (0.0, 0.0)))
    return read_total


def test_with_no_other_writer_one_lookup_of_the_total_keeps_the_cells_past_the_ttl():
    db = {("tea", "a"): (1.0, 4.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, ALL_DOCS): (1.0, 4.0)}
    now = [0.0]
    cache = CountCache(60.0, clock=lambda: now[0])
    read, calls = reader(cache, db)
    read_total = total_reader(cache, db)
    cache.counts("tea", ["a"], read, read_total)
    cache.queue("i", ROWS)
    commit_exposures(cache, db)  # this object's own write
    for at in (61.0, 100.0, 119.0):  # one lookup confirms the cells for the next ttl
        now[0] = at
        counts, total = cache.counts("tea", ["a"], read, read_total)
        assert counts.tolist() == [[1.0, 4.5, 1.0, 4.5]] and total == (1.0, 4.5)
    assert (len(calls), cache.checks) == (1, 1)
    # another process writes: the next lookup finds the total changed, and the cells are read
    db["tea", "a"] = db[ALL_QUERIES, "a"] = db[ALL_QUERIES, ALL_DOCS] = (2.0, 5.0)
    now[0] = 200.0
    counts, total = cache.counts("tea", ["a"], read, read_total)
    assert counts.tolist() == [[2.0, 5.0, 2.0, 5.0]] and total == (2.0, 5.0)
    assert (len(calls), cache.checks) == (2, 2)


def test_a_lone_writers_cells_are_read_again_once_retention_may_have_forgotten_them():
    """With ``store.retention`` (``max_age``), a query's cells are kept at most as long:
    retention may then have deleted them in the database, which the total does not tell."""
    db = {("tea", "a"): (1.0, 4.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, ALL_DOCS): (1.0, 4.0)}
    now = [0.0]
    cache = CountCache(60.0, clock=lambda: now[0], max_age=500.0)
    read, calls = reader(cache, db)
    read_total = total_reader(cache, db)
    cache.counts("tea", ["a"], read, read_total)
    now[0] = 400.0  # confirmed by the total, as without a maximum age
    cache.counts("tea", ["a"], read, read_total)
    assert len(calls) == 1
    del db["tea", "a"]  # retention forgot the query (the total is as it was)
    now[0] = 501.0
    counts, _ = cache.counts("tea", ["a"], read, read_total)
    assert counts.tolist() == [[0.0, 0.0, 1.0, 4.0]] and len(calls) == 2


def test_a_query_read_before_another_processes_write_is_read_again_past_the_ttl():
    """The write is seen first by another query's read: the lookups of the total find it
    equal from then on, but the query read before the write lacks it, and is read again."""
    db = {(k, "a"): (1.0, 4.0) for k in ("tea", "cup", ALL_QUERIES)}
    db[ALL_QUERIES, ALL_DOCS] = (1.0, 4.0)
    now = [0.0]
    cache = CountCache(60.0, clock=lambda: now[0])
    read, calls = reader(cache, db)
    read_total = total_reader(cache, db)
    cache.counts("tea", ["a"], read, read_total)
    db["tea", "a"] = db[ALL_QUERIES, "a"] = db[ALL_QUERIES, ALL_DOCS] = (2.0, 4.0)
    now[0] = 30.0
    cache.counts("cup", ["a"], read, read_total)  # sees the new total
    now[0] = 95.0  # "cup" read 65 s ago, confirmed by a lookup; "tea" read again
    assert cache.counts("cup", ["a"], read, read_total)[0].tolist() == [[1.0, 4.0, 2.0, 4.0]]
    assert len(calls) == 2 and cache.checks == 1
    assert cache.counts("tea", ["a"], read, read_total)[0].tolist() == [[2.0, 4.0, 2.0, 4.0]]
    assert len(calls) == 3


def query_reader(cache, db, too_many=False):
    """A ``read_query`` for the cache over a dict standing for the database: the query's
    cells and the total (``too_many``: the query has too many cells, and ``keep`` is not
    called)."""
    calls = []

    def read_query(key, doc_ids, keep):
        with cache.gate.shared():
            calls.append(key)
            if not too_many:
                keep({c: v for c, v in db.items()
                      if c[0] == key or c == (ALL_QUERIES, ALL_DOCS)})
    return read_query, calls


class Reads:
    """A count cache over a dict standing for the database, with its three readers:
    ``now[0]`` is its clock; ``calls`` and ``query_calls`` record its full reads and its
    reads of a query's cells alone (``too_many``: the query has too many cells for one)."""

    def __init__(self, db, ttl=60.0, too_many=False):
        self.now = [0.0]
        self.cache = CountCache(ttl, clock=lambda: self.now[0])
        self.read, self.calls = reader(self.cache, db)
        self.read_total = total_reader(self.cache, db)
        self.read_query, self.query_calls = query_reader(self.cache, db, too_many)

    def counts(self, key, doc_ids, at=None):
        if at is not None:
            self.now[0] = at
        return self.cache.counts(key, doc_ids, self.read, self.read_total, self.read_query)

    def done(self):
        """(full reads, queries read alone, lookups of the total)"""
        return len(self.calls), self.query_calls, self.cache.checks


def test_a_new_query_whose_candidates_counts_are_kept_reads_its_own_cells_alone():
    db = {("tea", "a"): (1.0, 4.0), ("tea", "b"): (0.0, 2.0), ("cup", "b"): (1.0, 1.0),
          (ALL_QUERIES, "a"): (1.0, 4.0), (ALL_QUERIES, "b"): (1.0, 3.0),
          (ALL_QUERIES, ALL_DOCS): (2.0, 7.0)}
    reads = Reads(db)
    reads.counts("tea", ["a", "b"])
    assert reads.done() == (1, [], 0)  # nothing kept yet: a full read
    counts, total = reads.counts("cup", ["b", "a"], at=30.0)
    assert counts.tolist() == [[1.0, 1.0, 1.0, 3.0], [0.0, 0.0, 1.0, 4.0]]
    assert total == (2.0, 7.0)
    assert reads.done() == (1, ["cup"], 0)
    # the query's cells are kept like those of a full read, and own commits add to them
    reads.cache.queue("i", ROWS)
    commit_exposures(reads.cache, db)
    counts, _ = reads.counts("cup", ["b", "a"], at=50.0)
    assert counts.tolist() == [[1.0, 1.0, 1.0, 3.0], [0.0, 0.0, 1.0, 4.5]]
    assert reads.done() == (1, ["cup"], 0) and reads.cache.hits == 1
    # read with the total as kept, in the epoch of every count kept, they are current as
    # of their read (30): past the ttl from then, one lookup of the total keeps them, as it
    # does a full read's
    assert reads.counts("cup", ["b", "a"], at=89.0)[0].tolist() == counts.tolist()
    assert reads.done() == (1, ["cup"], 0)
    assert reads.counts("cup", ["b", "a"], at=91.0)[0].tolist() == counts.tolist()
    assert reads.done() == (1, ["cup"], 1)
    # A candidate never read over all queries: a full read
    reads.counts("mug", ["a", "c"])
    assert reads.done() == (2, ["cup"], 1)


def test_a_new_query_after_another_processes_write_reads_everything():
    """A query's cells read alone serve with the counts over all queries kept while the
    total read with them is as kept (nothing written since), or, for a query without cells,
    for the ttl after the counts' reads. Past that, when another process has written, every
    cell is read; so it is for a new query with a candidate whose counts were read before a
    write that a read has seen since."""
    db = {("tea", "a"): (1.0, 4.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, ALL_DOCS): (1.0, 4.0)}
    reads = Reads(db)
    reads.counts("tea", ["a"])
    db["tea", "a"] = db[ALL_QUERIES, "a"] = db[ALL_QUERIES, ALL_DOCS] = (2.0, 4.0)
    counts, total = reads.counts("cup", ["a"], at=61.0)  # its total read tells of the write
    assert counts.tolist() == [[0.0, 0.0, 2.0, 4.0]] and total == (2.0, 4.0)
    assert reads.done() == (2, ["cup"], 0) and reads.cache.query_reads == 0
    # the full read holds the other process's write, as of 61: the next new query's cells
    # read alone serve
    counts, _ = reads.counts("mug", ["a"], at=62.0)
    assert counts.tolist() == [[0.0, 0.0, 2.0, 4.0]]
    assert reads.done() == (2, ["cup", "mug"], 0) and reads.cache.query_reads == 1
    # a candidate whose counts over all queries were read before the other process's
    # write (and not since): a full read
    db["cup", "b"] = db[ALL_QUERIES, "b"] = (1.0, 1.0)
    reads.counts("cup", ["a", "b"], at=70.0)
    db[ALL_QUERIES, "b"] = (2.0, 2.0)
    db[ALL_QUERIES, ALL_DOCS] = (3.0, 5.0)
    reads.counts("tea", ["a"], at=131.0)  # sees the write, for its own candidate
    counts, _ = reads.counts("pot", ["a", "b"], at=132.0)
    assert counts.tolist() == [[0.0, 0.0, 2.0, 4.0], [0.0, 0.0, 2.0, 2.0]]
    assert reads.done() == (5, ["cup", "mug", "tea"], 0) and reads.cache.query_reads == 1
    # a ttl of 0 reads everything, every time
    every_time = Reads(db, ttl=0.0)
    for at, key in enumerate(("tea", "cup", "tea"), start=1):
        every_time.counts(key, ["a"], at=float(at))
    assert every_time.done() == (3, [], 0)


def test_counts_over_all_queries_read_within_the_ttl_serve_a_new_query_in_any_epoch():
    """With other processes writing (every read finds a new total), the counts over all
    queries still serve a new query for the ttl after their read: it reads its own cells
    alone, kept as of the oldest of those reads, and past the ttl from then reads them all
    again, with the other process's write."""
    db = {("tea", "a"): (1.0, 4.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, "b"): (0.0, 1.0), (ALL_QUERIES, ALL_DOCS): (1.0, 5.0)}
    reads = Reads(db)
    reads.counts("tea", ["a"])
    db["tea", "a"] = db[ALL_QUERIES, "a"] = (2.0, 4.0)  # another process's click
    db[ALL_QUERIES, ALL_DOCS] = (2.0, 5.0)
    reads.counts("cup", ["b"], at=10.0)  # a new epoch: "a" is of the one before
    counts, _ = reads.counts("mug", ["a", "b"], at=20.0)
    assert counts.tolist() == [[0.0, 0.0, 1.0, 4.0], [0.0, 0.0, 0.0, 1.0]]
    assert reads.done() == (2, ["mug"], 0)
    assert reads.counts("mug", ["a", "b"], at=59.0)[0].tolist() == counts.tolist()
    counts, _ = reads.counts("mug", ["a", "b"], at=61.0)
    assert counts.tolist() == [[0.0, 0.0, 2.0, 4.0], [0.0, 0.0, 0.0, 1.0]]
    assert reads.done() == (3, ["mug"], 0)


def test_a_query_another_process_wrote_to_since_the_counts_were_kept_is_read_in_full(
        open_store):
    """Its cells, read now, and the counts over all queries kept from before that write
    would make a state the store never held (its clicks taken out of counts that lack
    them): the total read with its cells tells of the write, and every cell is read."""
    mine, other, fresh, now, docs = tea_read_after_anothers_impression(open_store)
    before = click_lifts(fresh.click_counts("cup", docs), 5.0)
    other.log_impression(impression(2, "cup", docs, np.random.default_rng(1)))
    other.record_click("i2", other.get_impression("i2").shown_ids()[0])
    after = click_lifts(fresh.click_counts("cup", docs), 5.0)
    now[0] = 5.0
    assert np.array_equal(click_lifts(mine.click_counts("cup", docs), 5.0), after)
    assert not np.array_equal(before, after)
    assert (mine._counts.reads, mine._counts.query_reads) == (2, 0)


def test_a_read_that_finds_the_total_as_kept_confirms_the_other_queries_of_its_epoch():
    db = {("tea", "a"): (1.0, 4.0), ("cup", "b"): (0.0, 1.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, "b"): (0.0, 1.0), (ALL_QUERIES, ALL_DOCS): (1.0, 5.0)}
    reads = Reads(db)
    reads.counts("tea", ["a"])
    reads.counts("cup", ["b"], at=50.0)  # a full read (a candidate not kept), total as kept
    assert reads.counts("tea", ["a"], at=100.0)[0].tolist() == [[1.0, 4.0, 1.0, 4.0]]
    assert reads.done() == (2, [], 0) and reads.cache.hits == 1


def test_a_stored_query_with_more_cells_than_a_range_read_holds_is_read_in_full(open_store):
    mine, fresh = open_store(), open_store()
    mine.click_refresh, fresh.click_refresh = 3600.0, 0.0
    docs = [f"d{i}" for i in range(12)]
    mine.log_impression(impression(1, "tea", docs, np.random.default_rng(0)))
    mine.flush()
    few = docs[:2]  # "tea" has 5 cells (its shown documents), more than 2 per candidate
    click_lifts(mine.click_counts("cup", few), 5.0)  # the counts over all queries kept
    assert np.array_equal(click_lifts(mine.click_counts("tea", few), 5.0),
                          click_lifts(fresh.click_counts("tea", few), 5.0))
    assert (mine._counts.reads, mine._counts.query_reads) == (2, 0)
    click_lifts(mine.click_counts("pot", few), 5.0)  # none: read alone
    assert (mine._counts.reads, mine._counts.query_reads) == (2, 1)


def test_a_query_with_too_many_cells_for_one_range_is_read_in_full():
    db = {("tea", "a"): (1.0, 4.0), ("cup", "a"): (1.0, 1.0), (ALL_QUERIES, "a"): (2.0, 5.0),
          (ALL_QUERIES, ALL_DOCS): (2.0, 5.0)}
    reads = Reads(db, too_many=True)
    reads.counts("tea", ["a"])
    counts, _ = reads.counts("cup", ["a"])
    assert counts.tolist() == [[1.0, 1.0, 2.0, 5.0]]
    assert reads.done() == (2, ["cup"], 0)


def test_a_query_read_alone_while_the_cells_are_forgotten_is_read_in_full():
    """The counts over all queries the query's own read relies on are forgotten during it
    (a commit whose answer was lost): its cells are not kept alone, everything is read."""
    db = {("tea", "a"): (1.0, 4.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, ALL_DOCS): (1.0, 4.0)}
    reads = Reads(db)
    read_query = reads.read_query

    def forgetting(key, doc_ids, keep):
        reads.cache.forget()
        read_query(key, doc_ids, keep)

    reads.read_query = forgetting
    reads.counts("tea", ["a"])
    counts, _ = reads.counts("cup", ["a"])
    assert counts.tolist() == [[0.0, 0.0, 1.0, 4.0]]
    assert reads.done() == (2, ["cup"], 0) and reads.cache.query_reads == 0


def test_new_queries_read_their_own_cells_and_their_counts_stay_exact(open_store):
    """A stream of searches of new queries over shared documents, with clicks, in one
    process: each new query reads its own cells alone, and every answer is that of a
    fresh read of the store once the queue is written."""
    mine, fresh = open_store(), open_store()
    mine.click_refresh, fresh.click_refresh = 3600.0, 0.0
    pool = [f"d{i}" for i in range(10)]

    def search(i, rng):  # one query comes back, the rest are new
        return "tea" if i % 4 == 0 else f"tea {i}", list(rng.choice(pool, 6, replace=False))

    replay(mine, fresh, search, 40, np.random.default_rng(7))
    counts = mine._counts  # its size is what it keeps (its bound counts on it)
    assert counts._size == len(counts._all) + sum(1 + len(docs)
                                                  for _, docs, _ in counts._queries.values())
    assert mine._counts.query_reads > 15


def test_a_new_query_sees_another_processes_write_once_the_refresh_time_has_passed(
        open_store):
    mine, other, fresh, now, docs = tea_read_after_anothers_impression(open_store)
    before = click_lifts(fresh.click_counts("cup", docs), 5.0)
    other.record_click("i1", other.get_impression("i1").shown_ids()[0])
    after = click_lifts(fresh.click_counts("cup", docs), 5.0)
    assert not np.array_equal(before, after)
    now[0] = 5.0  # within the refresh time: the counts over all queries kept
    assert np.array_equal(click_lifts(mine.click_counts("cup", docs), 5.0), before)
    assert (mine._counts.reads, mine._counts.query_reads) == (1, 1)
    now[0] = 10.5  # past it: the write is seen
    assert np.array_equal(click_lifts(mine.click_counts("cup", docs), 5.0), after)
    assert np.array_equal(click_lifts(mine.click_counts("mug", docs), 5.0),
                          click_lifts(fresh.click_counts("mug", docs), 5.0))
    assert (mine._counts.reads, mine._counts.query_reads) == (2, 2)


def test_the_cache_forgets_everything_past_its_size_and_reads_again():
    db = {(k, d): (1.0, 2.0) for k in ("tea", "cup", ALL_QUERIES) for d in "abc"}
    db[ALL_QUERIES, ALL_DOCS] = (3.0, 6.0)
    cache = CountCache(60.0, max_cells=8)
    read, _ = reader(cache, db)
    for key in ("tea", "cup", "tea"):
        counts, total = cache.counts(key, ["a", "b", "c"], read)
        assert counts.tolist() == [[1.0, 2.0, 1.0, 2.0]] * 3 and total == (3.0, 6.0)
    assert cache.reads == 3 and cache._size <= 8


def hold_writer(store) -> threading.Event:
    """Hold ``store``'s impression writer before each batch until the event returned is
    set."""
    gate = threading.Event()
    writer = store._impressions()
    write_batch = writer._write_batch
    writer._write_batch = lambda batch: (gate.wait(30), write_batch(batch))
    return gate


def test_a_click_on_an_impression_another_process_has_not_written_yet_waits(workdir):
    """Two services on one store (two worker processes would be the same): the click
    reaches the one that did not serve the page while the other still holds its
    impression in its queue; it is accepted once the impression is written."""
    config = load_config(write_config(workdir, trainer={"enabled": False}))
    serving, other = RerankerService(config).open(), RerankerService(config).open()
    try:
        gate = hold_writer(serving.events)
        page = serving.search("tea kettle", 10)
        threading.Timer(0.3, gate.set).start()
        started = time.monotonic()
        result = other.click(page["impression_id"], page["hits"][0]["id"])
        assert not result.duplicate and time.monotonic() - started >= 0.25
        assert other.events.get_impression(page["impression_id"]).clicked == [
            page["hits"][0]["id"]]
    finally:
        serving.close()
        other.close()


def test_the_counts_of_a_query_are_those_of_the_store_after_a_restart(workdir):
    """Nothing of the cache outlives its process: a new service reads what the old one
    wrote, queued impressions included (close writes them)."""
    config = load_config(write_config(workdir, trainer={"enabled": False}))
    service = RerankerService(config).open()
    pages = [service.search("tea kettle", 10) for _ in range(3)]
    service.click(pages[0]["impression_id"], pages[0]["hits"][2]["id"])
    candidates = service.backend.search("tea kettle", 100).ids
    before = click_lifts(service.events.click_counts("tea kettle", candidates), 5.0)
    service.close()
    again = RerankerService(config).open()
    try:
        assert np.array_equal(click_lifts(again.events.click_counts("tea kettle", candidates), 5.0),
                              before)
        assert again.events.stats()["impressions"] == 3
    finally:
        again.close()


def test_lifts_of_the_cached_counts_match_the_formula(open_store):
    store = open_store()
    docs = ["a", "b"]
    store.log_impression(impression(0, "Tea", docs, np.random.default_rng(1)))
    store.record_click("i0", store.get_impression("i0").shown_ids()[0])
    rows = {(k, d): (c, e) for k, d, c, e in store_rows(
        store, "SELECT query_key, doc_id, clicks, exposure FROM click_stats")}
    counts = np.array([[*rows[query_key("Tea"), d], *rows[ALL_QUERIES, d]] for d in docs])
    np.testing.assert_array_equal(click_lifts(store.click_counts("tea", docs), 5.0),
                                  lifts_from_counts(counts, *rows[ALL_QUERIES, ALL_DOCS], 5.0))


@pytest.mark.parametrize("doc_ids", [[], ["b"], ["c", "a", "b"]])
def test_the_counts_of_any_number_of_candidates_come_in_their_order(doc_ids):
    db = {("tea", "a"): (1.0, 2.0), ("tea", "b"): (0.0, 3.0), (ALL_QUERIES, "a"): (2.0, 5.0),
          (ALL_QUERIES, "b"): (0.0, 4.0), (ALL_QUERIES, ALL_DOCS): (2.0, 9.0)}
    cache = CountCache(60.0)
    read, _ = reader(cache, db)
    want = np.array([[*db.get(("tea", d), (0.0, 0.0)), *db.get((ALL_QUERIES, d), (0.0, 0.0))]
                     for d in doc_ids]).reshape(len(doc_ids), 4)
    for _ in range(2):  # read, then kept
        counts, total = cache.counts("tea", doc_ids, read)
        assert np.array_equal(counts, want) and total == (2.0, 9.0)
    assert cache.reads == 1 and cache.hits == 1


def test_an_impression_the_database_refuses_is_dropped_and_the_others_are_written(
        open_store, caplog):
    """One impression the database refuses (here a missing learner; on PostgreSQL a NUL in
    a text is another) is dropped alone, its exposures no longer counted; the impressions
    queued with it are written, and clicks on them are taken."""
    store = open_store()
    rng = np.random.default_rng(3)
    docs = [f"d{i}" for i in range(8)]
    gate = hold_writer(store)
    good = [impression(i, "tea", docs, rng) for i in range(3)]
    bad = dataclasses.replace(impression(9, "tea", docs, rng), learner=None)
    for imp in (good[0], bad, good[1], good[2]):
        store.log_impression(imp)
    gate.set()
    store.flush()
    assert store.stats()["impressions"] == 3 and store._impressions().dropped == 1
    assert "dropped 1 impressions that the event store refuses" in caplog.text
    assert store.record_click("i1", store.get_impression("i1").shown_ids()[0])
    fresh = open_store()
    fresh.click_refresh = 0.0
    assert np.array_equal(click_lifts(store.click_counts("tea", docs), 5.0),
                          click_lifts(fresh.click_counts("tea", docs), 5.0))


def test_a_batch_written_again_after_its_commit_counts_once(open_store):
    """A commit whose answer was lost is tried again: the impressions already there are
    left as they are, their exposures not counted twice."""
    store = open_store()
    batches, write = [], store._log_impressions
    store._impressions()._write_batch = lambda items: (batches.append(list(items)),
                                                       write(items))
    store.log_impression(impression(0, "tea", [f"d{i}" for i in range(6)],
                                    np.random.default_rng(0)))
    store.flush()
    rows = store_rows(store, "SELECT query_key, doc_id, exposure FROM click_stats")
    (item,), = batches
    store._counts.queue(item.impression.id, item.exposures)  # still queued, as for a retry
    write([item])  # again
    assert store_rows(store, "SELECT query_key, doc_id, exposure FROM click_stats") == rows
    assert store.stats()["impressions"] == 1
    fresh = open_store()
    fresh.click_refresh = 0.0
    docs = [f"d{i}" for i in range(6)]
    assert np.array_equal(click_lifts(store.click_counts("tea", docs), 5.0),
                          click_lifts(fresh.click_counts("tea", docs), 5.0))


def test_what_a_search_reads_never_waits_for_the_queue(open_store):
    """The experiment's state and a later page's first page are read without waiting for
    the queued impressions (a store that cannot take them must not fail the searches)."""
    store = open_store()
    gate = hold_writer(store)
    docs = [f"d{i}" for i in range(6)]
    store.log_impression(impression(0, "tea", docs, np.random.default_rng(0)))
    started = time.monotonic()
    assert store.experiment_state("exp") == {}
    assert store.first_page("no such page", 0.0) is None
    assert time.monotonic() - started < 5
    gate.set()
    store.flush()
    # the newest first page of a key: written, or still queued (read from the queue)
    older = dataclasses.replace(impression(1, "tea", docs, np.random.default_rng(1)),
                                page_key="p1")
    store.log_impression(older)
    store.flush()
    gate.clear()
    newer = dataclasses.replace(impression(2, "tea", docs, np.random.default_rng(2)),
                                page_key="p1")
    store.log_impression(newer)
    started = time.monotonic()
    assert store.first_page("p1", 0.0) is newer and store.queued_impressions == 1
    assert store.first_page("p1", 3.0) is None  # both older than asked
    assert time.monotonic() - started < 5
    gate.set()
    store.flush()
    assert store.first_page("p1", 0.0).id == "i2"  # written now


def test_a_split_batch_interrupted_by_the_store_writes_and_drops_each_item_once():
    """A batch fails for one bad item and is written item by item; the store then fails
    for a while on a good one: the items already written or dropped stay so, and the rest
    follow once the store is back."""
    written, dropped, calls = [], [], []
    hiccup = {"b": 1}  # "b" meets a store that fails once

    def write_batch(batch):
        calls.append(list(batch))
        if "bad" in batch:
            error = StoreError("event store x failed: invalid value")
            error.permanent = True
            raise error
        if hiccup.get(batch[0]) and len(batch) == 1:
            hiccup[batch[0]] -= 1
            raise StoreError("event store x failed: database is locked")
        written.extend(batch)

    log = WriteBehind(write_batch, name="w", what="items", linger=0.3, dropped=dropped.extend)
    for item in ("a", "bad", "b", "c"):
        log.put(item)
    deadline = time.monotonic() + 10
    while log.pending and time.monotonic() < deadline:
        time.sleep(0.02)
    assert written == ["a", "b", "c"] and dropped == ["bad"]
    assert log.dropped == 1 and log.items == 3
    log.close(5)


def test_an_error_that_is_not_the_stores_drops_only_the_item_it_comes_from():
    written, dropped = [], []

    def write_batch(batch):
        if "bad" in batch:
            raise OverflowError("a value too large")
        written.extend(batch)

    log = WriteBehind(write_batch, name="w", what="items", linger=0.3, dropped=dropped.extend)
    for item in ("a", "bad", "b"):
        log.put(item)
    deadline = time.monotonic() + 10
    while log.pending and time.monotonic() < deadline:
        time.sleep(0.02)
    assert written == ["a", "b"] and dropped == ["bad"]
    log.close(5)


def test_a_commit_that_hangs_does_not_hang_the_reads_for_longer_than_the_timeout():
    cache = CountCache(0.0, timeout=0.2)
    db = {(ALL_QUERIES, ALL_DOCS): (1.0, 2.0)}
    read, _ = reader(cache, db)
    with cache.committing():
        started = time.monotonic()
        with pytest.raises(StoreError, match="store.timeout"):
            cache.counts("tea", ["a"], read)
        assert time.monotonic() - started < 2
    assert cache.counts("tea", ["a"], read)[1] == (1.0, 2.0)  # and then it reads


def test_a_commit_that_fails_forgets_the_kept_counts():
    """A commit whose answer was lost may or may not have happened: what was kept is read
    again."""
    db = {("tea", "a"): (1.0, 4.0), (ALL_QUERIES, "a"): (1.0, 4.0),
          (ALL_QUERIES, ALL_DOCS): (1.0, 4.0)}
    cache = CountCache(60.0)
    read, calls = reader(cache, db)
    cache.counts("tea", ["a"], read)
    with pytest.raises(StoreError), cache.committing():
        db["tea", "a"] = (2.0, 4.0)  # it did happen
        raise StoreError("event store x failed: connection lost")
    counts, _ = cache.counts("tea", ["a"], read)
    assert len(calls) == 2 and counts[0, 0] == 2.0


@pytest.mark.filterwarnings("ignore:.*multi-threaded.*:DeprecationWarning")  # (3.12+)
def test_a_forked_child_starts_with_an_empty_queue_cache_and_locks_of_its_own():
    """gunicorn forks its workers: a child must neither write its parent's queue nor wait
    on a lock a parent's thread held at the fork."""
    import os

    gate = threading.Event()
    log = WriteBehind(lambda batch: gate.wait(5), name="w", what="items")
    cache = CountCache(60.0)
    log.put("parent's")
    cache.queue("i", [("tea", "a", 0.5)])
    with log._cond, cache._lock:  # held by the parent's threads while it forks
        pid = os.fork()
        if pid == 0:
            fresh = (log.pending == 0 and log._thread is None and log._cond.acquire(timeout=1)
                     and cache._queued == {} and cache._lock.acquire(timeout=1))
            os._exit(0 if fresh else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert log.pending == 1 and cache._queued  # the parent's are its own still
    gate.set()
    log.close(5)
