"""Event pages of the Firestore event store: several events per document.

Firestore bills per document written, so an append writes all its events into one *page*,
``executions/{id}/events/{first_seq:010d}`` with ``seq`` (its first seq), ``last`` and
``bodies`` (each event's canonical JSON string, in order). A page over Firestore's 1 MiB
is cut into several pages, each keyed by its first seq, in the same commit. The start event
rides the execution document (``start``, the same JSON string), with the events written by
the same ``create`` (``head``), unless they are too big to sit there beside a snapshot;
then they are pages. An append that finishes the execution may ride it too (``end``, see
:mod:`loom_gcp._firestore_fence`); readers merge these runs with the pages by seq.

Two writers appending at the same ``expected_seq`` create the same page id
(``expected_seq + 1``): every log end a writer can have loaded is a page end, so the
``create()`` that fenced per-event documents fences pages the same way.

Documents written by the previous layout (one per event: ``seq``, ``type``, ``at``,
``body``; the start event in document ``0000000001``) read as pages of one event.

An execution document removed by Firestore's TTL leaves its pages behind; a new execution
of the same id must not take them for its own log. Pages are never updated, so a page
created before the execution document belongs to an earlier execution of that id: readers
that hold the execution document drop such *orphans* (and the store then deletes them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from google.cloud import firestore
from google.cloud.firestore_v1 import FieldFilter

from loom.events import TERMINAL_TYPES, Event
from loom.store.unreadable import parse_events
from loom_gcp._firestore_docs import MAX_DOC_BYTES, doc_size, event_doc_id
from loom_gcp._firestore_io import CountedDocs, Doc

# The start event rides the execution document only up to this size, so the document stays
# under 1 MiB with an inline snapshot (256 kB) and its other fields beside it.
START_ON_DOC_BYTES = 512_000


@dataclass(frozen=True, slots=True)
class Page:
    """Consecutive events stored together.

    Attributes:
        first: The seq of the first event.
        bodies: The events' stored JSON strings, in order.
        home: The page document's first seq; 0 for the start on the execution document.
        created: When the page document was created (``None``: unknown or not a page).
    """

    first: int
    bodies: Sequence[str]
    home: int
    created: datetime | None = None

    @property
    def last(self) -> int:
        """The seq of the last event."""
        return self.first + len(self.bodies) - 1

    def holds(self, seq: int) -> bool:
        """Whether event ``seq`` is on this page."""
        return self.first <= seq <= self.last

    def body_at(self, seq: int) -> str:
        """The stored body of event ``seq`` (which must be on this page)."""
        return self.bodies[seq - self.first]

    @property
    def ends_log(self) -> bool:
        """Whether the page's last event is terminal: nothing may follow it."""
        return terminal_body(self.bodies[-1])

    def events_after(self, seq: int, execution_id: str) -> list[Event]:
        """The page's events with a seq above ``seq``, parsed (``execution_id``: whose,
        named by the error for a body this release cannot read)."""
        start = max(0, seq + 1 - self.first)
        # A body this release cannot parse is a store error naming it (loom.store.unreadable).
        return parse_events(self.bodies[start:], self.first + start, execution_id)


def terminal_body(body: str) -> bool:
    """Whether an event's stored JSON is a terminal event's.

    A stored body is the event's canonical JSON, whose first string-valued field is its
    ``type`` (after ``schema_version``, ``seq`` and ``at``): reading the name there spares
    parsing a body that may be hundreds of kilobytes. A body of another shape is parsed.
    """
    start = body.find(_TYPE_KEY, 0, 160)
    if start < 0:
        return json.loads(body).get("type") in TERMINAL_TYPES
    start += len(_TYPE_KEY)
    return body[start : body.find('"', start)] in TERMINAL_TYPES


_TYPE_KEY = '"type":"'


def page_from_doc(doc: Doc) -> Page:
    """A page document (or an event document of the previous layout) as a page."""
    fields = doc.to_dict() or {}
    bodies = fields.get("bodies")
    if bodies is None:  # the previous layout: one event, its body in ``body``
        bodies = [fields["body"]]
    first = int(fields["seq"])
    created = cast("datetime | None", doc.create_time)
    return Page(first, [str(b) for b in cast("list[Any]", bodies)], first, created)


def start_page(exec_fields: Mapping[str, Any]) -> Page | None:
    """The start event kept on the execution document, with the events written with it
    (``head``, seqs 2 on), if it is kept there."""
    body = exec_fields.get("start")
    if body is None:
        return None
    head = cast("list[Any]", exec_fields.get("head") or [])
    return Page(1, [str(body), *(str(b) for b in head)], 0)


def end_page(exec_fields: Mapping[str, Any]) -> Page | None:
    """The events of the append that finished the execution, when they ride the execution
    document (``end``: ``seq``, the first seq, and ``bodies``)."""
    end = cast("Mapping[str, Any] | None", exec_fields.get("end"))
    if not end:
        return None
    bodies = cast("list[Any]", end["bodies"])
    return Page(int(end["seq"]), [str(b) for b in bodies], 0)


def held_pages(exec_fields: Mapping[str, Any]) -> tuple[Page, ...]:
    """Every run of events the execution document holds, in seq order."""
    return tuple(p for p in (start_page(exec_fields), end_page(exec_fields)) if p is not None)


def page_fields(first: int, bodies: Sequence[str]) -> dict[str, Any]:
    """The fields of one page document."""
    return {"seq": first, "last": first + len(bodies) - 1, "bodies": list(bodies)}


def with_start(
    exec_fields: dict[str, Any], bodies: Sequence[str]
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The execution document holding the start event and the events written with it
    (``bodies``, seqs 1 on), and the pages ``create`` writes beside it: none, unless they
    are too big to ride the document (then the start alone rides it, or neither)."""
    sizes = [len(b.encode()) + 1 for b in bodies]
    if sum(sizes) <= START_ON_DOC_BYTES:
        head = {"head": list(bodies[1:])} if len(bodies) > 1 else {}
        return {**exec_fields, "start": bodies[0], **head}, []
    rest = bodies_pages(2, bodies[1:])
    if sizes[0] <= START_ON_DOC_BYTES:
        return {**exec_fields, "start": bodies[0]}, rest
    return exec_fields, [(event_doc_id(1), page_fields(1, [bodies[0]])), *rest]


def pages_of(events: Sequence[Event]) -> list[tuple[str, dict[str, Any]]]:
    """``(document id, fields)`` of the pages holding ``events`` (consecutive seqs)."""
    if not events:
        return []
    return bodies_pages(events[0].seq, [e.model_dump_json() for e in events])


def bodies_pages(first: int, bodies: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """The pages holding ``bodies`` (events' JSON strings, seqs from ``first``).

    A page is filled until the next event would take it over 1 MiB. An event too big for a
    document alone gets a page of its own, which the commit check then refuses.
    """
    pages: list[tuple[int, list[str]]] = []
    size = 0
    empty = doc_size(event_doc_id(0), page_fields(0, []))
    for seq, body in enumerate(bodies, start=first):
        grows = len(body.encode()) + 1
        if not pages or size + grows > MAX_DOC_BYTES:
            pages.append((seq, []))
            size = empty
        pages[-1][1].append(body)
        size += grows
    return [(event_doc_id(first), page_fields(first, bodies)) for first, bodies in pages]


def keep_current(docs: Sequence[Doc], created: datetime | None) -> tuple[list[Page], bool]:
    """The pages of ``docs`` not older than the execution document (created ``created``),
    and whether any was older (an orphan of an earlier execution of the same id)."""
    pages = [page_from_doc(d) for d in docs]
    if created is None:
        return pages, False
    kept = [p for p in pages if p.created is None or p.created >= created]
    return kept, len(kept) < len(pages)


async def query_pages(
    io: CountedDocs, events: Any, op: str, seq: int, created: datetime | None
) -> tuple[list[Page], bool]:
    """Pages whose first seq is ``op`` ``seq``, in order (see :func:`keep_current`)."""
    query = events.where(filter=FieldFilter("seq", op, seq)).order_by("seq")
    return keep_current(await io.query(query), created)


async def page_holding(
    io: CountedDocs, events: Any, seq: int, created: datetime | None
) -> Page | None:
    """The page document holding event ``seq``: the last one starting at or before it."""
    op, bound = "<=", seq
    while True:
        query = (
            events.where(filter=FieldFilter("seq", op, bound))
            .order_by("seq", direction=firestore.Query.DESCENDING)
            .limit(1)
        )
        docs = await io.query(query)
        pages, orphan = keep_current(docs, created)
        if not orphan:
            return pages[0] if pages and pages[0].holds(seq) else None
        # A TTL leftover starting between the log's page and ``seq`` would hide that page:
        # look below it (leftovers are few, and deleted by the next full read).
        op, bound = "<", page_from_doc(docs[0]).first


async def newest_page(
    io: CountedDocs, events: Any, after: int, created: datetime | None
) -> tuple[Page | None, bool]:
    """The page with the highest first seq above ``after`` (``None``: none, or it is older
    than the execution document), and whether it was older: a TTL leftover beyond the log's
    end hides the log's own newest page, so the caller clears leftovers and asks again."""
    query = (
        events.where(filter=FieldFilter("seq", ">", after))
        .order_by("seq", direction=firestore.Query.DESCENDING)
        .limit(1)
    )
    pages, orphans = keep_current(await io.query(query), created)
    return (pages[0] if pages else None), orphans


async def stored_equal(io: CountedDocs, events: Any, pages: Sequence[tuple[str, Any]]) -> bool:
    """Whether every page of a batch exists with exactly these events."""
    refs = [events.document(doc_id) for doc_id, _ in pages]
    stored = await io.get_all(refs)
    for ref, (_, fields) in zip(refs, pages, strict=True):
        snap = stored.get(ref.path)
        # ``to_dict``: an event document of the previous release has no ``bodies`` (and
        # ``get`` would raise KeyError): not ours.
        stored_bodies = (snap.to_dict() or {}).get("bodies") if snap is not None else None
        if stored_bodies != fields["bodies"]:
            return False
    return True


@dataclass(slots=True)
class Tail:
    """What follows event ``base`` of a log, as read by :func:`read_after`.

    Attributes:
        events: The events after ``base``, in order.
        base_body: The stored body of event ``base``, when its page was read.
        last: The page holding the log's last event read (``None``: none read).
        orphans: Pages older than the execution document were met (and left out).
    """

    events: list[Event]
    base_body: str | None
    last: Page | None
    orphans: bool


@dataclass(frozen=True, slots=True)
class Where:
    """Where a read starts: after event ``base``.

    Attributes:
        base: Read the events after this seq.
        page: The first seq of the page that *ends* at ``base`` (0: the execution
            document), if known; unknown, the page holding ``base + 1`` may start before.
        check: Read the page ending at ``base`` too (its body proves which log it is).
        held: The events on the execution document (:func:`held_pages`).
        created: The execution document's creation time (older pages are orphans).
    """

    base: int
    page: int | None = None
    check: bool = False
    held: tuple[Page, ...] = ()
    created: datetime | None = None


async def read_after(io: CountedDocs, events: Any, where: Where, execution_id: str) -> Tail | None:
    """The events after ``where.base``; ``None`` when the checked page is not there.

    One query in the usual cases; a second only when ``base`` is not known to end a page
    and the first query does not start right after it. Runs of events on the execution
    document (the start, an end) are merged in by seq.
    """
    base, created = where.base, where.created
    held = [p for p in where.held if p.last >= base]
    if where.check and where.page == 0:
        if not any(p.holds(base) for p in held):
            return None
        pages, orphans = await query_pages(io, events, ">", base, created)
    elif where.check and where.page is not None:
        pages, orphans = await query_pages(io, events, ">=", where.page, created)
        if not pages or pages[0].first != where.page or not pages[0].holds(base):
            return None
    else:
        start = held[0] if base == 0 and held and held[0].first == 1 else None
        pages, orphans = await query_pages(io, events, ">", start.last if start else base, created)
    read = sorted([*held, *pages], key=lambda p: p.first)
    straddles = where.page is None and base >= 2 and not where.check
    if straddles and (not read or read[0].first > base + 1):
        boundary = await page_holding(io, events, base, created)
        read = [boundary, *read] if boundary else read
    found = [e for page in read for e in page.events_after(base, execution_id)]
    holding = next((p for p in read if p.holds(base)), None)
    base_body = holding.body_at(base) if holding else None
    return Tail(found, base_body, read[-1] if read else None, orphans)
