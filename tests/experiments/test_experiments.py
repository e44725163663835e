"""Several learners in one service: arms, the logged impression as the contract, interleaving,
multileaving and split experiments through the real HTTP API, promotion and the guard."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.core.errors import ConfigError, ModelLoadError
from reranker.core.plugins import get_plugin_manager
from reranker.experiments.interleaving import perturbed_list_log_probability
from reranker.features.clicks import click_lifts
from reranker.models.arms import arms_from_config
from reranker.offline.ranking_quality import ndcg
from reranker.serving.service import RerankerService
from reranker.stores.sql import SCHEMA_VERSION
from reranker.stores.sqlite import SQLiteStore
from tests.support import legacy_stores
from tests.support.configs import ENGINE, PERCEPTRON, RANDOM, experiment_config, write_config
from tests.support.servers import LiveServer, run_cli, wait_until
from tests.support.traffic import users_search

# -- arms --------------------------------------------------------------------------------------


def test_an_arm_is_its_learner_and_settings(workdir):
    base = load_config(write_config(workdir))
    pm = get_plugin_manager()
    (arm,) = arms_from_config(base, pm)
    assert arm.label == "preference_perceptron" and arm.id.startswith("preference_perceptron-")
    assert arms_from_config(load_config(write_config(workdir)), pm)[0].id == arm.id  # stable
    # the default spelled out is the same arm; another parameter value is another arm
    same = write_config(workdir, learner={"params": {"swap_probability": 0.5}})
    assert arms_from_config(load_config(same), pm)[0].id == arm.id
    other = write_config(workdir, learner={"params": {"swap_probability": 0.25}})
    assert arms_from_config(load_config(other), pm)[0].id != arm.id
    deeper = write_config(workdir, learner={"params": {}, "depth": 5})
    assert arms_from_config(load_config(deeper), pm)[0].id != arm.id
    seeded = write_config(workdir, learner={"seed": 3})  # a seed changes no model
    assert arms_from_config(load_config(seeded), pm)[0].id == arm.id


def test_configs_that_differ_in_a_parameter_keep_their_models_apart(workdir):
    first = RerankerService(load_config(write_config(workdir))).open()
    page = first.search("tea kettle", 10)
    # three ranks apart: one is the lower result of its pair whichever pairing the page
    # used, so the pass learns and saves version 1
    for position in (5, 2):
        first.click(page["impression_id"], page["hits"][position]["id"])
    assert first.trainer.run_once(close_all=True).applied == 1
    first.close()
    path = write_config(workdir, learner={"params": {"swap_probability": 0.25}})
    second = RerankerService(load_config(path)).open()
    try:
        assert second.model.version == 0  # a model of its own, from scratch
        assert second.models.dir != first.models.dir
        # the other arm's page is not its to learn from
        report = second.trainer.run_once(close_all=True)
        assert report.applied == 0 and report.versions == []
        # and the first arm's saved model is refused by it, naming the parameter
        saved = first.models.path(1)
        (second.models.dir / saved.name).write_bytes(saved.read_bytes())
        with pytest.raises(ModelLoadError, match="swap_probability = 0.5.*asks for 0.25"):
            second.models.load(1, second.factory)
    finally:
        second.close()


def test_a_switched_learner_never_learns_from_the_old_learners_pages(workdir):
    old = RerankerService(load_config(write_config(workdir))).open()
    for _ in range(3):
        page = old.search("tea kettle", 10)
        old.click(page["impression_id"], page["hits"][4]["id"])
    old.close()  # three pages, never trained on
    path = write_config(workdir, learner={"name": "online_ranknet"})
    new = RerankerService(load_config(path)).open()
    try:
        assert new.trainer.run_once(close_all=True).applied == 0
        page = new.search("tea kettle", 10)
        new.click(page["impression_id"], page["hits"][4]["id"])
        report = new.trainer.run_once(close_all=True)
        assert report.applied == 1 and report.clicks == 1  # its own page only
    finally:
        new.close()
    back = RerankerService(load_config(write_config(workdir))).open()
    try:  # the first learner, back again, learns its own three pages and not the other's
        assert back.trainer.run_once(close_all=True).applied == 3
    finally:
        back.close()


def test_the_model_folder_of_an_earlier_version_is_taken_over(workdir):
    service = RerankerService(load_config(write_config(workdir))).open()
    page = service.search("tea kettle", 10)
    for position in (3, 6):  # one of them teaches whichever pairing the page used
        service.click(page["impression_id"], page["hits"][position]["id"])
    service.trainer.run_once(close_all=True)
    arm_folder = service.models.dir
    service.close()
    # as the version before arms left it: <models>/<learner>/, impressions named by learner
    legacy = workdir / "models" / "preference_perceptron"
    arm_folder.rename(legacy)
    (legacy / "arm.json").unlink()
    with sqlite3.connect(workdir / "events.sqlite") as conn:
        conn.execute("UPDATE impressions SET arm = learner")
    service = RerankerService(load_config(write_config(workdir))).open()
    try:
        assert service.models.dir == arm_folder and not legacy.exists()
        assert service.model.version == 1
        page = service.search("tea kettle", 10)  # a new page of its own, and an old one
        service.click(page["impression_id"], page["hits"][2]["id"])
        with sqlite3.connect(workdir / "events.sqlite") as conn:
            conn.execute("INSERT INTO impressions SELECT seq + 100, id || 'x', created, query, "
                         "user_id, learner, model_version, feature_set, candidates, features, "
                         "n_shown, log_prob, teams, NULL, context, 'preference_perceptron', "
                         "NULL, 0, NULL FROM impressions WHERE seq = 1")
        assert service.trainer.run_once(close_all=True).applied == 2
    finally:
        service.close()
    # a folder of the same learner with other settings is left alone
    legacy.mkdir()
    (legacy / "model-000001.json").write_text((arm_folder / "model-000001.json").read_text())
    path = write_config(workdir, learner={"params": {"prior_steps": 10.0}})
    service = RerankerService(load_config(path)).open()
    try:
        assert legacy.exists() and service.model.version == 0
    finally:
        service.close()


def test_an_event_store_of_schema_2_is_migrated(tmp_path):
    path = tmp_path / "events.sqlite"
    legacy_stores.sqlite_store(path, [])
    with sqlite3.connect(path) as conn:  # from schema 3, the schema the version before wrote
        for column in ("arm", "experiment", "page_offset", "page_key"):
            conn.execute(f"ALTER TABLE impressions DROP COLUMN {column}")
        conn.execute("DROP TABLE experiment_state")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        conn.execute("INSERT INTO impressions (id, created, query, learner, model_version, "
                     "doc_ids, feature_names, features, ranking, n_shown) VALUES ('i0', 0, 'q', "
                     "'online_ranknet', 3, '[\"a\"]', '[\"f\"]', ?, ?, 1)",
                     (np.zeros(1).tobytes(), np.zeros(1, dtype=np.int32).tobytes()))
    store = SQLiteStore(path)
    imp = store.get_impression("i0")
    assert (imp.arm, imp.experiment, imp.learner) == ("online_ranknet", None, "online_ranknet")
    assert store.experiment_state("x") == {}
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == (str(SCHEMA_VERSION),)


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("experiment, message", [
    ({"mode": "interleave", "arms": {"a": PERCEPTRON}}, "at least two arms"),
    ({"mode": "interleave", "arms": {"a": PERCEPTRON, "b": RANDOM, "c": ENGINE}},
     "exactly two arms, got 3; use multileave"),
    ({"mode": "split", "arms": {"a": PERCEPTRON, "b": RANDOM}, "shares": {"c": 1}},
     "experiment.shares.c: no arm 'c'"),
    ({"mode": "split", "arms": {"a": PERCEPTRON, "b": RANDOM}, "shares": {"a": 0}},
     "experiment.shares.a must be a positive number"),
    ({"mode": "interleave", "arms": {"a": PERCEPTRON, "b": RANDOM}, "shares": {"a": 2}},
     "experiment.shares divide the traffic between the arms of a split; with mode "
     "interleave every arm is on every page"),
    ({"mode": "split", "arms": {"a": PERCEPTRON, "b": RANDOM}, "control": "z"},
     "experiment.control 'z' is not one of the arms"),
    ({"mode": "split", "arms": {"a": PERCEPTRON, "b": RANDOM}, "start": "next week"},
     "experiment.start must be an ISO 8601"),
    ({"mode": "split", "arms": {"a": PERCEPTRON, "b": RANDOM}, "assign_by": ["cookie"]},
     "'cookie' is not a request field"),
    ({"mode": "split", "arms": {"a": PERCEPTRON, "b": {"name": "perceptron"}}},
     "experiment.arms.b.name: unknown learner 'perceptron'"),
    ({"mode": "split", "arms": {"a": PERCEPTRON, "b": {"name": "random", "parms": {}}}},
     "experiment.arms.b: unknown key 'parms'"),
    ({"mode": "split", "arms": {"a": PERCEPTRON,
                                "b": {"name": "random", "params": {"x": 1}}}},
     "experiment.arms.b.params: learner 'random' has no parameter 'x'"),
    ({"mode": "split", "arms": {"a": PERCEPTRON, "b": RANDOM}, "shares": {"a": 0.9}},
     "experiment.shares gives no share to b: give every arm its share"),
    ({"name": "forgot-mode", "arms": {"a": PERCEPTRON, "b": RANDOM}},
     "experiment.arms is given but experiment.mode is not"),
    ({"mode": "interleave", "arms": {"a": RANDOM, "b": {
        "name": "backend_order", "params": {"feature": "field_score:titel"}}}},
     "experiment.arms.b.params: .*no feature named 'field_score:titel'"),
])
def test_bad_experiment_configs_name_the_key(workdir, experiment, message):
    path = write_config(workdir, experiment=experiment)
    with pytest.raises(ConfigError, match=message):
        RerankerService(load_config(path))


@pytest.mark.parametrize("mode", ["interleave", "multileave"])
def test_a_learner_that_cannot_learn_from_mixed_pages_is_refused_there_and_taken_in_a_split(
        workdir, mode):
    """EELS learns from the rewards of its own uniformly random pages only: mixed with
    another arm's results it would never learn, so the configuration is refused at start-up,
    naming the arm, the learner and the mode that works; a split takes it."""
    eels = {"name": "eels", "params": {"positions": 10}}
    arms = {"a": PERCEPTRON, "b": eels} if mode == "interleave" else \
        {"a": PERCEPTRON, "b": eels, "c": ENGINE}
    with pytest.raises(ConfigError, match=(
            f"experiment.arms.b: learner 'eels' learns only from pages it ranks itself, and "
            f"in experiment.mode {mode} .* compare it with experiment.mode: split")):
        RerankerService(load_config(write_config(workdir, experiment={"mode": mode,
                                                                      "arms": arms})))
    service = RerankerService(load_config(write_config(
        workdir, experiment={"mode": "split", "arms": arms})))
    assert service.by_label["b"].spec.learner == "eels"


# -- interleaving through the HTTP API ------------------------------------------------------


def test_an_interleaved_experiment_logs_who_showed_what_and_finds_the_better_arm(workdir,
                                                                                   corpus):
    server = LiveServer(experiment_config(workdir, arms={"engine": ENGINE,
                                                          "random": RANDOM}))
    try:
        pages = users_search(server, corpus, 250)
        page = pages[0][0]
        assert page["experiment"] == "trial" and page["learner"] == "interleave"
        imp = server.service.events.get_impression(page["impression_id"])
        assert imp.arm is None and len(imp.teams) == imp.n_shown
        assert set(imp.teams) == {"engine", "random"}
        logged = imp.context["arms"]
        assert set(logged) == {"engine", "random"}
        # the logged probability is the mixed page's (team draft, then randomised pairs),
        # given the arms' own rankings, which are logged too
        rankings = [np.array(logged[label]["ranking"] + [i for i in range(len(imp.doc_ids))
                                                           if i not in logged[label]["ranking"]])
                    for label in ("engine", "random")]
        assert imp.log_prob == pytest.approx(
            perturbed_list_log_probability(rankings, imp.ranking[: imp.n_shown]))
        assert logged["random"]["log_prob"] < 0 and logged["engine"]["log_prob"] is None
        server.service.trainer.run_once(close_all=True)
        status = server.get("/experiments").json()
        assert status["mode"] == "interleave" and status["impressions"] == 250
        (pair,) = status["pairs"]
        assert pair["arms"] == ["engine", "random"]
        assert pair["wins"] > pair["losses"] and pair["significant"]
        assert pair["winner"] == "engine" and pair["interval"][0] > 0.5
        assert pair["always_valid_p"] <= 0.05 and pair["p_value"] < pair["always_valid_p"]
        assert status["arms"]["engine"]["metrics"]["mrr"]["value"] > \
            status["arms"]["random"]["metrics"]["mrr"]["value"]
        assert len(status["arms"]["engine"]["curve"]) == 5  # windows of 50
    finally:
        server.stop()


def test_every_arm_of_an_interleaved_experiment_learns_from_the_mixed_pages(
        workdir, corpus):
    server = LiveServer(experiment_config(workdir))
    try:
        users_search(server, corpus, 150)
        report = server.service.trainer.run_once(close_all=True)
        perceptron = report.arms["perceptron"]
        assert perceptron.applied == 150 and perceptron.updates > 10
        # it learns from every click on the mixed pages, not only those credited to it
        status = server.get("/experiments").json()["arms"]
        assert perceptron.clicks == status["perceptron"]["clicks"] == \
            status["perceptron"]["credited_clicks"] + status["random"]["credited_clicks"]
        assert server.service.by_label["perceptron"].model.version >= 1
    finally:
        server.stop()


def test_mixed_lists_give_every_arm_the_page_with_its_randomised_pairs(workdir, corpus,
                                                                        monkeypatch):
    server = LiveServer(experiment_config(workdir))
    try:
        offsets, swaps = set(), 0
        for _ in range(40):
            page = server.post("/search", {"query": "tea kettle", "size": 10}).json()
            ids = [hit["id"] for hit in page["hits"]]
            server.post("/click", {"impression_id": page["impression_id"], "doc_id": ids[3]})
            imp = server.service.events.get_impression(page["impression_id"])
            offsets.add(imp.context["pair_offset"])
            swaps += len(imp.context["swapped"])
            for arm in server.service.arms:
                X, feedback = arm.feedback(imp)  # the features the arm's model has
                columns = [imp.feature_names.index(n) for n in arm.factory.feature_names]
                assert np.array_equal(X, imp.features[:, columns])
                assert feedback.ranking.tolist() == imp.ranking.tolist()  # the page shown
                assert [imp.doc_ids[i] for i in feedback.clicked] == [ids[3]]
                assert feedback.context == {key: imp.context[key] for key in
                                            ("pair_offset", "swapped", "swap_probability",
                                             "pair_depth")}
        # a fair coin picks the pairing, and about half of the pairs inside the page swap
        assert offsets == {0, 1} and 0.35 < swaps / (40 * 4.5) < 0.65
        # a learner whose update needs the whole list's probability takes none of it
        arm = server.service.by_label["perceptron"]
        cls = arm.factory.learner_cls
        monkeypatch.setattr(cls, "capabilities",
                            replace(cls.capabilities, learns_from_mixed_lists=False))
        assert arm.feedback(imp) is None
    finally:
        server.stop()


def test_a_multileaved_experiment_compares_every_pair(workdir, corpus):
    arms = {"engine": ENGINE, "random": RANDOM, "perceptron": PERCEPTRON}
    # a seeded service: the same team drafts every run (the searches come one at a time)
    server = LiveServer(experiment_config(workdir, mode="multileave", arms=arms,
                                          learner={"seed": 11}))
    try:
        pages = users_search(server, corpus, 200)
        imp = server.service.events.get_impression(pages[-1][0]["impression_id"])
        assert set(imp.teams) <= set(arms) and len(set(imp.teams)) == 3
        server.service.trainer.run_once(close_all=True)
        status = server.get("/experiments").json()
        pairs = {frozenset(p["arms"]): p for p in status["pairs"]}
        assert set(pairs) == {frozenset(p) for p in (("engine", "random"),
                                                     ("engine", "perceptron"),
                                                     ("random", "perceptron"))}
        assert pairs[frozenset(("engine", "random"))]["winner"] == "engine", status["pairs"]
        assert pairs[frozenset(("random", "perceptron"))]["winner"] == "perceptron", \
            status["pairs"]
    finally:
        server.stop()


def test_a_split_experiment_is_sticky_and_compares_the_arms(workdir, corpus):
    server = LiveServer(experiment_config(workdir, mode="split",
                                          arms={"engine": ENGINE, "random": RANDOM}))
    try:
        seen = {}
        for user in ("ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal"):
            arms = {server.post("/search", {"query": "tea", "user_id": user}).json()["arm"]
                    for _ in range(4)}
            assert len(arms) == 1  # the same user always sees the same arm
            seen[user] = arms.pop()
        assert set(seen.values()) == {"engine", "random"}
        by_session = {server.post("/search", {"query": "tea", "session_id": "s1"}).json()["arm"]
                      for _ in range(4)}
        assert len(by_session) == 1
        pages = users_search(server, corpus, 400, user_id=True)
        imp = server.service.events.get_impression(pages[0][0]["impression_id"])
        label = pages[0][0]["arm"]
        assert imp.arm == server.service.by_label[label].id and set(imp.teams) == {label}
        server.service.trainer.run_once(close_all=True)
        status = server.get("/experiments").json()
        (pair,) = status["pairs"]
        assert pair["wins"] + pair["losses"] + pair["ties"] > 100
        assert pair["win_rate"] > 0.5 and pair["winner"] in (None, "engine")
        engine, random_ = status["arms"]["engine"], status["arms"]["random"]
        assert engine["impressions"] + random_["impressions"] == status["impressions"]
        assert engine["metrics"]["mrr"]["value"] > random_["metrics"]["mrr"]["value"]
    finally:
        server.stop()


# -- promotion and the guard -------------------------------------------------------------------


def test_promote_makes_an_arm_the_sole_learner(workdir, corpus):
    path = experiment_config(workdir)
    server = LiveServer(path)
    try:
        users_search(server, corpus, 30)
        server.service.trainer.run_once(close_all=True)
        failed = run_cli("promote", "-c", str(path), "nobody", check=False)
        assert failed.returncode == 1 and "no arm 'nobody' (arms: perceptron, random)" \
            in failed.stderr
        result = run_cli("promote", "-c", str(path), "perceptron")
        assert "promoted 'perceptron'" in result.stdout and "name: preference_perceptron" \
            in result.stdout
        server.service.experiment._cache.read_at = -1e18  # as a second passes
        version = server.service.by_label["perceptron"].model.version
        for _ in range(5):
            page = server.post("/search", {"query": "tea kettle"}).json()
            assert page["arm"] == "perceptron" and page["experiment"] is None
            assert page["model_version"] == version
        status = server.get("/experiments").json()
        assert status["status"] == "promoted" and status["promoted"] == "perceptron"
        assert status["arms"]["random"]["status"] == "stopped"
        # the promoted arm keeps learning; the other's folder stays for a rollback
        server.post("/click", {"impression_id": page["impression_id"],
                               "doc_id": page["hits"][6]["id"]})
        assert server.service.trainer.run_once(close_all=True).arms["perceptron"].applied >= 5
        assert server.service.by_label["random"].models.dir.exists()
    finally:
        server.stop()


def test_the_guard_holds_a_losing_arm_and_promotes_a_winning_one(workdir, corpus):
    path = experiment_config(workdir, arms={"engine": ENGINE, "random": RANDOM},
                             promote="auto", control="engine", share=0.5, min_impressions=100,
                             min_duration=0)
    server = LiveServer(path)
    try:
        pages = users_search(server, corpus, 300)
        mixed = sum(page["experiment"] == "trial" for page, _ in pages)
        assert 100 < mixed < 200  # half of the traffic is interleaved
        server.service.trainer.run_pass()  # the guard runs after each training pass
        status = server.get("/experiments").json()
        assert status["held"] == ["random"] and status["arms"]["random"]["status"] == "held"
        assert status["promoted"] is None
        assert status["why"]["random"].startswith("lost to engine (win rate ")
        for _ in range(10):  # the losing arm is no longer served
            page = server.post("/search", {"query": "tea"}).json()
            assert page["arm"] == "engine" and page["experiment"] is None
        # promoting it by hand takes --force, and then it is held no more
        refused = run_cli("promote", "-c", str(path), "random", check=False)
        assert refused.returncode == 1 and "'random' is held" in refused.stderr \
            and "--force" in refused.stderr
        assert server.get("/experiments").json()["promoted"] is None
        run_cli("promote", "-c", str(path), "random", "--force")
        # (the service reads the shared state again within Experiment.STATE_REFRESH)
        wait_until(lambda: server.service.experiment_status()["promoted"] == "random",
                   timeout=10.0)
        assert server.service.experiment_status()["held"] == []
    finally:
        server.stop()
    # with the default guard, 200 pages are too few to promote the winner
    path = experiment_config(workdir, arms={"random": RANDOM, "engine": ENGINE},
                             promote="auto", control="random", name="second")
    server = LiveServer(path)
    try:
        users_search(server, corpus, 200)
        server.service.trainer.run_pass()
        status = server.get("/experiments").json()
        assert status["pairs"][0]["significant"] and status["promoted"] is None
        assert status["guard"]["held_back"]["arm"] == "engine"
        assert status["guard"]["held_back"]["because"].endswith(
            "closed pages of the 1000 experiment.min_impressions asks")
        assert any(note["text"].startswith("held back from promotion: ")
                   for note in status["notes"])
    finally:
        server.stop()
    path = experiment_config(workdir, arms={"random": RANDOM, "engine": ENGINE},
                             promote="auto", control="random", name="second",
                             min_impressions=100, min_duration=0)
    server = LiveServer(path)
    try:
        server.service.trainer.run_pass()
        status = server.get("/experiments").json()
        assert status["promoted"] == "engine" and status["status"] == "promoted"
        assert status["guard"]["promoted_at"] is not None
        assert "after 200 closed pages" in status["why"]["engine"]
        assert any(note["text"].startswith("engine was promoted: beat random (win rate ")
                   for note in status["notes"])
        assert server.post("/search", {"query": "tea"}).json()["arm"] == "engine"
    finally:
        server.stop()


def test_report_prints_the_results_and_writes_html(workdir, corpus, tmp_path):
    path = experiment_config(workdir, arms={"engine": ENGINE, "random": RANDOM})
    server = LiveServer(path)
    try:
        users_search(server, corpus, 120)
        server.service.trainer.run_once(close_all=True)
        status = server.get("/experiments").json()
    finally:
        server.stop()
    html = tmp_path / "report.html"
    result = run_cli("report", "-c", str(path), "--html", str(html))
    (pair,) = status["pairs"]
    assert f"{pair['wins']}" in result.stdout and "engine" in result.stdout
    assert html.exists() and "<svg" in html.read_text()
    # piped, every arm's row is whole (no label cut to "ra…")
    lines = result.stdout.splitlines()
    arms_table = "\n".join(lines[next(i for i, line in enumerate(lines)
                                      if line.strip() == "Arms"):])
    for label, arm in status["arms"].items():
        row = next(line for line in arms_table.splitlines() if f" {label} " in line)
        assert arm["learner"] in row and arm["status"] in row and "\u2026" not in row
    as_json = json.loads(run_cli("report", "-c", str(path), "--json").stdout)
    assert as_json["pairs"][0]["wins"] == pair["wins"]
    # the command and the service compute one report: the same pairs, cells and verdicts
    assert as_json["report"]["pairs"] == status["report"]["pairs"]
    (verdict,) = status["report"]["pairs"]
    assert verdict["sentence"] in " ".join(result.stdout.split())
    missing = run_cli("report", "-c", str(path), "--html", str(tmp_path / "no" / "r.html"),
                      check=False)
    assert missing.returncode == 2 and "--html" in missing.stderr and "does not exist" in \
        missing.stderr and "Traceback" not in missing.stderr
    no_experiment = write_config(workdir, experiment={"mode": None})
    failed = run_cli("report", "-c", str(no_experiment), check=False)
    assert failed.returncode == 1 and "has no experiment" in failed.stderr


def test_without_an_experiment_the_endpoints_say_so(live):
    for path in ("/experiments", "/dashboard"):
        answer = live.get(path)
        assert answer.status_code == 404 and "no experiment" in answer.json()["error"]["message"]


def test_outside_its_time_window_the_control_serves(workdir):
    path = experiment_config(workdir, start="2099-01-01T00:00:00Z", control="random")
    server = LiveServer(path)
    try:
        page = server.post("/search", {"query": "tea"}).json()
        assert page["arm"] == "random" and page["experiment"] is None
        assert server.get("/experiments").json()["status"] == "not started"
    finally:
        server.stop()


def own_quality(service, label, corpus):
    """An arm's own ranking (its general model, without the queries' own click lifts) of
    every query of the labelled corpus: its mean NDCG@10."""
    arm = service.by_label[label]
    model, columns = arm.model, arm.columns(service.spec.names)
    scores = []
    rng = np.random.default_rng(0)
    for query, topic in corpus.queries:
        candidates = service.backend.search(query, 100)
        clicks = click_lifts(service.events.click_counts(query, candidates.ids), 5.0)
        X = service.spec.build(candidates, clicks)[:, columns]  # the general model's
        ranking = model.rank(X, 10, rng).ranking[:10]
        labels = np.array([corpus.label(topic, candidates.ids[i]) for i in ranking])
        scores.append(ndcg(labels, corpus.labels(topic), 10))
    return float(np.mean(scores))


def test_an_arm_learns_in_an_experiment_as_it_does_alone(workdir, corpus):
    """The perceptron's own ranking (the general model's quality over every query, without
    the queries' own click lifts) improves as much interleaved with the engine as when it
    serves alone, within noise."""

    def quality(service, label):
        return own_quality(service, label, corpus)

    gains: dict[str, list[float]] = {"alone": [], "interleaved": []}
    for run in range(2):  # two runs of each: a single run's gain varies by about 0.03
        for name in ("alone", "interleaved"):
            store = {"path": f"{name}{run}.sqlite", "models": f"{name}{run}"}
            learner = {"seed": 11 + run}
            server = LiveServer(
                write_config(workdir, store=store, learner=learner) if name == "alone"
                else experiment_config(workdir, arms={"perceptron": PERCEPTRON,
                                                      "engine": ENGINE},
                                       store=store, learner=learner))
            try:
                label = "perceptron" if name == "interleaved" else "preference_perceptron"
                before = quality(server.service, label)
                users_search(server, corpus, 500, seed=3 + run)
                server.service.trainer.run_once(close_all=True)
                gains[name].append(quality(server.service, label) - before)
            finally:
                server.stop()
    gains = {name: float(np.mean(values)) for name, values in gains.items()}
    # (the general model alone, without the queries' own click lifts: at 500 searches its
    # pages are soon specialised, and it learns from the judged pairs only, +0.03 here)
    assert gains["alone"] > 0.015, gains
    # within noise: the mean of two runs varies by about 0.02 either way
    assert gains["interleaved"] > 0.015 and gains["interleaved"] > gains["alone"] - 0.06, gains


@pytest.mark.parametrize("learner", ["pdgd", "dbgd"])
def test_a_gradient_arm_interleaved_with_the_engine_learns_from_the_mixed_pages(
        workdir, corpus, learner):
    """PDGD and DBGD learn from the mixed pages they take part in (their rules on the pages'
    randomised pairs: docs/algorithms.md, "PDGD" and "DBGD"): through the live HTTP API,
    interleaved with the engine, the arm's model version grows, /experiments says it
    learned, and PDGD's own ranking of the labelled corpus improves (from the papers'
    uniformly random start, prior_steps 0, where its gain shows clearly: 0.36 to 0.65
    here). DBGD's random directions make its gain vary from run to run (from -0.11 to +0.21
    over five runs here), so only its learning is asserted."""
    gains = []
    for run in range(1):
        arms = {"learner": {"name": learner, "params": {"prior_steps": 0}}, "engine": ENGINE}
        store = {"path": f"events{run}.sqlite", "models": f"models{run}"}
        server = LiveServer(experiment_config(workdir, arms=arms, store=store,
                                              learner={"seed": 4 + run}))
        try:
            before = own_quality(server.service, "learner", corpus)
            users_search(server, corpus, 400, seed=8 + run)
            report = server.service.trainer.run_once(close_all=True)
            learned = report.arms["learner"]
            assert learned.applied == 400 and learned.updates > 20
            assert server.service.by_label["learner"].model.version >= 1
            gains.append(own_quality(server.service, "learner", corpus) - before)
            status = server.get("/experiments").json()["arms"]["learner"]
            assert status["learning"]["updates"] == learned.updates
            assert "not_learning" not in status
        finally:
            server.stop()
    if learner == "pdgd":
        assert gains[0] > 0.15, gains


def test_an_experiment_of_two_learners_on_each_store(workdir, corpus, store_section):
    """The issue's experimenter on SQLite and PostgreSQL: a perceptron and pdgd interleaved
    on 80% of the searches, started evenly; both arms learn from the mixed pages, the
    traffic share counts the searches outside, and /explain of a mixed page gives each
    arm's ranking, probability and lesson."""
    arms = {"perceptron": PERCEPTRON, "pdgd": {"name": "pdgd"}}
    server = LiveServer(experiment_config(workdir, arms=arms, store=store_section, share=0.8,
                                          even_start=True))
    try:
        pages = users_search(server, corpus, 200, user_id=True)
        server.service.trainer.run_once(close_all=True)
        status = server.get("/experiments").json()
        mixed = sum(page["experiment"] == "trial" for page, _ in pages)
        assert status["impressions"] == mixed and 120 < mixed < 190
        assert status["traffic"]["searches"] == 200
        assert status["traffic"]["in_experiment"] == mixed
        assert status["traffic"]["outside"] == 200 - mixed
        for label in arms:
            arm = status["arms"][label]
            assert arm["learning"]["updates"] > 0 and arm["model_version"] >= 1, label
            assert "not_learning" not in arm and "learned_before" not in arm
        page = next(page for page, _ in pages if page["experiment"] == "trial")
        explained = server.post("/explain", {"impression_id": page["impression_id"]}).json()
        assert set(explained["arms"]) == set(arms)
        assert all(arm["applied"] for arm in explained["arms"].values())
    finally:
        server.stop()


def split_tally(window: int = 100):
    from reranker.experiments.outcomes import Tally
    from reranker.experiments.spec import ExperimentSpec

    return Tally(ExperimentSpec(name="split", mode="split", labels=("learner", "engine"),
                                shares={"learner": 3.0, "engine": 1.0}, window=window))


def test_a_split_compares_pages_of_the_same_time_whatever_the_shares():
    """No page gets a click at first; then the arm with three times the traffic, which has
    learned, gets the first click on top, the engine third. Compared with the engine's
    pages of the same time, it wins from the first comparison on; paired with its own
    early pages queued up by its larger share (the i-th with the i-th), the engine would
    have won."""
    tally = split_tally()
    order = ["learner", "learner", "learner", "engine"]
    for i in range(400):  # warm-up: no clicks on either arm
        arm = order[i % 4]
        tally.add(arm, [arm] * 10, 10, [])
    for i in range(2000):
        arm = order[i % 4]
        tally.add(arm, [arm] * 10, 10, [1] if arm == "learner" else [3])
    (pair,) = tally.pair_summaries()
    assert pair["winner"] == "learner"
    assert (pair["wins"], pair["losses"], pair["ties"]) == (500, 0, 100)  # every engine page


def test_a_split_with_equal_shares_pairs_every_page():
    tally = split_tally()
    rng = np.random.default_rng(3)
    arms = rng.permutation(["learner"] * 500 + ["engine"] * 500)
    for arm in arms:  # a random order: runs of one arm within the window
        tally.add(str(arm), [str(arm)] * 10, 10, [int(rng.integers(1, 11))])
    (pair,) = tally.pair_summaries()
    assert pair["wins"] + pair["losses"] + pair["ties"] >= 490


def test_a_split_of_three_arms_pairs_each_pair_on_its_own():
    """Three arms with shares 5:2:1: every pair is compared on its own pages, each page once
    per pair, and the order of the arms' quality comes out."""
    from reranker.experiments.outcomes import Tally
    from reranker.experiments.spec import ExperimentSpec

    tally = Tally(ExperimentSpec(name="three", mode="split", labels=("a", "b", "c"),
                                 shares={"a": 5.0, "b": 2.0, "c": 1.0}))
    rng = np.random.default_rng(5)
    first = {"a": 1, "b": 2, "c": 3}  # where each arm's first click falls
    counts = {"a": 0, "b": 0, "c": 0}
    for _ in range(4000):
        arm = str(rng.choice(["a", "b", "c"], p=[5 / 8, 2 / 8, 1 / 8]))
        counts[arm] += 1
        tally.add(arm, [arm] * 10, 10, [first[arm]])
    summaries = {tuple(p["arms"]): p for p in tally.pair_summaries()}
    for (x, y), pair in summaries.items():
        compared = pair["wins"] + pair["losses"] + pair["ties"]
        assert compared <= min(counts[x], counts[y]) and compared > 0.95 * min(counts[x],
                                                                               counts[y])
        assert pair["winner"] == min(x, y, key=first.get)


def test_a_split_keeps_at_most_max_waiting_pages_of_an_arm():
    from reranker.experiments.outcomes import MAX_WAITING

    tally = split_tally()
    for _ in range(MAX_WAITING + 500):  # the engine gets no traffic for a while
        tally.add("learner", ["learner"] * 10, 10, [])
    waiting = tally._waiting[("learner", "engine")]
    assert len(waiting[0]) == MAX_WAITING and not waiting[1]
    for _ in range(MAX_WAITING + 10):  # then only the engine: pairs with the latest first
        tally.add("engine", ["engine"] * 10, 10, [1])
    (pair,) = tally.pair_summaries()
    assert pair["losses"] == MAX_WAITING and len(waiting[1]) == 10


def test_report_and_promote_name_a_store_that_is_not_there(workdir):
    missing = experiment_config(workdir, arms={"engine": ENGINE, "random": RANDOM},
                                store={"path": "nowhere.sqlite"})
    for command in (["report"], ["promote", "engine"]):
        result = run_cli(*command, "-c", str(missing), check=False)
        assert result.returncode == 1 and "nowhere.sqlite does not exist" in result.stderr
    assert not (workdir / "nowhere.sqlite").exists()


def test_an_arm_removed_from_the_config_leaves_the_others_clicks_on_their_pages_as_they_were():
    """Multileaved pages of three arms, read again by the two that stay: each keeps the
    clicks of the pages it took part in, the removed arm's included."""
    from reranker.experiments.outcomes import Tally
    from reranker.experiments.spec import ExperimentSpec

    def tally(labels):
        counted = Tally(ExperimentSpec(name="m", mode="multileave", labels=labels,
                                       shares={label: 1.0 for label in labels}))
        counted.add(None, ["a", "b", "c", "a", "b", "c"], 6, [2, 3, 6])
        return counted.page_clicks

    assert tally(("a", "b", "c")) == {"a": 3, "b": 3, "c": 3}
    assert tally(("a", "b")) == {"a": 3, "b": 3}


def test_a_promotion_of_an_arm_removed_from_the_config_is_void(workdir, corpus):
    """The promoted arm taken out of the configuration: the experiment runs again among the
    arms that stay (as the searches already did), /experiments says so, and the guard acts
    again."""
    arms = {"engine": ENGINE, "random": RANDOM, "perceptron": PERCEPTRON}
    path = experiment_config(workdir, mode="multileave", arms=arms, control="engine")
    server = LiveServer(path)
    try:
        users_search(server, corpus, 30)
    finally:
        server.stop()
    run_cli("promote", "-c", str(path), "random")
    path = experiment_config(workdir, mode="multileave",
                             arms={"engine": ENGINE, "perceptron": PERCEPTRON},
                             control="engine")
    server = LiveServer(path)
    try:
        status = server.get("/experiments").json()
        assert status["status"] == "running" and status["promoted"] is None
        assert "'random' was promoted but is no longer one of the arms" in status["note"]
        assert {arm["status"] for arm in status["arms"].values()} == {"serving"}
        assert server.service.experiment.promoted() is None
    finally:
        server.stop()


def test_promoting_a_significant_loser_by_hand_takes_force_and_a_replaced_promotion_is_said(
        workdir, corpus):
    path = experiment_config(workdir, arms={"engine": ENGINE, "random": RANDOM})
    server = LiveServer(path)
    try:
        users_search(server, corpus, 300)
        server.service.trainer.run_once(close_all=True)
        (pair,) = server.get("/experiments").json()["pairs"]
        assert pair["significant"] and pair["winner"] == "engine"
        refused = run_cli("promote", "-c", str(path), "random", check=False)
        assert refused.returncode == 1 and "arm 'random' loses to 'engine' significantly" \
            in refused.stderr and "--force" in refused.stderr
        run_cli("promote", "-c", str(path), "engine")
        replaced = run_cli("promote", "-c", str(path), "random", "--force")
        assert "(this replaces the promotion of 'engine')" in replaced.stdout
    finally:
        server.stop()


def test_report_on_a_renamed_experiment_says_which_the_store_holds(workdir, corpus):
    path = experiment_config(workdir)
    server = LiveServer(path)
    try:
        users_search(server, corpus, 20)
        server.service.trainer.run_once(close_all=True)
    finally:
        server.stop()
    renamed = experiment_config(workdir, name="trial-2")
    out = run_cli("report", "-c", str(renamed)).stdout
    assert "note: no page of experiment 'trial-2' is in the event store, which holds pages " \
           "of trial" in out


# -- where the arms start ----------------------------------------------------------------------


def test_an_arm_that_learned_before_is_named_and_even_start_starts_every_arm_afresh(
        workdir, corpus):
    """The perceptron learns alone first. An experiment that compares it with the engine
    names it as having learned before (its version and impressions); with
    experiment.even_start a new experiment starts it from its initial model as a new version
    (the old versions stay), learns on from there, and says so."""
    server = LiveServer(write_config(workdir))
    try:
        users_search(server, corpus, 60, seed=1)
        server.service.trainer.run_once(close_all=True)
        alone = server.service.model
        assert alone.version >= 1 and alone.progress.impressions == 60
    finally:
        server.stop()
    arms = {"perceptron": PERCEPTRON, "engine": ENGINE}
    server = LiveServer(experiment_config(workdir, arms=arms))
    try:
        status = server.get("/experiments").json()
        assert status["even_start"] is False
        perceptron = status["arms"]["perceptron"]
        assert perceptron["model_version"] == alone.version
        assert perceptron["learned_before"] == {"version": alone.version, "impressions": 60,
                                                "updates": alone.progress.updates}
        assert f"at version {alone.version}, after learning from 60 impressions" in \
            perceptron["started"]
        assert "learned_before" not in status["arms"]["engine"]
    finally:
        server.stop()
    server = LiveServer(experiment_config(workdir, arms=arms, name="even", even_start=True))
    try:
        arm = server.service.by_label["perceptron"]
        fresh = arm.model
        assert fresh.version == alone.version + 1 and fresh.progress.impressions == 0
        assert fresh.origin == {"restart_after": alone.version}  # as `models list` says
        assert alone.version in arm.models.versions()  # kept
        assert np.allclose(fresh.learner.w_, arm.factory.new().learner.w_)
        status = server.get("/experiments").json()["arms"]["perceptron"]
        assert status["model_version"] == fresh.version and "learned_before" not in status
        assert status["started"].startswith(f"from its initial model as version "
                                            f"{fresh.version} (experiment.even_start)")
        users_search(server, corpus, 40, seed=2)
        report = server.service.trainer.run_once(close_all=True)
        # the pages of before are not applied again: only the experiment's 40
        assert report.arms["perceptron"].applied == 40
        status = server.get("/experiments").json()["arms"]["perceptron"]
        assert status["learning"]["impressions"] == 40 and status["learning"]["updates"] > 0
    finally:
        server.stop()
    # started once: the same experiment run again does not start it afresh again
    server = LiveServer(experiment_config(workdir, arms=arms, name="even", even_start=True))
    try:
        assert server.service.by_label["perceptron"].model.progress.impressions == 40
    finally:
        server.stop()


def test_an_arm_that_learns_from_none_of_its_pages_is_flagged(workdir, corpus, monkeypatch):
    """A learner whose arm applies none of the mixed pages it took part in is flagged in
    /experiments and by `reranker report` once it took part in enough pages with a click."""
    server = LiveServer(experiment_config(workdir, arms={"perceptron": PERCEPTRON,
                                                         "engine": ENGINE}))
    cls = server.service.by_label["perceptron"].factory.learner_cls
    monkeypatch.setattr(cls, "capabilities",  # (after the start-up check)
                        replace(cls.capabilities, learns_from_mixed_lists=False))
    try:
        users_search(server, corpus, 60)
        server.service.trainer.run_once(close_all=True)
        status = server.get("/experiments").json()["arms"]
        flag = status["perceptron"]["not_learning"]
        clicked = status["perceptron"]["clicked_pages"]
        assert clicked >= 20 and f"took part in {clicked} pages with a click" in flag
        assert "learned from none of them" in flag
        assert "not_learning" not in status["engine"]  # a floor learns nothing by design
    finally:
        monkeypatch.undo()
        server.stop()
    printed = " ".join(run_cli("report", "-c", str(workdir / "config.yaml")).stdout.split())
    assert f"not learning: arm 'perceptron' (preference_perceptron) took part in {clicked} " \
           f"pages with a click" in printed


# -- the guard's guardrails and dry run -----------------------------------------------------------


def test_a_winner_that_breaks_a_guardrail_is_held_back():
    """An arm that wins the interleaved comparison with two clicks on some pages while its
    users leave more pages without a click than the control's: abandonment is a guardrail
    (non-inferiority margin 0.02), so the guard does not promote it; without that
    guardrail, clicks@3 alone lets it through."""
    from reranker.experiments.experiment import Experiment
    from reranker.experiments.spec import ExperimentSpec

    def experiment(guardrails):
        spec = ExperimentSpec(name="g", mode="interleave", labels=("a", "b"),
                              shares={"a": 1.0, "b": 1.0}, control="b", promote="auto",
                              guardrails=guardrails)
        return Experiment(spec, events=None, clock=lambda: 1e9)

    both = experiment((("abandonment", 0.02), ("clicks_at_k", 0.05)))
    clicks_only = experiment((("clicks_at_k", 0.05),))
    for i in range(500):
        # three pages in five: two clicks on a's results, one on b's; two in five: b's only
        positions = [1, 2, 3] if i % 5 < 3 else [2]
        for tried in (both, clicks_only):
            tried._tally.add(None, ["a", "b"] * 5, 10, positions)
    (pair,) = both._tally.pair_summaries()
    assert pair["winner"] == "a" and pair["significant"]
    value, low, high = both._tally.difference("a", "b", "abandonment")
    assert value == pytest.approx(0.4) and low > 0.02
    held = both.held_back("a", 500, {"started_at": 0.0})
    assert held.startswith("guardrail abandonment: a's is +0.400 against b's (95% interval up "
                           "to +0.") and held.endswith("more than the margin 0.02")
    assert clicks_only.held_back("a", 500, {"started_at": 0.0}) is None
    # and the run itself: too few pages, too short
    short = ExperimentSpec(name="g", mode="interleave", labels=("a", "b"),
                           shares={"a": 1.0, "b": 1.0}, control="b", min_impressions=10,
                           min_duration=60.0)
    guard = Experiment(short, events=None, clock=lambda: 100.0)
    assert guard.held_back("a", 9, {"started_at": 0.0}).startswith("9 closed pages of the 10")
    assert guard.held_back("a", 10, {"started_at": 50.0}).startswith(
        "the experiment has run 50 s of the 60 s experiment.min_duration asks")
    assert guard.held_back("a", 10, {"started_at": 0.0}) is None


def rigged_split_users(server, searches, seed=0):
    """Users of a split who click the first result of 70% of arm 'new''s pages and leave the
    rest without a click, and the third result of 95% of arm 'engine''s pages: 'new' gets
    its first click higher up (it wins the split's comparison) while more of its searches
    end without a click."""
    rng = np.random.default_rng(seed)
    for t in range(searches):
        page = server.post("/search", {"query": "tea kettle", "size": 10,
                                       "session_id": f"s{seed}-{t}"}).json()
        rank = (0 if rng.random() < 0.7 else None) if page["arm"] == "new" else \
            (2 if rng.random() < 0.95 else None)
        if rank is not None:
            answer = server.post("/click", {"impression_id": page["impression_id"],
                                            "doc_id": page["hits"][rank]["id"],
                                            "session_id": f"s{seed}-{t}"})
            assert answer.status_code == 202, answer.text


def test_guardrails_hold_back_a_winner_that_leaves_more_searches_without_a_click(workdir):
    """Through the live API: an arm that wins a split (its users' first click is higher up)
    while 30% of its searches end without a click, against the control's 5%, is held back
    by the abandonment guardrail, with the numbers; the same experiment without guardrails
    promotes it."""
    arms = {"engine": ENGINE, "new": RANDOM}
    guard = {"promote": "auto", "control": "engine", "min_impressions": 100,
             "min_duration": 0, "assign_by": ["session_id"]}
    server = LiveServer(experiment_config(workdir, mode="split", arms=arms, **guard))
    try:
        rigged_split_users(server, 600)
        server.service.trainer.run_once(close_all=True)
        server.service.trainer.run_pass()  # the guard runs after each training pass
        status = server.get("/experiments").json()
        (pair,) = status["pairs"]
        assert pair["significant"] and pair["winner"] == "new"
        assert status["promoted"] is None and status["status"] == "running"
        held_back = status["guard"]["held_back"]
        assert held_back["arm"] == "new"
        assert held_back["because"].startswith("guardrail abandonment: new's is +0.")
        assert "more than the margin 0.02" in held_back["because"]
        entry = status["history"][-1]
        assert entry["action"] == "held back" and entry["arm"] == "new"
        assert entry["impressions"] == status["impressions"]
        assert "it beat engine (win rate " in entry["because"]
        served = {server.post("/search", {"query": "tea", "session_id": f"x{i}"}).json()["arm"]
                  for i in range(20)}
        assert served == {"engine", "new"}  # still a split: nothing was promoted
    finally:
        server.stop()
    # the same pages, with no guardrail: the winner is promoted
    server = LiveServer(experiment_config(workdir, mode="split", arms=arms, guardrails={},
                                          **guard))
    try:
        server.service.trainer.run_pass()
        status = server.get("/experiments").json()
        assert status["promoted"] == "new" and status["guard"]["guardrails"] == {}
        assert [entry["action"] for entry in status["history"]] == ["held back", "promoted"]
    finally:
        server.stop()


def test_a_dry_run_records_what_the_guard_would_promote_and_changes_nothing(workdir, corpus):
    path = experiment_config(workdir, arms={"random": RANDOM, "engine": ENGINE},
                             promote="auto", control="random", min_impressions=100,
                             min_duration=0, dry_run=True)
    server = LiveServer(path)
    try:
        users_search(server, corpus, 200)
        server.service.trainer.run_pass()
        status = server.get("/experiments").json()
        assert status["promoted"] is None and status["status"] == "running"
        would = status["guard"]["would"]
        assert would["action"] == "promote" and would["arm"] == "engine"
        assert would["because"].startswith("beat random (win rate ")
        assert any(note["text"].startswith("dry run: the guard would promote engine: beat")
                   for note in status["notes"])
        page = server.post("/search", {"query": "tea"}).json()
        assert page["experiment"] == "trial"  # still the mixed page
    finally:
        server.stop()


def test_a_mixed_page_of_the_largest_size_is_answered(workdir):
    """A search of size 100 on an interleaved experiment: its page's probability sums the
    swap patterns of the top's pairs only (it used to enumerate 2^50 and hold the process)."""
    server = LiveServer(write_config(workdir, experiment={
        "mode": "interleave", "name": "trial",
        "arms": {"perceptron": PERCEPTRON, "random": RANDOM}}, server={"search_timeout": 30.0}))
    try:
        page = server.post("/search", {"query": "tea", "size": 100})
        assert page.status_code == 200 and page.json()["learner"] == "interleave"
        imp = server.service.events.get_impression(page.json()["impression_id"])
        assert imp.context["pair_depth"] == 10 and -np.inf < imp.log_prob < 0
    finally:
        server.stop()
