"""The caller check of a target that is not the HTTP worker (the ``tasks`` target).

Every route but the probes runs it before it reads anything: ``LOOM_CALLER_AUTH`` when set
(on Cloud Run: the ID token of the invoker account Cloud Tasks and Cloud Scheduler present,
checked in the service behind Cloud Run IAM); with none, off Cloud Run, the target is a
loopback-only one and refuses a request naming another host (DNS rebinding, see
:func:`loom.workers.auth.loopback_host`).
"""

from __future__ import annotations

from flask import Request

from loom.workers.auth import (
    Authenticator,
    AuthRequest,
    caller_auth_from_env,
    loopback_host,
    loopback_mode,
)


class CallerGuard:
    """The caller check of a target, built from the environment on first use.

    Args:
        check: The caller check (default ``LOOM_CALLER_AUTH``; none if unset).
    """

    def __init__(self, check: Authenticator | None = None) -> None:
        self._check = check
        self._loaded = check is not None

    def check(self, request: Request, action: str) -> str | None:
        """Who calls (``None`` with no check configured).

        Raises:
            AuthError: The check refused (401/403).
            HttpError: 403 ``foreign_host``: no check, off Cloud Run, another host named.
        """
        if not self._loaded:
            self._check, self._loaded = caller_auth_from_env(), True
        if self._check is not None:
            return self._check(AuthRequest(action, "", request.headers, b""))
        if loopback_mode() and not loopback_host(request.host):
            from loom.workers.http_base import HttpError

            raise HttpError(
                403,
                "foreign_host",
                "this target answers requests to localhost only (no caller check is "
                "configured, off Cloud Run): set LOOM_CALLER_AUTH",
            )
        return None
