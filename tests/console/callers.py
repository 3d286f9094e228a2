"""A caller authenticator for the console tests: accepts one bearer token, names one
operator (a stand-in for an ID-token verifier, which needs Google to issue tokens)."""

from __future__ import annotations

from loom.workers.auth import AuthRequest, Forbidden, Unauthenticated


def operators(request: AuthRequest) -> str:
    """``Bearer op`` is ops@example.com; anything else is refused."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated(f"{request.action} needs a bearer token")
    if token != "op":
        raise Forbidden("unknown operator")
    return "ops@example.com"
