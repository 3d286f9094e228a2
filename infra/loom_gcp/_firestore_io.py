"""Counted Firestore I/O: every document read and write is tallied (billing units), and
commits are retried here, not by the client, so the caller learns whether an earlier attempt
may have been applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.base_document import DocumentSnapshot

from loom.errors import StoreError

# A commit that failed with one of these may still have been applied by the server.
_UNKNOWN_OUTCOME = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.Unknown,
)
# A commit that failed with one of these was not applied; trying again is safe.
_NOT_APPLIED = (gexc.Aborted, gexc.ResourceExhausted)

Doc = DocumentSnapshot[Any]
# Builds a fresh batch for each attempt; returns it and how many of its writes are deletes.
BuildBatch = Callable[[], tuple[AsyncWriteBatch, int]]


class Collision(Exception):
    """A ``create()`` in the batch met an existing document.

    Attributes:
        maybe_ours: An earlier attempt of the same commit may have been applied, so the
            existing documents may be this caller's own.
    """

    def __init__(self, maybe_ours: bool) -> None:
        super().__init__("document exists")
        self.maybe_ours = maybe_ours


@contextmanager
def translating(what: str) -> Generator[None]:
    """Turn Google API errors into :class:`StoreError` at the store's boundary."""
    try:
        yield
    except gexc.GoogleAPIError as exc:
        raise StoreError(f"Firestore: {what} failed: {exc}") from exc


class CountedDocs:
    """Reads, queries and batch commits through one client, counted as Firestore bills them."""

    def __init__(self, client: firestore.AsyncClient, *, commit_attempts: int) -> None:
        self.client = client
        self.attempts = commit_attempts
        self.ops = {"reads": 0, "writes": 0, "deletes": 0}

    def reset(self) -> None:
        """Count from zero again."""
        self.ops = dict.fromkeys(self.ops, 0)

    async def get(self, ref: AsyncDocumentReference) -> Doc:
        """One document (a missing one is billed as a read too)."""
        self.ops["reads"] += 1
        return await ref.get()

    async def get_all(self, refs: list[AsyncDocumentReference]) -> dict[str, Doc]:
        """Several documents in one round trip, keyed by path."""
        self.ops["reads"] += len(refs)
        found: dict[str, Doc] = {}
        async for snap in self.client.get_all(refs):
            doc: Doc = snap
            found[str(doc.reference.path)] = doc
        return found

    async def query(self, query: Any) -> list[Doc]:
        """Every document a query returns (an empty result is billed as one read)."""
        docs: list[Doc] = [d async for d in query.stream()]
        self.ops["reads"] += max(1, len(docs))
        return docs

    async def commit_once(self, batch: AsyncWriteBatch) -> None:
        """Send one commit with the client's own retries off (fault tests replace this)."""
        await batch.commit(retry=None)

    async def commit(self, build: BuildBatch) -> None:
        """Commit a batch, retrying transient errors with backoff.

        Raises:
            Collision: A ``create()`` met an existing document.
            StoreError: Still failing after the last attempt.
            google.api_core.exceptions.GoogleAPIError: Any other failure, untranslated.
        """
        maybe_applied = False
        last_error: gexc.GoogleAPIError | None = None
        for attempt in range(self.attempts):
            batch, deletes = build()
            writes = len(batch)
            try:
                await self.commit_once(batch)
            except gexc.Conflict as exc:
                raise Collision(maybe_applied) from exc
            except _UNKNOWN_OUTCOME as exc:
                maybe_applied = True
                last_error = exc
            except _NOT_APPLIED as exc:
                last_error = exc
            else:
                self.ops["writes"] += writes - deletes
                self.ops["deletes"] += deletes
                return
            await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
        raise StoreError(f"commit failed after {self.attempts} attempts") from last_error
