"""The connections of a :class:`~loom.store.sqlite.SqliteEventStore` to its one file: one
per thread, opened in WAL mode with ``synchronous=FULL``; the writer thread and reader pool a
served worker runs them on (:meth:`~loom.store.sqlite.SqliteEventStore.serve_off_loop`, ADR
0013); and the checks that the file written is still the one the store first opened, so a
write after the file was deleted or replaced fails instead of being acknowledged into the
unlinked file.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from loom.errors import StoreUnavailableError
from loom.store.sqlite_faults import (
    check_same_file,
    check_writable,
    file_identity,
    rollback,
    translate,
)
from loom.store.sqlite_wal import configure, release

T = TypeVar("T")

_READ_THREADS = 4
_REOPEN = frozenset({"read_only", "cannot_open", "io"})


class SqliteConnections:
    """Connections to one SQLite file, the threads that may run them, and the file's identity.

    The base of :class:`~loom.store.sqlite.SqliteEventStore`, which runs every call through
    ``_run`` (``write`` picks the writer thread) and every write transaction through ``_write``.

    Args:
        path: The database file.
        busy_timeout: Seconds a connection waits for another's lock.
    """

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._file: tuple[int, int] | None = None  # (device, inode) of the file first opened
        self._where = self.path.absolute()  # (fixed: a later chdir must not move the store)

    def _serve_off_loop(self) -> None:
        """Run writes on one writer thread and reads on a small pool from now on."""
        with self._lock:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="loom-sqlite-write")
                self._readers = ThreadPoolExecutor(
                    _READ_THREADS, thread_name_prefix="loom-sqlite-read"
                )

    async def _run(self, write: bool, fn: Callable[..., T], *args: Any) -> T:
        pool = self._writer if write else self._readers
        if pool is None:
            return self._call(fn, *args)
        return await asyncio.get_running_loop().run_in_executor(pool, self._call, fn, *args)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except StoreUnavailableError as exc:
            if exc.details.get("reason") in _REOPEN:
                self._forget()  # a connection opened read-only stays so: reopen next time
            raise

    def _forget(self) -> None:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            return
        self._local.con = None
        with self._lock:
            if con in self._all:
                self._all.remove(con)
        with contextlib.suppress(sqlite3.Error):
            release(con)

    def _con(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            con = self._open()
            self._local.con = con
            with self._lock:
                self._all.append(con)
        return con

    def _open(self) -> sqlite3.Connection:
        # Once the store has opened its file, a new connection opens it or fails (``rw``):
        # one opened after the file was deleted must not create an empty database there.
        uri = f"file:{quote(str(self._where))}?mode={'rw' if self._file else 'rwc'}"
        check_writable(self._where)
        try:
            con = sqlite3.connect(
                uri,
                isolation_level=None,
                timeout=self.busy_timeout,
                check_same_thread=False,
                uri=True,
            )
        except sqlite3.OperationalError:
            if self._file is not None and file_identity(self._where) is None:
                check_same_file(self._where, None)  # gone: say so, naming the path
            raise
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            configure(con, self._where)  # commits overwrite a kept WAL (``sqlite_wal``)
            self._file = self._file or file_identity(self._where)  # (for ``_write_con``)
        except sqlite3.Error:
            con.close()
            raise
        except OSError as exc:
            con.close()
            raise translate(exc, f"opening {self._where}") from exc
        return con

    def _write_con(self) -> sqlite3.Connection:
        """This thread's connection for one write transaction, unless the file the store
        opened is no longer the one at the path (deleted or replaced: ``check_same_file``)."""
        con = self._con()
        check_same_file(self._where, self._file)
        return con

    def _check_file(self) -> None:
        """After a commit: was the file written still the one at the path, all along? (The
        check before the transaction cannot see a deletion while it ran.)"""
        check_same_file(self._where, self._file)

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction; roll back on any error."""
        con = self._write_con()
        try:
            con.execute("BEGIN IMMEDIATE")
            result = body(con)
            con.execute("COMMIT")
            self._check_file()
        except BaseException:
            rollback(con)
            raise
        return result

    def _close(self) -> None:
        """Stop the threads (after the calls they run) and close every connection."""
        for pool in (self._writer, self._readers):
            if pool is not None:
                pool.shutdown(wait=True)
        self._writer = self._readers = None
        with self._lock:
            for con in self._all:
                release(con)
            self._all.clear()
        self._local = threading.local()
