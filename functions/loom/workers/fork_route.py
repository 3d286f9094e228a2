"""``POST /executions/{id}/fork``: a new execution from an execution's recorded prefix.

Authorized like a retry (the verdict authenticator, action ``fork``) and recorded with who
asked on the fork's ``ExecutionStarted``; the original is never written to.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from loom.ids import ExecutionId
from loom.workers.http_routes import Reply, Request, Services, bind_result, run
from loom.workers.operator_routes import operator_call
from loom.workers.signed_ids import signed_default_id


class ForkRequest(BaseModel):
    """``POST /executions/{id}/fork`` body: where to cut, and the fork's id."""

    model_config = ConfigDict(extra="forbid")

    from_step: str = Field(min_length=1, max_length=256, description="Step id to rerun from.")
    execution_id: ExecutionId | None = Field(
        default=None,
        description="The fork's id (idempotent by it); default: a new id, or for a signed "
        "request one derived from its signature (a copy of it makes no second fork).",
    )
    version: str | None = Field(default=None, min_length=1, max_length=64)
    by: str | None = Field(default=None, min_length=1, max_length=256)


def fork(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/fork``: authorized, copied, then run until it blocks."""
    call = operator_call(s, request, args, "fork", ForkRequest)
    body: ForkRequest = call.body
    result = run(
        s.runtime.fork(
            call.execution_id,
            body.from_step,
            new_id=body.execution_id
            or signed_default_id(request.headers, "fork", call.execution_id, "sig-"),
            by=call.by,
            version=body.version,
        )
    )
    bind_result(result)
    return 200, result
