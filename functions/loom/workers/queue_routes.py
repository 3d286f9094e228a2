"""``GET /queues``: each declared queue's limits, executions in flight and waiting."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from loom.primitives.queues import declared, depths

if TYPE_CHECKING:
    from flask import Request

    from loom.runtime import Runtime
    from loom.workers.http_base import Reply, Services


async def describe_queues(runtime: Runtime) -> list[dict[str, Any]]:
    """The queues as ``loom queues`` and ``GET /queues`` list them."""
    found = await depths(runtime)
    return [
        {
            "name": q.name,
            "concurrency": q.concurrency,
            "rate_per_second": q.rate_per_second,
            "worker_concurrency": q.worker_concurrency,
            "in_flight": found[q.name].in_flight,
            "waiting": found[q.name].waiting,
        }
        for q in declared(runtime.app).values()
    ]


def list_queues(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /queues``."""
    from loom.workers.http_base import run

    return 200, {"queues": run(describe_queues(s.runtime))}
