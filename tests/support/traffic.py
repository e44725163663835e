"""Searches and clicks for the tests to send: pages the default learner learns from, and
simulated users who click by the generated corpus's hidden labels."""

from __future__ import annotations

import itertools

import numpy as np

from reranker.offline.click_models import cascade_model
from reranker.offline.democorpus import generate_corpus

#: The queries :func:`learn` searches in turn: each is clicked on a page or two, so that no
#: query's own clicks judge one of its results (its pages stay the general model's, which
#: learns from their clicks; a query clicked again and again is specialised, and teaches
#: the general model only the pairs its clicks judge: tests/learners/test_specialization.py).
LEARNING_QUERIES = itertools.cycle([query for query, _ in generate_corpus(seed=7).queries])


def learn(search, click, pages: int = 1, query: str | None = None) -> None:
    """Pages the perceptron learns from: clicks on ranks 6 and 3, one of which is the lower
    result of its pair whichever random pairing the page used (of the next queries of
    :data:`LEARNING_QUERIES`, or of ``query``)."""
    for _ in range(pages):
        page = search(query or next(LEARNING_QUERIES))
        for position in (5, 2):
            click(page["impression_id"], page["hits"][position]["id"])


def users_search(server, corpus, searches, seed=0, model="navigational", **body):
    """Simulated users search through HTTP and click with a cascade model on the hidden
    labels; returns the pages."""
    rng = np.random.default_rng(seed)
    users = cascade_model(model, 3)
    pages = []
    for t in range(searches):
        query, topic = corpus.queries[rng.integers(len(corpus.queries))]
        request = {"query": query, "size": 10, **body}
        if "user_id" in body:
            request["user_id"] = f"user{t % 50}"
        page = server.post("/search", request).json()
        ids = [hit["id"] for hit in page["hits"]]
        labels = np.array([corpus.label(topic, d) for d in ids])
        for j in np.flatnonzero(users.clicks(labels, rng)):
            served_to = {"user_id": request["user_id"]} if "user_id" in request else {}
            answer = server.post("/click", {"impression_id": page["impression_id"],
                                            "doc_id": ids[j], **served_to})
            assert answer.status_code == 202, answer.text
        pages.append((page, topic))
    return pages
