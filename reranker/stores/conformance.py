"""Conformance checks of the event store's parts, shipped so that a third-party store can run
them too (:mod:`reranker.testing` gives them with the learners' checks).

Every check takes ``open_store``, a callable that opens another object on one store, empty
when the check starts, as another process would (connections of its own); the check closes
what it opens, and raises ``AssertionError`` naming the store's class when the store breaks
the guarantee its part documents (:mod:`reranker.stores.base`). The checks are grouped by
the part they test, in :data:`STORE_CHECKS`; those of :class:`ClickCounts` and
:class:`Maintenance` write through :class:`ImpressionLog` too. Run them from pytest, a new
store for each::

    import pytest
    from reranker.testing import STORE_CHECKS

    @pytest.mark.parametrize("check", [c for checks in STORE_CHECKS.values() for c in checks],
                             ids=lambda c: c.__name__)
    def test_my_store(check, tmp_path):
        check(lambda: MyStore(tmp_path / "events"))

What a part leaves optional (the defaults :class:`Coordination` and :class:`Maintenance`
document: no shared request counts, a trainer lock or leadership that holds nothing, no
trainer status, no signing secret, no retention) is accepted as such; a store that takes it
on is checked for it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import numpy as np

from reranker.core.errors import (
    ConfigError,
    ConflictError,
    NotFoundError,
    UnprocessableError,
)
from reranker.features.clicks import PositionBias, query_key
from reranker.features.clicks.position_bias import (
    PAIR_OFFSET,
    SWAP_PROBABILITY_KEY,
    SWAPPED,
    randomized_pairs,
)
from reranker.stores.base import (
    ClickCounts,
    Coordination,
    EventStore,
    ImpressionLog,
    Maintenance,
    Reader,
)
from reranker.stores.events import ClickResult, Impression

#: Opens another object on the store under test.
OpenStore = Callable[[], EventStore]


def impression(imp_id: str, created: float, n: int = 5, shown: int = 3, query: str = "q",
               **more) -> Impression:
    """A logged page of ``n`` candidates ``d0 .. d{n-1}`` ranked in reverse (``d{n-1}``
    first), ``shown`` of them shown, with two features each."""
    more = {"user_id": None, **more}
    return Impression(id=imp_id, created=created, query=query, learner="x",
                      model_version=0, doc_ids=[f"d{i}" for i in range(n)],
                      feature_names=["a", "b"], features=np.arange(2.0 * n).reshape(n, 2),
                      ranking=np.arange(n)[::-1].copy(), n_shown=shown, **more)


class _Opened:
    """The objects a check opened on the store, closed when it ends."""

    def __init__(self, open_store: OpenStore):
        self._open = open_store
        self.stores: list[EventStore] = []

    def __call__(self) -> EventStore:
        self.stores.append(self._open())
        return self.stores[-1]

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *exc) -> None:
        for store in self.stores:
            store.close()


def _raises(error: type[Exception], text: str, call: Callable[[], object], what: str) -> None:
    """Assert that ``call()`` raises ``error`` with ``text`` in its message."""
    try:
        call()
    except error as exc:
        assert text in str(exc), f"{what}: {error.__name__} {str(exc)!r} should say {text!r}"
        return
    raise AssertionError(f"{what}: should raise {error.__name__}")


def _equal(got, expected, what: str) -> None:
    assert got == expected, f"{what}: got {got!r}, expected {expected!r}"


def _name(store: EventStore) -> str:
    return type(store).__qualname__


# -- ImpressionLog -----------------------------------------------------------------------------

def check_impressions_read_back_as_logged(open_store: OpenStore) -> None:
    """Every field of a logged impression comes back; an unknown id is ``NotFoundError``."""
    with _Opened(open_store) as opened:
        store = opened()
        imp = impression("i1", 1.0, context={"k": [1, 2]}, arm="a1", experiment="e",
                         page_key="pk", user_id="u")
        imp.log_prob, imp.propensities, imp.teams = -1.5, np.linspace(0, 1, 5), ["a", "b", "a"]
        store.log_impression(imp)
        got = store.get_impression("i1")
        where = f"{_name(store)}.get_impression"
        _equal((got.log_prob, got.teams, got.created), (-1.5, ["a", "b", "a"], 1.0), where)
        _equal((got.context, got.arm, got.experiment, got.page_key, got.user_id),
               ({"k": [1, 2]}, "a1", "e", "pk", "u"), where)
        assert np.array_equal(got.propensities, np.linspace(0, 1, 5)), f"{where}: propensities"
        assert np.array_equal(got.features, np.arange(10.0).reshape(5, 2)), f"{where}: features"
        assert np.array_equal(got.ranking, [4, 3, 2, 1, 0]), f"{where}: ranking"
        _equal(got.shown_ids(), ["d4", "d3", "d2"], f"{where}: shown documents")
        _equal((got.clicked, got.reward), ([], None), f"{where}: clicks and reward")
        _raises(NotFoundError, "unknown impression_id 'nope'",
                lambda: store.get_impression("nope"), f"{where} of an unknown id")


def check_a_click_is_validated_and_counted_once(open_store: OpenStore) -> None:
    """A click has its position on the page; recorded twice it is kept once (``duplicate``);
    an unknown impression is ``NotFoundError``, a document not shown
    ``UnprocessableError``."""
    with _Opened(open_store) as opened:
        store = opened()
        store.log_impression(impression("i1", time.time()))
        where = f"{_name(store)}.record_click"
        first = store.record_click("i1", "d3")
        _equal((first.position, first.duplicate), (2, False), f"{where}: the first click")
        assert store.record_click("i1", "d3").duplicate, f"{where}: a repeat is a duplicate"
        _raises(NotFoundError, "unknown impression_id 'nope'",
                lambda: store.record_click("nope", "d3"), f"{where} on an unknown impression")
        _raises(UnprocessableError, "doc_id 'd0' was not shown",  # a candidate, below the page
                lambda: store.record_click("i1", "d0"), f"{where} on a document not shown")
        _equal(store.get_impression("i1").clicked, ["d3"], f"{where}: the clicks kept")


def check_a_later_page_counts_positions_in_the_whole_ranking(open_store: OpenStore) -> None:
    """A click on a page after the first has its rank in the whole ranking."""
    with _Opened(open_store) as opened:
        store = opened()
        store.log_impression(impression("p2", 1.0, n=8, shown=3, offset=3))
        # ranking d7 .. d0, ranks 4-6 shown: d4 d3 d2
        _equal(store.record_click("p2", "d3").position, 5,
               f"{_name(store)}.record_click: the position on a later page")


def check_a_batch_of_clicks_has_an_outcome_per_click(open_store: OpenStore) -> None:
    """``record_clicks`` gives each click what ``record_click`` would, its error alone."""
    with _Opened(open_store) as opened:
        store = opened()
        store.log_impression(impression("i1", 1.0))
        outcomes = store.record_clicks([("i1", "d3", 2.0), ("nope", "d3", 2.0),
                                        ("i1", "d0", 2.0), ("i1", "d4", 2.0), ("i1", "d3", 2.0)])
        where = f"{_name(store)}.record_clicks"
        _equal([type(o).__name__ for o in outcomes],
               ["ClickResult", "NotFoundError", "UnprocessableError", "ClickResult",
                "ClickResult"], where)
        results = [o for o in outcomes if isinstance(o, ClickResult)]
        _equal([(r.doc_id, r.position, r.duplicate) for r in results],
               [("d3", 2, False), ("d4", 1, False), ("d3", 2, True)], where)
        _equal(sorted(store.get_impression("i1").clicked), ["d3", "d4"],
               f"{where}: the clicks kept")


def check_closing_numbers_impressions_in_order(open_store: OpenStore) -> None:
    """Closing numbers the impressions created before a time 1, 2, 3, ... oldest first; they
    come back in that order with their clicks; a closed impression refuses a new click but
    accepts a repeat of a counted one."""
    with _Opened(open_store) as opened:
        store = opened()
        where = _name(store)
        for k, created in enumerate([10.0, 5.0, 20.0]):
            store.log_impression(impression(f"i{k}", created))
        store.record_click("i0", "d4")
        _equal(store.close_impressions(before=15.0), 2, f"{where}.close_impressions")
        closed = store.closed_since(0, 10)
        _equal([(i.id, i.closed_seq) for i in closed], [("i1", 1), ("i0", 2)],
               f"{where}.closed_since")
        _equal([i.clicked for i in closed], [[], ["d4"]], f"{where}.closed_since: clicks")
        assert store.record_click("i0", "d4").duplicate, \
            f"{where}.record_click: a repeat after closing is a duplicate"
        _raises(ConflictError, "no longer accepts clicks", lambda: store.record_click("i0", "d3"),
                f"{where}.record_click on a closed impression")
        _equal(store.close_impressions(before=float("inf")), 1, f"{where}.close_impressions")
        _equal([i.closed_seq for i in store.closed_since(2, 10)], [3], f"{where}.closed_since")
        _equal(store.closed_since(3, 10), [], f"{where}.closed_since past the last")
        _equal(store.last_closed_seq(), 3, f"{where}.last_closed_seq")
        _equal(store.close_impressions(float("inf")), 0, f"{where}.close_impressions again")


def check_closing_with_a_limit_and_reading_by_arm(open_store: OpenStore) -> None:
    """``close_impressions`` closes at most ``limit``; ``pending`` counts what is open and
    unapplied; an arm reads its own impressions and the mixed lists (``arm`` None)."""
    with _Opened(open_store) as opened:
        store = opened()
        where = _name(store)
        for k, arm in enumerate(["a", "b", None, "a"]):
            store.log_impression(impression(f"i{k}", float(k), arm=arm))
        _equal(store.close_impressions(before=float("inf"), limit=3), 3,
               f"{where}.close_impressions with a limit")
        _equal(store.pending(cursor=1), {"open_impressions": 1, "closed_unapplied": 2,
                                         "oldest_unapplied": 1.0, "oldest_open": 3.0},
               f"{where}.pending")
        _equal(store.pending(cursor=3)["oldest_unapplied"], None, f"{where}.pending")
        store.close_impressions(before=float("inf"))
        _equal(store.pending(cursor=3)["oldest_open"], None, f"{where}.pending")
        _equal([i.id for i in store.closed_since(0, 10, arms=("a",))], ["i0", "i2", "i3"],
               f"{where}.closed_since by arm")
        _equal([i.id for i in store.closed_since(1, 2)], ["i1", "i2"],
               f"{where}.closed_since with a limit")


def check_a_lean_read_leaves_out_only_what_no_click_or_reward_needs(
        open_store: OpenStore) -> None:
    """``closed_since_lean`` reads what ``closed_since`` reads, in the same order, except
    that an impression without a click or a reward may come bare (no candidates, no
    features); one with a click or a reward comes in full."""
    with _Opened(open_store) as opened:
        store = opened()
        where = f"{_name(store)}.closed_since_lean"
        for k in range(4):
            store.log_impression(impression(f"i{k}", float(k), arm="a"))
        store.record_click("i1", "d4")
        store.record_reward("i2", 1.0)
        store.close_impressions(before=float("inf"))
        full, lean = store.closed_since(0, 10), store.closed_since_lean(0, 10)
        _equal([(i.id, i.closed_seq, i.clicked, i.reward, i.query, i.arm, i.n_shown)
                for i in lean],
               [(i.id, i.closed_seq, i.clicked, i.reward, i.query, i.arm, i.n_shown)
                for i in full], where)
        for read, whole in zip(lean, full, strict=True):
            if read.bare:
                _equal(read.id in ("i0", "i3") and read.doc_ids == [] and read.features is None,
                       True, f"{where}: {read.id} bare")
            else:
                _equal((read.doc_ids, read.features.tolist(), read.ranking.tolist()),
                       (whole.doc_ids, whole.features.tolist(), whole.ranking.tolist()),
                       f"{where}: {read.id} in full")
        _equal([i.id for i in store.closed_since_lean(1, 2, arms=("a",))], ["i1", "i2"],
               f"{where} with a limit")


def check_a_reward_is_replaced_while_open_and_frozen_after(open_store: OpenStore) -> None:
    """A later reward replaces an open page's; after closing only the same value is
    accepted; an unknown impression is ``NotFoundError``."""
    with _Opened(open_store) as opened:
        store = opened()
        where = f"{_name(store)}.record_reward"
        store.log_impression(impression("i1", 1.0))
        _equal(store.record_reward("i1", 2.5).replaced, None, where)
        _equal(store.record_reward("i1", 4.0).replaced, 2.5, where)
        store.close_impressions(before=float("inf"))
        _equal(store.record_reward("i1", 4.0).replaced, 4.0, f"{where}: the same value again")
        _raises(ConflictError, "no longer accepts a reward",
                lambda: store.record_reward("i1", 5.0), f"{where} on a closed impression")
        _raises(NotFoundError, "unknown impression_id 'nope'",
                lambda: store.record_reward("nope", 1.0), f"{where} on an unknown impression")
        _equal(store.closed_since(0, 1)[0].reward, 4.0, f"{where}: the reward read back")


def check_first_pages_and_experiment_rows(open_store: OpenStore) -> None:
    """``first_page`` finds the latest first page of a key; ``experiment_rows`` gives an
    experiment's closed pages with their clicked positions, and ``open_experiment_rows`` and
    ``experiment_names`` say what they can (nothing, for a store that cannot tell)."""
    with _Opened(open_store) as opened:
        store = opened()
        where = _name(store)
        store.log_impression(impression("old", 1.0, page_key="k"))
        store.log_impression(impression("new", 2.0, page_key="k", experiment="exp", arm=None,
                                        teams=["a", "b", "a"]))
        store.log_impression(impression("page2", 3.0, n=8, page_key="k", offset=3,
                                        experiment="exp"))
        page = store.first_page("k", since=0.0)
        _equal(page and page.id, "new", f"{where}.first_page")
        _equal((store.first_page("k", since=2.5), store.first_page("x", 0.0)), (None, None),
               f"{where}.first_page of none")
        store.record_click("new", "d2")
        store.record_click("new", "d4")
        teams = json.dumps(["a", "b", "a"])
        open_rows = [(*row[:3], sorted(row[3])) for row in store.open_experiment_rows("exp", 10)]
        assert open_rows in ([], [(None, teams, 3, [1, 3]), (None, None, 3, [])]), \
            f"{where}.open_experiment_rows: {open_rows!r}"
        assert store.experiment_names() in ([], ["exp"]), f"{where}.experiment_names"
        store.close_impressions(before=float("inf"))
        rows = [(*row[:4], sorted(row[4])) for row in store.experiment_rows("exp", 0, 10)]
        _equal(rows, [(2, None, teams, 3, [1, 3]), (3, None, None, 3, [])],
               f"{where}.experiment_rows")
        _equal([row[0] for row in store.experiment_rows("exp", after=2, limit=10)], [3],
               f"{where}.experiment_rows after a cursor")
        _equal(store.open_experiment_rows("exp", 10), [], f"{where}.open_experiment_rows")


def check_closed_first_pages_are_counted(open_store: OpenStore) -> None:
    """The traffic share's counts: first pages closed after a cursor and created since a
    time, and those of the experiment; later pages and open impressions are left out (None:
    a store that cannot tell)."""
    with _Opened(open_store) as opened:
        store = opened()
        where = f"{_name(store)}.closed_first_pages"
        store.log_impression(impression("before", 1.0))
        store.log_impression(impression("in1", 2.0, experiment="exp", arm=None))
        store.log_impression(impression("out1", 3.0))
        store.log_impression(impression("page2", 4.0, n=8, offset=3, page_key="k"))
        store.log_impression(impression("in2", 5.0, experiment="exp", arm=None))
        store.log_impression(impression("other", 6.0, experiment="another"))
        first = store.closed_first_pages("exp", 0, 1.5, 100)
        if first is None:
            return
        _equal(first, (0, 0, 0), f"{where}: none closed yet")
        store.close_impressions(before=float("inf"))
        store.log_impression(impression("open", 7.0, experiment="exp", arm=None))
        _equal(store.closed_first_pages("exp", 0, 1.5, 100), (6, 4, 2), where)
        # read in batches, the counts add up, and the cursor moves past every row read
        _equal(store.closed_first_pages("exp", 0, 1.5, 3), (3, 2, 1), f"{where}: a batch")
        _equal(store.closed_first_pages("exp", 3, 1.5, 3), (6, 2, 1), f"{where}: the next")
        _equal(store.closed_first_pages("exp", 6, 1.5, 3), (6, 0, 0), f"{where}: past the end")


def check_pages_since_reads_the_window(open_store: OpenStore) -> None:
    """``pages_since`` gives the pages created since a time, in logging order, with their
    clicked ranks (in the whole ranking) and a first page's served order of the engine's
    candidates (None for a later page); with ``arms``, only the pages those arms showed
    alone. (Read once every page is closed: a store may leave open ones out.)"""
    with _Opened(open_store) as opened:
        store = opened()
        where = f"{_name(store)}.pages_since"
        store.log_impression(impression("old", 1.0, arm="a"))
        store.log_impression(impression("first", 2.0, query="Tea", arm="a"))
        store.log_impression(impression("later", 3.0, n=8, offset=3, arm="a"))
        store.log_impression(impression("empty", 4.0, n=0, shown=0, arm=None))
        store.log_impression(impression("other", 5.0, arm="b"))
        store.record_click("first", "d2")
        store.record_click("first", "d4")
        store.record_click("later", "d3")  # shown at rank 5: the fifth of d7 .. d0
        store.close_impressions(before=float("inf"))
        pages = list(store.pages_since(2.0))
        _equal([(p.created, p.query, p.arm, p.offset, p.n_shown, p.clicked) for p in pages],
               [(2.0, "Tea", "a", 0, 3, (1, 3)), (3.0, "q", "a", 3, 3, (5,)),
                (4.0, "q", None, 0, 0, ()), (5.0, "q", "b", 0, 3, ())], where)
        _equal([None if p.ranking is None else p.ranking.tolist() for p in pages],
               [[4, 3, 2, 1, 0], None, [], [4, 3, 2, 1, 0]], f"{where}: the served orders")
        _equal([p.created for p in store.pages_since(2.5, arms=("a", "b"))], [3.0, 5.0],
               f"{where} of two arms")
        _equal(list(store.pages_since(6.0)), [], f"{where} after the last page")


def check_writes_are_seen_by_every_object(open_store: OpenStore) -> None:
    """Another object on the store (another process) sees a flushed impression, a click and
    a reward once their methods returned, and the same ``store_id``."""
    with _Opened(open_store) as opened:
        store = opened()
        store.log_impression(impression("i1", 1.0))
        store.flush()
        other = opened()
        where = f"{_name(store)}: another object"
        _equal(other.get_impression("i1").clicked, [], f"{where}: a flushed impression")
        store.record_click("i1", "d4")
        store.record_reward("i1", 1.5)
        seen = other.get_impression("i1")
        _equal((seen.clicked, seen.reward), (["d4"], 1.5), f"{where}: a click and a reward")
        _equal(other.store_id, store.store_id, f"{where}: store_id")


def check_clicks_racing_the_close_are_counted_or_refused(open_store: OpenStore) -> None:
    """Clickers and closers on objects of their own: an accepted click is always in the
    closed impression read back, and the numbers have no gap."""
    with _Opened(open_store) as opened:
        writer = opened()
        count = 40
        for k in range(count):
            writer.log_impression(impression(f"i{k}", float(k), n=6, shown=6))
        writer.flush()
        # one click before the race, so that the check reads back at least one however the
        # threads are scheduled (the closers may close every page before a clicker starts)
        writer.record_click(f"i{count - 1}", "d5")
        accepted, errors = {(f"i{count - 1}", "d5")}, []

        def click(store, doc):
            for k in range(count):
                try:
                    if not store.record_click(f"i{k}", doc).duplicate:
                        accepted.add((f"i{k}", doc))
                except ConflictError:
                    pass
                except Exception as exc:  # noqa: BLE001 -- reported below
                    errors.append(exc)

        def close(store):
            for k in range(count):
                try:
                    store.close_impressions(before=k + 0.5, limit=2)
                except Exception as exc:  # noqa: BLE001 -- reported below
                    errors.append(exc)

        threads = [threading.Thread(target=click, args=(opened(), f"d{d}")) for d in range(3)]
        threads += [threading.Thread(target=close, args=(opened(),)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        where = _name(writer)
        assert not errors, f"{where}: clicks and closing at once raised {errors[:3]!r}"
        writer.close_impressions(before=float("inf"))
        closed = writer.closed_since(0, 1000)
        _equal([imp.closed_seq for imp in closed], list(range(1, count + 1)),
               f"{where}: the closing numbers")
        _equal([imp.id for imp in closed], [f"i{k}" for k in range(count)],
               f"{where}: the closing order")
        assert {(imp.id, doc) for imp in closed for doc in imp.clicked} == accepted, \
            f"{where}: the clicks read back are not those accepted"
        if isinstance(writer, Maintenance):  # (and counted as many in its statistics)
            _equal(writer.stats()["clicks"], len(accepted), f"{where}: stats()['clicks']")


# -- ClickCounts -------------------------------------------------------------------------------

def _expected_counts(pages: list[tuple[str, list[str], np.ndarray]],
                     clicks: list[tuple[str, str]], query: str, candidates: list[str]
                     ) -> tuple[np.ndarray, tuple[float, float]]:
    """What ``click_counts(query, candidates)`` must return for ``pages`` (query, shown
    documents, their exposures) and ``clicks`` (query, document), counted by hand."""
    key = query_key(query)
    counts = np.zeros((len(candidates), 4))
    for page_query, shown, weights in pages:
        for doc, weight in zip(shown, weights, strict=True):
            for i, candidate in enumerate(candidates):
                if candidate == doc:
                    counts[i, 3] += weight
                    counts[i, 1] += weight if query_key(page_query) == key else 0.0
    for click_query, doc in clicks:
        for i, candidate in enumerate(candidates):
            if candidate == doc:
                counts[i, 2] += 1.0
                counts[i, 0] += 1.0 if query_key(click_query) == key else 0.0
    total = (float(len(clicks)), float(sum(w.sum() for _, _, w in pages)))
    return counts, total


def check_click_counts_add_up(open_store: OpenStore) -> None:
    """``click_counts`` returns raw counts: clicks and exposures (the position-bias weights
    of the positions shown at) per normalised query and document, per document over all
    queries, and the totals; a duplicate click counts once; the object that logged sees
    them at once, another opened later too."""
    with _Opened(open_store) as opened:
        store = opened()
        theta = store.position_bias(max_age=0).weights(8)  # no randomised pairs: it stays
        logged = [("a", "Tea  Kettle", 0, 3), ("b", "tea kettle!", 0, 4),
                  ("c", "teapot", 0, 3), ("d", "tea kettle", 3, 3)]
        pages = []
        for imp_id, query, offset, shown in logged:
            imp = impression(imp_id, 1.0, n=8, shown=shown, query=query, offset=offset)
            store.log_impression(imp)
            pages.append((query, imp.shown_ids(), theta[offset:offset + shown]))
        clicks = [("a", "d7"), ("a", "d6"), ("b", "d7"), ("c", "d5"), ("d", "d3")]
        for imp_id, doc in clicks + [("a", "d7")]:  # the last a duplicate: counted once
            store.record_click(imp_id, doc)
        by_id = {imp_id: query for imp_id, query, _, _ in logged}
        clicked = [(by_id[imp_id], doc) for imp_id, doc in clicks]
        candidates = ["d7", "never", "d5", "d3", "d6"]
        counts, total = _expected_counts(pages, clicked, "TEA kettle", candidates)
        for who, reader in (("the object that logged them", store), ("another", opened())):
            got, got_total = reader.click_counts("TEA kettle", candidates)
            where = f"{_name(store)}.click_counts, read by {who}"
            assert np.shape(got) == (len(candidates), 4), f"{where}: shape {np.shape(got)}"
            assert np.allclose(got, counts, rtol=1e-9, atol=1e-12), \
                f"{where}: got {np.asarray(got).tolist()}, expected {counts.tolist()}"
            assert np.allclose(got_total, total, rtol=1e-9), \
                f"{where}: totals {tuple(got_total)}, expected {total}"


def check_position_bias_counts_the_randomised_pairs(open_store: OpenStore) -> None:
    """A click in a pair the learner randomised adds the pair's inverse-propensity-weighted
    counts to the position-bias estimate, once; a click elsewhere adds none."""
    context = {PAIR_OFFSET: 0, SWAPPED: [0], SWAP_PROBABILITY_KEY: 0.25}
    expected = PositionBias()
    with _Opened(open_store) as opened:
        store = opened()
        for k, positions in enumerate([[1], [0], [1, 2], [4]]):
            imp = impression(f"i{k}", 1.0, n=6, shown=5, context=context)
            store.log_impression(imp)
            shown = imp.shown_ids()
            for position in positions:
                store.record_click(f"i{k}", shown[position])
            store.record_click(f"i{k}", shown[positions[0]])  # a duplicate: counted once
            pairs, p = randomized_pairs(context, 5)
            expected.add(PositionBias.pair_counts(pairs, p, positions))
        store.log_impression(impression("later", 1.0, n=8, shown=3, offset=3, context=context))
        store.record_click("later", "d3")  # a later page's pairs were not randomised
        for who, reader in (("the object that logged them", store), ("another", opened())):
            got = reader.position_bias(max_age=0).weights(5)
            assert np.allclose(got, expected.weights(5), rtol=1e-9), \
                f"{_name(store)}.position_bias, read by {who}: weights {got.tolist()}, " \
                f"expected {expected.weights(5).tolist()}"


# -- Coordination ------------------------------------------------------------------------------

def check_experiment_state_changes_are_atomic(open_store: OpenStore) -> None:
    """Changes of an experiment's state from several objects at once are never lost."""
    with _Opened(open_store) as opened:
        stores = [opened(), opened()]
        _equal(stores[0].experiment_state("e"), {}, f"{_name(stores[0])}.experiment_state")

        def bump(store):
            for _ in range(15):
                store.update_experiment_state("e", lambda s: {"n": s.get("n", 0) + 1},
                                              time.time())

        threads = [threading.Thread(target=bump, args=(s,)) for s in stores for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        _equal(stores[1].experiment_state("e"), {"n": 60},
               f"{_name(stores[0])}.update_experiment_state from four threads")


def check_request_counts_are_summed_across_objects(open_store: OpenStore) -> None:
    """``exchange_requests`` adds each object's requests to counts every object reads, by
    marks that only grow, and prunes a scope's older slots (None: a store that keeps none)."""
    with _Opened(open_store) as opened:
        a, b = opened(), opened()
        where = f"{_name(a)}.exchange_requests"
        first = a.exchange_requests({("search", "u", 5): 2}, 0, {})
        if first is None:
            return
        rows, mark_a = first
        _equal(sorted(rows), [("search", "u", 5, 2)], where)
        rows, mark_b = b.exchange_requests({("search", "u", 5): 3, ("search", "v", 5): 1}, 0, {})
        _equal(sorted(rows), [("search", "u", 5, 5), ("search", "v", 5, 1)],
               f"{where}: the sums, read by another object")
        rows, mark = a.exchange_requests({}, mark_a, {})
        _equal(sorted(rows), [("search", "u", 5, 5), ("search", "v", 5, 1)],
               f"{where}: what changed since the first object's mark")
        assert mark >= mark_b > mark_a, f"{where}: marks {mark_a}, {mark_b}, {mark} must grow"
        _equal(a.exchange_requests({}, mark, {})[0], [], f"{where}: nothing new since")
        rows, _ = b.exchange_requests({("search", "u", 6): 1}, mark, {"search": 6})
        _equal(sorted(rows), [("search", "u", 6, 1)], f"{where}: a new slot")
        _equal(sorted(a.exchange_requests({}, 0, {})[0]), [("search", "u", 6, 1)],
               f"{where}: the slots before the pruned one are gone")


def check_trainer_leadership_has_one_holder(open_store: OpenStore) -> None:
    """One object leads the trainers until it lets go, then another can (a store that
    cannot tell leads everywhere: the default)."""
    with _Opened(open_store) as opened:
        first, second = opened(), opened()
        where = f"{_name(first)}.trainer_leadership"
        held = first.trainer_leadership()
        assert held is not None and held.held(), f"{where}: the first to ask leads"
        if type(first).trainer_leadership is Coordination.trainer_leadership:
            held.release()
            return
        try:
            assert second.trainer_leadership() is None, f"{where}: two leaders at once"
        finally:
            held.release()
        taken = second.trainer_leadership()
        assert taken is not None, f"{where}: released, it goes to the next to ask"
        try:
            assert first.trainer_leadership() is None, f"{where}: two leaders at once"
        finally:
            taken.release()
        taken.release()  # harmless twice


def check_the_trainer_lock_excludes_other_objects(open_store: OpenStore) -> None:
    """A model's trainer lock held by one object makes another wait until released; another
    model's lock is free (the default holds nothing: a store of one machine)."""
    with _Opened(open_store) as opened:
        first, second = opened(), opened()
        if type(first).trainer_lock is Coordination.trainer_lock:
            return
        where = f"{_name(first)}.trainer_lock"
        with first.trainer_lock("arm-a"):
            waiter, got = take_trainer_lock_in_thread(second, "arm-a")
            assert not got.wait(0.5), f"{where}: held by two objects at once"
            with second.trainer_lock("arm-b"):  # another model's lock is free
                pass
        assert got.wait(10), f"{where}: not taken once released"
        waiter.join()


def take_trainer_lock_in_thread(store: EventStore, name: str
                                ) -> tuple[threading.Thread, threading.Event]:
    """A started thread that takes ``store``'s trainer lock ``name`` and lets go at once,
    and the event it sets when it has it."""
    got = threading.Event()

    def take():
        with store.trainer_lock(name):
            got.set()

    waiter = threading.Thread(target=take, daemon=True)
    waiter.start()
    return waiter, got


def check_the_trainer_status_is_shared(open_store: OpenStore) -> None:
    """What a trainer records, every object reads; recorded again, it is replaced (a store
    that keeps none reads None)."""
    with _Opened(open_store) as opened:
        store, other = opened(), opened()
        where = f"{_name(store)}.trainer_status"
        _equal(store.trainer_status(), None, f"{where} before any")
        store.record_trainer({"last_run": 5.0, "last_error": None, "cursors": {"a": 3},
                              "interval": 1.0})
        if store.trainer_status() is None:
            return
        status = {"last_run": 6.0, "last_error": "disk full", "cursors": {}, "interval": 1.0}
        store.record_trainer(status)
        _equal(other.trainer_status(), status, f"{where}, read by another object")


def check_the_signing_secret_is_one_for_the_store(open_store: OpenStore) -> None:
    """The signing secret is made once and is the same for every object, also one opened
    after the first closed (``ConfigError``: a store that keeps none)."""
    with _Opened(open_store) as opened:
        first = opened()
        where = f"{_name(first)}.signing_secret"
        try:
            secret = first.signing_secret()
        except ConfigError:
            return
        assert isinstance(secret, str) and len(secret) >= 32, \
            f"{where}: a secret of at least 32 characters"
        _equal(opened().signing_secret(), secret, f"{where} of another object")
        _equal(first.signing_secret(), secret, f"{where} asked again")
        first.close()
        opened.stores.remove(first)
        _equal(opened().signing_secret(), secret, f"{where} after the first object closed")


# -- Maintenance -------------------------------------------------------------------------------

def check_stats_count_the_log(open_store: OpenStore) -> None:
    """``stats`` counts impressions, open ones, clicks (a duplicate once) and the last
    closing number."""
    with _Opened(open_store) as opened:
        store = opened()
        where = f"{_name(store)}.stats"
        _equal(store.stats(), {"impressions": 0, "open_impressions": 0, "clicks": 0,
                               "closed_seq": 0}, f"{where} of an empty store")
        for k in range(4):
            store.log_impression(impression(f"i{k}", float(k)))
        for imp_id, doc in [("i0", "d4"), ("i0", "d3"), ("i0", "d4"), ("i2", "d2")]:
            store.record_click(imp_id, doc)
        store.close_impressions(before=2.5)
        _equal(store.stats(), {"impressions": 4, "open_impressions": 1, "clicks": 3,
                               "closed_seq": 3}, where)


def check_a_sound_store_passes_its_health_checks(open_store: OpenStore) -> None:
    """``check_writable`` and ``check_damage`` return on a sound store; ``disk_bytes`` is a
    size or None."""
    with _Opened(open_store) as opened:
        store = opened()
        store.log_impression(impression("i0", 1.0))
        store.flush()
        store.check_writable()
        store.check_damage()
        size = store.disk_bytes()
        assert size is None or (isinstance(size, int) and size > 0), \
            f"{_name(store)}.disk_bytes: {size!r}"


def check_retention_removes_only_what_every_reader_has_applied(open_store: OpenStore) -> None:
    """``retain`` deletes the closed impressions before a time that every reader has
    applied (or does not read), with their clicks and rewards, never an open one; the click
    counts stay as they were (``ConfigError``: a store that cannot remove impressions)."""
    with _Opened(open_store) as opened:
        store = opened()
        where = f"{_name(store)}.retain"
        for i, arm in enumerate(["a", "a", "b", None, "a"]):
            store.log_impression(impression(f"i{i}", float(i), arm=arm))
        for i in range(4):
            store.record_click(f"i{i}", "d4")
        store.record_reward("i0", 1.0)
        _equal(store.close_impressions(3.5), 4, f"{_name(store)}.close_impressions")
        counts = store.click_counts("q", ["d4", "d3", "d2"])
        try:  # a has applied i0 only, b nothing: i0 goes (b does not read a's pages)
            done = store.retain(100.0, [Reader(("a",), 1), Reader(("b",), 0)])
        except ConfigError:
            return
        _equal((done.deleted, done.compacted), (1, 0), where)
        _raises(NotFoundError, "unknown impression_id", lambda: store.get_impression("i0"),
                f"{where}: a deleted impression read")
        # b applies its page, a not yet the mixed list i3 that both read
        _equal(store.retain(100.0, [Reader(("a",), 2), Reader(("b",), 3)]).deleted, 2, where)
        _equal([imp.id for imp in store.closed_since(0, 10)], ["i3"], f"{where}: what is left")
        _equal(store.retain(3.0, [Reader(("a",), 4), Reader(("b",), 4)]).deleted, 0,
               f"{where}: too recent")
        _equal(store.retain(100.0, [Reader(("a",), 4), Reader(("b",), 4)]).deleted, 1, where)
        _equal(store.get_impression("i4").closed_seq, None, f"{where}: the open page is kept")
        stats = store.stats()
        _equal((stats["impressions"], stats["clicks"], store.last_closed_seq()), (1, 0, 4),
               f"{where}: the impressions, clicks and closing number left")
        got = store.click_counts("q", ["d4", "d3", "d2"])
        assert np.array_equal(got[0], counts[0]) and tuple(got[1]) == tuple(counts[1]), \
            f"{where}: the click counts changed"
        store.vacuum()
        _equal(store.get_impression("i4").id, "i4", f"{_name(store)}.vacuum keeps the rest")


def check_retention_forgets_the_counts_of_queries_searched_no_more(
        open_store: OpenStore) -> None:
    """``retain(before, ...)`` deletes the click counts of a query no page of which was
    logged or clicked since ``before``, and keeps those of a query searched since, the
    counts per document over all queries and the total; another object reads them so."""
    with _Opened(open_store) as opened:
        store = opened()
        where = f"{_name(store)}.retain"
        store.log_impression(impression("i0", 1.0, query="old query"))
        store.record_click("i0", "d4")
        store.flush()
        time.sleep(0.01)
        before = time.time()
        time.sleep(0.01)
        store.log_impression(impression("i1", 2.0, query="new query"))
        store.flush()
        reader = opened()
        old_before = reader.click_counts("old query", ["d4", "d3"])
        new_before = reader.click_counts("new query", ["d4", "d3"])
        try:
            done = store.retain(before, [Reader(("x",), 0)])
        except ConfigError:
            return
        _equal(done.forgotten, 1, f"{where}: queries forgotten")
        later = opened()
        old, total = later.click_counts("old query", ["d4", "d3"])
        _equal(old[:, :2].tolist(), [[0.0, 0.0], [0.0, 0.0]], f"{where}: the old query's counts")
        _equal(old[:, 2:].tolist(), old_before[0][:, 2:].tolist(),
               f"{where}: the counts over all queries")
        _equal(tuple(total), tuple(old_before[1]), f"{where}: the total")
        new = later.click_counts("new query", ["d4", "d3"])
        _equal(new[0].tolist(), new_before[0].tolist(), f"{where}: the new query's counts")
        _equal(store.retain(before, [Reader(("x",), 0)]).forgotten, 0, f"{where}: again")


def check_retention_compacts_the_kept_experiment(open_store: OpenStore) -> None:
    """The pages of ``keep_experiment`` lose their features but stay for its report."""
    with _Opened(open_store) as opened:
        store = opened()
        where = f"{_name(store)}.retain"
        store.log_impression(impression("x0", 1.0, arm=None, experiment="trial",
                                        teams=["p", "r", "p"]))
        store.log_impression(impression("x1", 2.0, arm=None, experiment="earlier",
                                        teams=["p"] * 3))
        store.record_click("x0", "d3")
        store.close_impressions(10.0)
        rows = store.experiment_rows("trial", 0, 10)
        everyone = [Reader(("p",), 2), Reader(("r",), 2)]
        try:
            done = store.retain(100.0, everyone, keep_experiment="trial")
        except ConfigError:
            return
        _equal((done.deleted, done.compacted), (1, 1), where)
        kept = store.get_impression("x0")
        _equal((kept.features, kept.clicked, kept.shown_ids()), (None, ["d3"], ["d4", "d3", "d2"]),
               f"{where}: the kept page")
        _equal(store.experiment_rows("trial", 0, 10), rows, f"{where}: the report's rows")
        _equal(store.experiment_rows("earlier", 0, 10), [], f"{where}: another experiment's")
        _equal(store.retain(100.0, everyone, keep_experiment="trial").compacted, 0,
               f"{where}: compacted once")
        _equal(store.retain(100.0, everyone).deleted, 1, f"{where}: once no longer running")


#: The checks of each part of the interface.
STORE_CHECKS: dict[type, list[Callable[[OpenStore], None]]] = {
    ImpressionLog: [
        check_impressions_read_back_as_logged,
        check_a_click_is_validated_and_counted_once,
        check_a_later_page_counts_positions_in_the_whole_ranking,
        check_a_batch_of_clicks_has_an_outcome_per_click,
        check_closing_numbers_impressions_in_order,
        check_closing_with_a_limit_and_reading_by_arm,
        check_a_lean_read_leaves_out_only_what_no_click_or_reward_needs,
        check_a_reward_is_replaced_while_open_and_frozen_after,
        check_first_pages_and_experiment_rows,
        check_closed_first_pages_are_counted,
        check_pages_since_reads_the_window,
        check_writes_are_seen_by_every_object,
        check_clicks_racing_the_close_are_counted_or_refused,
    ],
    ClickCounts: [
        check_click_counts_add_up,
        check_position_bias_counts_the_randomised_pairs,
    ],
    Coordination: [
        check_experiment_state_changes_are_atomic,
        check_request_counts_are_summed_across_objects,
        check_trainer_leadership_has_one_holder,
        check_the_trainer_lock_excludes_other_objects,
        check_the_trainer_status_is_shared,
        check_the_signing_secret_is_one_for_the_store,
    ],
    Maintenance: [
        check_stats_count_the_log,
        check_a_sound_store_passes_its_health_checks,
        check_retention_removes_only_what_every_reader_has_applied,
        check_retention_forgets_the_counts_of_queries_searched_no_more,
        check_retention_compacts_the_kept_experiment,
    ],
}
