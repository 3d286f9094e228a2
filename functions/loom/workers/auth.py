"""Who may resume an execution or give a verdict on one: pluggable checks.

An authenticator is any callable ``(AuthRequest) -> principal``: it returns who is asking
(recorded in the log as the verdict's ``by``, and logged for a resume), or raises
:class:`Unauthenticated` (401: no usable credential) or :class:`Forbidden` (403: a credential
that does not grant this). It runs before anything is read or appended.

Out of the box, :class:`SharedSecretAuth` accepts either

* ``Authorization: Bearer <secret>`` (handy with ``curl``), or
* ``X-Loom-Signature: sha256=<hex>``, an HMAC-SHA256 with the secret over
  ``"{action}\\n{execution_id}\\n"`` followed by the raw body (see :func:`sign`); the secret
  never travels, and a signature is good for one action on one execution only.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from werkzeug.datastructures import Headers

from loom.errors import ConfigurationError

Action = Literal["resume", "verdict", "retry"]


@dataclass(frozen=True)
class AuthRequest:
    """What an authenticator sees of a request.

    Attributes:
        action: ``resume`` or ``verdict``.
        execution_id: The execution named in the path.
        headers: The request headers (case-insensitive).
        body: The raw request body.
    """

    action: Action
    execution_id: str
    headers: Headers | Mapping[str, str]
    body: bytes


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


def sign(secret: str, action: Action, execution_id: str, body: bytes) -> str:
    """The ``X-Loom-Signature`` header value for a request (what a client sends).

    Args:
        secret: The shared secret.
        action: ``resume`` or ``verdict``.
        execution_id: The execution in the path.
        body: The exact bytes of the request body.
    """
    message = f"{action}\n{execution_id}\n".encode() + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _bearer(headers: Headers | Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class SharedSecretAuth:
    """Accepts a bearer token equal to the secret, or an HMAC signature made with it.

    Args:
        secret: The shared secret (at least 16 characters).
        principal: Who a request that passes is recorded as.
    """

    def __init__(self, secret: str, principal: str = "shared-secret") -> None:
        if len(secret) < 16:
            raise ConfigurationError("the shared secret must be at least 16 characters long")
        self._secret = secret
        self.principal = principal

    def __call__(self, request: AuthRequest) -> str:
        signature = request.headers.get("X-Loom-Signature")
        token = _bearer(request.headers)
        if signature is None and token is None:
            raise Unauthenticated(
                f"{request.action} needs 'Authorization: Bearer <secret>' or an "
                "X-Loom-Signature header"
            )
        if signature is not None:
            expected = sign(self._secret, request.action, request.execution_id, request.body)
            ok = hmac.compare_digest(signature.encode(), expected.encode())
        else:
            ok = hmac.compare_digest((token or "").encode(), self._secret.encode())
        if not ok:
            raise Forbidden(f"the credential does not allow {request.action}")
        return self.principal


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


def verdict_auth_from_env(env: Mapping[str, str] | None = None) -> Authenticator:
    """The verdict authorizer the environment configures (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("LOOM_VERDICT_AUTH"):
        return _load_callable(env["LOOM_VERDICT_AUTH"])
    secret = env.get("LOOM_VERDICT_SECRET") or env.get("LOOM_RESUME_SECRET")
    if secret:
        return SharedSecretAuth(secret, principal="shared-secret")
    return DenyAll("set LOOM_VERDICT_SECRET, LOOM_RESUME_SECRET or LOOM_VERDICT_AUTH")
