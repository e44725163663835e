"""The model store in PostgreSQL (store.model_store: database), on a real server: versions,
pins, numbers never reused, the trainer lock, the notifications that tell other processes,
and a service and trainer that share nothing but the database."""

import multiprocessing
import threading
import time

import pytest

from reranker.core.errors import ConfigError, ModelLoadError
from reranker.models.database_store import ModelDatabase
from reranker.models.store import VersionExistsError
from tests.support.models import factory, trained_model


@pytest.fixture
def database(postgres_dsn):
    db = ModelDatabase(postgres_dsn, timeout=5.0)
    yield db
    db.close()


def wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_versions_round_trip_and_are_never_overwritten_or_reused(database):
    store = database.store("arm-a", keep=2)
    assert not store.exists() and store.versions() == [] and store.next_version() == 1
    for version in (1, 2, 3):
        store.save(trained_model(version))
    assert store.versions() == [2, 3]  # pruned to the newest two
    assert store.next_version() == 4
    loaded = store.load(3, factory())
    assert loaded.version == 3
    assert loaded.learner.weights() == pytest.approx(trained_model(3).learner.weights())
    with pytest.raises(VersionExistsError, match="version 3 already exists"):
        store.save(trained_model(3))
    # deleting every version does not give a number out again
    with database.connection() as conn:
        conn.execute("DELETE FROM model_versions WHERE arm = 'arm-a'")
    assert store.next_version() == 4
    # another arm's numbers are its own
    assert database.store("arm-b").next_version() == 1


def test_a_pin_is_kept_by_pruning_and_a_broken_pin_is_named(database):
    store = database.store("arm-a", keep=1)
    store.save(trained_model(1))
    store.pin(1)
    store.save(trained_model(2))
    store.save(trained_model(3))
    assert store.versions() == [1, 3] and store.pinned() == 1
    assert store.unpin() == 1 and store.pinned() is None and store.unpin() is None
    store.write_text("pinned-version", "seven\n")
    pinned, problem = store.pin_state()
    assert pinned is None and "pinned-version of arm arm-a" in problem and "'seven'" in problem


def test_a_corrupt_or_oversized_version_is_refused_and_the_last_good_one_loads(database):
    store = database.store("arm-a")
    store.save(trained_model(1))
    store.save(trained_model(2))
    with database.connection() as conn:
        conn.execute("UPDATE model_versions SET body = 'not json'::bytea WHERE version = 2")
    model, errors = store.load_latest(factory())
    assert model.version == 1
    assert "model version 2 of arm arm-a" in errors[0] and "not readable JSON" in errors[0]
    small = database.store("arm-a", max_bytes=100)
    with pytest.raises(ModelLoadError, match="more than store.max_model_bytes"):
        small.load(1, factory())


def test_two_trainers_exclude_each_other_through_the_lock(database):
    store = database.store("arm-a")
    order = []

    def other():
        with store.lock():
            order.append("other")

    with store.lock():
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        order.append("first")
    thread.join(5)
    assert order == ["first", "other"]


def _save_in_another_process(dsn, version, pin):
    db = ModelDatabase(dsn)
    store = db.store("arm-a")
    store.save(trained_model(version))
    if pin:
        store.pin(pin)
    db.close()


def test_another_process_learns_of_a_new_version_and_a_pin_by_notification(database):
    store = database.store("arm-a")
    store.save(trained_model(1))
    assert wait_for(lambda: not database._down), "the process does not listen"
    stamp = store.stamp()
    assert store.stamp() == stamp  # no change, no new stamp
    context = multiprocessing.get_context("spawn")
    saver = context.Process(target=_save_in_another_process, args=(database.dsn, 2, None))
    saver.start()
    saver.join(60)
    assert wait_for(lambda: store.stamp() != stamp, 2.0)
    stamp = store.stamp()
    saver = context.Process(target=_save_in_another_process, args=(database.dsn, 3, 2))
    saver.start()
    saver.join(60)
    assert wait_for(lambda: store.stamp() != stamp, 2.0)
    assert store.pinned() == 2 and store.versions() == [1, 2, 3]


def test_the_database_model_store_needs_the_postgresql_event_store(tmp_path):
    from reranker.core.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("store: {model_store: database}\n")
    with pytest.raises(ConfigError, match="store.model_store database .* needs store.type "
                                          "postgresql, not 'sqlite'"):
        load_config(path)


def test_a_folder_of_models_moves_into_the_database_with_one_command(tmp_path, postgres_dsn):
    from reranker.models.store import ModelStore
    from tests.support.servers import run_cli

    folder = tmp_path / "models"
    source = ModelStore(folder, "arm-x")
    for version in (1, 2, 3):
        source.save(trained_model(version))
    source.pin(2)
    source.write_text("next-version", "9\n")  # numbers up to 8 were used once
    source.write_text("arm.json", '{"id": "arm-x", "aliases": ["old"]}\n')
    config = tmp_path / "c.yaml"
    config.write_text(f"store: {{type: postgresql, dsn: '{postgres_dsn}', model_store: "
                      f"database}}\n")
    out = run_cli("models", "import", str(folder), "-c", str(config)).stdout
    assert "arm-x: 3 versions copied; next version 9, version 2 pinned" in out
    again = run_cli("models", "import", str(folder), "-c", str(config)).stdout
    assert "arm-x: 0 versions copied, 3 already in the database" in again
    database = ModelDatabase(postgres_dsn)
    try:
        store = database.store("arm-x")
        assert store.versions() == [1, 2, 3] and store.pinned() == 2
        assert store.next_version() == 9
        assert store.saved_at(1) == pytest.approx(source.saved_at(1))
        assert store.load(3, factory()).progress.cursor == 7
        assert '"aliases": ["old"]' in store.read_text("arm.json")
    finally:
        database.close()
    folder_config = tmp_path / "f.yaml"
    folder_config.write_text(f"store: {{type: postgresql, dsn: '{postgres_dsn}'}}\n")
    refused = run_cli("models", "import", str(folder), "-c", str(folder_config), check=False)
    assert refused.returncode != 0 and "set store.model_store: database" in refused.stderr


def test_a_changed_feature_set_carries_the_model_within_the_database(workdir, postgres_dsn):
    from reranker.core.config import load_config
    from reranker.serving.service import RerankerService
    from tests.support.configs import write_config
    from tests.support.servers import run_cli
    from tests.support.traffic import learn

    store = {"type": "postgresql", "dsn": postgres_dsn, "model_store": "database"}
    old_path = workdir / "old.yaml"
    write_config(workdir, store=store, learner={"query_balance": False},
                 features={"numeric_fields": ["popularity"], "click_features": False}
                 ).rename(old_path)
    service = RerankerService(load_config(old_path)).open()
    try:
        learn(lambda q: service.search(q, 10), service.click, pages=3)
        old_arm = service.arms[0]
    finally:
        service.close()
    out = run_cli("train", "-c", str(old_path), "--close-all").stdout
    assert "saved model version 1" in out, out
    new_path = write_config(workdir, store=store, learner={"query_balance": False},
                            features={"numeric_fields": [], "click_features": False})
    listing = run_cli("models", "list", "-c", str(new_path)).stdout
    assert f"starts from the newest model of {old_arm.id}" in listing, listing
    service = RerankerService(load_config(new_path)).open()
    try:
        arm = service.arms[0]
        assert arm.id != old_arm.id and arm.model.version == 1
        assert arm.arm_file()["carried_from"] == {
            "arm": old_arm.id, "version": 1, "change": "drops field_value:popularity"}
        assert not (workdir / "models").exists()
    finally:
        service.close()
