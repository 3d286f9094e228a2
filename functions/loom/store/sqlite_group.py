"""Group commit for ``SqliteEventStore``: many appends, one transaction, one fsync.

Appends and creates are queued, and a flush commits everything queued in one ``BEGIN
IMMEDIATE`` transaction (at most :data:`MAX_REQUESTS` requests or :data:`MAX_BYTES` of
event bodies per transaction). A caller's future is settled only after the ``COMMIT`` of the
transaction holding its request returned, so with ``synchronous=FULL`` an acknowledged
append is fsync'd, exactly as when every append had a transaction of its own.

Where the flush runs:

* **On the loop** (the CLI, ``Runtime`` used from Python): when other callbacks are ready
  in this loop turn, the first request schedules the flush with ``call_soon``, so every
  execution that becomes ready in the same turn joins the group. When none are, nobody could
  join, and the request commits at once on the caller's thread, as before group commit.
  Waiting costs a loop turn, so it is adaptive: while flushes gather one request only (a
  lone flow whose own tasks are ready), requests commit at once and only every
  :data:`PROBE_EVERY`-th one waits to see whether others join.
* **On the writer thread** (a served worker, after ``serve_off_loop``): the first request
  submits a drain job; while it commits, later requests queue and form the next group.

Isolation inside a group: a group of requests for distinct executions whose bodies can be
applied by kind (:class:`Batch`: the store's appends and creates) is first applied so, a few
``executemany`` statements for the whole group; if one request of it would be refused, that
pass is rolled back and the group applied one by one as follows, which finds that request
and refuses it alone. One by one, requests are applied one after the other without savepoints
while none needs undoing; if one does (a SQLite error, or a refusal after it changed
rows), the transaction is rolled back and the group applied again with each request in a
``SAVEPOINT`` of its own (nothing was committed in between). A request that fails on its own (``AppendConflictError``, ``UnknownExecutionError``) is rolled back to its
savepoint and fails alone; so does one that breaks a constraint (a row another writer put
in its way), with the translated :class:`~loom.errors.StoreError`. An error that a retry
may cure (lock timeout, disk full, I/O, read-only) is an error of the group: the whole
transaction is rolled back and every request of the group fails with the translated
:class:`~loom.errors.StoreUnavailableError`, nothing written.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from loom import crash
from loom.errors import StoreUnavailableError
from loom.store.sqlite_faults import rollback, translate
from loom.store.sqlite_requests import Batch, Body, Call, Request

T = TypeVar("T")

MAX_REQUESTS = 256
MAX_BYTES = 4 << 20  # event bodies per transaction; a larger single request goes alone
PROBE_EVERY = 16  # on the loop, out of grouping mode: every 16th busy-turn request waits
_REOPEN = frozenset({"read_only", "cannot_open", "io"})


@dataclass(slots=True)
class _LoopQueue:
    """The requests of one thread's loop waiting for the next in-loop flush."""

    loop: asyncio.AbstractEventLoop | None = None
    pending: list[Request] = field(default_factory=list[Request])
    grouping: bool = True  # the last flush gathered more than one request
    since_probe: int = 0

    def waits(self) -> bool:
        """Whether a request that others might join waits for a flush or commits now.

        Other ready callbacks are not always other appends (a task woken by an event of the
        same flow is common), so waiting is a bet: kept while flushes gather several
        requests, and otherwise retried every ``PROBE_EVERY`` requests.
        """
        if self.grouping:
            return True
        self.since_probe += 1
        if self.since_probe < PROBE_EVERY:
            return False
        self.since_probe = 0
        return True


class GroupCommitter:
    """Gathers write requests and commits them in groups (see the module docstring).

    Args:
        connect: This thread's connection (the store's per-thread connection).
        forget: Drops this thread's connection, after an error a new one may cure.
        after_commit: Called after each ``COMMIT``, before anyone is told: raises to fail
            every request of the group instead (the store's check that the file it wrote is
            still the one at its path: it may have been deleted while the group ran).
    """

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        forget: Callable[[], None],
        after_commit: Callable[[], None] | None = None,
    ) -> None:
        self._connect = connect
        self._forget = forget
        self._after_commit = after_commit
        self._local = threading.local()
        self._lock = threading.Lock()
        self._queue: deque[Request] = deque()
        self._draining = False
        self.commits = 0  # transactions committed (or attempted): for tests and benchmarks
        self.batched = 0  # groups of them applied by kind (``Batch.apply_many``): for tests

    def submit(
        self, body: Body, size: int, what: str, writer: Executor | None
    ) -> asyncio.Future[Any]:
        """Queue ``body`` for the next group transaction: a future of its result, settled
        once it is durable (a plain function, not a coroutine: one frame fewer for every
        caller to suspend and resume).

        Args:
            body: Statements of one request; raises to refuse it (nothing of it is kept).
                A :class:`Request` (a :class:`Batch`) is queued itself.
            size: Bytes it writes, for the group's byte budget.
            what: Names the operation in a translated error ("append", "create").
            writer: The writer thread's executor, or ``None`` to flush on the loop.
        """
        request = body if isinstance(body, Request) else Call(body)
        return self.queue(request, size, what, writer)

    def queue(
        self, request: Request, size: int, what: str, writer: Executor | None
    ) -> asyncio.Future[Any]:
        """:meth:`submit` for a body that is a :class:`Request` already (the store's appends
        and creates): no check of its type, which on an ABC is a Python-level call."""
        loop = asyncio.get_running_loop()
        request.size, request.what, request.loop = size, what, loop
        request.future = future = loop.create_future()
        request.result = request.error = None
        if writer is None:
            self._enqueue_local(request)
        else:
            self._enqueue_writer(request, writer)
        return future

    def _enqueue_local(self, request: Request) -> None:
        queue: _LoopQueue | None = getattr(self._local, "queue", None)
        if queue is None or queue.loop is not request.loop:
            queue = self._local.queue = _LoopQueue(request.loop)  # a new loop: start afresh
        if not queue.pending and not (_others_ready(request.loop) and queue.waits()):
            self._commit([request])  # nobody else can join before a flush: commit now
            _settle(request)
            return
        queue.pending.append(request)
        if len(queue.pending) == 1:
            request.loop.call_soon(self._flush_local, queue)

    def _flush_local(self, queue: _LoopQueue) -> None:
        pending, queue.pending = queue.pending, []
        queue.grouping = len(pending) > 1
        while pending:
            group = _take(pending)
            self._commit(group)
            _settle_all(group)

    def _enqueue_writer(self, request: Request, writer: Executor) -> None:
        with self._lock:
            self._queue.append(request)
            if self._draining:
                return
            self._draining = True
        try:
            writer.submit(self._drain)
        except RuntimeError:  # the store closed meanwhile: commit here rather than never
            self._drain()

    def _drain(self) -> None:
        """Commit queued groups on the writer thread until the queue is empty."""
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        self._draining = False
                        return
                    group = _take(self._queue)
                self._commit(group)
                _settle_threadsafe(group)
        except BaseException:
            with self._lock:  # let the next request start a drain instead of waiting forever
                self._draining = False
            raise

    def _commit(self, group: list[Request]) -> None:
        """One transaction for ``group``; record each request's result or error."""
        self.commits += 1
        con: sqlite3.Connection | None = None
        try:
            con = self._connect()
            con.execute("BEGIN IMMEDIATE")
            if len(group) == 1:
                _apply_alone(con, group[0])
            elif _apply_batched(con, group):
                self.batched += 1
            elif not _apply_together(con, group):
                rollback(con)  # one request needs undoing alone: again, a savepoint each
                con.execute("BEGIN IMMEDIATE")
                for request in group:
                    _apply_isolated(con, request)
            if con.in_transaction:
                crash.point("in_group_commit", str(self.commits))  # a test's SIGKILL
                con.execute("COMMIT")
                if self._after_commit is not None:
                    self._after_commit()
        except sqlite3.Error as exc:
            self._fail_group(con, group, exc)
        except BaseException as exc:
            if con is not None:
                rollback(con)
            for request in group:
                request.error = exc
            if not isinstance(exc, Exception):
                raise

    def _fail_group(
        self, con: sqlite3.Connection | None, group: list[Request], exc: sqlite3.Error
    ) -> None:
        if con is not None:
            rollback(con)
        for request in group:
            request.result = None
            request.error = translate(exc, request.what)
            request.error.__cause__ = exc
        first = group[0].error
        if isinstance(first, StoreUnavailableError) and first.details.get("reason") in _REOPEN:
            self._forget()  # a connection opened read-only stays so: reopen next time


_KEY = operator.attrgetter("key")
_SIZE = operator.attrgetter("size")


def _others_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether other callbacks run in this loop turn (and so may join a group).

    A lone flow finds none and commits at once, paying no extra loop turn (the sequential
    path stays as fast as one transaction per append). Loops that do not expose their ready
    queue (not the standard library's) are assumed busy: grouping is never wrong, only
    slower for a lone flow.
    """
    ready = getattr(loop, "_ready", None)
    return ready is None or len(ready) > 0


def _take(queue: list[Request] | deque[Request]) -> list[Request]:
    """Pop the next group from the front of ``queue``, within the count and byte budget."""
    if len(queue) <= MAX_REQUESTS and sum(map(_SIZE, queue)) <= MAX_BYTES:
        group = list(queue)  # the common case: all of it fits (one pass in C, not a loop)
        queue.clear()
        return group
    count, size = 0, 0
    for nxt in itertools.islice(queue, MAX_REQUESTS):
        if count and size + nxt.size > MAX_BYTES:
            break
        size += nxt.size
        count += 1
    if isinstance(queue, deque):
        return [queue.popleft() for _ in range(count)]
    group = queue[:count]
    del queue[:count]  # (one move of what is left, not one per request taken)
    return group


def _apply_alone(con: sqlite3.Connection, request: Request) -> None:
    """A group of one needs no savepoint: a refusal rolls back the whole transaction."""
    try:
        request.result = request(con)
    except sqlite3.Error:
        raise
    except Exception as exc:
        rollback(con)
        request.error = exc


def _apply_batched(con: sqlite3.Connection, group: list[Request]) -> bool:
    """Apply ``group`` by kind when it can be (see :class:`Batch`); False, with nothing of it
    kept and a transaction open again, when it cannot or one request would be refused."""
    # (Whole-group passes in C, ``map`` over attribute getters, rather than a Python loop:
    # a kind check a kind, not one a request, and a group is most often of one kind.)
    kinds: dict[type[Any], None] = dict.fromkeys(map(type, group))  # in order seen
    if not all(issubclass(kind, Batch) for kind in kinds):
        return False
    if len(set(map(_KEY, group))) != len(group):
        return False  # two requests for one execution: only their order decides
    try:
        for kind in kinds:
            requests: list[Any] = group
            if len(kinds) > 1:
                requests = [request for request in group if type(request) is kind]
            results = kind.apply_many(con, requests)
            if results is None:
                break
            for request, result in zip(requests, results, strict=True):
                request.result = result
        else:
            return True
    except sqlite3.Error as exc:
        if not con.in_transaction or isinstance(translate(exc, ""), StoreUnavailableError):
            raise  # busy, full, I/O, read-only: an error of the group's transaction
    for request in group:
        request.result = None
    rollback(con)
    con.execute("BEGIN IMMEDIATE")
    return False


def _apply_together(con: sqlite3.Connection, group: list[Request]) -> bool:
    """Apply ``group`` without savepoints (two statements fewer a request); False, the
    results cleared, when one failed in a way only a savepoint could undo alone: a SQLite
    error, or a refusal after it changed rows. A refusal that changed nothing (a conflict's
    ``UPDATE`` matched no row) needs no undoing."""
    for request in group:
        before = con.total_changes
        try:
            request.result = request(con)
        except sqlite3.Error:
            break
        except Exception as exc:
            if con.total_changes != before or not con.in_transaction:
                break
            request.error = exc
    else:
        return True
    for request in group:
        request.result = request.error = None
    return False


def _apply_isolated(con: sqlite3.Connection, request: Request) -> None:
    con.execute("SAVEPOINT loom_request")
    try:
        request.result = request(con)
    except sqlite3.Error as exc:
        if not con.in_transaction or isinstance(translate(exc, ""), StoreUnavailableError):
            raise  # busy, full, I/O, read-only: the group's transaction cannot go on
        con.execute("ROLLBACK TO loom_request")  # a constraint of this request alone
        request.error = translate(exc, request.what)
        request.error.__cause__ = exc
    except Exception as exc:
        con.execute("ROLLBACK TO loom_request")
        request.error = exc
    con.execute("RELEASE loom_request")


def _settle(request: Request) -> None:
    future = request.future
    if future.done():  # the caller was cancelled: its request was still committed
        return
    if request.error is not None:
        future.set_exception(request.error)
    else:
        future.set_result(request.result)


def _settle_all(requests: list[Request]) -> None:
    # (``_settle`` inlined: one Python call fewer for every request of every group.)
    for request in requests:
        future = request.future
        if future.done():  # the caller was cancelled: its request was still committed
            continue
        error = request.error
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(request.result)


def _settle_threadsafe(group: list[Request]) -> None:
    """Hand results to their loops: one wake-up per loop, not one per request."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Request]] = {}
    for request in group:
        by_loop.setdefault(request.loop, []).append(request)
    for loop, requests in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle_all, requests)
