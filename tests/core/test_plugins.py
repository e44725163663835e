import inspect
import types

import numpy as np
import pytest

from reranker import hookimpl
from reranker.core import hookspecs
from reranker.core.errors import ConfigError
from reranker.core.plugins import (
    backend_classes,
    event_store_classes,
    get_plugin_manager,
    learner_class,
    learner_classes,
)
from reranker.learners.base import Learner, Param, RankResult
from tests.support.paths import ROOT


class Reverse(Learner):
    name = "reverse_test"
    description = "Ranks the backend's order backwards (a test plugin)."
    params = (Param("strength", float, 1.0, "unused", minimum=0.0),)

    def _initialize(self, n_features):
        self.calls_ = 0

    def _rank(self, X, n_shown, rng):
        scores = np.arange(X.shape[0], dtype=float)
        return RankResult(ranking=np.argsort(-scores), scores=scores)

    def _update(self, X, feedback):
        return False


def plugin(*classes):
    module = types.SimpleNamespace()

    @hookimpl
    def reranker_register_learners():
        return list(classes)

    module.reranker_register_learners = reranker_register_learners
    return module


def test_builtins_register_through_the_hooks():
    pm = get_plugin_manager(load_entrypoints=False)
    assert "preference_perceptron" in learner_classes(pm)
    assert "embedded" in backend_classes(pm)


def test_a_third_party_learner_is_selectable_by_name():
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(plugin(Reverse))
    assert learner_class(pm, "reverse_test") is Reverse


def test_duplicate_names_fail_at_start_up():
    pm = get_plugin_manager(load_entrypoints=False)
    clone = type("Clone", (Reverse,), {"name": "preference_perceptron"})
    pm.register(plugin(clone))
    with pytest.raises(ConfigError, match="two plugins register a learner named "
                                          "'preference_perceptron'"):
        learner_classes(pm)


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="has no parameter 'strenght'"):
        Reverse(strenght=2)
    with pytest.raises(ValueError, match="'strength' must be at least 0"):
        Reverse(strength=-1.0).validate_params()
    with pytest.raises(ValueError, match="'strength' must be a number"):
        Reverse(strength="high").validate_params()


def test_every_hook_is_documented_with_its_signature():
    page = (ROOT / "docs" / "reference" / "plugin-hooks.md").read_text(encoding="utf-8")
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("reranker_"):
            assert f"{name}{inspect.signature(func)}" in page, name


def test_the_documented_plugin_example_works():
    page = (ROOT / "docs" / "tutorials" / "plugin-author.md").read_text(encoding="utf-8")
    code = page.split("# Quick start: plugin author")[1].split("```python")[1].split("```")[0]
    namespace = {}
    exec(compile(code, "docs/tutorials/plugin-author.md example", "exec"), namespace)
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(types.SimpleNamespace(
        reranker_register_learners=namespace["reranker_register_learners"]))
    cls = learner_class(pm, "scaled_perceptron")
    learner = cls(step=0.5)
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    from reranker.learners.feedback import feedback_from_clicks
    assert learner.update(X, feedback_from_clicks(learner.rank(X).ranking, 2, np.array([1])))
    np.testing.assert_array_equal(learner.rank(X).ranking, [1, 0])


def test_learners_command_lists_a_plugin_that_needs_arguments(monkeypatch):
    """`reranker learners` builds each learner with its defaults to tell whether it samples;
    a third-party learner that needs constructor arguments is still listed."""
    from click.testing import CliRunner

    import reranker.core.plugins
    from reranker.commands.main import cli

    class NeedsIndex(Reverse):
        name = "needs_index_test"
        description = "A test plugin built only with an index name."

        def __init__(self, index, **params):
            super().__init__(**params)
            self.index = index

    def manager(load_entrypoints=True):
        pm = get_plugin_manager(load_entrypoints=False)
        pm.register(plugin(NeedsIndex))
        return pm

    monkeypatch.setattr(reranker.core.plugins, "get_plugin_manager", manager)
    result = CliRunner().invoke(cli, ["learners"])
    assert result.exit_code == 0, result.output
    assert "needs_index_test  A test plugin built only with an index name." in result.output
    assert "preference_perceptron  (stochastic)" in result.output  # perturbed by default
    assert "greedy_klrank  Greedy KLRank" in result.output  # an argmax learner


def installed_plugin(tmp_path, monkeypatch, name: str, source: str) -> None:
    """A package installed on the path with an entry point in the group ``reranker``, as
    pip installs a plugin."""
    (tmp_path / f"{name}.py").write_text(source)
    info = tmp_path / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[reranker]\n{name} = {name}\n")
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize("source, message", [
    ("import nonexistent_dependency_xyz\n",
     "plugin 'broken_plugin_t' (broken_plugin_t, from broken_plugin_t) cannot be loaded: "
     "ModuleNotFoundError: No module named 'nonexistent_dependency_xyz'; fix or uninstall it"),
    ("from reranker import hookimpl\n\n@hookimpl\ndef reranker_register_learner():\n"
     "    return []\n",
     "plugin 'broken_plugin_t': unknown hook 'reranker_register_learner'"),
])
def test_an_installed_plugin_that_cannot_load_is_named(tmp_path, monkeypatch, source, message):
    installed_plugin(tmp_path, monkeypatch, "broken_plugin_t", source)
    with pytest.raises(ConfigError) as info:
        get_plugin_manager()
    assert message in info.value.message


def test_a_plugin_that_registers_something_else_than_a_learner_is_named(tmp_path, monkeypatch):
    installed_plugin(tmp_path, monkeypatch, "odd_plugin_t", (
        "from reranker import hookimpl\n\nclass NotALearner:\n    name = 'odd'\n\n"
        "@hookimpl\ndef reranker_register_learners():\n    return [NotALearner]\n"))
    pm = get_plugin_manager()
    with pytest.raises(ConfigError, match="registers <class 'odd_plugin_t.NotALearner'> as a "
                                          "learner, but it is not a subclass of "
                                          "reranker.learners.base.Learner"):
        learner_classes(pm)
    from click.testing import CliRunner

    from reranker.commands.main import cli

    result = CliRunner().invoke(cli, ["learners"])  # a clean error, no traceback
    assert result.exit_code == 1 and "not a subclass of reranker.learners.base.Learner" in \
        result.output and "Traceback" not in result.output


@pytest.mark.parametrize("name, body, message", [
    ("hook_plugin_t", "    return Oops\n",
     "plugin 'hook_plugin_t': its reranker_register_learners hook must return a list of "
     "classes, got <class 'hook_plugin_t.Oops'>"),
    ("raising_plugin_t", "    raise RuntimeError('no licence')\n",
     "plugin 'raising_plugin_t': its reranker_register_learners hook raised RuntimeError: no "
     "licence; fix or uninstall it"),
    ("abstract_plugin_t", "    return [Abstract]\n",
     "plugin 'abstract_plugin_t' registers learner class Abstract, which does not implement "
     "_update"),
])
def test_a_hook_that_answers_wrongly_is_named_with_its_plugin(tmp_path, monkeypatch, name,
                                                              body, message):
    installed_plugin(tmp_path, monkeypatch, name, (
        "import numpy as np\nfrom reranker import hookimpl\n"
        "from reranker.learners.base import Learner, RankResult\n\n"
        "class Abstract(Learner):\n    name = 'abstract_t'\n    description = 'x'\n\n"
        "    def _initialize(self, n):\n        self.w_ = np.zeros(n)\n\n"
        "    def _rank(self, X, n_shown, rng):\n"
        "        return RankResult(ranking=np.arange(len(X)), scores=np.zeros(len(X)))\n\n"
        "class Oops(Abstract):\n    name = 'oops_t'\n\n"
        "    def _update(self, X, feedback):\n        return False\n\n"
        "@hookimpl\ndef reranker_register_learners():\n" + body))
    from click.testing import CliRunner

    from reranker.commands.main import cli

    result = CliRunner().invoke(cli, ["learners"])  # every command: a clean error
    assert result.exit_code == 1 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_a_plugin_without_hookimpl_is_named_when_its_learner_is_asked_for(tmp_path,
                                                                          monkeypatch):
    installed_plugin(tmp_path, monkeypatch, "unmarked_plugin_t", (
        "def reranker_register_learners():\n    return []\n"))
    with pytest.raises(ConfigError) as info:
        learner_class(get_plugin_manager(), "unmarked")
    assert "learner.name: unknown learner 'unmarked'" in info.value.message
    assert "installed plugin 'unmarked_plugin_t' registers nothing: are its hook functions " \
           "marked with @reranker.hookimpl?" in info.value.message


def test_a_duplicate_name_is_said_whole_where_a_config_asks_for_the_learner(tmp_path):
    from reranker.core.config import load_config
    from reranker.models.arms import build_arm

    config_path = tmp_path / "c.yaml"
    config_path.write_text("learner:\n  name: reverse_test\n")
    config = load_config(config_path)
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(plugin(type("Clone", (Reverse,), {"name": "random"})))
    section = {"name": "reverse_test", "params": {}, "depth": 10, "discount": "log2",
               "seed": None}
    with pytest.raises(ConfigError, match="two plugins register a learner named 'random': "):
        build_arm("main", section, config, pm, "learner")


def test_an_event_store_missing_methods_is_told_the_part_of_each():
    """The event store's interface is four parts: a third party learns which part each
    missing method belongs to."""
    from reranker.stores.sqlite import SQLiteStore

    partial = type("Partial", (SQLiteStore,), {"name": "partial_t"})
    for method in ("click_counts", "stats"):
        setattr(partial, method, None)
    partial.__abstractmethods__ = frozenset({"click_counts", "stats"})
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(types.SimpleNamespace(reranker_register_event_stores=hookimpl(
        lambda: [partial])), name="partial_plugin_t")
    with pytest.raises(ConfigError, match="registers event store class Partial, which does "
                       "not implement ClickCounts.click_counts, Maintenance.stats$"):
        event_store_classes(pm)
