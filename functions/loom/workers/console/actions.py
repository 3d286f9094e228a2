"""The console's actions: a verdict, a resume, a cancel, a retry, a re-drive or a fork,
posted as a form.

Each one reads the raw form body (bounded like any API body), checks CSRF, runs the same
authenticator as the API route for that action over the raw body (a retry and a re-drive
are the action ``retry``, a fork ``fork``, as on ``POST /executions/{id}/retry``,
``POST /dead-letters/retry`` and ``POST /executions/{id}/fork``), and then calls the same
runtime method with the same arguments the API passes: a verdict names its step *and* the
in-doubt episode the page showed, so a form left open while the step was settled and fell
in doubt again is refused as stale, never applied to the new episode. Every form takes the
operator's name, recorded as ``name (via principal)`` as the API records a body's ``by``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from flask import Request

from loom.errors import InputError
from loom.ids import check_execution_id
from loom.ops.deadletters import redrive_by_id
from loom.workers.console.security import actor, check_csrf
from loom.workers.http_base import HttpError, Services, read_body, run
from loom.workers.logs import bind


@dataclass(frozen=True)
class Done:
    """What an action did: the notice the next page shows, and which execution's page that
    is (a fork's or a re-drive's; default: the one acted on)."""

    notice: str
    goto: str | None = None


Action = Callable[[Services, Request, str, str], Done]
"""``(services, request, execution_id, reader) -> Done``."""

_VERDICTS = ("performed", "not_performed", "failed")


def read_form(s: Services, req: Request) -> tuple[bytes, dict[str, str]]:
    """The raw body and its fields; 415 unless the body is a URL-encoded form."""
    if req.mimetype != "application/x-www-form-urlencoded":
        raise HttpError(
            415,
            "unsupported_media_type",
            f"the console takes forms (application/x-www-form-urlencoded), not "
            f"{req.mimetype or 'nothing'!r}",
        )
    raw = read_body(req, s.max_body)
    try:
        fields = dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False))
    except UnicodeDecodeError:
        raise HttpError(400, "malformed_form", "the form is not UTF-8") from None
    return raw, fields


def _field(form: dict[str, str], name: str, limit: int = 1024, required: bool = True) -> str:
    value = form.get(name, "").strip()
    if required and not value:
        raise InputError(f"the form needs {name!r}", code="invalid_request")
    if len(value) > limit:
        raise InputError(f"{name!r} is longer than {limit} characters", code="invalid_request")
    return value


def _json_field(form: dict[str, str], name: str) -> Any:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except ValueError as exc:
        raise InputError(f"{name} is not valid JSON: {exc}", code="malformed_json") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _recorded(form: dict[str, str], principal: str) -> str:
    """Who the log records: the operator's name from the form on behalf of the principal
    the check accepted, as the API records a body's ``by``."""
    name = _field(form, "by", 256, required=False)
    return f"{name} (via {principal})" if name else principal


def verdict(s: Services, req: Request, execution_id: str, who: str) -> Done:
    """Settle one in-doubt episode with the verdict the form names."""
    raw, form = read_form(s, req)
    check_csrf(req, form)
    principal = actor(s.verdict_auth, req, "verdict", execution_id, raw, who)
    chosen = _field(form, "verdict", 32)
    if chosen not in _VERDICTS:
        raise InputError(
            f"verdict must be one of {', '.join(_VERDICTS)}, not {chosen!r}",
            code="invalid_verdict",
        )
    step_id = _field(form, "step_id", 256)
    episode = _field(form, "episode", 20)
    if not (episode.isascii() and episode.isdigit()) or int(episode) < 1:  # "²" is a digit
        raise InputError(
            f"episode must be a positive number, not {episode!r}", code="invalid_request"
        )
    by = _recorded(form, principal)
    output = _json_field(form, "output") if chosen == "performed" else None
    error = _field(form, "error", 4096, required=False) or None
    bind(step_id=step_id, episode=int(episode), principal=by)
    run(
        s.runtime.verdict(
            execution_id,
            step_id,
            chosen,
            output=output,
            error=error if chosen == "failed" else None,
            by=by,
            episode=int(episode),
        )
    )
    return Done(f"verdict {chosen} recorded on step {step_id}")


def resume(s: Services, req: Request, execution_id: str, who: str) -> Done:
    """Deliver a resume to a gate (buffered if the flow has not opened it yet)."""
    raw, form = read_form(s, req)
    check_csrf(req, form)
    by = _recorded(form, actor(s.resume_auth, req, "resume", execution_id, raw, who))
    on = _field(form, "on", 256)
    key = _field(form, "correlation_key", 1024)
    payload = _json_field(form, "payload")
    bind(principal=by)
    run(s.runtime.resume(execution_id, on, key, payload, by=by))
    return Done(f"resume {on} delivered")


def cancel(s: Services, req: Request, execution_id: str, who: str) -> Done:
    """End the execution as cancelled (an operator's action: the verdict check decides)."""
    raw, form = read_form(s, req)
    check_csrf(req, form)
    by = _recorded(form, actor(s.verdict_auth, req, "cancel", execution_id, raw, who))
    reason = _field(form, "reason", 1024, required=False) or "cancelled from the console"
    bind(principal=by)
    run(s.runtime.cancel(execution_id, reason, by=by))
    return Done("execution cancelled")


def retry(s: Services, req: Request, execution_id: str, who: str) -> Done:
    """Let a parked execution (poison, divergence) run again, as the retry route does."""
    raw, form = read_form(s, req)
    check_csrf(req, form)
    by = _recorded(form, actor(s.verdict_auth, req, "retry", execution_id, raw, who))
    bind(principal=by)
    result = run(s.runtime.retry(execution_id, by=by))
    return Done(f"retried: the execution is {result.status}")


def redrive(s: Services, req: Request, execution_id: str, who: str) -> Done:
    """Re-run a failed execution as a fork from the step whose failure ended it, under its
    re-drive id, as ``POST /dead-letters/retry`` does."""
    raw, form = read_form(s, req)
    check_csrf(req, form)
    principal = actor(s.verdict_auth, req, "retry", execution_id, raw, who)
    note = _field(form, "by", 256, required=False) or None
    bind(principal=_recorded(form, principal))
    done = run(redrive_by_id(s.runtime, execution_id, by=principal, note=note))
    if done.error:
        raise InputError(f"the re-drive was refused: {done.error}", code="not_redriven")
    if done.action == "none":
        return Done(f"already re-driven as {done.new_execution_id} ({done.status})")
    return Done(f"re-driven from {execution_id}: {done.status}", done.new_execution_id)


def fork(s: Services, req: Request, execution_id: str, who: str) -> Done:
    """Start a new execution reusing the steps before the one the form names."""
    raw, form = read_form(s, req)
    check_csrf(req, form)
    principal = actor(s.verdict_auth, req, "fork", execution_id, raw, who)
    note = _field(form, "by", 256, required=False) or None
    step = _field(form, "from_step", 256)
    new_id = _field(form, "execution_id", 1024, required=False) or None
    bind(principal=_recorded(form, principal), step_id=step)
    result = run(s.runtime.fork(execution_id, step, new_id=new_id, by=principal, note=note))
    return Done(f"forked from {execution_id} at step {step}: {result.status}", result.execution_id)


ACTIONS: dict[str, Action] = {
    "verdict": verdict,
    "resume": resume,
    "cancel": cancel,
    "retry": retry,
    "redrive": redrive,
    "fork": fork,
}
"""The console's actions by the last segment of their URL."""


def perform(s: Services, req: Request, execution_id: str, name: str, who: str) -> Done:
    """Run the named action on the execution; what the next page shows."""
    check_execution_id(execution_id)
    bind(execution_id=execution_id)
    return ACTIONS[name](s, req, execution_id, who)
