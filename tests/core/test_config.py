import re

import pytest
import yaml

from reranker.core.config import SCHEMA, config_from_dict, defaults, load_config
from reranker.core.errors import ConfigError
from tests.support.paths import ROOT


def test_default_yaml_is_the_schema_defaults():
    data = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    assert data == defaults()


def test_the_configuration_reference_documents_every_key():
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    for section, keys in SCHEMA.items():
        for key in keys:
            assert f"`{section}.{key}`" in page, \
                f"docs/reference/configuration.md lacks {section}.{key}"


def test_relative_paths_resolve_against_the_config_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "c.yaml"
    path.write_text("backend: {path: idx}\nstore: {path: ../events.sqlite, models: /abs/models}\n")
    config = load_config(path)
    assert config.backend.path == str(tmp_path / "sub" / "idx")
    assert config.store.path == str(tmp_path / "events.sqlite")
    assert config.store.models == "/abs/models"


def test_config_is_immutable(tmp_path):
    config = config_from_dict({}, tmp_path)
    with pytest.raises(AttributeError):
        config.server.port = 1
    assert config.backend.fields == ("title", "body")


def test_environment_and_explicit_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("server: {port: 9000}\n")
    config = load_config(path, environ={"RERANKER_SERVER_PORT": "9100",
                                        "RERANKER_TRAINER_FEEDBACK_WINDOW": "2.5",
                                        "RERANKER_TEST_ES_URL": "ignored"})
    assert config.server.port == 9100
    assert config.trainer.feedback_window == 2.5
    assert load_config(path, {"server.port": 1234}, environ={}).server.port == 1234


@pytest.mark.parametrize("text, message", [
    ("backend: {feilds: [title]}\n", "unknown key backend.feilds"),
    ("bakend: {}\n", "unknown section 'bakend'"),
    ("backend: {candidates: many}\n", "backend.candidates must be an integer, got 'many'"),
    ("backend: {candidates: 0}\n", "backend.candidates must be at least 1"),
    ("backend: {fields: title}\n", "backend.fields must be a list of non-empty strings"),
    ("backend: {fields: []}\n", "backend.fields must name at least one text field"),
    ("trainer: {enabled: 'yes'}\n", "trainer.enabled must be true or false"),
    ("features: {normalization: l2}\n", "features.normalization must be one of"),
    ("learner: {params: [1, 2]}\n", "learner.params must be a mapping"),
    ("server: {default_size: 50, max_size: 10}\n", "server.default_size (50) is larger"),
    ("- just\n- a list\n", "must hold a mapping of sections"),
    ("backend: [1]\n", "section 'backend' must be a mapping"),
    ("backend: {fields: [title, body\n", "is not valid YAML"),
    ("store: {type: postgresql}\n", "store.type postgresql needs store.dsn"),
    ("store: {pool_size: 0}\n", "store.pool_size must be at least 1"),
    ("store: {timeout: soon}\n", "store.timeout must be a number, got 'soon'"),
    ("store: {dsm: 'host=db'}\n", "unknown key store.dsm; did you mean 'store.dsn'?"),
])
def test_invalid_configs_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert message in info.value.message
    assert "bad.yaml" in info.value.message


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_a_misspelt_environment_key_is_said_once_and_ignored(caplog, monkeypatch):
    import reranker.core.config

    monkeypatch.setattr(reranker.core.config, "_warned", set())
    environ = {"RERANKER_SERVER_PROT": "9", "RERANKER_SIGNING_KEYS": "k1:secret",
               "RERANKER_TEST_ES_URL": "http://x"}
    with caplog.at_level("WARNING", logger="reranker.core.config"):
        config = load_config(None, environ=environ)
        load_config(None, environ=environ)  # loaded again in the process: not said again
    assert config.server.port == load_config(None, environ={}).server.port
    assert [r.getMessage() for r in caplog.records] == [
        "environment variable RERANKER_SERVER_PROT is not a config key and is ignored; did "
        "you mean RERANKER_SERVER_PORT?"]


def test_bad_environment_value_is_named(tmp_path):
    with pytest.raises(ConfigError, match="environment variable RERANKER_SERVER_PORT: "
                                          "server.port must be an integer"):
        load_config(None, environ={"RERANKER_SERVER_PORT": "eighty"})


def test_a_learner_set_in_the_environment_is_named_as_the_environments(tmp_path):
    """The learner's name and parameters are checked where the arms are built, after the
    configuration: an error names the variable that gave them, not the file."""
    from reranker.core.plugins import get_plugin_manager
    from reranker.models.arms import arms_from_config

    path = tmp_path / "c.yaml"
    path.write_text("learner: {name: preference_perceptron, params: {prior_steps: 5}}\n")
    pm = get_plugin_manager(load_entrypoints=False)
    cases = [({"RERANKER_LEARNER_PARAMS": '{"prior_steps": "fast"}'},
              "environment variable RERANKER_LEARNER_PARAMS: learner.params: "),
             ({"RERANKER_LEARNER_NAME": "perceptronn"},
              "environment variable RERANKER_LEARNER_NAME: learner.name: unknown learner")]
    for environ, message in cases:
        with pytest.raises(ConfigError) as info:
            arms_from_config(load_config(path, environ=environ), pm)
        assert message in info.value.message, info.value.message
    with pytest.raises(ConfigError) as info:  # and the file's own mistakes are the file's
        path.write_text("learner: {name: preference_perceptron, params: {prior_steps: x}}\n")
        arms_from_config(load_config(path, environ={}), pm)
    assert info.value.message.startswith(f"{path}: learner.params: ")


@pytest.mark.parametrize("data, message", [
    ({"lerner": {}}, "unknown section 'lerner'; did you mean 'learner'"),
    ({"backend": {"feilds": ["a"]}}, "unknown key backend.feilds; did you mean 'backend.fields'?"),
    ({"trainer": {"feedback_windw": 1}}, "did you mean 'trainer.feedback_window'?"),
    ({"experiment": {"mode": "split", "arms": {"a": {"name": "random"},
                                                "b": {"name": "random", "parms": {}}}}},
     "experiment.arms.b: unknown key 'parms'; did you mean 'params'?"),
])
def test_config_errors_suggest_the_closest_key(tmp_path, data, message):
    from reranker.core.plugins import get_plugin_manager
    from reranker.models.arms import arms_from_config

    with pytest.raises(ConfigError, match=re.escape(message)):
        arms_from_config(config_from_dict(data, tmp_path), get_plugin_manager())


@pytest.mark.parametrize("written, expected", [
    ("2030-01-01T00:00:00", "2030-01-01T00:00:00+00:00"),
    ("2026-12-01T09:00:00Z", "2026-12-01T09:00:00+00:00"),
    ("2030-01-01", "2030-01-01T00:00:00+00:00"),
    ("'2030-01-01T00:00:00+02:00'", "2029-12-31T22:00:00+00:00"),
])
def test_experiment_times_may_be_unquoted(tmp_path, written, expected):
    """YAML reads an unquoted ISO 8601 date and time as a timestamp: taken as the same
    moment as the quoted text (UTC when it gives no offset)."""
    from datetime import datetime

    from reranker.core.times import parse_time

    path = tmp_path / "c.yaml"
    path.write_text(f"experiment: {{mode: interleave, arms: {{a: {{}}, b: {{learner: random}}}}, "
                    f"stop: {written}}}\n")
    config = load_config(path, environ={"RERANKER_EXPERIMENT_START": "2020-01-01T00:00:00"})
    assert parse_time(config.experiment.stop, "") == datetime.fromisoformat(expected).timestamp()
    assert parse_time(config.experiment.start, "") == datetime.fromisoformat(
        "2020-01-01T00:00:00+00:00").timestamp()
