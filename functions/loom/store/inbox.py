"""The ``Inbox`` SPI: deliveries to an execution written beside its log, drained into it.

Fan-in without contention: when many writers deliver to one execution at once (the results
of a parent's children), each appending to its log would race every other (one conditional
append wins per round, the rest reload and try again). Instead each delivery is one
independent write to the execution's inbox, and the execution drains its inbox into its log
in one append (:mod:`loom.kernel.inbox`).

Contract (``tests/contracts/test_inbox.py``, every backend):

* ``post(execution_id, item)`` writes ``item`` unless the execution's inbox holds an item
  with the same ``key`` already: True when this call wrote it. Posts to one execution
  never contend with each other (each is its own record).
* ``items(execution_id, limit)`` answers the items posted and not removed, oldest first
  (by ``at``, then ``key``), at most ``limit`` (an inbox holding more may answer any
  ``limit`` of them: the drain reads until it is empty).
* ``remove(execution_id, keys)`` removes those items (absent ones are ignored).
* ``stranded(before, shard, shards, limit)`` answers executions of the shard
  (:func:`loom.shards.shard_of` among ``shards``) with an item posted before ``before``: a
  sweep wakes them, in case the wake of the post was lost.
* Deleting an execution (``EventStore.delete_execution``, ``purge``) deletes its inbox.
* Every failure of the backend is a :class:`~loom.errors.StoreError` with the cause chained.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from loom.scope import off_scope_methods
from loom.shards import shard_of


@dataclass(frozen=True, slots=True)
class InboxItem:
    """One delivery waiting in an inbox.

    Attributes:
        key: Unique per delivery to the execution (a repeat of it is the same item):
            ``resume:{on}:{correlation_key}``, ``message:{message_id}``.
        kind: ``resume`` or ``message``.
        body: What the drain needs to decide it (JSON).
        at: When it was posted (epoch seconds).
    """

    key: str
    kind: str
    body: dict[str, Any] = field(default_factory=dict[str, Any])
    at: float = 0.0


class Inbox(abc.ABC):
    """Deliveries to executions, beside their logs; see the module docstring.

    Attributes:
        wake_interval: Seconds the wakes of one execution's posts are coalesced over: a
            post's wake is due at the end of its interval, so posts within one interval
            make one wake (0: a wake per post, at once).
    """

    wake_interval: float = 0.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        off_scope_methods(cls)

    @abc.abstractmethod
    async def post(self, execution_id: str, item: InboxItem) -> bool:
        """Write ``item`` unless an item with its key is there; whether this call wrote it."""

    @abc.abstractmethod
    async def items(self, execution_id: str, limit: int = 500) -> list[InboxItem]:
        """The items waiting, oldest first."""

    @abc.abstractmethod
    async def remove(self, execution_id: str, keys: list[str]) -> None:
        """Remove these items (absent ones ignored)."""

    @abc.abstractmethod
    async def stranded(self, before: float, shard: int, shards: int, limit: int = 500) -> list[str]:
        """Executions of ``shard`` with an item posted before ``before``."""


class InMemoryInbox(Inbox):
    """Inboxes in this process's memory (beside :class:`~loom.store.memory.InMemoryEventStore`)."""

    def __init__(self) -> None:
        self._boxes: dict[str, dict[str, InboxItem]] = {}

    async def post(self, execution_id: str, item: InboxItem) -> bool:
        """See :class:`Inbox`."""
        box = self._boxes.setdefault(execution_id, {})
        if item.key in box:
            return False
        box[item.key] = item
        return True

    async def items(self, execution_id: str, limit: int = 500) -> list[InboxItem]:
        """See :class:`Inbox`."""
        box = self._boxes.get(execution_id, {})
        return sorted(box.values(), key=lambda i: (i.at, i.key))[:limit]

    async def remove(self, execution_id: str, keys: list[str]) -> None:
        """See :class:`Inbox`."""
        box = self._boxes.get(execution_id, {})
        for key in keys:
            box.pop(key, None)
        if not box:
            self._boxes.pop(execution_id, None)

    async def stranded(self, before: float, shard: int, shards: int, limit: int = 500) -> list[str]:
        """See :class:`Inbox`."""
        found = [
            eid
            for eid, box in self._boxes.items()
            if shard_of(eid, shards) == shard and any(i.at < before for i in box.values())
        ]
        return sorted(found)[:limit]

    def drop(self, execution_id: str) -> None:
        """Forget an execution's inbox (it was deleted)."""
        self._boxes.pop(execution_id, None)
