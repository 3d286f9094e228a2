"""The write requests ``GroupCommitter`` gathers (:mod:`loom.store.sqlite_group`).

A request is called with the connection to apply it alone; a :class:`Batch` can also be
applied together with others of its kind (the store's appends and creates,
:mod:`loom.store.sqlite_writes`).
"""

from __future__ import annotations

import abc
import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

Body = Callable[[sqlite3.Connection], Any]


class Request(abc.ABC):
    """One write waiting for its group's transaction: called with the connection, it applies
    its statements (raising to refuse itself, nothing of it kept).

    :meth:`GroupCommitter.submit` fills in the rest, so a request that is its own body
    (every :class:`Batch`: the store's appends and creates) is one object a write, not two.

    Attributes:
        size: Bytes it writes, for the group's byte budget.
        what: Names the operation in a translated error ("append", "create").
        loop: The loop of the caller waiting for it.
        future: Settled with its result or error once its group committed (or failed).
        result: What applying it returned.
        error: Why it was refused, if it was.
    """

    __slots__ = ("error", "future", "loop", "result", "size", "what")
    size: int
    what: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    result: Any
    error: BaseException | None

    @abc.abstractmethod
    def __call__(self, con: sqlite3.Connection) -> Any:
        """Apply this request alone; raise to refuse it."""


class Call(Request):
    """A request whose statements are a plain function (``submit``'s ``body``)."""

    __slots__ = ("body",)

    def __init__(self, body: Body) -> None:
        self.body = body

    def __call__(self, con: sqlite3.Connection) -> Any:
        return self.body(con)


class Batch(Request):
    """A request that can also be applied together with others of its kind.

    Attributes:
        key: The execution the request writes. A group is applied by kind only when its
            keys are distinct: requests for different executions touch different rows, so
            applying them by kind rather than in order cannot change an outcome.
    """

    __slots__ = ("key",)
    key: str

    @classmethod
    @abc.abstractmethod
    def apply_many(cls, con: sqlite3.Connection, batch: list[Any]) -> list[Any] | None:
        """Apply every request of ``batch``: their results in order, or ``None`` (or a
        ``sqlite3`` error) when one would be refused; the committer then rolls back and
        applies the group one by one, which finds that request and refuses it alone."""
