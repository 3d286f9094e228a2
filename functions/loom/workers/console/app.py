"""The console's routes: one function per path, each answering an HTML page.

Reads run the caller check (or the loopback rule) first; posts are actions
(:mod:`loom.workers.console.actions`) that answer with a redirect to the execution's page (so a
reload never posts twice), or with an error page naming what was refused.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from flask import Request, Response

from loom.errors import ExecutionSupersededError, InputError, StoreError
from loom.workers.auth import AuthError, Forbidden
from loom.workers.console import actions, bulk, execution, pages
from loom.workers.console import schedules as schedule_page
from loom.workers.console.render import as_json, page, plain
from loom.workers.console.security import (
    COOKIE_PATH,
    CSRF_COOKIE,
    CSRF_FIELD,
    TOKEN_COOKIE,
    check_csrf,
    csrf_token,
    principal_of,
    read_notice,
    reader,
    secure,
    sign_notice,
    signed_in_as,
)
from loom.workers.http_base import HttpError, Services, path_segments

log = logging.getLogger("loom.console")

NOTICE_COOKIE = "loom_console_notice"
_STATIC = {
    "console.css": "text/css",
    "console.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
_SESSION_SECONDS = 8 * 3600


def execution_url(execution_id: str, **query: Any) -> str:
    """The console URL of an execution's page (the id percent-encoded as one segment)."""
    url = f"/console/executions/{quote(execution_id, safe='')}"
    return f"{url}?{urlencode(query)}" if query else url


def payload_url(execution_id: str, seq: int, name: str) -> str:
    """Where the page fetches one recorded value on demand."""
    return f"{execution_url(execution_id)}/payload?{urlencode({'seq': seq, 'field': name})}"


def serve(services: Callable[[], Services], req: Request) -> Response:
    """Answer one request under ``/console``."""
    token, new = csrf_token(req)
    try:
        response = _route(services, req, token)
    except Exception as exc:  # every error becomes a page saying what was refused
        response = _error_page(exc, token)
    if new:
        response.set_cookie(
            CSRF_COOKIE, token, path=COOKIE_PATH, httponly=True, samesite="Strict",
            secure=secure(req),
        )  # fmt: skip
    return response


def _route(services: Callable[[], Services], req: Request, token: str) -> Response:
    segments = path_segments(req)[1:]
    method = "GET" if req.method == "HEAD" else req.method
    if len(segments) == 2 and segments[0] == "static" and method == "GET":
        return _static(segments[1])
    if not segments and method == "GET":
        return _redirect("/console/executions")
    if segments in (["sign-in"], ["sign-out"]):
        return _session(services(), req, token, method, segments[0])
    s = services()
    if segments == ["executions"] and method == "GET":
        who = reader(s, req, "list")
        context = pages.executions_page(s, req)
        context["notice"] = read_notice(req.cookies.get(NOTICE_COOKIE, ""))  # a bulk action's
        response = page("executions.html", _ctx(s, req, token, who, context))
        if NOTICE_COOKIE in req.cookies:
            response.delete_cookie(NOTICE_COOKIE, path=COOKIE_PATH)
        return response
    if segments == ["in-doubt"] and method == "GET":
        who = reader(s, req, "list")
        return page("in_doubt.html", _ctx(s, req, token, who, pages.in_doubt_page(s, req)))
    if segments and segments[0] == "schedules":
        return _schedules(s, req, token, method, segments[1:])
    if segments == ["live"] and method == "GET":
        reader(s, req, "list")
        return as_json(pages.list_token(s, req))
    if len(segments) >= 2 and segments[0] == "executions":
        return _execution(s, req, token, method, segments[1:])
    if len(segments) == 2 and segments[0] == "bulk" and method == "POST":
        return _bulk(s, req, token, segments[1])
    raise HttpError(404, "not_found", f"the console has no page {req.method} {req.path}")


def _execution(s: Services, req: Request, token: str, method: str, rest: list[str]) -> Response:
    execution_id = rest[0]
    if len(rest) == 1 and method == "GET":
        who = reader(s, req, "read", execution_id)
        context = execution.execution_page(s, req, execution_id)
        context["notice"] = read_notice(req.cookies.get(NOTICE_COOKIE, ""))
        response = page("execution.html", _ctx(s, req, token, who, context))
        if NOTICE_COOKIE in req.cookies:
            response.delete_cookie(NOTICE_COOKIE, path=COOKIE_PATH)
        return response
    if rest[1:] == ["live"] and method == "GET":
        reader(s, req, "read", execution_id)
        return as_json(execution.live_token(s, execution_id))
    if rest[1:] == ["payload"] and method == "GET":
        reader(s, req, "read", execution_id)
        args = req.args
        text = execution.payload_text(s, execution_id, args.get("seq", ""), args.get("field", ""))
        return plain(text, "application/json" if args.get("format") == "json" else "text/plain")
    if len(rest) == 2 and rest[1] in actions.ACTIONS and method == "POST":
        who = reader(s, req, rest[1], execution_id)
        done = actions.perform(s, req, execution_id, rest[1], who)
        response = _redirect(execution_url(done.goto or execution_id))
        # A flash in a cookie, not the URL: a link from elsewhere cannot make the page say
        # something the console did not do.
        response.set_cookie(
            NOTICE_COOKIE, sign_notice(done.notice), max_age=60, path=COOKIE_PATH, httponly=True,
            samesite="Strict", secure=secure(req),
        )  # fmt: skip
        return response
    raise HttpError(404, "not_found", f"the console has no page {req.method} {req.path}")


def _bulk(s: Services, req: Request, token: str, which: str) -> Response:
    """A bulk action's preview (a page), or the confirmed action (back to the list)."""
    who = reader(s, req, "list")
    if which == "preview":
        return page("bulk.html", _ctx(s, req, token, who, bulk.preview(s, req, who)))
    if which not in bulk.OPERATIONS:
        raise HttpError(404, "not_found", f"the console has no bulk action {which!r}")
    done = bulk.perform(s, req, which, who)
    response = _redirect("/console/executions")
    response.set_cookie(
        NOTICE_COOKIE, sign_notice(done.notice), max_age=60, path=COOKIE_PATH, httponly=True,
        samesite="Strict", secure=secure(req),
    )  # fmt: skip
    return response


def _schedules(s: Services, req: Request, token: str, method: str, rest: list[str]) -> Response:
    """The schedules page, and its actions (a redirect back to it, with a notice)."""
    if not rest and method == "GET":
        who = reader(s, req, "list")
        context = schedule_page.schedules_page(s)
        context["notice"] = read_notice(req.cookies.get(NOTICE_COOKIE, ""))
        response = page("schedules.html", _ctx(s, req, token, who, context))
        if NOTICE_COOKIE in req.cookies:
            response.delete_cookie(NOTICE_COOKIE, path=COOKIE_PATH)
        return response
    if len(rest) == 2 and method == "POST":
        who = reader(s, req, "schedule")
        done = schedule_page.perform(s, req, rest[0], rest[1], who)
        response = _redirect("/console/schedules")
        response.set_cookie(
            NOTICE_COOKIE, sign_notice(done.notice), max_age=60, path=COOKIE_PATH, httponly=True,
            samesite="Strict", secure=secure(req),
        )  # fmt: skip
        return response
    raise HttpError(404, "not_found", f"the console has no page {req.method} {req.path}")


def _session(s: Services, req: Request, token: str, method: str, which: str) -> Response:
    """Sign in (keep a credential the worker's checks accept) or sign out."""
    if method == "GET" and which == "sign-in":
        return page("sign_in.html", _ctx(s, req, token, None, {}))
    if method != "POST":
        raise HttpError(405, "method_not_allowed", f"{method} is not allowed here")
    _, form = actions.read_form(s, req)
    check_csrf(req, form)
    response = _redirect("/console/executions")
    if which == "sign-out":
        response.delete_cookie(TOKEN_COOKIE, path=COOKIE_PATH)
        return response
    credential = form.get("token", "").strip()
    if not credential:
        raise Forbidden("paste the credential the worker accepts (e.g. its shared secret)")
    if principal_of(s, credential) is None:
        raise Forbidden("no check of this worker accepts that credential")
    response.set_cookie(
        TOKEN_COOKIE, credential, max_age=_SESSION_SECONDS, path=COOKIE_PATH, httponly=True,
        samesite="Strict", secure=secure(req),
    )  # fmt: skip
    return response


def _ctx(
    s: Services, req: Request, token: str, who: str | None, context: dict[str, Any]
) -> dict[str, Any]:
    signed_in = bool(req.cookies.get(TOKEN_COOKIE))
    return {
        **context,
        "csrf": token,
        "csrf_field": CSRF_FIELD,
        "who": who,
        "signed_in": signed_in,
        "acting_as": signed_in_as(s, req) if signed_in else None,
        "execution_url": execution_url,
        "payload_url": payload_url,
    }


def _redirect(location: str) -> Response:
    response = Response("", status=303, headers={"Location": location})
    response.headers["Cache-Control"] = "no-store"
    return response


def _static(name: str) -> Response:
    if name not in _STATIC:
        raise HttpError(404, "not_found", f"no static file {name!r}")
    data = resources.files("loom.workers.console").joinpath("static", name).read_bytes()
    response = Response(data, mimetype=_STATIC[name])
    response.headers["Cache-Control"] = "public, max-age=300"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def _status(exc: Exception) -> tuple[int, str, str]:
    from loom.workers.http_errors import input_status

    if isinstance(exc, HttpError):
        return exc.status, exc.code, exc.message
    if isinstance(exc, AuthError):
        return exc.status, exc.code, exc.message
    if isinstance(exc, ExecutionSupersededError):
        return 409, exc.code, exc.message
    if isinstance(exc, InputError):
        return input_status(exc), exc.code, exc.message
    if isinstance(exc, StoreError):
        return 503, exc.code, f"the store cannot answer now: {exc.message}"
    error_id = uuid.uuid4().hex
    log.error("console error %s: %s", error_id, exc, exc_info=exc)
    return 500, "internal", f"internal error; the log entry with error_id {error_id} has more"


def _error_page(exc: Exception, token: str) -> Response:
    status, code, message = _status(exc)
    context: dict[str, Any] = {"status": status, "code": code, "message": message}
    context |= {"csrf": token, "csrf_field": CSRF_FIELD, "who": None, "signed_in": False}
    context |= {"acting_as": None}
    context |= {"execution_url": execution_url, "payload_url": payload_url}
    response = page("error.html", context, status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="loom"'
    return response
