"""The plugin manager and the registries it feeds."""

from __future__ import annotations

import importlib

import pluggy

from . import hookspecs
from .errors import ConfigError

#: Modules whose hooks ship with the project; they register like any third-party plugin.
DEFAULT_PLUGINS = (
    "reranker.backends.embedded",
    "reranker.backends.elasticsearch",
    "reranker.backends.application",
    "reranker.stores.sqlite",
    "reranker.stores.postgres",
    "reranker_plugins.preference_perceptron",
    "reranker_plugins.batch_preference_perceptron",
    "reranker_plugins.exponentiated_preference_perceptron",
    "reranker_plugins.convex_preference_perceptron",
    "reranker_plugins.second_order_preference_perceptron",
    "reranker_plugins.noregret_klrank",
    "reranker_plugins.greedy_klrank",
    "reranker_plugins.online_ranknet",
    "reranker_plugins.pdgd",
    "reranker_plugins.dbgd",
    "reranker_plugins.ranking_svm",
    "reranker_plugins.epsilon_greedy",
    "reranker_plugins.linucb",
    "reranker_plugins.vcee",
    "reranker_plugins.eels",
    "reranker_plugins.random_ranking",
    "reranker_plugins.backend_order",
)

ENTRY_POINT_GROUP = "reranker"


def get_plugin_manager(load_entrypoints: bool = True) -> pluggy.PluginManager:
    """A new plugin manager with the built-in plugins and, optionally, the installed ones
    (entry-point group ``reranker``)."""
    pm = pluggy.PluginManager("reranker")
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    pm.check_pending()
    return pm


def _registry(pm: pluggy.PluginManager, results: list[list[type]], what: str) -> dict[str, type]:
    registry: dict[str, type] = {}
    for classes in results:
        for cls in classes:
            name = getattr(cls, "name", "")
            if not name:
                raise ConfigError(f"{what} class {cls.__qualname__} has no name")
            if name in registry and registry[name] is not cls:
                raise ConfigError(f"two plugins register a {what} named {name!r}: "
                                  f"{registry[name].__module__} and {cls.__module__}")
            registry[name] = cls
    return dict(sorted(registry.items()))


def learner_classes(pm: pluggy.PluginManager) -> dict[str, type]:
    """Every registered learner class by name."""
    return _registry(pm, pm.hook.reranker_register_learners(), "learner")


def backend_classes(pm: pluggy.PluginManager) -> dict[str, type]:
    """Every registered backend class by name."""
    return _registry(pm, pm.hook.reranker_register_backends(), "backend")


def event_store_classes(pm: pluggy.PluginManager) -> dict[str, type]:
    """Every registered event store class by name."""
    return _registry(pm, pm.hook.reranker_register_event_stores(), "event store")


def _lookup(classes: dict[str, type], name: str, what: str, key: str) -> type:
    if name not in classes:
        raise ConfigError(f"{key}: unknown {what} {name!r} (available: {', '.join(classes)})")
    return classes[name]


def learner_class(pm: pluggy.PluginManager, name: str) -> type:
    """The learner class called ``name``; the error lists the available ones."""
    return _lookup(learner_classes(pm), name, "learner", "learner.name")


def backend_class(pm: pluggy.PluginManager, name: str) -> type:
    """The backend class called ``name``; the error lists the available ones."""
    return _lookup(backend_classes(pm), name, "backend", "backend.type")


def event_store_class(pm: pluggy.PluginManager, name: str) -> type:
    """The event store class called ``name``; the error lists the available ones."""
    return _lookup(event_store_classes(pm), name, "event store", "store.type")
