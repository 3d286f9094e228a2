"""``GET /versions``: live executions per flow version, for deciding when a version can go.

Mounted by :mod:`loom.workers.http_routes`. Reads summaries only (``EventStore.scan``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from flask import Request

from loom.ops.versions import live_counts, version_table

if TYPE_CHECKING:
    from loom.workers.http_base import Reply, Services


def list_versions(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /versions``: every flow version registered here or with live executions."""
    from loom.workers.http_base import run

    async def table() -> dict[str, Any]:
        counts = await live_counts(s.runtime.store)
        return {"versions": [r.to_json() for r in version_table(counts, s.runtime.app)]}

    return 200, run(table())
