"""Which Cloud Tasks queue a dispatch goes to: queues by class, and by shard within a class.

``LOOM_DISPATCH`` names either one queue, which then carries everything (the layout of
earlier releases)::

    cloudtasks://projects/P/locations/L/queues/loom-executions

or a *family* of queues, a prefix and how many queues each class has::

    cloudtasks://projects/P/locations/L/queues/loom?executions=64&timers=8&admission=4&maintenance=2

whose queues are named ``{prefix}-{class}-{i}`` (``loom-executions-0`` … ``loom-executions-63``).
The classes keep one kind of work from starving another (a backlog of timers never delays
a start): ``executions`` (starts, resumes, wakes), ``timers`` (every dispatch with a time),
``admission`` (queue admit passes), ``maintenance`` (purge, sweep and schedule passes).
Within a class, an execution's tasks go to queue ``shard_of(execution_id, n)`` and a job's to
its shard modulo ``n``: each queue gets an even share, under Cloud Tasks' 500 dispatches a
second per queue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from loom.errors import ConfigurationError
from loom.shards import shard_of

CLASSES: Final = ("executions", "timers", "admission", "maintenance")
MAX_PER_CLASS: Final = 200
_PATH = re.compile(r"^projects/([^/]+)/locations/([^/]+)/queues/([A-Za-z0-9-]+)$")


@dataclass(frozen=True, slots=True)
class TaskQueues:
    """The queues of one deployment.

    Attributes:
        parent: ``projects/P/locations/L``.
        name: The one queue's name, or the family's prefix.
        counts: Queues per class; empty for one queue carrying everything.
    """

    parent: str
    name: str
    counts: tuple[tuple[str, int], ...] = ()

    @classmethod
    def parse(cls, url: str) -> TaskQueues:
        """Read a ``cloudtasks://`` URL (see the module docstring).

        Raises:
            ConfigurationError: Not such a URL, an unknown class, or a bad count.
        """
        parts = urlsplit(url)
        path = f"{parts.netloc}{parts.path}".strip("/")
        match = _PATH.match(path) if parts.scheme == "cloudtasks" else None
        if match is None:
            raise ConfigurationError(
                "expected cloudtasks://projects/PROJECT/locations/LOCATION/queues/QUEUE"
                f"[?executions=N&timers=N&admission=N&maintenance=N], got {url!r}"
            )
        parent = f"projects/{match.group(1)}/locations/{match.group(2)}"
        counts = _counts(url, parse_qsl(parts.query, keep_blank_values=True))
        return cls(parent, match.group(3), counts)

    @property
    def all(self) -> list[str]:
        """Every queue's full name."""
        if not self.counts:
            return [f"{self.parent}/queues/{self.name}"]
        return [self._full(c, i) for c, n in self.counts for i in range(n)]

    def _full(self, klass: str, index: int) -> str:
        return f"{self.parent}/queues/{self.name}-{klass}-{index}"

    def for_execution(self, execution_id: str, klass: str) -> str:
        """The queue of a dispatch of ``execution_id`` in ``klass``."""
        if not self.counts:
            return f"{self.parent}/queues/{self.name}"
        n = dict(self.counts)[klass]
        return self._full(klass, shard_of(execution_id, n) if n > 1 else 0)

    def for_job(self, klass: str, shard: int) -> str:
        """The queue of a job of ``klass`` routed by ``shard``."""
        if not self.counts:
            return f"{self.parent}/queues/{self.name}"
        return self._full(klass, shard % dict(self.counts)[klass])


def _counts(url: str, query: list[tuple[str, str]]) -> tuple[tuple[str, int], ...]:
    given: dict[str, int] = {}
    for key, raw in query:
        if key not in CLASSES:
            raise ConfigurationError(
                f"unknown queue class {key!r} in {url!r}; classes: {', '.join(CLASSES)}"
            )
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_PER_CLASS:
            raise ConfigurationError(
                f"{key} in {url!r} must be a whole number of queues, 1 to {MAX_PER_CLASS}"
            )
        given[key] = int(raw)
    if not given:
        return ()
    return tuple((c, given.get(c, 1)) for c in CLASSES)
