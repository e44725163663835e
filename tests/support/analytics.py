"""Known pages and clicks for the search analytics' tests, and the figures they give."""

from __future__ import annotations

import numpy as np

from reranker.stores.conformance import impression

DAY = 86400.0

#: The figures of :func:`fill_pages`'s last seven days, per query, as the lists give them.
TEA = {"query": "tea kettle", "searches": 2, "pages": 3, "clicks": 3, "ctr": 0.6667,
       "mean_click_rank": 3.0, "no_result": 0, "no_click": 1, "moved": 1.2}
ESPRESSO = {"query": "espresso", "searches": 1, "pages": 1, "clicks": 1, "ctr": 1.0,
            "mean_click_rank": 1.0, "no_result": 0, "no_click": 0, "moved": 5.2}
ZZZ = {"query": "zzz", "searches": 1, "pages": 1, "clicks": 0, "ctr": None,
       "mean_click_rank": None, "no_result": 1, "no_click": 0, "moved": None}


def fill_pages(store, now: float) -> None:
    """Pages logged around ``now``, left open (the SQL stores read open pages too): two
    searches of "tea kettle" (one served d4 d3 d2 of the engine's d0 .. d4, clicked at
    ranks 1 and 3; one in the engine's order, not clicked) and a later page of it clicked
    at rank 5; "zzz", which found nothing; "Espresso", served in reverse of the engine's
    twelve, clicked at rank 1; and pages outside the last seven days: one older, one
    older still but logged last, one after ``now``."""
    old = impression("old", now - 8 * DAY, query="tea kettle", arm="a")
    first = impression("first", now - 100, query="Tea  Kettle", arm="a")
    as_engine = impression("as-engine", now - 90, query="tea kettle", arm="b")
    as_engine.ranking = np.arange(5)
    later = impression("later", now - 80, n=8, offset=3, query="tea kettle", arm="a")
    empty = impression("empty", now - 70, n=0, shown=0, query="zzz", arm=None)
    espresso = impression("espresso", now - 60, n=12, shown=10, query="Espresso", arm="b")
    late_old = impression("late-old", now - 9 * DAY, query="espresso", arm="b")
    future = impression("future", now + 10, query="espresso", arm="b")
    for page in (old, first, as_engine, later, empty, espresso, late_old, future):
        store.log_impression(page)
    store.record_click("old", "d4")
    store.record_click("first", "d4")  # rank 1
    store.record_click("first", "d2")  # rank 3
    store.record_click("later", "d3")  # rank 5: the later page shows d4 d3 d2 of d7 .. d0
    store.record_click("espresso", "d11")  # rank 1
