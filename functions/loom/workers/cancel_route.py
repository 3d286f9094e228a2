"""``POST /executions/{id}/cancel``: ask an execution to stop; its flow cleans up first.

Authorized like a verdict (the same authenticator, action ``cancel``), and recorded with who
asked (``by``): the flow gets ``asyncio.CancelledError`` and may run compensating effects
before it ends ``cancelled`` (see :mod:`loom.kernel.cancellation`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from loom.workers.http_base import Reply, Request, Services, bind_result, run
from loom.workers.operator_routes import operator_call


class CancelRequest(BaseModel):
    """``POST /executions/{id}/cancel`` body (optional): why, and on whose behalf."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="", max_length=1024)
    by: str | None = Field(default=None, max_length=256)


def cancel(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/cancel``: authorized, recorded, then the cleanup runs."""
    call = operator_call(s, request, args, "cancel", CancelRequest, optional=True)
    body: CancelRequest = call.body
    result = run(s.runtime.cancel(call.execution_id, body.reason, by=call.by))
    bind_result(result)
    return 200, result
