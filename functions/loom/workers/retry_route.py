"""``POST /executions/{id}/retry``: run a parked execution again (poison or nondeterminism).

Authorized like a verdict (the same authenticator, action ``retry``), and recorded with who
asked: an operator decision, not a caller's.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

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


class RetryRequest(BaseModel):
    """``POST /executions/{id}/retry`` body (optional): who lets it run again."""

    model_config = ConfigDict(extra="forbid")
    by: str | None = None


def retry(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/retry``: authorized, appended, then run until it blocks."""
    execution_id = args[0]
    bind(execution_id=execution_id)
    raw = read_body(request, s.max_body)
    principal = authorize(s.verdict_auth, "retry", execution_id, request, raw)
    body = parse_model(RetryRequest, parse_json(request, raw)) if raw.strip() else RetryRequest()
    by = f"{body.by} (via {principal})" if body.by else principal
    result = run(s.runtime.retry(execution_id, by=by))
    bind_result(result)
    return 200, result
