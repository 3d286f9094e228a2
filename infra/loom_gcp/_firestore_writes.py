"""Writes of the Firestore event store that may take several commits: snapshots, purges.

A snapshot's parts are written before the execution document points at them, so a reader
never sees a half-written snapshot: parts nobody points at are invisible. When all parts fit
in one commit with the pointer update (the usual case: one part), that is one commit, which
also deletes the replaced parts; otherwise the parts go first in as many commits as Firestore's
limits need, then the pointer (with the precondition that the execution document did not
change since it was read), then the deletes.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, cast

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch
from google.cloud.firestore_v1.async_collection import AsyncCollectionReference
from google.cloud.firestore_v1.async_document import AsyncDocumentReference

from loom_gcp._firestore_docs import (
    MAX_COMMIT_BYTES,
    MAX_COMMIT_WRITES,
    SnapshotPointer,
    decode_snapshot,
    doc_size,
    pack,
)
from loom_gcp._firestore_io import BuildBatch, Collision, CountedDocs, Doc

Writes = list[tuple[AsyncDocumentReference, dict[str, Any]]]
# Room left in the last commit for the execution-document update and its framing.
_POINTER_BYTES = 20_000


def batch_of(
    io: CountedDocs,
    creates: Writes,
    update: tuple[AsyncDocumentReference, dict[str, Any], Any] | None = None,
    deletes: list[AsyncDocumentReference] | None = None,
) -> BuildBatch:
    """A batch builder: ``create`` these, then one ``update``, then ``delete`` these."""
    gone = deletes or []

    def build() -> tuple[AsyncWriteBatch, int]:
        batch = io.client.batch()
        for ref, fields in creates:
            batch.create(ref, fields)
        if update is not None:
            batch.update(update[0], update[1], option=update[2])
        for ref in gone:
            batch.delete(ref)
        return batch, len(gone)

    return build


async def delete_all(io: CountedDocs, refs: list[AsyncDocumentReference]) -> None:
    """Delete documents, one commit per 500."""
    for start in range(0, len(refs), MAX_COMMIT_WRITES):
        await io.commit(batch_of(io, [], deletes=refs[start : start + MAX_COMMIT_WRITES]))


async def delete_page(io: CountedDocs, query: Any) -> bool:
    """Delete the documents a (keys-only, limited) query finds; False if it found none."""
    refs = [cast(AsyncDocumentReference, doc.reference) for doc in await io.query(query)]
    await delete_all(io, refs)
    return bool(refs)


async def delete_tree(io: CountedDocs, execution: AsyncDocumentReference, name: str) -> bool:
    """Delete an execution document with its events, snapshots and inbox; whether it existed.

    Deletes at most 500 documents per commit, each commit a store call of its own (under its
    own deadline), the execution document last.
    """
    async with io.call(f"delete {name}"):
        existed = (await io.get(execution)).exists
    for sub in ("events", "snapshots", "inbox"):
        children = cast(AsyncCollectionReference, execution.collection(sub))
        query = children.select([]).limit(MAX_COMMIT_WRITES)
        while True:
            async with io.call(f"delete {name}"):
                if not await delete_page(io, query):
                    break
    async with io.call(f"delete {name}"):
        await delete_all(io, [execution])
    return existed


async def read_state(io: CountedDocs, refs: list[AsyncDocumentReference]) -> str | None:
    """The state held by these parts, or None if one is gone (the snapshot was replaced)."""
    found = await io.get_all(refs)
    parts: list[bytes] = []
    for ref in refs:
        snap = found.get(ref.path)
        if snap is None or not snap.exists:
            return None
        parts.append(snap.get("data"))
    return decode_snapshot(parts)


async def swap_in(
    io: CountedDocs,
    exec_doc: Doc,
    new: tuple[SnapshotPointer, list[AsyncDocumentReference], list[bytes]],
    old_refs: list[AsyncDocumentReference],
    max_bytes: int = MAX_COMMIT_BYTES,
) -> bool:
    """Write a snapshot's parts and point ``exec_doc`` at them; False if it changed meanwhile.

    Args:
        io: The store's I/O.
        exec_doc: The execution document as read just before (its update time is the
            precondition of the swap).
        new: The new pointer, its part references and the parts' bytes.
        old_refs: The parts of the snapshot being replaced, deleted once it is.
        max_bytes: The size limit of one commit.
    """
    pointer, refs, parts = new
    creates: Writes = [
        (ref, {"seq": pointer.seq, "data": data}) for ref, data in zip(refs, parts, strict=True)
    ]
    alone = len(old_refs) + 1 >= MAX_COMMIT_WRITES  # too many stale parts to ride along
    groups = pack(
        [doc_size(cast(str, ref.id), fields) for ref, fields in creates],
        writes=MAX_COMMIT_WRITES - 1 - (0 if alone else len(old_refs)),
        size=max_bytes - _POINTER_BYTES,
    )
    for group in groups[:-1]:
        # Part ids carry a random token: only a retry of this very commit, whose answer
        # was lost after it was applied, can meet them. They are written.
        with contextlib.suppress(Collision):
            await io.commit(batch_of(io, [creates[i] for i in group]))
    read_at = cast("datetime | None", exec_doc.update_time)
    option = io.client.write_option(last_update_time=read_at)
    swap = (cast(AsyncDocumentReference, exec_doc.reference), pointer.fields(), option)
    last = [creates[i] for i in groups[-1]]
    try:
        await io.commit(batch_of(io, last, swap, [] if alone else old_refs))
    except (Collision, gexc.FailedPrecondition):
        # The retry of a commit whose answer was lost meets its own parts (or its own
        # pointer update): if it was applied, the parts written before it are the current
        # snapshot, and deleting them would leave the execution unloadable.
        if not await _points_at(io, exec_doc, pointer):
            await delete_all(io, [ref for ref, _ in creates[: len(creates) - len(last)]])
            return False
    if alone:
        await delete_all(io, old_refs)
    return True


async def _points_at(io: CountedDocs, exec_doc: Doc, pointer: SnapshotPointer) -> bool:
    """Whether the execution document now names this snapshot (its id is ours alone)."""
    doc = await io.get(cast(AsyncDocumentReference, exec_doc.reference))
    return doc.exists and (doc.to_dict() or {}).get("snapshot_id") == pointer.snapshot_id
