"""Event stores: the interface (:mod:`.base`: four narrow parts, :class:`ImpressionLog`,
:class:`ClickCounts`, :class:`Coordination` and :class:`Maintenance`, composed into
:class:`EventStore`) with its conformance checks (:mod:`.conformance`), the statements SQL
stores share (:mod:`.sql`), SQLite, the embedded default (:mod:`.sqlite`), and PostgreSQL, for
several machines (:mod:`.postgres`). Stores register through the
``reranker_register_event_stores`` hook."""

from __future__ import annotations

import pluggy

from reranker.stores.base import (
    ClickCounts,
    Coordination,
    EventStore,
    ImpressionLog,
    Leadership,
    Maintenance,
    Reader,
    Retained,
)


def open_event_store(config, pm: pluggy.PluginManager | None = None, *,
                     existing: bool = False) -> EventStore:
    """Open the event store the ``store`` section of ``config`` selects (``store.type``);
    with ``existing``, one that must be there already (a command that only reads what
    searches logged: a store it would create is a misspelt ``store.path``)."""
    from reranker.core.errors import StoreError
    from reranker.core.plugins import event_store_class, get_plugin_manager

    cls = event_store_class(pm or get_plugin_manager(), config.store.type)
    missing = cls.missing(config) if existing else None
    if missing:
        raise StoreError(f"{missing}: no search has been logged with this configuration "
                         f"(is the store section right?)")
    return cls.from_config(config)


__all__ = ["ClickCounts", "Coordination", "EventStore", "ImpressionLog", "Leadership",
           "Maintenance", "Reader", "Retained", "open_event_store"]
