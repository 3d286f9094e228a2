"""``POST /executions/{id}/fork``: a new execution from an execution's recorded prefix.

Authorized like a retry (the verdict authenticator, action ``fork``) and recorded with who
asked on the fork's ``ExecutionStarted``; the original is never written to. The fork is a
start too: the caller check (when configured) is asked about the new id as a start's id is
(action ``start``, with the original's flow), and the capabilities it keeps are those the
grant policy lets the authenticated principal grant; the body's ``by`` is only a note.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from loom.ids import ExecutionId
from loom.workers.http_base import Reply, Request, Services, bind_result, check_caller, run
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
    by: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="A note recorded beside the authenticated principal; grants nothing.",
    )


def fork(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/fork``: authorized, copied, then run until it blocks."""
    call = operator_call(s, request, args, "fork", ForkRequest)
    body: ForkRequest = call.body
    if s.caller_auth is not None:  # the new id is checked as a start's (the original was)
        flow = run(s.runtime.require(call.execution_id)).flow
        check_caller(s, request, "start", body.execution_id or "", call.raw, flow)
    new_id, derived = body.execution_id, None
    if new_id is None:  # a signed request's copy is the same fork (loom.workers.signed_ids)
        new_id = signed_default_id(request.headers, "fork", call.execution_id, "sig-")
        derived = "signed" if new_id is not None else None
    result = run(
        s.runtime.fork(
            call.execution_id,
            body.from_step,
            new_id=new_id,
            by=call.principal,  # the authority: who the checks authenticated
            note=call.note,  # the body's ``by``: recorded beside it, authorizing nothing
            version=body.version,
            derived=derived,
        )
    )
    bind_result(result)
    return 200, result
