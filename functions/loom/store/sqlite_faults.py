"""How ``SqliteEventStore`` turns ``sqlite3`` and file-system errors into store errors.

Nothing raised by ``sqlite3`` leaves the store: a caller (the session, an HTTP route) sees a
:class:`~loom.errors.StoreError` with the cause chained, and
:class:`~loom.errors.StoreUnavailableError` when a retry may succeed.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import ParamSpec, TypeVar

from loom.errors import ConfigurationError, StoreError, StoreLimitError, StoreUnavailableError

log = logging.getLogger("loom.store")
P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT = 30.0
DEFAULT_MAX_EVENT_BYTES = 1_000_000_000  # SQLite's own longest string (SQLITE_MAX_LENGTH)
_TOOBIG = 18  # SQLITE_TOOBIG: a string or blob over the connection's length limit

# Primary SQLite result codes (the low byte of an extended code) that a retry may cure.
_UNAVAILABLE = {
    5: "busy",  # SQLITE_BUSY: another connection holds the lock past the busy timeout
    6: "busy",  # SQLITE_LOCKED
    8: "read_only",  # SQLITE_READONLY
    10: "io",  # SQLITE_IOERR
    13: "disk_full",  # SQLITE_FULL
    14: "cannot_open",  # SQLITE_CANTOPEN
}


def translate(exc: sqlite3.Error | OSError, what: str) -> StoreError:
    """The :class:`StoreError` for a ``sqlite3`` (or file system) error while doing ``what``."""
    if isinstance(exc, OSError):
        reason = {errno.ENOSPC: "disk_full", errno.EROFS: "read_only"}.get(
            exc.errno or 0, "cannot_open"
        )
    else:
        code = getattr(exc, "sqlite_errorcode", None)
        reason = _UNAVAILABLE.get(code & 0xFF) if isinstance(code, int) else None
    message = f"{what} failed: {exc}"
    if reason is None and getattr(exc, "sqlite_errorcode", None) == _TOOBIG:
        return StoreLimitError(message, details={"limit": "bytes per value"})
    if reason is None:
        return StoreError(message, details={"error": type(exc).__name__})
    return StoreUnavailableError(message, details={"reason": reason})


def check_writable(path: Path) -> None:
    """Refuse to open an existing file this process may not write (a read-only mount, say).

    SQLite would open it read-only (with a kept WAL, reads even work) and keep that file
    descriptor for later connections to the file, even once it is writable again.

    Raises:
        StoreUnavailableError: ``reason="read_only"``.
    """
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise translate(OSError(errno.EROFS, "not writable"), f"opening {path}")


def guard(what: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Translate ``sqlite3`` errors raised by a method into :class:`StoreError`."""

    def wrap(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return fn(*args, **kwargs)
            except sqlite3.Error as exc:
                raise translate(exc, what) from exc

        return guarded

    return wrap


def rollback(con: sqlite3.Connection) -> None:
    """Roll back if a transaction is open; never let a failing rollback mask the cause."""
    try:
        if con.in_transaction:
            con.execute("ROLLBACK")
    except sqlite3.Error as exc:
        log.warning("rollback after a failed transaction failed too: %s", exc)


def file_identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the file at ``path`` now, or ``None`` if there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def check_same_file(path: Path, opened: tuple[int, int] | None) -> None:
    """Refuse a write whose connection has open another file than the one at ``path`` now.

    A database file deleted or replaced (``rm``, ``mv new.db loom.db``, a restore) under a
    running process leaves its connections on the unlinked file: their commits succeed and
    are lost with it. One ``os.stat`` per write transaction (a microsecond or two) tells.

    Raises:
        StoreUnavailableError: ``reason="replaced"``, naming the path; nothing is written.
    """
    try:
        now = file_identity(path)
    except OSError as exc:
        raise translate(exc, f"checking the database file {path}") from exc
    if now == opened and now is not None:
        return
    what = "is gone" if now is None else "is another file now"
    raise StoreUnavailableError(
        f"the database file {path} {what}: it was deleted or replaced under this process, "
        "which still has the old file open; the write is refused so that nothing is "
        "acknowledged into the unlinked file (restart the process to open the file now at "
        "the path)",
        details={"reason": "replaced", "path": str(path)},
    )


def busy_timeout_from_env() -> float:
    raw = os.environ.get("LOOM_SQLITE_BUSY_TIMEOUT")
    if not raw:
        return DEFAULT_BUSY_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigurationError(f"LOOM_SQLITE_BUSY_TIMEOUT must be seconds >= 0, not {raw!r}")
    return value


def max_event_bytes_from_env() -> int:
    """``LOOM_SQLITE_MAX_EVENT_BYTES``: the largest event (its JSON) the store takes."""
    raw = os.environ.get("LOOM_SQLITE_MAX_EVENT_BYTES")
    if not raw:
        return DEFAULT_MAX_EVENT_BYTES
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigurationError(
            f"LOOM_SQLITE_MAX_EVENT_BYTES must be a positive integer, not {raw!r}"
        )
    return int(raw)


def check_sizes(op: str, execution_id: str, bodies: Iterable[str], limit: int | None) -> None:
    """Refuse, before anything is written, an event whose JSON is over ``limit`` bytes
    (``op``: "create" or "append to", for the message, built only when refusing; ``None``:
    no limit, as ``EventStore.max_event_bytes`` may say).

    Raises:
        StoreLimitError: Naming the limit and the size asked for.
    """
    if limit is None:
        return
    for body in bodies:
        if len(body) * 4 <= limit:  # UTF-8 takes at most 4 bytes a character: surely fits
            continue
        size = len(body.encode())
        if size > limit:
            raise StoreLimitError(
                f"SQLite: {op} {execution_id!r} refused, nothing written: an event of {size} bytes, the "
                f"store takes at most {limit} (LOOM_SQLITE_MAX_EVENT_BYTES; store large "
                "payloads in a blob store)",
                details={"limit": "bytes per event", "max": limit, "size": size},
            )
