"""The console's bulk actions: cancel, resume or retry what the list's filters select, after
a preview the operator confirms (:mod:`loom.ops.bulk`).

The executions list posts its filters (status, flow, creation time) and the operation to
``/console/bulk/preview``: a dry run, shown as a page that lists what would be done to each
execution and counts them. Its *Confirm* form posts the ids it listed (and nothing else of
the filter) to ``/console/bulk/{operation}``, so what is done is what was shown: an
execution that changed meanwhile is skipped or reported, never a new one swept in.

Both are checked as the API checks ``POST /bulk/{operation}``: the preview is a read (the
caller check, action ``list``, then on each execution selected with the operation's
action); the action runs the operator's authenticator over the raw form (the verdict one
for a cancel and a retry, the resume one for a resume) and the caller check on every
execution before any is acted on. Every form is CSRF-checked.
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import parse_qsl

from flask import Request

from loom.errors import InputError
from loom.ops.bulk import Action, BulkReport, Operation, apply, check_action
from loom.ops.bulk_select import FILTERS, Selection, select
from loom.workers.console.actions import Done, read_form
from loom.workers.console.pages import PARKED, parse_time
from loom.workers.console.security import actor, check_csrf, reader
from loom.workers.http_base import Services, run
from loom.workers.logs import bind

OPERATIONS: Final[tuple[Operation, ...]] = ("cancel", "resume", "retry")
PREVIEW_LIMIT: Final = 200
_WHAT: Final = {
    "cancel": "Cancel: each flow gets CancelledError and cleans up, as with one cancel.",
    "resume": "Resume: each execution's open gate is answered with the payload.",
    "retry": "Retry: a parked execution runs again; a failed one is re-driven as a fork.",
}


def _operation(form: dict[str, str]) -> Operation:
    chosen = form.get("operation", "")
    for known in OPERATIONS:
        if chosen == known:
            return known
    raise InputError(
        f"the operation must be one of {', '.join(OPERATIONS)}, not {chosen!r}",
        code="invalid_request",
    )


def _fields(raw: bytes) -> list[tuple[str, str]]:
    return parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)


def _payload(form: dict[str, str]) -> Any:
    text = form.get("payload", "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"payload is not valid JSON: {exc}", code="malformed_json") from None


def _action(operation: Operation, form: dict[str, str], principal: str) -> Action:
    action = Action(
        principal,
        reason=form.get("reason", "").strip()[:1024] or "cancelled from the console (bulk)",
        on=form.get("on", "").strip() or None,
        correlation_key=form.get("correlation_key", "").strip() or None,
        payload=_payload(form) if operation == "resume" else None,
        note=form.get("by", "").strip()[:256] or None,
    )
    check_action(operation, action)
    return action


def preview(s: Services, req: Request, who: str) -> dict[str, Any]:
    """The preview page's context: the dry run of the form's operation over its filters."""
    _, form = read_form(s, req)
    check_csrf(req, form)
    operation = _operation(form)
    status = form.get("status", "").strip() or None
    if status is not None and status not in FILTERS[operation]:
        raise InputError(
            f"{operation} acts on executions that are {', '.join(FILTERS[operation])}; the "
            f"list shows {status}: choose one of those statuses first",
            code="invalid_request",
        )
    selection = Selection(
        flow=form.get("flow", "").strip()[:256] or None,
        status=status,
        created_from=parse_time("from", form.get("from", "")),
        created_before=parse_time("to", form.get("to", "")),
        limit=PREVIEW_LIMIT,
    )
    action = _action(operation, form, who)
    selected = run(select(s.runtime, operation, selection))
    for row in selected.rows:  # a preview shows only what the reader may act on
        reader(s, req, operation, row.execution_id)
    report = run(apply(s.runtime, operation, selected, action, dry_run=True))
    return {
        "operation": operation,
        "what": _WHAT[operation],
        "report": report,
        "fields": {k: form.get(k, "") for k in ("reason", "on", "correlation_key", "payload")},
        "filters": {k: form.get(k, "") for k in ("status", "flow", "from", "to")},
        "parked": PARKED,
    }


def perform(s: Services, req: Request, operation_name: str, who: str) -> Done:
    """Do the confirmed operation to the ids the preview listed (module docstring)."""
    raw, form = read_form(s, req)
    check_csrf(req, form)
    operation = _operation({"operation": operation_name})
    check = s.resume_auth if operation == "resume" else s.verdict_auth
    principal = actor(check, req, operation, "", raw, who)
    ids = [v for k, v in _fields(raw) if k == "execution_id" and v]
    if not ids:
        raise InputError("the confirmation names no execution", code="invalid_request")
    action = _action(operation, form, principal)
    selected = run(select(s.runtime, operation, Selection(execution_ids=ids, limit=len(ids))))
    for row in selected.rows:  # every one checked before any is acted on
        reader(s, req, operation, row.execution_id)
    bind(principal=action.recorded)
    report = run(apply(s.runtime, operation, selected, action))
    return Done(_notice(report))


def _notice(report: BulkReport) -> str:
    failed = sum(1 for item in report.items if item.error)
    skipped = sum(1 for item in report.items if item.action in ("skip", "none"))
    told = f"{report.operation}: {report.count - failed} execution(s) done"
    if failed:
        told += f", {failed} failed (see each execution)"
    if skipped:
        told += f", {skipped} left alone (changed since the preview)"
    return told
