"""``POST /executions/{id}/cancel``: ask an execution to stop; its flow cleans up first.

Authorized like a verdict (the same authenticator, action ``cancel``), and recorded with who
asked (``by``): the flow gets ``asyncio.CancelledError`` and may run compensating effects
before it ends ``cancelled`` (see :mod:`loom.cancellation`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from loom.ids import check_execution_id
from loom.workers.http_routes import (
    Reply,
    Request,
    Services,
    authorize,
    bind,
    bind_result,
    parse_json,
    parse_model,
    read_body,
    run,
)


class CancelRequest(BaseModel):
    """``POST /executions/{id}/cancel`` body (optional): why, and on whose behalf."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="", max_length=1024)
    by: str | None = Field(default=None, max_length=256)


def cancel(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/cancel``: authorized, recorded, then the cleanup runs."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    raw = read_body(request, s.max_body)
    principal = authorize(s.verdict_auth, "cancel", execution_id, request, raw)
    body = parse_model(CancelRequest, parse_json(request, raw)) if raw.strip() else CancelRequest()
    by = f"{body.by} (via {principal})" if body.by else principal
    result = run(s.runtime.cancel(execution_id, body.reason, by=by))
    bind_result(result)
    return 200, result
