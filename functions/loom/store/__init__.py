"""Event stores: the SPI and its embedded backends."""

from loom.store.base import (
    STATUSES,
    AppendRequest,
    EventStore,
    ExecutionSummary,
    LoadedLog,
    Snapshot,
    StatusChange,
)
from loom.store.memory import InMemoryEventStore
from loom.store.sqlite import SqliteEventStore

__all__ = [
    "STATUSES",
    "AppendRequest",
    "EventStore",
    "ExecutionSummary",
    "InMemoryEventStore",
    "LoadedLog",
    "Snapshot",
    "SqliteEventStore",
    "StatusChange",
]
