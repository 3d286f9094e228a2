"""``SqliteTable``: a table of its own in the event store's SQLite file (inboxes, schedule
records), each call one ``BEGIN IMMEDIATE`` transaction on a fresh connection, on a thread:
a lock held by another process never stalls the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from loom.store.sqlite_faults import translate


class SqliteTable:
    """Runs one transaction per call against ``path``; creates the table (``schema``, a
    script of ``CREATE ... IF NOT EXISTS``) on a process's first call."""

    schema: ClassVar[str] = ""

    def __init__(self, path: str | Path, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._ready = False

    async def _run(self, what: str, body: Callable[..., object], *args: object) -> object:
        """Run ``body(connection, *args)`` in one transaction; SQLite's errors translated
        (``what`` names the operation in them)."""

        def call() -> object:
            try:
                con = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
                try:
                    if not self._ready:
                        con.executescript(self.schema)
                        self._ready = True
                    con.execute("BEGIN IMMEDIATE")
                    result = body(con, *args)
                    con.execute("COMMIT")
                    return result
                finally:
                    con.close()
            except (sqlite3.Error, OSError) as exc:
                raise translate(exc, what) from exc

        return await asyncio.to_thread(call)
