"""Flow versions in use: live executions per flow version, read from summaries only.

An operator deletes a flow version from the code once no live execution started on it;
:func:`version_table` says which those are without reading a single event.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from loom.kernel.app import App
from loom.kernel.defs import version_key
from loom.store.base import LIVE_STATUSES, EventStore


@dataclass(frozen=True)
class VersionRow:
    """One flow version: its live executions, and whether the code registers it.

    Attributes:
        flow: The flow name.
        version: The version.
        live: Executions started on it that have not finished (running, suspended, in
            doubt, parked).
        registered: Whether the app registers it (None when no app was given).
        latest: Whether new executions start on it.
    """

    flow: str
    version: str
    live: int
    registered: bool | None
    latest: bool

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return asdict(self)


async def live_counts(store: EventStore, page: int = 1000) -> Counter[tuple[str, str]]:
    """Live executions per ``(flow, version)``, paging through the summaries."""
    counts: Counter[tuple[str, str]] = Counter()
    after: str | None = None
    while True:
        rows = await store.scan(LIVE_STATUSES, after=after, limit=page)
        counts.update((r.flow, r.flow_version) for r in rows)
        if len(rows) < page:
            return counts
        after = rows[-1].execution_id


def version_table(counts: Counter[tuple[str, str]], app: App | None) -> list[VersionRow]:
    """Every version with live executions or registered by ``app``, by flow then version."""
    keys = set(counts)
    if app is not None:
        keys.update((name, v) for name, known in app.versions.items() for v in known)
    rows: list[VersionRow] = []
    for flow, version in sorted(keys, key=lambda k: (k[0], version_key(k[1]))):
        registered = None if app is None else version in app.versions.get(flow, {})
        latest = app is not None and flow in app.flows and app.flows[flow].version == version
        rows.append(VersionRow(flow, version, counts[(flow, version)], registered, latest))
    return rows
