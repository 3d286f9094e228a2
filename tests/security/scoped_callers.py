"""Caller authenticators for the caller-scope tests: one that allows each caller its own
executions only (a stand-in for a per-tenant policy behind an ID-token check, which needs
Google to issue tokens), and one written against the first four fields of ``AuthRequest``.

Both keep what they were asked in :data:`SEEN`, so a test can tell which execution the
worker named to the check, and that a refused request was refused before any effect.
"""

from __future__ import annotations

from loom.workers.auth import AuthRequest, Forbidden, Unauthenticated

SEEN: list[AuthRequest] = []


def per_execution(request: AuthRequest) -> str:
    """``X-Caller: NAME`` may act on executions named ``NAME-…``; ``ops`` on every one."""
    SEEN.append(request)
    who = request.headers.get("X-Caller", "")
    if not who:
        raise Unauthenticated(f"{request.action} needs an X-Caller header")
    if who == "ops" or request.execution_id.startswith(f"{who}-"):
        return who
    raise Forbidden(f"{who} may not {request.action} that execution")


def positional(request: AuthRequest) -> str:
    """An older check: builds its own record positionally, reads four fields only."""
    action, execution_id, headers, body = (
        request.action,
        request.execution_id,
        request.headers,
        request.body,
    )
    SEEN.append(AuthRequest(action, execution_id, headers, body))
    if headers.get("X-Caller") != "ops":
        raise Forbidden("only ops")
    return "ops"


def per_flow(request: AuthRequest) -> str:
    """``X-Caller: NAME@FLOW`` may act on executions of ``FLOW`` only; ``ops`` on every one.

    Its refusal names the execution and the flow it was asked about, as a careless check's
    might: the worker must not pass that on where the server, not the caller, chose them.
    """
    SEEN.append(request)
    who = request.headers.get("X-Caller", "")
    if not who:
        raise Unauthenticated(f"{request.action} needs an X-Caller header")
    if who == "ops":
        return who
    name, _, flow = who.partition("@")
    if request.flow is not None and request.flow == flow:
        return name
    raise Forbidden(
        f"{name} may not {request.action} {request.execution_id!r} of flow {request.flow!r}"
    )


def per_action(request: AuthRequest) -> str:
    """``X-Caller: lister`` may ``list``, and nothing else."""
    SEEN.append(request)
    if request.headers.get("X-Caller") == "lister" and request.action == "list":
        return "lister"
    raise Forbidden(f"only listing, not {request.action}")
