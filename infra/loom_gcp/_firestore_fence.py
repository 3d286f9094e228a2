"""The end of an execution riding its execution document, and what fences it.

An append that finishes an execution writes the execution document anyway (its status).
Its events can ride that write (``end``: ``seq``, the first seq, and ``bodies``) instead of
a page of their own: one document written, not two. A page is fenced by its ``create()``
(two writers at the same ``expected_seq`` create the same page id); events on the
execution document collide with no page, so that write is fenced differently:

* it carries a ``last_update_time`` precondition, the execution document's update time as
  this store last read or wrote it (a :class:`Stamp`): any write to the document since
  makes it fail;
* every append that is not the holder session's own (``AppendRequest.fence``: a control
  event, a message, a takeover claim) writes the execution document in its commit, under
  the same precondition (read first when the store has none): a riding end that lands
  after it fails, and it fails if a riding end landed first;
* an end rides only when the store has seen the page ending at ``expected_seq`` (so the
  holder's claim was written as a page or with ``create``, and a zombie holder's page at
  ``expected_seq + 1`` would have collided with it), and the event there (not terminal),
  the append carries no claim, and the document holds no end yet.

One store object serves every holder of its process, so the update time it remembers may
come from its own write for *another* holder: the end it just wrote for one, the takeover
claim it just wrote for another. That the document is unchanged since then fences nothing
for a writer at an older position. So a stamp also records where the log had got to at
that version (``reached``, and whether it had ended), and serves as the precondition of a
write at ``expected_seq`` only when it had not got past it nor ended
(:meth:`Stamp.fences`); otherwise the document is read again, and the write is refused
when it still says so. (Without this, a second holder's takeover claim at 13 passed the
precondition its own process's end at 14-15 had just refreshed: a forked log.)

A precondition that fails is not necessarily a lost race (the store's stamp may be stale):
the store reads the document, counts its own end (a retried commit whose answer was lost)
as written, refuses when another end is there, and otherwise falls back to a page, whose
``create()`` decides.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from loom.store.base import FINISHED, AppendRequest
from loom_gcp._firestore_io import Doc
from loom_gcp._firestore_pages import end_page, held_pages

# An end rides the execution document up to this many bytes of events: with the start
# (up to 512 kB) and an inline snapshot (up to 256 kB) the document stays under 1 MiB.
END_ON_DOC_BYTES = 200_000


@dataclass(frozen=True, slots=True)
class Stamp:
    """The execution document as this store last read or wrote it.

    Attributes:
        at: Its update time (a write precondition).
        ended: Whether it holds an end already.
        reached: A seq the log had reached when the document was written at ``at`` (its
            ``last_seq``, or the end it holds, or what the store's own write made it).
        closed: Whether the log had ended then (its last event was terminal).
    """

    at: datetime
    ended: bool
    reached: int = 0
    closed: bool = False

    def fences(self, expected: int) -> bool:
        """Whether this stamp may be the precondition of a write at ``expected``: the
        document, as of ``at``, says the log neither went past ``expected`` nor ended.

        A precondition only says the document is unchanged since ``at``. A stamp the
        store's own write refreshed (an end riding the document, a claim) describes the
        log after that write, not the log a writer at an older ``expected`` decided from:
        the document being unchanged since then is no fence for that writer.
        """
        return not self.closed and self.reached <= expected


class Stamps:
    """A bounded LRU of :class:`Stamp` by execution id."""

    def __init__(self, entries: int = 10_000) -> None:
        self._stamps: OrderedDict[str, Stamp] = OrderedDict()
        self._entries = entries

    def get(self, execution_id: str) -> Stamp | None:
        """The stamp remembered, if any."""
        return self._stamps.get(execution_id)

    def seen(self, execution_id: str, doc: Doc) -> None:
        """Remember the execution document as read (forget it when it does not exist),
        unless a newer version is remembered (a read answered after the store's own write)."""
        at = cast("datetime | None", doc.update_time)
        if not doc.exists or at is None:
            self.drop(execution_id)
            return
        known = self._stamps.get(execution_id)
        if known is not None and known.at > at:
            return
        fields = doc.to_dict() or {}
        held = held_pages(fields)
        end = end_page(fields)
        reached = max([int(fields.get("last_seq") or 0), *(p.last for p in held)])
        closed = any(p.ends_log for p in held)
        self.put(execution_id, Stamp(at, end is not None, reached, closed))

    def wrote(
        self,
        execution_id: str,
        results: Sequence[Any],
        index: int,
        ended: bool,
        reached: int,
        closed: bool,
    ) -> None:
        """Remember the update time of the execution document written as write ``index`` of
        a commit, after which the log reached ``reached`` (and ended, if ``closed``); forget
        it when the commit's answer did not say."""
        at = (
            cast("datetime | None", getattr(results[index], "update_time", None))
            if results
            else None
        )
        if at is None:
            self.drop(execution_id)
            return
        self.put(execution_id, Stamp(at, ended, reached, closed))

    def put(self, execution_id: str, stamp: Stamp) -> None:
        """Remember one stamp."""
        self._stamps[execution_id] = stamp
        self._stamps.move_to_end(execution_id)
        while len(self._stamps) > self._entries:
            self._stamps.popitem(last=False)

    def drop(self, execution_id: str) -> None:
        """Forget one execution's stamp (its next end falls back to a page)."""
        self._stamps.pop(execution_id, None)


def may_ride(
    request: AppendRequest, bodies: Sequence[str], known: int, open_end: bool, stamp: Stamp | None
) -> bool:
    """Whether this append's events may ride the execution document (see the module);
    ``open_end``: the store saw the event at ``expected_seq``, and it is not terminal."""
    status = request.status
    return (
        status is not None
        and status.status in FINISHED
        and not request.fence
        and stamp is not None
        and not stamp.ended
        and stamp.fences(request.expected_seq)
        and known == request.expected_seq
        and open_end
        and not any(e.type == "ExecutionClaimed" for e in request.events)
        and sum(len(b.encode()) + 1 for b in bodies) <= END_ON_DOC_BYTES
    )


def end_fields(first: int, bodies: Sequence[str]) -> dict[str, Any]:
    """The execution-document field holding a riding end."""
    return {"end": {"seq": first, "bodies": list(bodies)}}


def is_our_end(fields: dict[str, Any], first: int, bodies: Sequence[str]) -> bool | None:
    """Whether the document holds this very end (None: it holds no end at all)."""
    end = end_page(fields)
    if end is None:
        return None
    return end.first == first and list(end.bodies) == list(bodies)
