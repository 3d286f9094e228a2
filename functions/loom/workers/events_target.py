"""The CloudEvent target: Pub/Sub messages (pushed, or through Eventarc) that start or resume
executions.

The message data is a JSON object:

* ``{"action": "start", "flow": "...", "input": ..., "execution_id"?: "...",
  "capabilities"?: [...], "limits"?: {...}}``: start the flow (``limits``: see
  :mod:`loom.kernel.execution_limits`; above the flow's own only as the grant policy allows). Without an ``execution_id`` the execution is
  named after the Pub/Sub message (``pubsub-{messageId}``), so a redelivered message names
  the same execution; a signed one after its signature (``sig-…``), so the same signed data
  published again is the same start too.
* ``{"action": "resume", "execution_id": "...", "on": "...", "correlation_key": "...",
  "payload"?: ...}``: deliver a resume.

Redelivery is harmless: a start is idempotent by execution id (same flow and input: same
execution, no second run), and a resume by ``on`` + ``correlation_key`` (a duplicate is a
no-op). So the handler acknowledges (2xx) everything that is done or can never succeed — a
malformed message, an unknown flow, a conflicting start, a resume of a finished execution —
and raises :class:`RedeliverError` (non-2xx, Pub/Sub retries with backoff, bounded by the
subscription's dead-letter policy) only when a retry may succeed: a resume that arrived
before its start (Pub/Sub does not order messages), or a store or dispatch failure.

Authority is the HTTP worker's, checked here (the topic's IAM, publisher bindings only for
named principals, is the first wall; the push subscription's OIDC token gets the message to
the private service, and says nothing about who published it). A message may carry the
attribute ``loom-signature``: :func:`loom.workers.auth.sign` with the shared secret
(``LOOM_EVENTS_SECRET``, else ``LOOM_RESUME_SECRET``) over the action (``start`` or
``resume``), the execution id (``""`` for a start without one) and the exact message data,
with an expiry. ``LOOM_EVENTS_AUTH`` (``module:attr``) replaces that check; it sees the
attribute as the ``X-Loom-Signature`` header and the message attributes as headers.

* A resume needs a signature the check accepts, exactly as ``POST .../resume`` needs the
  resume secret: unsigned or badly signed, it is rejected (acknowledged, nothing written).
* A start is made by the principal the check returns, or by ``anonymous`` when unsigned; the
  grant policy decides which of its ``capabilities`` that principal may grant (anything it
  may not is rejected, nothing written).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, Field, StrictInt, TypeAdapter, ValidationError

from loom.errors import (
    ExecutionFinishedError,
    InputError,
    LoomError,
    StoreLimitError,
    UnknownExecutionError,
)
from loom.grants import ANONYMOUS, GrantPolicy
from loom.ids import ExecutionId
from loom.reserved_ids import IdForm
from loom.runtime import Runtime
from loom.workers.auth import Authenticator, AuthError, AuthRequest, events_auth_from_env
from loom.workers.lazy import LazyRuntime
from loom.workers.logs import log_context
from loom.workers.loop import PROCESS_LOOP, BackgroundLoop
from loom.workers.signed_ids import signed_default_id

log = logging.getLogger("loom.events")


class StartMessage(BaseModel):
    """Start a flow (idempotent by execution id)."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["start"]
    flow: str = Field(min_length=1, max_length=256)
    input: Any = None
    execution_id: ExecutionId | None = None
    capabilities: list[str] = Field(default_factory=list[str], max_length=256)
    limits: dict[str, StrictInt | float] | None = Field(default=None, max_length=16)


class ResumeMessage(BaseModel):
    """Resume a gate (a duplicate on + key is a no-op)."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["resume"]
    execution_id: ExecutionId
    on: str = Field(min_length=1, max_length=256)
    correlation_key: str = Field(min_length=1, max_length=1024)
    payload: Any = None


Message = Annotated[StartMessage | ResumeMessage, Field(discriminator="action")]
_MESSAGE: TypeAdapter[StartMessage | ResumeMessage] = TypeAdapter(Message)


class InvalidMessageError(InputError):
    """The event is not a Pub/Sub message carrying a start or resume."""

    code = "invalid_message"


class RedeliverError(LoomError):
    """The message could not be handled now but may be later: answer non-2xx."""

    code = "redeliver"


@dataclass(frozen=True)
class EventOutcome:
    """What the handler did with one message.

    Attributes:
        outcome: ``started``, ``resumed``, ``finished`` (a resume of an ended execution)
            or ``rejected`` (will never succeed; acknowledged and logged).
        message_id: The Pub/Sub message id (or the CloudEvent id).
        execution_id: The execution concerned, when known.
        status: Its status afterwards, when known.
        error: The error body of a rejected message.
    """

    outcome: str
    message_id: str | None = None
    execution_id: str | None = None
    status: str | None = None
    error: dict[str, Any] | None = None


class CloudEventLike(Protocol):
    """What the handler reads of a CloudEvent (``cloudevents.http.CloudEvent`` fits)."""

    data: Any

    def __getitem__(self, key: str) -> Any: ...


@dataclass(frozen=True)
class Published:
    """One decoded Pub/Sub message: its JSON object, id, raw data and attributes."""

    value: dict[str, Any]
    message_id: str | None
    raw: bytes
    attributes: dict[str, str]


def decode_pubsub(data: Any) -> tuple[dict[str, Any], str | None]:
    """The JSON object inside a Pub/Sub CloudEvent's data, and the message id.

    ``data`` is ``{"message": {"data": base64, "messageId": ..., ...}, "subscription"?: ...}``,
    as Pub/Sub push (converted by functions-framework) and Eventarc both deliver it.

    Raises:
        InvalidMessageError: Anything else.
    """
    published = decode_published(data)
    return published.value, published.message_id


def decode_published(data: Any) -> Published:
    """Like :func:`decode_pubsub`, keeping the raw data and attributes a check needs.

    Raises:
        InvalidMessageError: Not a Pub/Sub message carrying a JSON object.
    """
    if isinstance(data, bytes | str):
        try:
            data = json.loads(data)
        except ValueError:
            raise InvalidMessageError("event data is not JSON") from None
    envelope = cast("dict[str, Any]", data) if isinstance(data, dict) else {}
    raw = envelope.get("message")
    message = cast("dict[str, Any]", raw) if isinstance(raw, dict) else {}
    encoded = message.get("data")
    if not isinstance(encoded, str):
        raise InvalidMessageError("event data has no Pub/Sub message with data")
    try:
        raw_data = base64.b64decode(encoded, validate=True)
        decoded = json.loads(raw_data)
    except (binascii.Error, ValueError):
        raise InvalidMessageError("the message data is not base64-encoded JSON") from None
    if not isinstance(decoded, dict):
        raise InvalidMessageError("the message data must be a JSON object")
    message_id = message.get("messageId") or message.get("message_id")
    raw_attrs = message.get("attributes")
    attrs = cast("dict[str, Any]", raw_attrs) if isinstance(raw_attrs, dict) else {}
    return Published(
        cast("dict[str, Any]", decoded),
        str(message_id) if message_id else None,
        raw_data,
        {str(k): str(v) for k, v in attrs.items()},
    )


def parse_message(value: dict[str, Any]) -> StartMessage | ResumeMessage:
    """Validate a decoded message.

    Raises:
        InvalidMessageError: It is neither a start nor a resume.
    """
    try:
        return _MESSAGE.validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "message"
        raise InvalidMessageError(f"{where}: {first['msg']}") from None


SIGNATURE_ATTRIBUTE = "loom-signature"


def message_principal(
    check: Authenticator, message: StartMessage | ResumeMessage, published: Published
) -> str:
    """Who sent ``message``: what ``check`` makes of its signature; ``anonymous`` for an
    unsigned start.

    Raises:
        AuthError: A resume without a signature, or a signature ``check`` refuses.
    """
    headers = {k: v for k, v in published.attributes.items() if k != SIGNATURE_ATTRIBUTE}
    signature = published.attributes.get(SIGNATURE_ATTRIBUTE)
    if signature is None and isinstance(message, StartMessage):
        return ANONYMOUS
    if signature is not None:
        headers["X-Loom-Signature"] = signature
    eid = message.execution_id or ""
    return check(AuthRequest(message.action, eid, headers, published.raw))


def signed_start_id(message: StartMessage | ResumeMessage, published: Published) -> str | None:
    """The id of a signed start without ``execution_id``, named after its signature: the
    same signed data published again is the same start (see ``loom.workers.signed_ids``),
    where the Pub/Sub message id would name a new execution for every copy. ``None`` for
    anything else."""
    if not isinstance(message, StartMessage) or message.execution_id is not None:
        return None
    headers = {"X-Loom-Signature": published.attributes.get(SIGNATURE_ATTRIBUTE, "")}
    return signed_default_id(headers, "start", "", "sig-")


def _start_id(
    message: StartMessage, message_id: str | None, signed_id: str | None
) -> tuple[str, IdForm | None]:
    """The execution a start message names, and the engine form it was derived in (the
    message's own id is an outside id, checked like any start's)."""
    if message.execution_id is not None:
        return message.execution_id, None
    if signed_id is not None:
        return signed_id, "signed"
    if message_id is None:
        raise InvalidMessageError("a start without execution_id needs a message id")
    return f"pubsub-{message_id}", "pubsub"


async def handle_message(
    runtime: Runtime,
    message: StartMessage | ResumeMessage,
    message_id: str | None,
    by: str | None = None,
    *,
    signed_id: str | None = None,
) -> EventOutcome:
    """Start or resume as ``by``; see the module docstring for what is acknowledged.

    ``by`` ``None`` is the trusted path (in-process code); :class:`EventsHandler` always
    names the principal its check returned. ``signed_id``: a signed start's default id
    (:func:`signed_start_id`).

    Raises:
        RedeliverError: A resume for an execution that does not exist (yet).
        NotPermittedError: ``by`` may not grant the start's capabilities.
        ReservedExecutionIdError: The start names an id of a form the engine derives, or
            the id it derived is held by an execution the engine did not start.
    """
    if isinstance(message, StartMessage):
        eid, derived = _start_id(message, message_id, signed_id)
        result = await runtime.start(
            message.flow,
            message.input,
            execution_id=eid,
            capabilities=message.capabilities,
            budgets=message.limits,
            by=by,
            derived=derived,
        )
        return EventOutcome("started", message_id, eid, result.status)
    eid = message.execution_id
    try:
        result = await runtime.resume(
            eid, message.on, message.correlation_key, message.payload, by=by
        )
    except ExecutionFinishedError as exc:
        return EventOutcome("finished", message_id, eid, str(exc.details.get("status")))
    except UnknownExecutionError as exc:
        raise RedeliverError(
            f"resume for unknown execution {eid!r}; its start may not have arrived yet",
            details={"execution_id": eid},
        ) from exc
    return EventOutcome("resumed", message_id, eid, result.status)


async def handle_event(
    runtime: Runtime, event_id: str | None, data: Any, check: Authenticator | None = None
) -> EventOutcome:
    """Decode one CloudEvent's data, check who sent it, and handle the message in it.

    Args:
        runtime: The runtime.
        event_id: The CloudEvent id.
        data: The CloudEvent data.
        check: Names the sender from the message's signature (see the module docstring);
            ``None`` trusts the message (in-process callers only).

    Raises:
        RedeliverError: Try again later (see :func:`handle_message`).
        LoomError: A store or dispatch failure (also worth a redelivery).
    """
    message_id = event_id
    try:
        published = decode_published(data)
        message_id = published.message_id or event_id
        message = parse_message(published.value)
        by = None if check is None else message_principal(check, message, published)
        signed_id = signed_start_id(message, published)
        return await handle_message(runtime, message, message_id, by, signed_id=signed_id)
    except (InputError, StoreLimitError, AuthError) as exc:  # a redelivery fails the same way
        body = _auth_json(exc) if isinstance(exc, AuthError) else exc.to_json()
        log.error("message %s rejected: %s", message_id, exc.message)
        return EventOutcome("rejected", message_id, error=body)


def _auth_json(exc: AuthError) -> dict[str, Any]:
    return {"code": exc.code, "message": exc.message, "details": {}}


class EventsHandler:
    """The ``events`` target: ``handler(cloud_event) -> dict`` (the outcome, for logs).

    Args:
        runtime: A runtime or a factory for one, built on first use.
        loop: Where coroutines run (default: the process's :data:`PROCESS_LOOP`).
        check: Names a message's sender (default from the environment, see
            :func:`~loom.workers.auth.events_auth_from_env`).
    """

    def __init__(
        self,
        runtime: Runtime | Callable[[], Runtime],
        *,
        loop: BackgroundLoop = PROCESS_LOOP,
        check: Authenticator | None = None,
    ) -> None:
        self._runtime = LazyRuntime(runtime)
        self.loop = loop
        self._check = check
        self._configured = False

    def runtime(self) -> Runtime:
        """The runtime, built on first use (with the environment's grant policy, if any)."""
        runtime = self._runtime.get()
        if not self._configured:
            policy = GrantPolicy.from_env()
            if policy is not None:
                runtime.grants = policy
            self._check = self._check or events_auth_from_env()
            self._configured = True
        return runtime

    def __call__(self, event: CloudEventLike) -> dict[str, Any]:
        """Handle one event; raises to get it redelivered (the framework answers 500, or
        503 with ``Retry-After`` for a :class:`~loom.errors.StoreError`, see ``main.py``)."""
        event_id = event["id"]
        with log_context(message_id=event_id):
            runtime = self.runtime()
            outcome = self.loop.run(handle_event(runtime, event_id, event.data, self._check))
            log.info(
                "message %s: %s %s",
                outcome.message_id,
                outcome.outcome,
                outcome.execution_id or "",
                extra={"execution_id": outcome.execution_id, "status": outcome.status},
            )
        return asdict(outcome)
