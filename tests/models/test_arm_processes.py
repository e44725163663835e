"""An experiment's arms learning at once in processes of their own (``reranker train --jobs
N``): the models they save are those one process saves, a process that dies fails its arms'
pass alone, and the follower stops its processes with itself."""

import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.models.arm_processes import deal
from reranker.models.trainer import Trainer
from reranker.stores import open_event_store
from tests.support.configs import PERCEPTRON, experiment_config, write_config
from tests.support.servers import LiveServer, follow, run_cli, stop_following
from tests.support.traffic import users_search

ARMS = {"perceptron": PERCEPTRON, "gradient": {"name": "pdgd"}}
#: Every page learned from (the query balance's coin, drawn from random page ids, could pass
#: over the few pages of a query that a short test has).
EVERY_PAGE = {"name": "preference_perceptron", "query_balance": False}


@pytest.fixture
def experiment(workdir):
    return experiment_config(workdir, arms=ARMS, trainer={"enabled": False},
                             learner=EVERY_PAGE)


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_ended(pids, timeout: float = 10.0) -> list[int]:
    """The pids still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if running(pid)]


def children_of(pid: int) -> list[int]:
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()]


def traffic(path, corpus, searches: int, seed: int) -> None:
    """Simulated users' searches and clicks through the service at ``path``, then it stops."""
    server = LiveServer(path)
    try:
        users_search(server, corpus, searches, seed=seed)
    finally:
        server.stop()


def models_of(trainer):
    return {arm.label: arm.models.load_latest(arm.factory)[0] for arm in trainer.arms}


def test_deal_gives_each_process_its_turn_of_the_arms():
    assert deal(["a", "b", "c"], 2) == [["a", "c"], ["b"]]
    assert deal(["a", "b"], 8) == [["a"], ["b"]]
    assert deal(["a"], 0) == [["a"]]


def test_arms_in_processes_save_the_models_one_process_saves(workdir, corpus, experiment):
    traffic(experiment, corpus, 40, seed=3)
    config = load_config(experiment)
    events = open_event_store(config)
    try:
        alone = Trainer.from_config(config, events)
        one = alone.run_once(close_all=True)
        expected = models_of(alone)
        shutil.move(workdir / "models", workdir / "models-one")
        trainer = Trainer.from_config(config, events)
        assert trainer.train_in_processes(config, 2) == 2
        try:
            two = trainer.run_once()
            pids = trainer.processes.pids()
            got = models_of(trainer)
        finally:
            trainer.close()
    finally:
        events.close()
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert not wait_ended(pids)  # closed with the trainer
    assert not one.errors and not two.errors
    for label in ARMS:
        assert two.arms[label].applied == one.arms[label].applied > 0, label
        assert two.arms[label].updates == one.arms[label].updates > 0, label
        assert vars(got[label].progress) == vars(expected[label].progress), label
        state, state_one = got[label].learner.get_state(), expected[label].learner.get_state()
        assert state.keys() == state_one.keys()
        for key, value in state.items():
            assert np.array_equal(np.asarray(value), np.asarray(state_one[key])), (label, key)
    assert two.applied == one.applied and sorted(two.versions) == sorted(one.versions)


def test_a_process_that_dies_fails_its_arms_pass_alone(workdir, corpus, experiment):
    server = LiveServer(experiment)
    config = load_config(experiment)
    events = open_event_store(config)
    trainer = Trainer.from_config(config, events)
    try:
        trainer.train_in_processes(config, 2)
        # (the service writes its pages behind its answers: flushed, every page it served
        # is there for the trainer's pass to close)
        users_search(server, corpus, 10, seed=1)
        server.service.events.flush()
        first = trainer.run_once(close_all=True)
        assert not first.errors and first.arms["perceptron"].cursor == \
            first.arms["gradient"].cursor > 0
        users_search(server, corpus, 10, seed=2)
        server.service.events.flush()
        (lost,), (kept,) = trainer.processes.groups
        killed = trainer.processes.pids()[0]  # the process of the first group
        os.kill(killed, signal.SIGKILL)
        assert not wait_ended([killed])
        failed = trainer.run_once(close_all=True)
        assert list(failed.errors) == [lost]
        learner = ARMS[lost]["name"]
        assert f"arm {lost} (learner {learner}): its training process ended" \
            in failed.errors[lost]
        assert failed.arms[kept].applied > 0  # the other arm learned
        again = trainer.run_once()
        assert not again.errors and again.arms[lost].applied == \
            failed.arms[kept].applied  # what waited at its cursor
        assert again.arms[lost].cursor == failed.arms[kept].cursor  # caught up
        assert killed not in trainer.processes.pids()
    finally:
        trainer.close()
        events.close()
        server.stop()


def test_train_jobs_on_the_command_line(workdir, corpus, experiment):
    traffic(experiment, corpus, 20, seed=4)
    out = run_cli("train", "-c", str(experiment), "--close-all", "--jobs", "2").stdout
    assert "perceptron: applied" in out and "gradient: applied" in out, out
    refused = run_cli("train", "-c", str(experiment), "--jobs", "0", check=False)
    assert refused.returncode == 2 and "--jobs" in refused.stderr
    single = workdir / "single"  # one arm: its own folder, the same index
    single.mkdir()
    (single / "index").symlink_to(workdir / "index")
    alone = run_cli("train", "-c", str(write_config(single)), "--jobs", "4")
    assert "--jobs 4: 1 arm(s), so 1 process(es) train" in alone.stderr


def test_the_follower_stops_its_processes_with_itself(workdir, corpus):
    # (a window of a second: the follower's passes, in processes of their own, must not
    # close a page between its search and its click however busy the machine)
    path = experiment_config(workdir, arms=ARMS, learner=EVERY_PAGE,
                             trainer={"enabled": False, "feedback_window": 1.0,
                                      "interval": 0.2})
    follower = follow(path, "--jobs", "2")
    server = LiveServer(path)
    try:
        users_search(server, corpus, 40, seed=5)
        deadline = time.monotonic() + 60
        trained = set()
        while time.monotonic() < deadline and len(trained) < 2:
            trained = {arm.label for arm in server.service.arms
                       if arm.models.versions()}
            time.sleep(0.2)
        assert trained == set(ARMS)
        children = children_of(follower.pid)
        assert len(children) >= 2  # (and spawn's resource tracker)
    finally:
        server.stop()
        output = stop_following(follower)
    assert follower.returncode == 0, output
    assert "2 arms in 2 processes" in output
    assert not wait_ended(children)
