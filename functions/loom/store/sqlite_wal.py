"""The SQLite store's write-ahead log kept allocated, so a commit overwrites instead of grows.

A commit fsyncs the WAL (``synchronous=FULL``). When the commit writes past the file's end,
the file system must also journal the new size and blocks, which on the disks measured
costs 1.4x an overwrite when idle and up to 3.8x under load (``bench/floor.py``). SQLite
grows the WAL for the first ``wal_autocheckpoint`` pages of every file, and deletes the WAL
when the last connection closes cleanly, so every new process started growing it again.
Three settings keep commits in already-written space (docs/adr/0085):

* **Persistent WAL** (``SQLITE_FCNTL_PERSIST_WAL``): the file stays when the last connection
  closes. Python's ``sqlite3`` module does not expose the file control, so it is called
  through ``ctypes`` on the library the module links, with the connection's handle read from
  the object (CPython's layout: the handle follows the object header). The handle is checked
  by asking SQLite for the file name it has open; anything unexpected, and the store goes on
  without it (the WAL is then preallocated again by each process, as below).
* **Preallocation**: when the WAL is smaller than :data:`WAL_BYTES`, the store extends it
  with zeros (never touching a byte SQLite wrote) while it holds the write lock, and fsyncs
  it once. Zeros are no valid frame (frames carry the header's random salts), so SQLite
  reads the file as it was; it writes frames over them later without growing the file.
* **A bounded cycle**: a checkpoint every :data:`CHECKPOINT_PAGES` pages lets the next writer
  start again at the beginning of the file, inside the preallocated size; the
  ``journal_size_limit`` brings a WAL that a long reader made grow back to that size when it
  restarts. The limit is lifted just before the store closes a connection: with a
  persistent WAL SQLite would otherwise truncate the file to zero at the close.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import logging
import os
import platform
import sqlite3
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("loom.store")

CHECKPOINT_PAGES = 224  # PRAGMA wal_autocheckpoint: the WAL restarts after about 1 MB
WAL_FRAMES = 256  # frames preallocated: a checkpoint's worth and a large commit's slack
_FRAME_HEADER = 24
_WAL_HEADER = 32
_PERSIST_WAL = 10  # SQLITE_FCNTL_PERSIST_WAL
_lib: Any = None  # the SQLite library, once looked up; False when it cannot be


def wal_bytes(page_size: int) -> int:
    """The size the WAL is preallocated to, for pages of ``page_size`` bytes."""
    return _WAL_HEADER + WAL_FRAMES * (page_size + _FRAME_HEADER)


def configure(con: sqlite3.Connection, path: Path) -> bool:
    """Set the WAL's cycle on a new connection and keep its WAL across closes.

    Returns:
        Whether the WAL persists (``SQLITE_FCNTL_PERSIST_WAL`` was set).
    """
    page_size = int(con.execute("PRAGMA page_size").fetchone()[0])
    con.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
    con.execute(f"PRAGMA journal_size_limit={wal_bytes(page_size)}")
    return persist_wal(con, path)


def persist_wal(con: sqlite3.Connection, path: Path) -> bool:
    """Ask SQLite to keep the WAL of ``con`` when it closes; False where it cannot be asked."""
    lib = _library()
    if lib is None:
        return False
    handle = ctypes.c_void_p.from_address(id(con) + object.__basicsize__).value
    if not handle:
        return False
    opened = lib.sqlite3_db_filename(handle, b"main")
    if opened is None or os.fsdecode(opened) != os.path.realpath(path):
        log.debug("not the connection's handle (%r): the WAL is not kept", opened)
        return False
    flag = ctypes.c_int(1)
    return lib.sqlite3_file_control(handle, b"main", _PERSIST_WAL, ctypes.byref(flag)) == 0


def _library() -> Any:
    """The SQLite library ``sqlite3`` uses, with the two functions typed; None if unknown."""
    global _lib
    if _lib is None:
        _lib = _load() or False
    return _lib or None


def _load() -> Any:
    # Only where the connection object's layout is known: CPython, whose ``pysqlite``
    # connection has held the ``sqlite3 *`` right after the object header since 2.5.
    if platform.python_implementation() != "CPython" or sys.version_info >= (3, 15):
        return None
    spec = importlib.util.find_spec("_sqlite3")
    if spec is None or spec.origin is None:
        return None
    try:
        # Symbols resolve through the module's own dependencies: the very library it uses.
        lib = ctypes.CDLL(spec.origin)
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.sqlite3_file_control.restype = ctypes.c_int
        lib.sqlite3_file_control.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_void_p,
        ]
        lib.sqlite3_libversion.restype = ctypes.c_char_p
        if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
            return None  # another copy of SQLite than the module's: handles do not mix
    except (OSError, AttributeError):
        return None
    return lib


def wal_short(con: sqlite3.Connection, path: Path) -> bool:
    """Whether the WAL of ``path`` is missing or shorter than :func:`wal_bytes`."""
    page_size = int(con.execute("PRAGMA page_size").fetchone()[0])
    try:
        return os.stat(f"{path}-wal").st_size < wal_bytes(page_size)
    except OSError:
        return True


def preallocate(con: sqlite3.Connection, path: Path) -> None:
    """Extend the WAL of ``path`` with zeros to :func:`wal_bytes`, if it is shorter.

    Call with the write lock held (``BEGIN IMMEDIATE``): no writer can be appending frames
    meanwhile, and a checkpoint that truncates the WAL needs that lock too. Only bytes past
    the file's end are written. A failure is logged and ignored: the WAL then grows as
    SQLite grows it.
    """
    page_size = int(con.execute("PRAGMA page_size").fetchone()[0])
    target = wal_bytes(page_size)
    wal = f"{path}-wal"
    try:
        fd = os.open(wal, os.O_WRONLY)
    except OSError:
        return  # SQLite has not opened one (not in WAL mode): nothing to extend
    try:
        size = os.fstat(fd).st_size
        if size >= target:
            return
        os.lseek(fd, size, os.SEEK_SET)
        zeros = memoryview(bytes(target - size))
        while zeros:
            zeros = zeros[os.write(fd, zeros) :]
        # The size and blocks on disk now: a later commit's fdatasync has no metadata to add.
        os.fdatasync(fd) if hasattr(os, "fdatasync") else os.fsync(fd)
    except OSError as exc:
        log.warning("could not preallocate %s: %s", wal, exc)
    finally:
        os.close(fd)


def release(con: sqlite3.Connection) -> None:
    """Close ``con`` without letting SQLite truncate a persistent WAL (see the module doc)."""
    with contextlib.suppress(sqlite3.Error):
        con.execute("PRAGMA journal_size_limit=-1")
    con.close()
