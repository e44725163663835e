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
        _load_installed(pm)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:  # a hook the project does not define
        raise ConfigError(f"plugin {pm.get_name(exc.plugin) or exc.plugin!r}: {exc} (the "
                          f"hooks are reranker_register_learners, "
                          f"reranker_register_backends and reranker_register_event_stores)"
                          ) from None
    return pm


def _load_installed(pm: pluggy.PluginManager) -> None:
    """The plugins installed under the entry-point group ``reranker``, as pluggy's
    ``load_setuptools_entrypoints`` loads them, but a plugin that cannot be imported or
    registered is an error naming it and its package instead of a traceback."""
    from importlib.metadata import distributions

    for dist in list(distributions()):
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP or pm.get_plugin(ep.name) \
                    or pm.is_blocked(ep.name):
                continue
            where = f"plugin {ep.name!r} ({ep.value}, from {dist.metadata['name']})"
            try:
                plugin = ep.load()
            except Exception as exc:  # noqa: BLE001 -- any import failure of a plugin
                raise ConfigError(f"{where} cannot be loaded: {type(exc).__name__}: {exc}; "
                                  f"fix or uninstall it") from None
            try:
                pm.register(plugin, name=ep.name)
            except pluggy.PluginValidationError as exc:
                raise ConfigError(f"{where} is not a valid plugin: {exc}") from None


#: What each registry holds: a subclass of this (imported when first needed).
BASES = {"learner": ("reranker.learner", "Learner"),
         "backend": ("reranker.backends", "Backend"),
         "event store": ("reranker.stores.base", "EventStore")}


def _registry(pm: pluggy.PluginManager, results: list[list[type]], what: str) -> dict[str, type]:
    module, base_name = BASES[what]
    base = getattr(importlib.import_module(module), base_name)
    registry: dict[str, type] = {}
    for classes in results:
        for cls in classes:
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise ConfigError(f"a plugin registers {cls!r} as a {what}, but it is not a "
                                  f"subclass of {module}.{base_name}")
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
