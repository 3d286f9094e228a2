"""What the Firestore store remembers of the logs it loaded or wrote, to read less.

Firestore bills every document read, and one ``execute`` or ``resume`` loads the same
execution more than once (the resume loads it, then the execute it dispatches loads it
again). Events are immutable once written, so a log this process has seen stays a valid
prefix of the log: a later load needs only the events after it. The store checks the
prefix with the same query that fetches the tail — ``seq >= page`` returns the page holding
the last known event first, and that event's stored body must be the one remembered (the
start event: on the execution document, read anyway) — so an execution purged and
started again elsewhere (a different first event, a different log) is never mistaken for
the one remembered: that load falls back to reading everything.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from loom.events import Event
from loom.store.base import LoadedLog, Snapshot


@dataclass(slots=True)
class CachedLog:
    """A known prefix of one log: a snapshot, the events after it, the stored body of the
    last event and where it is (the first seq of its page; 0: the execution document)."""

    snapshot: Snapshot | None
    events: list[Event]
    last_body: str
    last_page: int

    @property
    def last_seq(self) -> int:
        """The seq of the last event known."""
        if self.events:
            return self.events[-1].seq
        return self.snapshot.seq if self.snapshot else 0

    def loaded(self) -> LoadedLog:
        """A copy the caller may keep (the cache goes on growing its own list)."""
        return LoadedLog(self.snapshot, list(self.events))


class LogCache:
    """A bounded LRU of :class:`CachedLog` by execution id.

    Args:
        entries: How many executions are remembered.
        max_events: Longer logs are not remembered (memory stays bounded).
    """

    def __init__(self, entries: int = 256, max_events: int = 2_000) -> None:
        self._logs: OrderedDict[str, CachedLog] = OrderedDict()
        self._entries = entries
        self._max_events = max_events

    def get(self, execution_id: str) -> CachedLog | None:
        """The remembered prefix, if any."""
        log = self._logs.get(execution_id)
        if log is not None:
            self._logs.move_to_end(execution_id)
        return log

    def put(
        self, execution_id: str, loaded: LoadedLog, last_body: str | None, last_page: int
    ) -> None:
        """Remember a whole log as loaded (forget it when its last body is unknown)."""
        if last_body is None or len(loaded.events) > self._max_events:
            self.drop(execution_id)
            return
        events = list(loaded.events)
        self._logs[execution_id] = CachedLog(loaded.snapshot, events, last_body, last_page)
        self._logs.move_to_end(execution_id)
        while len(self._logs) > self._entries:
            self._logs.popitem(last=False)

    def extend(
        self,
        execution_id: str,
        expected: int,
        events: Sequence[Event],
        last_body: str,
        last_page: int,
    ) -> None:
        """Add events appended after ``expected``; forget the log if that was not its end."""
        log = self._logs.get(execution_id)
        if log is None:
            return
        if log.last_seq != expected or len(log.events) + len(events) > self._max_events:
            self.drop(execution_id)
            return
        log.events.extend(events)
        log.last_body, log.last_page = last_body, last_page

    def rebase(self, execution_id: str, snapshot: Snapshot) -> None:
        """Take a newer snapshot: the events it covers are no longer needed."""
        log = self._logs.get(execution_id)
        if log is None or snapshot.seq > log.last_seq:
            return
        if log.snapshot is None or log.snapshot.seq < snapshot.seq:
            log.snapshot = snapshot
            log.events = [e for e in log.events if e.seq > snapshot.seq]

    def drop(self, execution_id: str) -> None:
        """Forget one execution."""
        self._logs.pop(execution_id, None)


class LogEnds:
    """Where each log is known to end: the highest page end seen (a fact that stays true,
    pages being immutable), and whether the event there is terminal, when that is known.

    An append at a remembered end needs no read to know the log reaches it; and none to know
    that nothing may follow it (the event there is terminal) or that something may.

    Args:
        entries: How many executions are remembered (least recently used go first).
    """

    def __init__(self, entries: int = 10_000) -> None:
        self._ends: OrderedDict[str, tuple[int, bool | None]] = OrderedDict()
        self._entries = entries

    def get(self, execution_id: str) -> int:
        """The highest page end seen (0: none)."""
        found = self._ends.get(execution_id)
        return 0 if found is None else found[0]

    def terminal_at(self, execution_id: str, seq: int) -> bool | None:
        """Whether the event at ``seq`` is terminal, if ``seq`` is the end remembered and
        its event was seen (``None``: not known)."""
        found = self._ends.get(execution_id)
        return found[1] if found is not None and found[0] == seq else None

    def note(self, execution_id: str, seq: int, terminal: bool | None = None) -> None:
        """Remember that a page ends at ``seq`` (and whether its last event is terminal)."""
        found = self._ends.get(execution_id)
        # A higher end replaces what was known; the same end learns whether it is terminal.
        if found is None or seq > found[0] or (seq == found[0] and terminal is not None):
            self._ends[execution_id] = (seq, terminal)
        self._touch(execution_id)

    def reset(self, execution_id: str, seq: int, terminal: bool | None = None) -> None:
        """Remember exactly this end, lower ones included (a log read whole, which may be a
        shorter one than remembered: the id was purged and started again)."""
        self._ends[execution_id] = (seq, terminal)
        self._touch(execution_id)

    def drop(self, execution_id: str) -> None:
        """Forget one execution."""
        self._ends.pop(execution_id, None)

    def _touch(self, execution_id: str) -> None:
        self._ends.move_to_end(execution_id)
        while len(self._ends) > self._entries:
            self._ends.popitem(last=False)
