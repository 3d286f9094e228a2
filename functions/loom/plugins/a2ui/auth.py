"""Resume authenticators for grain A: who may resume a gate with a client's reply.

A grain-A reply reaches the flow through an application endpoint and ``runtime.resume``, not
through the effect runtime, so nothing checks it unless the application does. An
authenticator is ``authenticate(request_headers, body) -> bool``; :func:`hmac_authenticator`
is the simplest useful one: the client signs the exact request body with a shared secret;
:func:`from_worker_authenticator` reuses whatever the HTTP worker is configured with.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Any

ResumeAuthenticator = Callable[[Mapping[str, str], bytes], bool]
"""``authenticate(request_headers, body) -> bool``: True admits the reply."""

SIGNATURE_HEADER = "x-a2ui-signature"
"""The header :func:`hmac_authenticator` reads by default."""


def _key(secret: bytes | str) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def sign_body(secret: bytes | str, body: bytes) -> str:
    """The signature header value for ``body``: ``sha256=<hex HMAC-SHA256>``."""
    return "sha256=" + hmac.new(_key(secret), body, hashlib.sha256).hexdigest()


def hmac_authenticator(
    secret: bytes | str, *, header: str = SIGNATURE_HEADER
) -> ResumeAuthenticator:
    """An authenticator admitting bodies signed with ``secret`` (see :func:`sign_body`).

    The header is looked up case-insensitively; the comparison is constant-time.

    Raises:
        ValueError: An empty secret (it would admit anyone who knows it is empty).
    """
    key = _key(secret)
    if not key:
        raise ValueError("hmac_authenticator needs a non-empty secret")
    wanted = header.lower()

    def authenticate(headers: Mapping[str, str], body: bytes) -> bool:
        given = next((v for k, v in headers.items() if k.lower() == wanted), "")
        return hmac.compare_digest(given.encode(), sign_body(key, body).encode())

    return authenticate


def from_worker_authenticator(
    authenticator: Callable[[Any], str], execution_id: str
) -> ResumeAuthenticator:
    """Use the HTTP worker's resume authenticator (``loom.workers.auth``) for grain A.

    The worker's authenticators take an ``AuthRequest`` and return a principal or raise; this
    asks the same question for a reply to ``execution_id``, as a ``resume``, so a deployment
    configures one check (``LOOM_RESUME_SECRET``, OIDC…) for both ways of resuming.
    """
    # Imported here: the worker module needs the ``server`` extra, the plugin does not.
    from werkzeug.datastructures import Headers

    from loom.workers.auth import AuthError, AuthRequest

    def authenticate(headers: Mapping[str, str], body: bytes) -> bool:
        request = AuthRequest("resume", execution_id, Headers(dict(headers)), body)
        try:
            authenticator(request)
        except AuthError:
            return False
        return True

    return authenticate
