"""Who may call the worker, resume an execution or give a verdict on one: pluggable checks.

An authenticator is any callable ``(AuthRequest) -> principal``: it returns who is asking
(recorded in the log as ``by`` on starts, resumes, verdicts and cancels), or raises
:class:`Unauthenticated` (401: no usable credential) or :class:`Forbidden` (403: a credential
that does not grant this). It runs before anything is appended: most before anything is read,
the caller check of a route that names its execution in the body once that body is parsed.

Two layers use them. The *caller* authenticator (optional, :func:`caller_auth_from_env`)
runs on every route but ``/health``, ``/live`` and ``/openapi.json``: on Cloud Run it verifies the
caller's Google-signed ID token (``loom_gcp.auth``), defense in depth behind the service's
IAM. It is told the execution each request acts on, including the routes that name it in
their body (see :class:`AuthRequest`), so it can be scoped per execution. The *resume* and
*verdict* authenticators run on those two routes as well; the resume one also names who
starts an execution with capabilities when no caller authenticator is configured (a start
with no credential is ``anonymous``, who may grant nothing).

Out of the box, :class:`SharedSecretAuth` accepts either

* ``Authorization: Bearer <secret>`` (handy with ``curl``), or
* ``X-Loom-Signature: t=<expires>,sha256=<hex>``, an HMAC-SHA256 with the secret over
  ``"{action}\\n{execution_id}\\n{expires}\\n"`` followed by the raw body (see :func:`sign`).
  The secret never travels; a signature is good for one action on one execution, for the
  exact body (a verdict's body names its step and in-doubt episode), and only until
  ``expires`` (epoch seconds, at most ``max_ttl`` ahead).

:class:`BearerTokenAuth` hands the bearer token to a ``verify`` callable of yours, which is
where OIDC plugs in (verify a Google ID token's audience and issuer, return its email).

Configuration from the environment (:func:`resume_auth_from_env`,
:func:`verdict_auth_from_env`): ``LOOM_RESUME_AUTH`` / ``LOOM_VERDICT_AUTH`` name a callable
as ``module:attr``; otherwise ``LOOM_RESUME_SECRET`` (and ``LOOM_VERDICT_SECRET``, which
defaults to the resume secret) select the shared secret. With nothing configured every
request is refused (fail closed).
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from werkzeug.datastructures import Headers

from loom.errors import ConfigurationError

Action = Literal[
    "start", "execute", "read", "list", "cancel", "resume", "verdict", "retry", "fork", "schedule"
]
DEFAULT_SIGNATURE_TTL = 300
"""Seconds a signature made by :func:`sign` stays good unless told otherwise."""


@dataclass(frozen=True)
class AuthRequest:
    """What an authenticator sees of a request.

    The contract of an authenticator (any callable ``(AuthRequest) -> principal``):

    * It returns who asks, or raises :class:`Unauthenticated` (401) or :class:`Forbidden`
      (403). It is called before the request has any effect, and its answer must not
      depend on whether the execution exists: a refused caller learns nothing of it.
    * ``execution_id`` is the execution the request acts on, so a check may allow one
      execution and refuse another. For most routes it is the one in the path. For the
      routes that name theirs in the body, the caller check runs once the body is parsed
      (size-bounded; a malformed body is 400 before the check, with nothing done): on
      ``POST /execute`` it is the package's execution (``flow`` the package's flow, if it
      names one); on ``POST /executions`` the requested ``execution_id`` (``""`` when the
      start asks for none) and ``flow`` the flow to start; on ``POST /dead-letters/retry``
      the check runs once for each execution the re-drive selects (``flow`` its flow),
      before any is re-driven, and one refusal refuses the whole request (once with
      ``""`` when it selects none); when the body names ``execution_ids``, once for each
      of them before anything is read.
    * ``""`` means the request names no execution (a listing, a start without an id).
    * New fields only ever come with defaults, so a check written for fewer keeps working.

    Attributes:
        action: What the request does (``start``, ``resume``, ``verdict``, ...).
        execution_id: The execution the request acts on (``""`` when it names none).
        headers: The request headers (case-insensitive).
        body: The raw request body (``b""`` where the check runs before it is read).
        flow: The flow the request concerns, where the route knows it (``None`` otherwise).
    """

    action: str
    execution_id: str
    headers: Headers | Mapping[str, str]
    body: bytes
    flow: str | None = None


class AuthError(Exception):
    """Refused by an authenticator.

    Attributes:
        status: The HTTP status to answer (401 or 403).
        code: The ``code`` of the JSON error body.
    """

    status = 403
    code = "forbidden"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthenticated(AuthError):
    """No usable credential came with the request (401)."""

    status = 401
    code = "unauthenticated"


class Forbidden(AuthError):
    """A credential came, and it does not grant this request (403)."""

    status = 403
    code = "forbidden"


Authenticator = Callable[[AuthRequest], str]


def sign(
    secret: str,
    action: Action,
    execution_id: str,
    body: bytes,
    *,
    expires: int | None = None,
    clock: Callable[[], float] = time.time,
) -> str:
    """The ``X-Loom-Signature`` header value for a request (what a client sends).

    Args:
        secret: The shared secret.
        action: What the request does (``resume``, ``verdict``, ``start``...).
        execution_id: The execution in the path (``""`` for a start).
        body: The exact bytes of the request body.
        expires: Epoch seconds after which the signature is refused (default: in
            :data:`DEFAULT_SIGNATURE_TTL` seconds).
        clock: The clock the default expiry is counted from.
    """
    if expires is None:
        expires = int(clock()) + DEFAULT_SIGNATURE_TTL
    return f"t={expires},sha256={_digest(secret, action, execution_id, expires, body)}"


def _digest(secret: str, action: str, execution_id: str, expires: int, body: bytes) -> str:
    message = f"{action}\n{execution_id}\n{expires}\n".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _parse_signature(value: str) -> tuple[int, str]:
    """``(expires, hexdigest)`` of a header value, or :class:`Forbidden` naming the form."""
    fields: dict[str, str] = {}
    for part in value.split(","):
        name, _, field = part.strip().partition("=")
        fields[name] = field
    expires, digest = fields.get("t", ""), fields.get("sha256", "")
    # ASCII digits, and few enough for a time: ``str.isdigit`` passes "²", which ``int``
    # refuses, and ``int`` refuses more than 4,300 digits (both were a 500).
    well_formed = expires.isascii() and expires.isdigit() and len(expires) <= 20
    if not well_formed or not digest or set(fields) != {"t", "sha256"}:
        raise Forbidden("X-Loom-Signature must look like t=<expires>,sha256=<hex>")
    return int(expires), digest


def _bearer(headers: Headers | Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class SharedSecretAuth:
    """Accepts a bearer token equal to the secret, or an HMAC signature made with it.

    A signature is refused once expired, or when its expiry lies more than ``max_ttl``
    seconds ahead (a signature good for ever would be a second secret).

    Args:
        secret: The shared secret (at least 16 characters).
        principal: Who a request that passes is recorded as.
        clock: Epoch seconds (injectable for tests).
        max_ttl: The furthest ahead a signature's expiry may lie, in seconds.
    """

    def __init__(
        self,
        secret: str,
        principal: str = "shared-secret",
        *,
        clock: Callable[[], float] = time.time,
        max_ttl: float = 3600.0,
    ) -> None:
        if len(secret) < 16:
            raise ConfigurationError("the shared secret must be at least 16 characters long")
        self._secret = secret
        self.principal = principal
        self._clock = clock
        self._max_ttl = max_ttl

    def __call__(self, request: AuthRequest) -> str:
        signature = request.headers.get("X-Loom-Signature")
        token = _bearer(request.headers)
        if signature is None and token is None:
            raise Unauthenticated(
                f"{request.action} needs 'Authorization: Bearer <secret>' or an "
                "X-Loom-Signature header"
            )
        if signature is not None:
            ok = self._signature_ok(request, signature)
        else:
            ok = hmac.compare_digest((token or "").encode(), self._secret.encode())
        if not ok:
            raise Forbidden(f"the credential does not allow {request.action}")
        return self.principal

    def _signature_ok(self, request: AuthRequest, signature: str) -> bool:
        expires, digest = _parse_signature(signature)
        expected = _digest(
            self._secret, request.action, request.execution_id, expires, request.body
        )
        if not hmac.compare_digest(digest.encode(), expected.encode()):
            return False
        now = self._clock()
        if expires < now:
            raise Forbidden(f"the signature expired {int(now - expires)} s ago; sign again")
        if expires > now + self._max_ttl:
            raise Forbidden(
                f"the signature expires {int(expires - now)} s from now; at most "
                f"{int(self._max_ttl)} s is accepted"
            )
        return True


class BearerTokenAuth:
    """Passes the bearer token to ``verify``, which returns the principal or raises.

    This is the OIDC plug: ``verify`` checks the token (signature, audience, issuer) and
    returns who it names; raising :class:`Forbidden` or any ``ValueError`` refuses with 403.

    Args:
        verify: ``token -> principal``.
    """

    def __init__(self, verify: Callable[[str], str]) -> None:
        self.verify = verify

    def __call__(self, request: AuthRequest) -> str:
        token = _bearer(request.headers)
        if token is None:
            raise Unauthenticated(f"{request.action} needs an 'Authorization: Bearer' token")
        try:
            return self.verify(token)
        except AuthError:
            raise
        except ValueError as exc:
            raise Forbidden(f"token refused: {exc}") from None


class DenyAll:
    """Refuses everything: what an action gets when no check is configured."""

    def __init__(self, hint: str) -> None:
        self.hint = hint

    def __call__(self, request: AuthRequest) -> str:
        raise Forbidden(f"{request.action} is not enabled on this worker: {self.hint}")


def _load_callable(ref: str) -> Authenticator:
    module_name, sep, attr = ref.partition(":")
    if not sep:
        raise ConfigurationError(f"authenticator {ref!r} must look like module:attr")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load authenticator {ref!r}: {exc}") from exc
    if not callable(target):
        raise ConfigurationError(f"authenticator {ref!r} is not callable")
    return target  # type: ignore[no-any-return]


def resume_auth_from_env(env: Mapping[str, str] | None = None) -> Authenticator:
    """The resume authenticator the environment configures (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("LOOM_RESUME_AUTH"):
        return _load_callable(env["LOOM_RESUME_AUTH"])
    if env.get("LOOM_RESUME_SECRET"):
        return SharedSecretAuth(env["LOOM_RESUME_SECRET"])
    return DenyAll("set LOOM_RESUME_SECRET or LOOM_RESUME_AUTH")


def caller_auth_from_env(env: Mapping[str, str] | None = None) -> Authenticator | None:
    """The caller authenticator ``LOOM_CALLER_AUTH`` names (``module:attr``), or ``None``.

    On Cloud Run: ``LOOM_CALLER_AUTH=loom_gcp.auth:google_id_token`` with
    ``LOOM_AUTH_AUDIENCE`` and ``LOOM_AUTH_PRINCIPALS`` (see ``loom_gcp.auth``).
    """
    env = os.environ if env is None else env
    ref = env.get("LOOM_CALLER_AUTH")
    return _load_callable(ref) if ref else None


def events_auth_from_env(env: Mapping[str, str] | None = None) -> Authenticator:
    """The check of Pub/Sub messages' ``loom-signature`` (see ``loom.workers.events_target``).

    ``LOOM_EVENTS_AUTH`` (``module:attr``), else the shared secret ``LOOM_EVENTS_SECRET`` or
    ``LOOM_RESUME_SECRET``; with none, every signed message and every resume is refused.
    """
    env = os.environ if env is None else env
    if env.get("LOOM_EVENTS_AUTH"):
        return _load_callable(env["LOOM_EVENTS_AUTH"])
    secret = env.get("LOOM_EVENTS_SECRET") or env.get("LOOM_RESUME_SECRET")
    if secret:
        return SharedSecretAuth(secret)
    return DenyAll("set LOOM_EVENTS_SECRET, LOOM_RESUME_SECRET or LOOM_EVENTS_AUTH")


def verdict_auth_from_env(env: Mapping[str, str] | None = None) -> Authenticator:
    """The verdict authorizer the environment configures (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("LOOM_VERDICT_AUTH"):
        return _load_callable(env["LOOM_VERDICT_AUTH"])
    secret = env.get("LOOM_VERDICT_SECRET") or env.get("LOOM_RESUME_SECRET")
    if secret:
        return SharedSecretAuth(secret, principal="shared-secret")
    return DenyAll("set LOOM_VERDICT_SECRET, LOOM_RESUME_SECRET or LOOM_VERDICT_AUTH")


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_mode(env: Mapping[str, str] | None = None) -> bool:
    """Whether the worker serves without a caller check, off Cloud Run: a loopback-only
    worker (``loom serve``, a local functions-framework), where the ``Host`` check holds."""
    env = os.environ if env is None else env
    return not env.get("LOOM_CALLER_AUTH") and not env.get("K_SERVICE")


def loopback_host(host_header: str) -> bool:
    """Whether a ``Host`` header names this machine (``localhost``, ``*.localhost``, a
    loopback address), with or without a port.

    A page of another site that got its name to resolve to 127.0.0.1 (DNS rebinding) sends
    its own name: a loopback-only worker answers none of its requests.
    """
    from urllib.parse import urlsplit

    try:
        name = urlsplit(f"//{host_header}").hostname or ""
    except ValueError:  # a malformed port or bracket
        return False
    return name == "localhost" or name.endswith(".localhost") or _is_loopback(name)


def require_authenticator_off_loopback(host: str, env: dict[str, str] | None = None) -> None:
    """Refuse to serve a non-loopback address with no caller authenticator configured.

    Raises:
        ConfigurationError: ``host`` is reachable from other machines and ``LOOM_CALLER_AUTH``
            is unset.
    """
    env = dict(os.environ) if env is None else env
    if not _is_loopback(host) and not env.get("LOOM_CALLER_AUTH"):
        raise ConfigurationError(
            f"refusing to serve on {host}, which other machines can reach, without an "
            "authenticator: set LOOM_CALLER_AUTH (module:attr), or bind 127.0.0.1"
        )
