"""The plugin manager and the registries it feeds."""

from __future__ import annotations

import importlib
import inspect

import pluggy

from reranker.core import hookspecs
from reranker.core.errors import ConfigError

#: Modules whose hooks ship with the project; they register like any third-party plugin.
DEFAULT_PLUGINS = (
    "reranker.backends.embedded",
    "reranker.backends.elasticsearch",
    "reranker.backends.opensearch",
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
BASES = {"learner": ("reranker.learners.base", "Learner"),
         "backend": ("reranker.backends", "Backend"),
         "event store": ("reranker.stores.base", "EventStore")}


def _registered(pm: pluggy.PluginManager, hook_name: str) -> list[tuple[str, list]]:
    """Each plugin's answer to a registration hook, with the plugin's name, in pluggy's order
    of calling: a hook that raises, or answers something other than a list of classes, is an
    error naming its plugin."""
    answers = []
    for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
        if getattr(impl, "hookwrapper", False) or getattr(impl, "wrapper", False):
            continue  # (a wrapper answers no classes of its own)
        plugin = pm.get_name(impl.plugin) or impl.plugin_name
        try:
            classes = impl.function()
        except Exception as exc:  # noqa: BLE001 -- any failure of a plugin's hook
            raise ConfigError(f"plugin {plugin!r}: its {hook_name} hook raised "
                              f"{type(exc).__name__}: {exc}; fix or uninstall it") from None
        if classes is None:
            continue
        if not isinstance(classes, list | tuple):
            raise ConfigError(f"plugin {plugin!r}: its {hook_name} hook must return a list of "
                              f"classes, got {classes!r}")
        answers.append((plugin, list(classes)))
    return answers


def _registry(pm: pluggy.PluginManager, hook_name: str, what: str) -> dict[str, type]:
    module, base_name = BASES[what]
    base = getattr(importlib.import_module(module), base_name)
    registry: dict[str, type] = {}
    for plugin, classes in _registered(pm, hook_name):
        for cls in classes:
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise ConfigError(f"plugin {plugin!r} registers {cls!r} as a {what}, but it is "
                                  f"not a subclass of {module}.{base_name}")
            if inspect.isabstract(cls):
                missing = ", ".join(sorted(_part_of(cls, base, name)
                                           for name in cls.__abstractmethods__))
                raise ConfigError(f"plugin {plugin!r} registers {what} class "
                                  f"{cls.__qualname__}, which does not implement {missing}")
            name = getattr(cls, "name", "")
            if not name:
                raise ConfigError(f"plugin {plugin!r}: {what} class {cls.__qualname__} has no "
                                  f"name")
            if name in registry and registry[name] is not cls:
                raise ConfigError(f"two plugins register a {what} named {name!r}: "
                                  f"{registry[name].__module__} and {cls.__module__}")
            registry[name] = cls
            if what == "learner" and plugin in DEFAULT_PLUGINS:
                # The project's own learners: the conformance suite checks their results in
                # the project's tests, so that Learner.rank need not on every search (a
                # subclass of one, defined elsewhere, is checked: the mark is the class's own).
                cls._shipped = True
    return dict(sorted(registry.items()))


def _part_of(cls: type, base: type, name: str) -> str:
    """``name`` as a plugin author looks it up: qualified by the part of the interface that
    declares it (``ClickCounts.click_counts``) when the base is composed of parts (the event
    store's), else bare."""
    declared = next((owner for owner in reversed(cls.__mro__) if name in vars(owner)), base)
    return name if declared is base or not issubclass(base, declared) else \
        f"{declared.__name__}.{name}"


def learner_classes(pm: pluggy.PluginManager) -> dict[str, type]:
    """Every registered learner class by name."""
    return _registry(pm, "reranker_register_learners", "learner")


def backend_classes(pm: pluggy.PluginManager) -> dict[str, type]:
    """Every registered backend class by name."""
    return _registry(pm, "reranker_register_backends", "backend")


def event_store_classes(pm: pluggy.PluginManager) -> dict[str, type]:
    """Every registered event store class by name."""
    return _registry(pm, "reranker_register_event_stores", "event store")


def _lookup(pm: pluggy.PluginManager, classes: dict[str, type], name: str, what: str,
            key: str) -> type:
    if name not in classes:
        idle = [plugin for plugin, module in pm.list_name_plugin()
                if plugin not in DEFAULT_PLUGINS and not pm.get_hookcallers(module)]
        hint = "".join(f"; installed plugin {plugin!r} registers nothing: are its hook "
                       f"functions marked with @reranker.hookimpl?" for plugin in idle)
        raise ConfigError(f"{key}: unknown {what} {name!r} (available: {', '.join(classes)})"
                          f"{hint}")
    return classes[name]


def learner_class(pm: pluggy.PluginManager, name: str, key: str = "learner.name") -> type:
    """The learner class called ``name``; the error names ``key`` and lists the available
    ones."""
    return _lookup(pm, learner_classes(pm), name, "learner", key)


def backend_class(pm: pluggy.PluginManager, name: str) -> type:
    """The backend class called ``name``; the error lists the available ones."""
    return _lookup(pm, backend_classes(pm), name, "backend", "backend.type")


def event_store_class(pm: pluggy.PluginManager, name: str) -> type:
    """The event store class called ``name``; the error lists the available ones."""
    return _lookup(pm, event_store_classes(pm), name, "event store", "store.type")
