"""``POST /executions/{id}/retry``: run a parked execution again (poison or nondeterminism).

Authorized like a verdict (the same authenticator, action ``retry``), and recorded with who
asked: an operator decision, not a caller's.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from loom.workers.http_base import Reply, Request, Services, bind_result, run
from loom.workers.operator_routes import operator_call


class RetryRequest(BaseModel):
    """``POST /executions/{id}/retry`` body (optional): who lets it run again."""

    model_config = ConfigDict(extra="forbid")
    by: str | None = None


def retry(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/retry``: authorized, appended, then run until it blocks."""
    call = operator_call(s, request, args, "retry", RetryRequest, optional=True)
    result = run(s.runtime.retry(call.execution_id, by=call.by))
    bind_result(result)
    return 200, result
