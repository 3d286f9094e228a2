"""Grain A, application side: admit a renderer's reply to a call, or refuse it.

:func:`deliver_function_response` is what an application's reply route calls;
:func:`admit_reply` is the resume check every other route to an ``A2UIFunctionResult`` gate
goes through (:func:`~loom.plugins.a2ui.gate.register_a2ui_sender` installs it). A reply is
admitted only when it answers a call this execution sent (read from the folded state) and
still awaits, and its result passes the catalog.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from loom.errors import GateTimedOutError
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.late_replies import timed_out_gate
from loom.plugins.a2ui.auth import ResumeAuthenticator
from loom.plugins.a2ui.catalog import A2UICatalog
from loom.plugins.a2ui.errors import (
    CorrelationError,
    LateReplyError,
    ResumeAuthenticationError,
)
from loom.plugins.a2ui.protocol import WireInput, parse_function_outcome
from loom.plugins.a2ui.sent_calls import A2UI_FUNCTION_RESULT, SEND_EFFECT, SentCall, as_reply

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult


async def _sent_calls(
    runtime: Runtime, state: ExecutionState, send_effect: str
) -> tuple[dict[str, SentCall], set[str]]:
    pending: dict[str, SentCall] = {}
    answered: set[str] = set()
    for rec in state.steps.values():
        if rec.get("effect") != send_effect or rec.get("status") != "completed":
            continue
        output = await runtime.payloads.decode(rec.get("output"), state.execution_id)
        sent = SentCall.model_validate(output)
        if resume_key(A2UI_FUNCTION_RESULT, sent.functionCallId) in state.resumes:
            answered.add(sent.functionCallId)
        else:
            pending[sent.functionCallId] = sent
    return pending, answered


async def pending_function_calls(
    runtime: Runtime, execution_id: str, *, send_effect: str = SEND_EFFECT
) -> tuple[dict[str, SentCall], set[str]]:
    """The grain-A calls of an execution, by call id: ``(awaiting a reply, answered)``.

    Read from the folded state (snapshot + tail), not the whole log. A call awaits a reply
    once its send step is recorded and until a resume for its call id is (a reply, or the
    gate's timeout).
    """
    return await _sent_calls(runtime, await runtime.load_state(execution_id), send_effect)


def _unawaited(execution_id: str, call_id: str, answered: set[str]) -> CorrelationError:
    if call_id in answered:
        return CorrelationError(
            f"call {call_id!r} of execution {execution_id!r} was already answered or timed "
            "out; late reply refused",
            details={"functionCallId": call_id, "reason": "late"},
        )
    return CorrelationError(
        f"execution {execution_id!r} issued no call {call_id!r}; unsolicited reply refused",
        details={"functionCallId": call_id, "reason": "unsolicited"},
    )


async def admit_reply(
    runtime: Runtime,
    state: ExecutionState,
    call_id: str,
    payload: Any,
    catalogs: Mapping[str, A2UICatalog],
    send_effect: str = SEND_EFFECT,
) -> dict[str, Any]:
    """The resume check of ``A2UIFunctionResult`` gates: admit a reply, or refuse it.

    Raises:
        A2UIProtocolError: The payload is not a function response.
        CorrelationError: It answers another call, or a call not awaiting a reply.
        CatalogValidationError: The result fails the function's ``returns`` schema.
    """
    reply = as_reply(call_id, payload)
    pending, answered = await _sent_calls(runtime, state, send_effect)
    sent = pending.get(call_id)
    if sent is None:
        raise _unawaited(state.execution_id, call_id, answered)
    catalog = catalogs.get(sent.catalogId)
    if catalog is not None and reply.error is None and sent.name in catalog:
        catalog.validate_result(sent.name, reply.value)
    return reply.to_wire()


async def deliver_function_response(
    runtime: Runtime,
    execution_id: str,
    message: WireInput,
    *,
    headers: Mapping[str, str] | None = None,
    authenticate: ResumeAuthenticator | None = None,
    catalog: A2UICatalog | None = None,
    send_effect: str = SEND_EFFECT,
    grace: float = 0.5,
) -> ExecutionResult:
    """Resume a grain-A gate with a renderer's reply, after checking it.

    Args:
        runtime: The runtime of the execution.
        execution_id: The execution that issued the call.
        message: The request body as received (bytes or text, so an authenticator can check
            the exact bytes), or a decoded message: a ``rendererFunctionResponse``, or an
            ``error`` naming the call's ``functionCallId``.
        headers: The request's headers, for the authenticator.
        authenticate: Admits or refuses the request; refused → nothing is resumed.
        catalog: Validates the result before it becomes a recorded fact.
        send_effect: The name the send effect was registered under.
        grace: Seconds to wait for the log to record a send the renderer already answered
            (the reply can overtake the send effect's completion record).

    Raises:
        ResumeAuthenticationError: The authenticator refused the request.
        A2UIProtocolError: Another version, or not an answer to a call.
        CorrelationError: Not a reply to a call this execution awaits (unsolicited, forged,
            late).
        LateReplyError: The call's gate timed out before this reply (a
            ``CorrelationError`` and a ``GateTimedOutError``: 409 ``gate_timed_out``).
        CatalogValidationError: The result fails the catalog.
    """
    if authenticate is not None and not authenticate(dict(headers or {}), _body_bytes(message)):
        raise ResumeAuthenticationError(
            f"reply for execution {execution_id!r} refused by the authenticator"
        )
    reply = parse_function_outcome(message)
    sent = await _awaited_call(runtime, execution_id, reply.functionCallId, send_effect, grace)
    if catalog is not None and reply.error is None:
        catalog.validate_result(sent.name, reply.value)
    try:
        return await runtime.resume(
            execution_id, A2UI_FUNCTION_RESULT, reply.functionCallId, reply.to_wire()
        )
    except GateTimedOutError as exc:  # its deadline passed, its timer not run yet
        raise _late(exc, reply.functionCallId) from None


def _late(late: GateTimedOutError, call_id: str) -> LateReplyError:
    details = {**late.details, "functionCallId": call_id, "reason": "late"}
    return LateReplyError(f"{late.message} (late reply)", details=details)


async def _awaited_call(
    runtime: Runtime, execution_id: str, call_id: str, send_effect: str, grace: float
) -> SentCall:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while True:
        state = await runtime.load_state(execution_id)
        pending, answered = await _sent_calls(runtime, state, send_effect)
        if call_id in pending:
            return pending[call_id]
        if call_id in answered or loop.time() >= deadline:
            # (a call whose gate timed out: refused as every route refuses it, 409)
            late = timed_out_gate(state, A2UI_FUNCTION_RESULT, call_id)
            if late is not None:
                raise _late(late, call_id)
            raise _unawaited(execution_id, call_id, answered)
        await asyncio.sleep(0.02)


def _body_bytes(message: WireInput) -> bytes:
    if isinstance(message, bytes):
        return message
    if isinstance(message, str):
        return message.encode()
    if isinstance(message, BaseModel):
        return message.model_dump_json(exclude_none=True).encode()
    return json.dumps(message, separators=(",", ":")).encode()
