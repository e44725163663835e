"""Every position can move (through the real HTTP API): a result the learner ranks k-th,
clicked on its impressions with nothing else clicked, ranks higher, for every k from 2 to 10
and every coactive learner at its defaults (and the default learner with prior_steps 0),
also when the engine scores every candidate the same. It rises while the clicks arrive, once
they judge it better than a result shown with it: the query's page is then specialised by its
click lift. Training then teaches the general model those judgments at its own ranking
(docs/algorithms.md, "General model and query specialisation"): when the engine's scores
differ, its model changes; when they tie, no feature that holds for any query tells the
results apart, and the general model rightly learns nothing from this one query."""

import shutil

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.core.plugins import backend_class, get_plugin_manager
from tests.support.configs import write_config
from tests.support.servers import LiveServer

COACTIVE = ["preference_perceptron", "batch_preference_perceptron",
            "exponentiated_preference_perceptron", "convex_preference_perceptron",
            "second_order_preference_perceptron"]
#: The default learner without its starting ranking: the click lifts move the result only
#: through the weights it learns from the pair feedback.
LEARNING_ALONE = ("preference_perceptron", {"prior_steps": 0})
QUERY = "espresso grinder"
SEARCHES = 20


def tied_documents(n=40):
    """Documents the query matches equally: the same words in every field, and one word of
    its own (as long as the others) that the query does not contain."""
    return [{"id": f"t{i:02d}", "title": f"espresso grinder {chr(97 + i % 26)}x{i // 26}y",
             "body": f"an espresso grinder review {chr(97 + i % 26)}x{i // 26}y"}
            for i in range(n)]


@pytest.fixture(scope="module", params=["engine scores differ", "engine scores tie"])
def index(request, tmp_path_factory, corpus):
    folder = tmp_path_factory.mktemp("index")
    documents = corpus.documents if request.param == "engine scores differ" \
        else tied_documents()
    config = load_config(write_config(folder, features={"numeric_fields": []}))
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents(((str(i), d) for i, d in enumerate(documents)), recreate=True)
    candidates = backend.search(QUERY, 100)
    scores = candidates.scores[:12]
    if request.param == "engine scores tie":
        assert scores.max() == scores.min()
        assert np.ptp(candidates.field_scores[:12], axis=0).max() == 0
    else:
        assert len(set(scores.tolist())) > 6
    TIED[folder / "index"] = request.param == "engine scores tie"
    return folder / "index"


#: Whether an index of the fixture scores every candidate the same.
TIED: dict = {}


def argmax_order(page):
    """The hits in the learner's own order (by score): what it ranks, before the pair
    perturbation of what it shows."""
    return [hit["id"] for hit in sorted(page["hits"], key=lambda h: -h["score"])]


@pytest.mark.parametrize("learner", COACTIVE + [LEARNING_ALONE])
@pytest.mark.parametrize("k", range(2, 11))
def test_a_result_clicked_at_rank_k_rises(tmp_path, index, learner, k):
    shutil.copytree(index, tmp_path / "index")
    name, params = learner if isinstance(learner, tuple) else (learner, {})
    path = write_config(tmp_path, features={"numeric_fields": []},
                        learner={"name": name, "params": params, "seed": k},
                        trainer={"enabled": False, "feedback_window": 3600.0})
    live = LiveServer(path)
    try:
        first = live.post("/search", {"query": QUERY, "size": 10}).json()
        target = argmax_order(first)[k - 1]
        page, shown_at = first, []
        for _ in range(SEARCHES):
            ranks = {hit["id"]: hit["rank"] for hit in page["hits"]}
            if target in ranks:  # the user clicks it wherever it is shown, nothing else
                shown_at.append(ranks[target])
                answer = live.post("/click", {"impression_id": page["impression_id"],
                                              "doc_id": target})
                assert answer.status_code == 202
            page = live.post("/search", {"query": QUERY, "size": 10}).json()
        # it was first shown at rank k (give or take the pair perturbation), and clicked on
        # nearly every impression, nothing else ever
        assert abs(shown_at[0] - k) <= 1 and len(shown_at) >= SEARCHES - 2
        assert argmax_order(page).index(target) + 1 < k  # its clicks specialise the page
        report = live.service.trainer.run_once(close_all=True)  # `reranker train`
        assert report.clicks == len(shown_at)
        if not TIED[index]:
            assert report.version == 1 and report.updates > 0
        after = live.post("/search", {"query": QUERY, "size": 10}).json()
        assert argmax_order(after).index(target) + 1 < k, (k, argmax_order(after))
    finally:
        live.stop()
