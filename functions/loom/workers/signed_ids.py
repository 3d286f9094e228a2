"""Default ids of signed requests: a replayed signed request names what the first one made.

A request signed with ``X-Loom-Signature`` (:func:`loom.workers.auth.sign`) stays good for
every copy of it until the signature expires: whoever saw it can send it again. Where such
a request creates something whose id defaults to a fresh one, a copy would create it again:
a second message, a second execution. So when a signed request leaves that id out, the
default is derived from the signed material instead (a digest of the action, the execution
in the path and the signature value, which covers the exact body and its expiry): the same
signed request again names the same message or execution, and Loom's idempotency by id
makes the copy a no-op. A request without a signature keeps a fresh id per request.

The routes that do this: ``POST /executions/{id}/messages`` (``message_id``),
``POST /executions`` (``execution_id``), ``POST /executions/{id}/fork`` (the fork's
``execution_id``), and a signed Pub/Sub start without ``execution_id``. Resumes (by ``on`` +
``correlation_key``), verdicts (by episode), cancels and retries have no random id to
derive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Final

from werkzeug.datastructures import Headers

from loom.workers.auth import Forbidden
from loom.workers.auth import _parse_signature as parse_signature  # pyright: ignore[reportPrivateUsage]

SIGNATURE_HEADER: Final = "X-Loom-Signature"


def signed_default_id(
    headers: Headers | Mapping[str, str], action: str, execution_id: str, prefix: str
) -> str | None:
    """``prefix`` + a digest of the request's signature, or ``None`` for an unsigned one.

    Args:
        headers: The request headers (the signature was accepted, or the request would not
            have reached its route).
        action: What the request does (``resume``, ``start``, ``fork``), as it was signed.
        execution_id: The execution named in the path (``""`` for a start).
        prefix: What the id starts with (``"sig:"`` for a message, ``"sig-"`` for an
            execution).
    """
    signature = headers.get(SIGNATURE_HEADER)
    if not signature:
        return None
    material = f"{action}\n{execution_id}\n{_canonical(signature)}".encode()
    return prefix + hashlib.sha256(material).hexdigest()[:32]


def _canonical(signature: str) -> str:
    """The signature as the check reads it: a copy rewritten in a form the check accepts
    just as well (spaces, field order, leading zeros in the expiry) names the same id."""
    try:
        expires, digest = parse_signature(signature)
    except Forbidden:  # not the shared-secret form: a custom check's own, taken as sent
        return signature.strip()
    return f"t={expires},sha256={digest}"
