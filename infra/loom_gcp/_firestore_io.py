"""Counted, bounded Firestore I/O.

Every document read and write is tallied (billing units). Every RPC runs under a deadline
and a google-api-core :class:`~google.api_core.retry.AsyncRetry` policy, applied here around
a whole attempt rather than passed to the client: the client's own retry only covers
*opening* a streaming call (``get``, ``get_all`` and queries all stream), so an error or a
stall in the middle of a stream would escape it. Each attempt gets at most ``timeout``
seconds (the gRPC deadline, with an asyncio backstop), and one store call — every RPC it
makes, retries and backoff included — at most ``deadline`` seconds.

Commits are retried here too, so the caller learns whether an earlier attempt may have been
applied (UNAVAILABLE, DEADLINE_EXCEEDED…) and can tell its own documents from another
writer's. ``ABORTED`` (contention) is retried: in google-api-core it is a subclass of
``Conflict``, so it must be caught *before* ``Conflict`` (an existing document), or
contention would pass for a lost append race.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, urlparse

from google.api_core import exceptions as gexc
from google.api_core.retry import AsyncRetry, if_exception_type
from google.cloud import firestore
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.base_document import DocumentSnapshot

from loom.errors import ConfigurationError, StoreError, StoreLimitError, StoreUnavailableError

T = TypeVar("T")

# A commit that failed with one of these may still have been applied by the server.
_UNKNOWN_OUTCOME = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.Unknown,
)
# Worth another attempt: the service is down, slow or contended, not the request wrong.
TRANSIENT = (*_UNKNOWN_OUTCOME, gexc.Aborted, gexc.ResourceExhausted)
_REASONS: list[tuple[type[Exception], str]] = [
    (gexc.DeadlineExceeded, "timeout"),
    (gexc.Aborted, "busy"),
    (gexc.ResourceExhausted, "busy"),
]
# How Firestore words a request over its size limits ("... exceeds the maximum allowed size",
# "Request payload size exceeds the limit", "too big", "too large").
_TOO_LARGE = re.compile(r"exceeds the (maximum|limit)|too (big|large)", re.IGNORECASE)
# How long past its own deadline an attempt may run before asyncio cancels it: the gRPC
# deadline should fire first; this only guards against one that never does.
_BACKSTOP = 0.5

Doc = DocumentSnapshot[Any]
# Builds a fresh batch for each attempt; returns it and how many of its writes are deletes.
BuildBatch = Callable[[], tuple[AsyncWriteBatch, int]]

# Seconds: one RPC attempt, and one store call with its retries (far below the minutes a
# Cloud Tasks dispatch or a Cloud Run request may last, so a caller always hears back).
DEFAULT_TIMEOUT = 5.0
DEFAULT_DEADLINE = 20.0

# When the current store call must be over (``time.monotonic()``), set by ``CountedDocs.call``.
_CALL_ENDS: ContextVar[float | None] = ContextVar("loom_firestore_call_ends", default=None)


def default_retry() -> AsyncRetry:
    """Exponential backoff (50 ms doubling to 1 s) on transient errors; bounded by the caller."""
    return AsyncRetry(
        predicate=if_exception_type(*TRANSIENT), initial=0.05, maximum=1.0, multiplier=2.0
    )


@dataclass(frozen=True, slots=True)
class CallPolicy:
    """Deadlines and retries of the store's Firestore calls.

    Attributes:
        timeout: Seconds one RPC attempt may take (its gRPC deadline).
        deadline: Seconds one store call may take: all its RPCs, retries and backoff.
        retry: Which errors are retried and the backoff between attempts; its own
            ``timeout`` is replaced by what is left of ``deadline``.
    """

    timeout: float = DEFAULT_TIMEOUT
    deadline: float = DEFAULT_DEADLINE
    retry: AsyncRetry = field(default_factory=default_retry)

    def __post_init__(self) -> None:
        for name in ("timeout", "deadline"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")


class Collision(Exception):
    """A ``create()`` in the batch met an existing document.

    Attributes:
        maybe_ours: An earlier attempt of the same commit may have been applied, so the
            existing documents may be this caller's own.
    """

    def __init__(self, maybe_ours: bool) -> None:
        super().__init__("document exists")
        self.maybe_ours = maybe_ours


def translate(exc: gexc.GoogleAPIError, what: str) -> StoreError:
    """The Loom error for a Google API error: retryable ones become unavailability, a
    request Firestore refuses as too large a :class:`StoreLimitError` (never retryable)."""
    cause: BaseException = exc
    if isinstance(exc, gexc.RetryError):
        cause = cast(BaseException | None, exc.cause) or exc
    if isinstance(cause, gexc.InvalidArgument) and _TOO_LARGE.search(str(cause)):
        return StoreLimitError(f"Firestore: {what} refused: {cause}", details={"limit": "size"})
    if isinstance(exc, gexc.RetryError) or isinstance(cause, TRANSIENT):
        reason = next((r for kind, r in _REASONS if isinstance(cause, kind)), "unavailable")
        return StoreUnavailableError(
            f"Firestore: {what} failed, retry later: {exc}", details={"reason": reason}
        )
    return StoreError(f"Firestore: {what} failed: {exc}")


@contextmanager
def translating(what: str) -> Generator[None]:
    """Turn Google API errors into :class:`StoreError` at the store's boundary."""
    try:
        yield
    except gexc.GoogleAPIError as exc:
        raise translate(exc, what) from exc


class CountedDocs:
    """Reads, queries and batch commits through one client: counted, bounded and retried."""

    def __init__(self, client: firestore.AsyncClient, policy: CallPolicy) -> None:
        self.client = client
        self.policy = policy
        self.ops = {"reads": 0, "writes": 0, "deletes": 0}

    def reset(self) -> None:
        """Count from zero again."""
        self.ops = dict.fromkeys(self.ops, 0)

    @asynccontextmanager
    async def call(self, what: str, *, deadline: float | None = None) -> AsyncGenerator[None]:
        """Bound one store call by the policy's deadline and translate its errors.

        Raises:
            StoreUnavailableError: The deadline passed, or a transient error outlasted it.
            StoreError: Any other Google API error (the cause chained).
        """
        seconds = self.policy.deadline if deadline is None else deadline
        token = _CALL_ENDS.set(time.monotonic() + seconds)
        try:
            async with asyncio.timeout(seconds + 2 * _BACKSTOP):
                with translating(what):
                    yield
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"Firestore: {what} did not finish within {seconds:g}s",
                details={"reason": "timeout"},
            ) from exc
        finally:
            _CALL_ENDS.reset(token)

    async def rpc(
        self,
        attempt: Callable[[float], Awaitable[T]],
        on_error: Callable[[Exception], None] | None = None,
    ) -> T:
        """Run ``attempt(timeout)`` under the retry policy until the store call's deadline.

        Raises:
            google.api_core.exceptions.RetryError: Transient errors until the deadline.
            Exception: A non-retryable error from ``attempt``, as it was raised.
        """
        ends = _CALL_ENDS.get() or time.monotonic() + self.policy.deadline
        errors: list[Exception] = []

        async def once() -> T:
            left = ends - time.monotonic()
            if left <= 0:
                last = errors[-1] if errors else None
                raise gexc.RetryError("the store call's deadline passed", last)
            timeout = min(self.policy.timeout, left)
            try:
                async with asyncio.timeout(timeout + _BACKSTOP):
                    return await attempt(timeout)
            except TimeoutError as exc:
                error: Exception = gexc.DeadlineExceeded(f"no answer within {timeout:.2g}s")
                error.__cause__ = exc
            except Exception as exc:
                error = exc
            errors.append(error)
            if on_error is not None:
                on_error(error)
            raise error

        retry = self.policy.retry.with_timeout(max(0.0, ends - time.monotonic()))
        retried = cast(Callable[[], Awaitable[T]], retry(once))
        return await retried()

    async def get(self, ref: AsyncDocumentReference) -> Doc:
        """One document (a missing one is billed as a read too)."""
        doc = await self.rpc(lambda t: ref.get(retry=None, timeout=t))
        self.ops["reads"] += 1
        return doc

    async def get_all(self, refs: list[AsyncDocumentReference]) -> dict[str, Doc]:
        """Several documents in one round trip, keyed by path."""

        async def attempt(timeout: float) -> dict[str, Doc]:
            found: dict[str, Doc] = {}
            async for snap in self.client.get_all(refs, retry=None, timeout=timeout):
                doc: Doc = snap
                found[str(doc.reference.path)] = doc
            return found

        found = await self.rpc(attempt)
        self.ops["reads"] += len(refs)
        return found

    async def query(self, query: Any) -> list[Doc]:
        """Every document a query returns (an empty result is billed as one read)."""

        async def attempt(timeout: float) -> list[Doc]:
            return [d async for d in query.stream(retry=None, timeout=timeout)]

        docs = await self.rpc(attempt)
        self.ops["reads"] += max(1, len(docs))
        return docs

    async def commit_once(self, batch: AsyncWriteBatch, timeout: float) -> list[Any] | None:
        """Send one commit with the client's own retries off (fault tests replace this).

        Returns:
            The write results, in the batch's order (each has the document's new
            ``update_time``).
        """
        return await batch.commit(retry=None, timeout=timeout)

    async def commit(self, build: BuildBatch) -> list[Any]:
        """Commit a batch, retrying transient errors with backoff until the deadline.

        Returns:
            The write results in the batch's order; empty when the commit's answer did not
            carry them (a retry that found its own writes, a fault test's commit).

        Raises:
            Collision: A ``create()`` met an existing document, or an update's precondition
                failed (the document changed since the time it names).
            google.api_core.exceptions.RetryError: Transient errors until the deadline.
            google.api_core.exceptions.GoogleAPIError: Any other failure, untranslated.
        """
        tried = [0, 0]  # the writes and deletes of the attempt under way
        billed = [0, 0]  # those of attempts whose answer never came: they may have applied

        def note(exc: Exception) -> None:
            if isinstance(exc, _UNKNOWN_OUTCOME):
                billed[0], billed[1] = billed[0] + tried[0], billed[1] + tried[1]

        async def attempt(timeout: float) -> list[Any]:
            batch, deletes = build()
            tried[0], tried[1] = len(batch) - deletes, deletes
            try:
                results = await self.commit_once(batch, timeout)
            except gexc.Aborted:
                raise  # contention, nothing applied: retried (it is a Conflict subclass)
            except (gexc.Conflict, gexc.FailedPrecondition) as exc:
                # (an earlier attempt may have applied: only those are billed so far)
                raise Collision(billed != [0, 0]) from exc
            billed[0], billed[1] = billed[0] + tried[0], billed[1] + tried[1]
            return list(results or [])

        try:
            return await self.rpc(attempt, note)
        finally:  # counted as Firestore bills them: an unanswered commit may have applied
            self.ops["writes"] += billed[0]
            self.ops["deletes"] += billed[1]


KNOBS = ("timeout", "deadline", "shards")


def url_knobs(url: str) -> dict[str, float]:
    """``timeout``/``deadline`` from a store URL's query string, checked."""
    knobs: dict[str, float] = {}
    for key, raw in parse_qsl(urlparse(url).query, keep_blank_values=True):
        if key not in KNOBS:
            raise ConfigurationError(
                f"unknown option {key!r} in {url!r}; a firestore:// URL takes {', '.join(KNOBS)}"
            )
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            unit = "" if key == "shards" else " of seconds"
            raise ConfigurationError(f"{key} in {url!r} must be a positive number{unit}")
        knobs[key] = value
    return knobs
