"""``POST /executions/{id}/fork``: a new execution from an execution's recorded prefix.

Authorized like a retry (the verdict authenticator, action ``fork``) and recorded with who
asked on the fork's ``ExecutionStarted``; the original is never written to.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from loom.ids import ExecutionId, check_execution_id
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


class ForkRequest(BaseModel):
    """``POST /executions/{id}/fork`` body: where to cut, and the fork's id."""

    model_config = ConfigDict(extra="forbid")

    from_step: str = Field(min_length=1, max_length=256, description="Step id to rerun from.")
    execution_id: ExecutionId | None = Field(
        default=None, description="The fork's id (idempotent by it); default: a new id."
    )
    version: str | None = Field(default=None, min_length=1, max_length=64)
    by: str | None = Field(default=None, min_length=1, max_length=256)


def fork(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/fork``: authorized, copied, then run until it blocks."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    raw = read_body(request, s.max_body)
    principal = authorize(s.verdict_auth, "fork", execution_id, request, raw)
    body = parse_model(ForkRequest, parse_json(request, raw))
    by = f"{body.by} (via {principal})" if body.by else principal
    result = run(
        s.runtime.fork(
            execution_id, body.from_step, new_id=body.execution_id, by=by, version=body.version
        )
    )
    bind_result(result)
    return 200, result
