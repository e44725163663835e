"""Hook specifications: the whole plugin API.

A plugin is a module or object with functions named after these hooks and marked with
``@reranker.hookimpl``. Built-in learners and backends register through the same hooks as
third-party ones. Hooks are always called with keyword arguments.
"""


import pluggy

hookspec = pluggy.HookspecMarker("reranker")


@hookspec
def reranker_register_learners() -> list[type]:
    """Return a list of :class:`reranker.learners.base.Learner` subclasses.

    Each class's ``name`` is the value users write in ``learner.name``; two plugins that
    register the same name make the plugin manager fail at start-up.
    """


@hookspec
def reranker_register_backends() -> list[type]:
    """Return a list of :class:`reranker.backends.Backend` subclasses.

    Each class's ``name`` is the value users write in ``backend.type``.
    """


@hookspec
def reranker_register_event_stores() -> list[type]:
    """Return a list of :class:`reranker.stores.EventStore` subclasses.

    Each class's ``name`` is the value users write in ``store.type`` (built in: ``sqlite``,
    ``postgresql``); its ``from_config(config)`` opens the store the ``store`` section
    names. The class implements every abstract method of the interface's four parts
    (:mod:`reranker.stores.base`: the impression log, the click counts, coordination and
    maintenance) with the guarantees they document (durable clicks, gapless ``closed_seq``
    numbers, a :meth:`~reranker.stores.EventStore.trainer_lock` that spans every machine
    sharing the store), which :data:`reranker.testing.STORE_CHECKS` checks;
    :mod:`reranker.stores.sql` holds the statements a SQL database can share.
    """
