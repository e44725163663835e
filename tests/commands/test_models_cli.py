"""`reranker models`: list, show, pin, unpin and roll back model versions through the real
command line, against a real service; version numbers are never reused, and a training pass
that learned nothing saves no version."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.models.trainer import Trainer
from reranker.serving.service import RerankerService
from tests.support.configs import write_config
from tests.support.servers import LiveServer, run_cli
from tests.support.traffic import learn

LABEL = "preference_perceptron"


def models(*args: str, check: bool = True):
    return run_cli("models", *args, check=check)


def failing(*args: str) -> str:
    result = models(*args, check=False)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def learn_in(service: RerankerService, pages: int = 1) -> None:
    learn(lambda q: service.search(q, 10), service.click, pages)


def learn_over_http(live: LiveServer, pages: int = 1) -> None:
    learn(lambda q: live.post("/search", {"query": q}).json(),
          lambda i, d: live.post("/click", {"impression_id": i, "doc_id": d}), pages)


def train(path: Path) -> str:
    return run_cli("train", "-c", str(path), "--close-all").stdout


def saved(service_or_folder, version: int) -> dict:
    folder = getattr(getattr(service_or_folder, "models", None), "dir", service_or_folder)
    return json.loads((Path(folder) / f"model-{version:06d}.json").read_text())


def served_version(live: LiveServer, expected: int, timeout: float = 3.0) -> int:
    """The version searches answer with, once it is ``expected`` (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        version = live.post("/search", {"query": "tea"}).json()["model_version"]
        if version == expected or time.monotonic() > deadline:
            return version
        time.sleep(0.05)


@pytest.fixture
def trained(workdir):
    """A service with versions 1 and 2 saved (one page, then two more)."""
    service = RerankerService(load_config(workdir / "config.yaml")).open()
    learn_in(service)
    assert service.trainer.run_once(close_all=True).versions == [1]
    learn_in(service, pages=2)
    assert service.trainer.run_once(close_all=True).versions == [2]
    yield service
    service.close()


def test_list_shows_each_version_with_its_progress_and_marks(workdir, trained):
    config = str(workdir / "config.yaml")
    (trained.models.dir / "model-000003.json").write_text('{"format": "reranker-model", "tr')
    out = models("list", "-c", config).stdout
    arm = trained.arms[0]
    assert f"arm {LABEL} ({arm.id}), learner {LABEL}, folder {arm.models.dir}" in out
    rows = {line.split()[1]: line for line in out.splitlines()
            if line.startswith("│") and line.split()[1].isdigit()}
    assert set(rows) == {"1", "2", "3"}
    for version in (1, 2):
        progress = saved(trained, version)["training"]
        cells = [cell.strip() for cell in rows[str(version)].strip("│").split("│")]
        assert cells[2:7] == [str(progress[key]) for key in
                              ("impressions", "clicks", "updates", "skipped", "cursor")]
    assert "serving" in rows["2"] and "serving" not in rows["1"]
    assert "newest" in rows["3"] and "refused" in rows["3"]
    assert "version 3 is refused: model" in out and "model-000003.json" in out
    assert "next version: 4" in out
    listing = json.loads(models("list", "-c", config, "--json").stdout)
    (info,) = listing
    assert (info["serving"], info["newest"], info["pinned"]) == (2, 3, None)
    assert [row["impressions"] for row in info["versions"][:2]] == [1, 3]
    assert info["versions"][1]["clicks"] == 6
    assert "not readable JSON" in info["versions"][2]["error"]


def test_show_prints_the_weights_by_feature_name_as_the_model_file_has_them(workdir, trained):
    config = str(workdir / "config.yaml")
    data = saved(trained, 1)
    names = data["features"]["names"]
    shown = json.loads(models("show", "1", "-c", config, "--json").stdout)
    assert shown["version"] == 1 and shown["learner"] == data["learner"]
    assert shown["training"] == data["training"] and shown["features"] == names
    assert shown["normalization"] == data["features"]["normalization"]
    state = data["state"]
    learner = trained.factory.new_learner()
    prior_weight = learner.prior_steps * (1 + state["step_sum_"]) / (1 + state["steps_"])
    assert list(shown["weights"]) == names
    for i, name in enumerate(names):
        weights = shown["weights"][name]
        assert weights["learned"] == state["w_"][i]
        assert weights["start"] == pytest.approx(prior_weight * state["prior_"][i])
        assert 0.0 <= weights["agreement"] <= 1.0
        assert weights["total"] == pytest.approx(weights["learned"] * weights["agreement"]
                                                 + weights["start"])
    assert any(state["w_"])  # it learned something
    text = models("show", "1", "-c", config).stdout
    assert "version 1, saved" in text and "model-000001.json" in text
    assert "learner preference_perceptron (swap_probability=0.5" in text
    assert "feature map: depth 10, discount log2" in text
    progress = data["training"]
    assert f"cursor {progress['cursor']}, impressions 1, clicks 2" in text
    assert shown["query_weight"] == data["query_weight"] == {"level": 0, "doubled": [0, 0],
                                                             "halved": [0, 0]}
    assert "query weight 1 (a query's click lift" in text
    assert shown["evidence_gate"] == {**data["evidence_gate"], "confidence": 0.95}
    assert data["evidence_gate"] == {"level": 0, "duels": {}}
    assert "evidence gate: a query's clicks judge at 95% confidence (level 0" in text
    for i, name in enumerate(names):
        row = next(line for line in text.splitlines() if f"│ {name} " in line)
        assert f"{state['w_'][i]:+.6g}" in row
    # by default the version being served, here the newest
    assert "version 2, saved" in models("show", "-c", config).stdout
    assert "[serving, newest]" in models("show", "-c", config).stdout


def test_show_summarises_the_state_of_a_learner_without_one_weight_vector(workdir):
    path = write_config(workdir, learner={"name": "random"})
    out = models("show", "-c", str(path)).stdout
    assert "version 0: the learner's initial model (never saved)" in out
    assert "Learned state" in out and "Weights by feature" not in out
    shown = json.loads(models("show", "-c", str(path), "--json").stdout)
    assert shown["weights"] is None and shown["version"] == 0


def test_a_pinned_version_is_served_while_training_goes_on(workdir):
    path = write_config(workdir, store={"keep_models": 2})
    live = LiveServer(path)
    try:
        for _ in range(2):
            learn_over_http(live)
            train(path)
        assert served_version(live, 2) == 2
        out = models("pin", "1", "-c", str(path)).stdout
        assert "pinned version 1 of arm 'preference_perceptron'" in out
        assert served_version(live, 1) == 1
        arm = live.service.arms[0]
        assert arm.pinned == 1
        # training goes on from the newest version, which the pin does not serve
        learn_over_http(live)
        assert "saved model version 3" in train(path)
        learn_over_http(live)
        assert "saved model version 4" in train(path)
        assert served_version(live, 1, timeout=1.5) == 1
        assert saved(arm.models.dir, 4)["training"]["cursor"] > \
            saved(arm.models.dir, 3)["training"]["cursor"]
        # pruning keeps the pinned version beside the newest two
        assert arm.models.versions() == [1, 3, 4]
        listing = json.loads(models("list", "-c", str(path), "--json").stdout)[0]
        assert (listing["pinned"], listing["serving"], listing["newest"]) == (1, 1, 4)
        # a service started now serves the pinned version too
        other = RerankerService(load_config(path)).open()
        try:
            assert other.model.version == 1
        finally:
            other.close()
        # the pinned file deleted: still served from memory, but said where a restart
        # would find out
        pinned_file = arm.models.path(1)
        kept = pinned_file.read_bytes()
        pinned_file.unlink()
        deadline = time.monotonic() + 3.0
        while "model" not in live.get("/healthz").json()["problems"] \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        health = live.get("/healthz").json()
        assert health["status"] == "degraded" and health["model_version"] == 1
        assert "pinned version 1 is gone" in health["model_errors"][0]
        listing = json.loads(models("list", "-c", str(path), "--json").stdout)[0]
        assert "pinned version 1 is gone" in listing["pin_error"]
        assert "warning: pinned version 1 is gone" in models("list", "-c", str(path)).stdout
        pinned_file.write_bytes(kept)  # back: the problem goes
        deadline = time.monotonic() + 3.0
        while live.get("/healthz").json()["problems"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert live.get("/healthz").json()["status"] == "ok"
        out = models("unpin", "-c", str(path)).stdout
        assert "unpinned version 1" in out
        assert served_version(live, 4) == 4 and arm.pinned is None
        assert "was not pinned" in models("unpin", "-c", str(path)).stdout
        # a pin file that holds no version number (edited by hand) is removed by unpin too
        (arm.models.dir / "pinned-version").write_text("abc\n")
        assert models("unpin", "-c", str(path)).returncode == 0
        assert not (arm.models.dir / "pinned-version").exists()
    finally:
        live.stop()


def test_pinning_a_version_that_is_missing_or_does_not_load_is_refused(workdir, trained):
    config = str(workdir / "config.yaml")
    err = failing("pin", "7", "-c", config)
    assert "arm 'preference_perceptron'" in err and "has no version 7" in err
    assert "its saved versions are 1-2" in err
    bad = trained.models.path(1)
    payload = json.loads(bad.read_text())
    payload["state"]["w_"][0] += 1.0  # edited by hand: the checksum no longer matches
    bad.write_text(json.dumps(payload))
    err = failing("pin", "1", "-c", config)
    assert "version 1 of arm 'preference_perceptron' does not load" in err
    assert "checksum mismatch" in err
    assert not trained.models.pin_path.exists()


def wait_for_health(live: LiveServer, check, timeout: float = 3.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        health = live.get("/healthz").json()
        if check(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


@pytest.mark.parametrize("broken", ["corrupt", "missing", "garbage"])
def test_a_pin_that_cannot_be_honoured_serves_the_newest_good_version(workdir, trained,
                                                                      broken):
    """The pinned version's file corrupted, the pin naming a version that does not exist,
    or the pin file holding no number: a running service and one started now both serve
    the newest good version (not the initial model), and /healthz says why; once the pin
    can be honoured again it is."""
    path = workdir / "config.yaml"
    folder = trained.models.dir
    models("pin", "1", "-c", str(path))
    kept = (folder / "model-000001.json").read_bytes()
    live = LiveServer(path)
    try:
        assert served_version(live, 1) == 1
        if broken == "corrupt":
            (folder / "model-000001.json").write_text('{"version": 1, "state": [')
        elif broken == "missing":
            (folder / "pinned-version").write_text("9\n")
        else:
            (folder / "pinned-version").write_text("garbage\n")
        if broken == "corrupt":  # the file served from memory: a restart finds it out
            restarted = RerankerService(load_config(path)).open()
        else:
            assert served_version(live, 2) == 2
            health = wait_for_health(live, lambda h: h["problems"])
            assert health["status"] == "degraded" and "model" in health["problems"]
            assert "the pin cannot be honoured" in health["model_errors"][0]
            assert "serving the newest good version, 2, instead" in health["model_errors"][0]
            restarted = RerankerService(load_config(path)).open()  # a restart is not refused
        try:
            assert restarted.model.version == 2
            errors = restarted.arms[0].model_errors
            assert errors[0].startswith("arm 'preference_perceptron' (preference_perceptron-")
            assert "the pin cannot be honoured" in errors[0] and "reranker models unpin" \
                in errors[0]
        finally:
            restarted.close()
        # honoured again once the pin is put right
        (folder / "model-000001.json").write_bytes(kept)
        models("pin", "1", "-c", str(path))
        assert served_version(live, 1) == 1
        assert wait_for_health(live, lambda h: not h["problems"])["status"] == "ok"
    finally:
        live.stop()


def test_a_model_file_over_the_size_limit_is_refused_before_it_is_read(workdir, trained):
    """A 300 MB file (sparse: no disk) put in the folder as the next version is refused by
    its size, without its bytes read; the newest good version keeps serving."""
    import tracemalloc

    folder = trained.models.dir
    with open(folder / "model-000003.json", "wb") as huge:
        huge.truncate(300 * 1024 * 1024)
    tracemalloc.start()
    try:
        service = RerankerService(load_config(workdir / "config.yaml")).open()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    try:
        assert service.model.version == 2
        (error,) = service.arms[0].model_errors
        assert "model-000003.json is refused: 314572800 bytes, more than " \
               "store.max_model_bytes (268435456)" in error
        assert peak < 50e6, peak
    finally:
        service.close()


def test_rollback_saves_the_old_weights_with_the_newest_cursor(workdir):
    path = workdir / "config.yaml"
    live = LiveServer(path)
    try:
        learn_over_http(live)
        train(path)
        learn_over_http(live, pages=2)
        train(path)
        folder = live.service.arms[0].models.dir
        out = models("rollback", "-c", str(path)).stdout
        assert "saved version 3 of arm 'preference_perceptron'" in out
        assert "weights and normalisation of version 1" in out
        assert "training cursor of version 2" in out
        assert "2 impressions applied after version 1" in out and "dropped" in out
        old, newest, rolled = (saved(folder, v) for v in (1, 2, 3))
        assert rolled["state"] == old["state"] and rolled["features"] == old["features"]
        assert rolled["training"] == newest["training"] and rolled["version"] == 3
        assert served_version(live, 3) == 3
        # where the weights came from, in the model file, the listing and the version shown
        assert rolled["origin"] == {"rollback_of": 1, "cursor_of": 2} and "origin" not in old
        listed = models("list", "-c", str(path)).stdout
        assert "rollback: weights of v1, cursor of v2" in listed
        assert json.loads(models("list", "--json", "-c", str(path)).stdout)[0]["versions"][
            2]["origin"] == {"rollback_of": 1, "cursor_of": 2}
        assert "made by rollback: weights of v1, cursor of v2" in models(
            "show", "3", "-c", str(path)).stdout
        # learning goes on from the old weights and never applies the dropped pages again
        learn_over_http(live)
        assert "saved model version 4" in train(path)
        assert "origin" not in saved(folder, 4)  # a trained version
        after, cursor = saved(folder, 4)["training"], newest["training"]["cursor"]
        since = live.service.events.closed_since(cursor, 1000)  # (with the searches above)
        assert len(since) >= 2
        assert after["impressions"] == newest["training"]["impressions"] + len(since)
        # an explicit version; the newest, a missing or a broken one is refused
        assert "weights and normalisation of version 2" in models(
            "rollback", "2", "-c", str(path)).stdout
        assert "is the newest version" in failing("rollback", "5", "-c", str(path))
        err = failing("rollback", "99", "-c", str(path))
        assert "has no version 99" in err and "preference_perceptron" in err
        (folder / "model-000001.json").write_text("{}")
        assert "version 1 of arm 'preference_perceptron' does not load" in failing(
            "rollback", "1", "-c", str(path))
    finally:
        live.stop()


def test_unknown_arms_are_named_and_several_arms_need_one(workdir):
    path = write_config(workdir, experiment={
        "mode": "interleave", "name": "trial",
        "arms": {"perceptron": {"name": "preference_perceptron"}, "random": {"name": "random"}}})
    err = failing("show", "-c", str(path))
    assert "has several arms (perceptron, random)" in err and "--arm" in err
    err = failing("pin", "1", "--arm", "nope", "-c", str(path))
    assert "no arm 'nope'" in err and "perceptron, random" in err
    err = failing("show", "3", "--arm", "random", "-c", str(path))
    assert "arm 'random'" in err and "has no version 3" in err and "no saved version" in err
    out = models("list", "-c", str(path)).stdout
    assert "arm perceptron (preference_perceptron-" in out and "arm random (random-" in out
    assert "no saved version" in out


def test_version_numbers_are_never_reused(workdir, trained):
    path = workdir / "config.yaml"
    folder = trained.models.dir
    learn_in(trained)
    assert trained.trainer.run_once(close_all=True).versions == [3]
    for version in (2, 3):  # the newest versions, deleted by hand
        (folder / f"model-{version:06d}.json").unlink()
    learn_in(trained)
    out = train(path)
    assert "saved model version 4" in out
    assert trained.models.versions() == [1, 4]
    # version 4 continued from version 1, the newest left: the impressions since are
    # applied again, and nothing is counted twice
    assert saved(folder, 4)["training"]["impressions"] == 5
    assert "next version: 5" in models("list", "-c", str(path)).stdout


def test_a_pass_that_learned_nothing_saves_no_version(workdir, trained):
    folder = trained.models.dir
    before = saved(trained, 2)["training"]
    for _ in range(3):  # searches without clicks teach the perceptron nothing
        trained.search("green tea", 10)
    out = train(workdir / "config.yaml")
    assert "saved model version" not in out
    assert trained.models.versions() == [1, 2]
    # the next pass that learns saves them with what it learned, each applied once
    learn_in(trained)
    report = trained.trainer.run_once(close_all=True)
    assert report.versions == [3] and report.applied == 4
    after = saved(folder, 3)["training"]
    assert after["impressions"] == before["impressions"] + 4
    assert after["clicks"] == before["clicks"] + 2


def test_a_long_run_of_passes_that_learn_nothing_still_moves_the_cursor(workdir, trained):
    trainer = Trainer(trained.arms, trained.events, feedback_window=0.0, batch_size=2)
    for _ in range(25):
        trained.search("green tea", 10)
    report = trainer.run_once(close_all=True)
    # saved once 10 batches (20 impressions) were read; the last 5 wait for the next version
    assert report.versions == [3] and report.updates == 0
    assert report.applied == 25 and report.unsaved == 5
    from reranker.models.trainer import unsaved_note  # what the log and `reranker train` say
    assert "all but the last 5" in unsaved_note(report.arms["preference_perceptron"])
    # later pages are not applied, so not left for the next version either
    learn_in(trained)
    for _ in range(6):
        trained.search("green tea", 10, user_id="u", offset=10)
    report = trainer.run_once(close_all=True)
    # the 5 from before and the clicked page are in the new version; the later pages after
    # it were read, but nothing was applied from them: nothing is left for the next one
    assert report.versions == [4] and report.applied == 6 and report.unsaved == 0
    assert saved(trained, 3)["training"]["impressions"] == saved(trained, 2)["training"][
        "impressions"] + 20
    assert trainer.run_once().versions == []
    np.testing.assert_array_equal(saved(trained, 3)["state"]["w_"],
                                  saved(trained, 2)["state"]["w_"])
