"""``POST /bulk/cancel``, ``POST /bulk/resume``, ``POST /bulk/retry``: bulk operations over
HTTP (:mod:`loom.ops.bulk`).

Each body is a selection (``flow``, ``status``, ``created_from``/``created_before``, an age
such as ``2h`` or an ISO-8601 time or epoch seconds, ``execution_ids``, ``limit``), whether
to only look (``dry_run``), a note on who acts (``by``, recorded beside the authenticated
principal as ``"{by} (via {principal})"``, authorizing nothing) and
what the operation needs (a cancel's ``reason``; a resume's ``on``, ``correlation_key`` and
``payload``). The answer is the report: ``count``, ``more`` and each execution with what came
of it.

Authorized like the same operation on one execution: the operator's authenticator (the
verdict one for a cancel and a retry, the resume one for a resume) with no execution id,
then the caller check (when configured) on every execution, before any is acted on. Named
ids are checked before anything is read. Each execution the filter selected is checked with
its flow, and one refusal refuses the request, nothing done: the answer names that
execution (so the caller can narrow the selection) and nothing else, neither its flow nor
the others selected, whatever the check's own message said.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from loom.ops.bulk import Action, Operation, apply, check_action
from loom.ops.bulk_select import MAX_LIMIT, Selected, Selection, select
from loom.ops.deadletters import parse_since
from loom.workers.auth import Authenticator, AuthError, Forbidden, Unauthenticated
from loom.workers.http_base import (
    Reply,
    Request,
    Services,
    authorize,
    caller,
    check_caller,
    parse_json,
    parse_model,
    read_body,
    run,
)
from loom.workers.logs import bind

Time = float | str


class BulkRequest(BaseModel):
    """What every bulk operation's body holds: the selection, a dry run, who acts."""

    model_config = ConfigDict(extra="forbid")

    flow: str | None = Field(default=None, min_length=1, max_length=256)
    status: str | None = Field(
        default=None,
        min_length=1,
        max_length=32,
        description="A status the operation acts on (cancel: running, suspended, in_doubt, "
        "parked, poison; resume: suspended, running; retry: failed, parked, poison); "
        "default: all of them",
    )
    created_from: Time | None = Field(
        default=None,
        description="Created at or after: an age back from now (2h, 7d), an ISO-8601 time "
        "with its offset, or epoch seconds",
    )
    created_before: Time | None = Field(default=None, description="Created before (the same)")
    execution_ids: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LIMIT,
        description="Only these executions (a filter as the others are): the caller check "
        "is asked about each before anything is read",
    )
    limit: int = Field(default=100, ge=1, le=MAX_LIMIT)
    dry_run: bool = False
    by: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="A note recorded beside the authenticated principal; grants nothing.",
    )


class BulkCancelRequest(BulkRequest):
    """``POST /bulk/cancel`` body."""

    reason: str = Field(default="", max_length=1024)


class BulkResumeRequest(BulkRequest):
    """``POST /bulk/resume`` body."""

    on: str = Field(min_length=1, max_length=256)
    correlation_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="The key to resume ({execution_id} stands for each id); default: each "
        "execution's one open gate on 'on'",
    )
    payload: Any = None


class BulkRetryRequest(BulkRequest):
    """``POST /bulk/retry`` body."""


def bulk_cancel(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /bulk/cancel``: cancel what the body selects (module docstring)."""
    return _bulk(s, request, "cancel", BulkCancelRequest, s.verdict_auth)


def bulk_resume(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /bulk/resume``: resume a gate of what the body selects."""
    return _bulk(s, request, "resume", BulkResumeRequest, s.resume_auth)


def bulk_retry(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /bulk/retry``: retry (or re-drive) the dead letters the body selects."""
    return _bulk(s, request, "retry", BulkRetryRequest, s.verdict_auth)


def _bulk(
    s: Services,
    request: Request,
    operation: Operation,
    model: type[BulkRequest],
    check: Authenticator,
) -> Reply:
    raw = read_body(request, s.max_body)
    principal = authorize(check, operation, "", request, raw)
    body = parse_model(model, parse_json(request, raw))
    now = s.runtime.clock()
    selection = Selection(
        flow=body.flow,
        status=body.status,
        created_from=_time(body.created_from, now),
        created_before=_time(body.created_before, now),
        execution_ids=body.execution_ids,
        limit=body.limit,
    )
    selection.check(operation)
    for eid in dict.fromkeys(body.execution_ids or ()):  # named: checked before any read
        check_caller(s, request, operation, eid, raw, body.flow)
    action = _action(body, caller(request) or principal)
    check_action(operation, action)
    selected = run(select(s.runtime, operation, selection))
    if body.execution_ids is None:
        _check_each(s, request, raw, operation, selected)
    bind(principal=action.recorded)
    report = run(apply(s.runtime, operation, selected, action, dry_run=body.dry_run))
    return 200, report.to_json()


def _time(value: Time | None, now: float) -> float | None:
    if value is None or isinstance(value, float | int):
        return value
    return parse_since(value, now)


def _action(body: BulkRequest, who: str) -> Action:
    """The action as ``who`` (the authenticated principal: the only authority), the body's
    ``by`` a note recorded beside it."""
    if isinstance(body, BulkCancelRequest):
        return Action(who, reason=body.reason or "bulk cancel", note=body.by)
    if isinstance(body, BulkResumeRequest):
        return Action(
            who,
            on=body.on,
            correlation_key=body.correlation_key,
            payload=body.payload,
            note=body.by,
        )
    return Action(who, note=body.by)


def _check_each(
    s: Services, request: Request, raw: bytes, operation: Operation, selected: Selected
) -> None:
    """The caller check on every execution the filter selected, before any is acted on
    (once with ``""`` when it selected none, so a refused caller learns nothing from an
    empty answer); a refusal names the execution refused and nothing else."""
    rows = selected.rows
    for row in rows or [None]:
        eid, flow = (row.execution_id, row.flow) if row is not None else ("", None)
        try:
            check_caller(s, request, operation, eid, raw, flow)
        except AuthError as exc:
            raise _refused(exc, operation, eid, len(rows)) from None


def _refused(exc: AuthError, operation: str, eid: str, selected: int) -> AuthError:
    what = f"execution {eid!r}, one of the {selected} selected" if eid else "this selection"
    message = (
        f"the caller may not {operation} {what}; nothing was done (narrow the selection, "
        "e.g. with execution_ids)"
    )
    return Unauthenticated(message) if exc.status == 401 else Forbidden(message)


ACTIONS: dict[str, Literal["cancel", "resume", "retry"]] = {
    "bulk_cancel": "cancel",
    "bulk_resume": "resume",
    "bulk_retry": "retry",
}
"""What the caller check is told each route does (by route name)."""
