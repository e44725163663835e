"""Candidates joined with the documents a pin adds (``Candidates.plus``): rows in order, each
document's source from its own search, and ``total`` counting only what the query did not
match already."""

import numpy as np

from reranker.backends import Candidates


def candidates(ids, scores, total=None, tag="search"):
    def load(indices):
        return [{"id": ids[i], "from": tag} for i in indices]

    n = len(ids)
    return Candidates(ids=list(ids), scores=np.asarray(scores, dtype=float),
                      field_scores=np.ones((n, 2)), numeric=np.full((n, 1), np.nan),
                      load_sources=load, total=total)


def test_pinned_documents_follow_the_search_s_and_load_from_their_own_read():
    found = candidates(["a", "b"], [3.0, 2.0], total=40)
    pinned = candidates(["x", "y"], [0.0, 1.5], tag="pin")  # x does not match, y ranked 41st
    both = found.plus(pinned)
    assert both.ids == ["a", "b", "x", "y"] and both.field_scores.shape == (4, 2)
    assert both.scores.tolist() == [3.0, 2.0, 0.0, 1.5]
    assert both.total == 41  # y matched the query: it was counted already
    assert both.load_sources([3, 0, 2]) == [{"id": "y", "from": "pin"},
                                            {"id": "a", "from": "search"},
                                            {"id": "x", "from": "pin"}]
    assert found.plus(candidates([], [])) is found
    assert candidates(["a"], [1.0]).plus(pinned).total is None  # (unknown stays unknown)
