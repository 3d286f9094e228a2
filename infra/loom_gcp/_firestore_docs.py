"""Document shapes of the Firestore event store: pure encoding, no I/O.

Kept apart from the store's modules (:mod:`loom_gcp.firestore` and its ``_firestore_append``,
``_firestore_load`` and ``_firestore_core`` parts) so they hold only the protocol (which
documents are read and written, and with which preconditions).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from loom.errors import StoreLimitError
from loom.events import EVENT_ADAPTER, Event
from loom.store.base import ExecutionSummary, Snapshot, StatusChange

# A Firestore document holds at most 1 MiB; keep each snapshot part well under it so the
# part's other fields and the document name never tip it over.
SNAPSHOT_PART_BYTES = 900_000
# A snapshot kept on the execution document itself (see :func:`inline_snapshot_fields`) stays
# far enough under 1 MiB that the document's other fields always fit beside it.
INLINE_SNAPSHOT_BYTES = 256_000

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})

# Firestore's limits: a document holds at most 1 MiB; a commit carries at most 500 writes
# and about 10 MiB. The commit budget keeps a margin for the request's own framing.
MAX_DOC_BYTES = 1_048_576
MAX_COMMIT_WRITES = 500
MAX_COMMIT_BYTES = 10_000_000


def doc_size(doc_id: str, fields: Mapping[str, Any]) -> int:
    """A document's size as Firestore counts it (name, field names and values, +32).

    The name counts the id and a fixed allowance for its parent path, which Loom keeps short.
    """
    return len(doc_id.encode()) + 1 + 200 + 32 + _map_size(fields)


def _map_size(fields: Mapping[str, Any]) -> int:
    return sum(len(key.encode()) + 1 + _value_size(value) for key, value in fields.items())


def _value_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode()) + 1
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, Mapping):
        return _map_size(value)  # pyright: ignore[reportUnknownArgumentType]
    if isinstance(value, list):
        return sum(_value_size(item) for item in value)  # pyright: ignore[reportUnknownVariableType]
    return 8  # numbers, timestamps, booleans and null are at most 8 bytes


def check_commit(
    what: str, docs: Sequence[tuple[str, Mapping[str, Any]]], other_writes: int
) -> None:
    """Refuse, before anything is written, a commit over one of Firestore's limits.

    Args:
        what: The store call, for the message.
        docs: ``(id, fields)`` of the documents the commit creates.
        other_writes: Small writes beside them (an execution-document update).

    Raises:
        StoreLimitError: Naming the limit and the size asked for.
    """
    writes = len(docs) + other_writes
    if writes > MAX_COMMIT_WRITES:
        raise over_limit(what, "writes per commit", MAX_COMMIT_WRITES, writes)
    total = other_writes * 2_000
    for doc_id, fields in docs:
        size = doc_size(doc_id, fields)
        if size > MAX_DOC_BYTES:
            raise over_limit(what, f"bytes in document {doc_id}", MAX_DOC_BYTES, size)
        total += size
    if total > MAX_COMMIT_BYTES:
        raise over_limit(what, "bytes per commit", MAX_COMMIT_BYTES, total)


def over_limit(what: str, limit: str, allowed: int, asked: int) -> StoreLimitError:
    return StoreLimitError(
        f"Firestore: {what} refused, nothing written: {asked} {limit}, Firestore allows at "
        f"most {allowed} (store large payloads in a blob store; split large batches)",
        details={"limit": limit, "max": allowed, "size": asked},
    )


def pack(sizes: list[int], *, writes: int, size: int) -> list[list[int]]:
    """Group indexes of documents, in order, into commits of at most ``writes``/``size``.

    Every size must fit alone (callers refuse bigger documents first).
    """
    groups: list[list[int]] = [[]]
    used = 0
    for index, doc_bytes in enumerate(sizes):
        if groups[-1] and (len(groups[-1]) >= writes or used + doc_bytes > size):
            groups.append([])
            used = 0
        groups[-1].append(index)
        used += doc_bytes
    return groups


def event_doc_id(seq: int) -> str:
    """The id of the event document at ``seq``: zero-padded so ids sort like seqs."""
    return f"{seq:010d}"


def event_fields(event: Event) -> dict[str, Any]:
    """The fields of one event document of the previous layout (one document per event;
    the store now writes pages, see :mod:`loom_gcp._firestore_pages`, and reads both).

    The event is kept as its canonical JSON string (``body``) rather than as a Firestore map:
    a map cannot hold arrays of arrays, reorders keys, and indexes every nested field, while
    a string round-trips exactly, so "is the stored content ours" is one string comparison.
    ``seq`` is a field of its own because the emulator refuses ordering on document ids.
    """
    return {"seq": event.seq, "type": event.type, "at": event.at, "body": event.model_dump_json()}


def event_from_fields(fields: Mapping[str, Any]) -> Event:
    """Parse an event document back into its event."""
    return EVENT_ADAPTER.validate_json(fields["body"])


@dataclass(frozen=True, slots=True)
class SnapshotPointer:
    """Where the newest snapshot lives, as kept on the execution document."""

    seq: int
    snapshot_id: str
    parts: int
    page: int | None = None  # the first seq of the page ending at ``seq``, if known

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> SnapshotPointer | None:
        """The pointer on an execution document, if a snapshot was saved."""
        parts = int(fields.get("snapshot_parts") or 0)
        if parts == 0:
            return None
        return cls(int(fields["snapshot_seq"]), str(fields["snapshot_id"]), parts)

    def fields(self) -> dict[str, Any]:
        """The execution-document fields that record this pointer."""
        return {
            "snapshot_seq": self.seq,
            "snapshot_id": self.snapshot_id,
            "snapshot_parts": self.parts,
            "snapshot_inline": None,
            "snapshot_page": self.page,
        }

    def part_ids(self) -> list[str]:
        """The ids of the snapshot part documents, in order."""
        return [f"{self.snapshot_id}.{i}" for i in range(self.parts)]


def encode_snapshot(state: str) -> list[bytes]:
    """Compress a snapshot state and cut it into parts that each fit in one document.

    Folded states are repetitive JSON: zlib typically shrinks them five- to tenfold, so even
    the state of a 10,000-step execution usually fits in one part (one read on resume).
    """
    data = zlib.compress(state.encode("utf-8"), level=6)
    return [data[i : i + SNAPSHOT_PART_BYTES] for i in range(0, len(data), SNAPSHOT_PART_BYTES)]


def decode_snapshot(parts: list[bytes]) -> str:
    """Join and decompress the parts written by :func:`encode_snapshot`."""
    return zlib.decompress(b"".join(parts)).decode("utf-8")


def inline_snapshot_fields(seq: int, state: str, page: int) -> dict[str, Any] | None:
    """Execution-document fields that hold a small snapshot in place (``None`` if too big).

    An append that changes the status writes the execution document anyway; a snapshot
    riding in it costs no write of its own (nor the read a part swap needs). Parts written
    by an earlier :meth:`save_snapshot` stay unreferenced until the execution is deleted.
    ``page`` is the first seq of the append's last page, which ends at ``seq``.
    """
    data = zlib.compress(state.encode("utf-8"), level=6)
    if len(data) > INLINE_SNAPSHOT_BYTES:
        return None
    return {
        "snapshot_seq": seq,
        "snapshot_id": None,
        "snapshot_parts": 0,
        "snapshot_inline": data,
        "snapshot_page": page,
    }


def snapshot_page(fields: Mapping[str, Any]) -> int | None:
    """The first seq of the page ending at the snapshot's seq (0: the execution document),
    or ``None`` when the snapshot is not known to end a page. Documents of the previous
    layout have no such field: there every event was a page of its own."""
    if "snapshot_page" not in fields:
        return snapshot_seq(fields)
    page = fields["snapshot_page"]
    return None if page is None else int(page)


def inline_snapshot(fields: Mapping[str, Any]) -> Snapshot | None:
    """The snapshot held on the execution document, if it holds one."""
    data = fields.get("snapshot_inline")
    if not data:
        return None
    return Snapshot(int(fields["snapshot_seq"]), decode_snapshot([data]))


def snapshot_seq(fields: Mapping[str, Any]) -> int:
    """The seq of the execution's current snapshot, inline or in parts (0: none)."""
    if fields.get("snapshot_inline") or int(fields.get("snapshot_parts") or 0):
        return int(fields.get("snapshot_seq") or 0)
    return 0


def new_execution_fields(flow: str, now: float, flow_version: str = "1") -> dict[str, Any]:
    """The execution document as ``create`` writes it."""
    return {
        "flow": flow,
        "flow_version": flow_version,
        "status": "running",
        "last_seq": 1,
        "created_at": now,
        "updated_at": now,
        "wake_at": None,
        "parked_reason": None,
        "expire_at": None,
        "snapshot_seq": 0,
        "snapshot_id": None,
        "snapshot_parts": 0,
    }


def status_fields(status: StatusChange, last_seq: int, retention: timedelta) -> dict[str, Any]:
    """The execution-document update of an append that changes the status.

    A finished execution gets ``expire_at`` (the TTL field): Firestore deletes the document
    some time after it passes.
    """
    now = time.time()
    expire_at = None
    if status.status in TERMINAL_STATUSES:
        expire_at = datetime.fromtimestamp(now, UTC) + retention
    return {
        "status": status.status,
        "wake_at": status.wake_at,
        "parked_reason": status.parked_reason,
        "last_seq": last_seq,
        "updated_at": now,
        "expire_at": expire_at,
    }


# What a listing reads of each execution document: never the snapshot it may hold.
SUMMARY_FIELDS = [
    "flow",
    "flow_version",
    "status",
    "last_seq",
    "created_at",
    "updated_at",
    "wake_at",
    "parked_reason",
]


def summary_from_fields(
    execution_id: str,
    fields: Mapping[str, Any],
    *,
    last_seq: int | None = None,
    updated_at: float | None = None,
) -> ExecutionSummary:
    """Build a summary row; ``last_seq``/``updated_at`` override the stored (lagging) ones."""
    stored_updated = float(fields["updated_at"])
    return ExecutionSummary(
        execution_id=execution_id,
        flow=str(fields["flow"]),
        status=str(fields["status"]),
        last_seq=int(fields["last_seq"]) if last_seq is None else last_seq,
        created_at=float(fields["created_at"]),
        updated_at=stored_updated if updated_at is None else max(updated_at, stored_updated),
        wake_at=None if fields.get("wake_at") is None else float(fields["wake_at"]),
        parked_reason=fields.get("parked_reason"),
        # Documents written before versions were recorded started on version "1".
        flow_version=str(fields.get("flow_version") or "1"),
    )


def timestamp_seconds(value: datetime | None) -> float | None:
    """Epoch seconds of a Firestore timestamp, if there is one."""
    return None if value is None else value.timestamp()
