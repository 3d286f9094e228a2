"""Grain A: send, suspend on ``A2UIFunctionResult``, resume with a checked reply; replay."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import UnknownExecutionError
from loom.events import TERMINAL_TYPES
from loom.plugins.a2ui import (
    A2UI_FUNCTION_RESULT,
    A2UICatalog,
    A2UIMessageSender,
    CallFunctionMessage,
    CatalogValidationError,
    ClientFunctionError,
    CorrelationError,
    ResumeAuthenticationError,
    define_function,
    deliver_function_response,
    from_worker_authenticator,
    gate_call_id,
    hmac_authenticator,
    register_a2ui_sender,
    request_client_function,
    sign_body,
)
from loom.testing import LoomTestEnv, replay

CATALOG = A2UICatalog(
    [
        define_function(
            "getLocale",
            None,
            {
                "type": "object",
                "properties": {"locale": {"type": "string", "minLength": 2}},
                "required": ["locale"],
            },
        )
    ]
)

Hook = Callable[[str, CallFunctionMessage], Awaitable[None]]


class RecordingSender(A2UIMessageSender):
    """Keeps what was sent; optionally reacts (as a fast client would)."""

    def __init__(self, hook: Hook | None = None) -> None:
        self.sent: list[CallFunctionMessage] = []
        self.hook = hook

    async def send(self, execution_id: str, message: CallFunctionMessage) -> None:
        self.sent.append(message)
        if self.hook is not None:
            await self.hook(execution_id, message)


class RefusingSender(A2UIMessageSender):
    async def send(self, execution_id: str, message: CallFunctionMessage) -> None:
        raise AssertionError("replay contacted the client")


def make_app(sender: A2UIMessageSender) -> Loom:
    app = Loom("gate-tests")
    send = register_a2ui_sender(app, sender)

    @app.flow("one")
    async def one(ctx: FlowContext, surface: str) -> Any:
        return await request_client_function(
            ctx, send, surface, "getLocale", catalog=CATALOG, timeout=60
        )

    @app.flow("both")
    async def both(ctx: FlowContext, surface: str) -> list[Any]:
        # Two concurrent calls whose caller-given id is derived only from the function name.
        name_only = f"{ctx.execution_id}:getLocale"
        return list(
            await asyncio.gather(
                request_client_function(ctx, send, surface, "getLocale", call_id=name_only),
                request_client_function(ctx, send, surface, "getLocale", call_id=name_only),
            )
        )

    @app.flow("tolerant")
    async def tolerant(ctx: FlowContext, surface: str) -> Any:
        try:
            return await request_client_function(ctx, send, surface, "getLocale")
        except ClientFunctionError as exc:
            return {"fallback": exc.details["error"]["code"]}

    return app


def reply(message: CallFunctionMessage, **outcome: Any) -> dict[str, Any]:
    call = message.callFunction
    body = {"surfaceId": call.surfaceId, "callId": call.callId, "name": call.name}
    return {"version": "v0.9", "functionResponse": {**body, **outcome}}


@pytest.fixture
def sender() -> RecordingSender:
    return RecordingSender()


@pytest.fixture
def env(sender: RecordingSender) -> LoomTestEnv:
    return LoomTestEnv(make_app(sender))


async def test_the_reply_resumes_the_gate_and_becomes_the_flows_result(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    result = await env.start("one", "s1", execution_id="e1")
    assert result.status == "suspended"
    [gate] = result.waiting_on
    assert (gate.on, gate.correlation_key) == (A2UI_FUNCTION_RESULT, "e1:getLocale#1")
    [sent] = sender.sent
    assert (sent.callFunction.surfaceId, sent.callFunction.callId) == ("s1", "e1:getLocale#1")

    result = await deliver_function_response(
        env.runtime, "e1", reply(sent, result={"locale": "fr-FR"})
    )
    assert (result.status, result.output) == ("completed", {"locale": "fr-FR"})
    history = await env.history("e1")
    resumed = [e for e in history if e.type == "ExecutionResumed"]
    assert [r.payload for r in resumed] == [
        reply(sent, result={"locale": "fr-FR"})["functionResponse"]
    ]
    # The plugin adds no event type of its own: the reply is an ordinary resume.
    assert {e.type for e in history} <= {
        "ExecutionStarted",
        "ExecutionClaimed",
        "EffectCompleted",
        "ExecutionSuspended",
        "ExecutionResumed",
        *TERMINAL_TYPES,
    }


async def test_replay_serves_the_reply_from_the_log_without_contacting_the_client(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e1")
    await deliver_function_response(
        env.runtime, "e1", reply(sender.sent[0], result={"locale": "fr-FR"})
    )
    outcome = await replay(make_app(RefusingSender()), await env.history("e1"))
    assert (outcome.status, outcome.output) == ("completed", {"locale": "fr-FR"})


async def test_two_calls_of_one_function_get_call_site_unique_ids_and_their_own_replies(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    result = await env.start("both", "s1", execution_id="e2")
    first, second = sorted(sender.sent, key=lambda m: m.callFunction.callId)
    assert first.callFunction.callId == "e2:getLocale#1.1"
    assert second.callFunction.callId == "e2:getLocale#2.1"
    assert len(result.waiting_on) == 2
    await deliver_function_response(env.runtime, "e2", reply(second, result={"locale": "de"}))
    assert (await env.runtime.result("e2")).status == "suspended"
    result = await deliver_function_response(
        env.runtime, "e2", reply(first, result={"locale": "fr"})
    )
    assert result.output == [{"locale": "fr"}, {"locale": "de"}]


def test_call_ids_derived_only_from_the_name_are_made_call_site_unique() -> None:
    assert gate_call_id("e", "3", "getLocale", None) == "e:getLocale#3"
    assert gate_call_id("e", "3", "getLocale", "getLocale") == "getLocale#3"
    assert gate_call_id("e", "3", "getLocale", "e:getLocale") == "e:getLocale#3"
    assert gate_call_id("e", "3", "getLocale", "e:getLocale#1") == "e:getLocale#1"


async def test_replies_that_do_not_answer_an_awaited_call_are_refused_and_nothing_appended(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e3")
    sent = sender.sent[0]
    before = len(await env.history("e3"))
    forged = reply(sent, result={"locale": "xx"})
    forged["functionResponse"]["callId"] = "e3:getLocale#7"
    with pytest.raises(CorrelationError, match="unsolicited"):
        await deliver_function_response(env.runtime, "e3", forged, grace=0)
    other_surface = reply(sent, result={"locale": "xx"})
    other_surface["functionResponse"]["surfaceId"] = "s2"
    with pytest.raises(CorrelationError, match="surface 's2'"):
        await deliver_function_response(env.runtime, "e3", other_surface)
    other_function = reply(sent, result={"locale": "xx"})
    other_function["functionResponse"]["name"] = "getTimeZone"
    with pytest.raises(CorrelationError, match="getTimeZone"):
        await deliver_function_response(env.runtime, "e3", other_function)
    with pytest.raises(CatalogValidationError, match="locale"):
        await deliver_function_response(
            env.runtime, "e3", reply(sent, result={"lang": "fr"}), catalog=CATALOG
        )
    assert len(await env.history("e3")) == before
    assert (await env.runtime.result("e3")).status == "suspended"
    with pytest.raises(UnknownExecutionError):
        await deliver_function_response(env.runtime, "nope", reply(sent, result={}))


async def test_a_late_or_duplicate_reply_is_refused(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e4")
    good = reply(sender.sent[0], result={"locale": "fr-FR"})
    await deliver_function_response(env.runtime, "e4", good)
    with pytest.raises(CorrelationError, match="late"):
        await deliver_function_response(env.runtime, "e4", good)


async def test_the_resume_authenticator_gates_the_reply(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e5")
    body = json.dumps(reply(sender.sent[0], result={"locale": "fr-FR"})).encode()
    authenticate = hmac_authenticator("s3cret")
    with pytest.raises(ResumeAuthenticationError):
        await deliver_function_response(
            env.runtime,
            "e5",
            body,
            authenticate=authenticate,
            headers={"X-A2UI-Signature": sign_body("wrong", body)},
        )
    with pytest.raises(ResumeAuthenticationError):
        await deliver_function_response(env.runtime, "e5", body, authenticate=authenticate)
    assert (await env.runtime.result("e5")).status == "suspended"
    result = await deliver_function_response(
        env.runtime,
        "e5",
        body,
        authenticate=authenticate,
        headers={"X-A2UI-Signature": sign_body("s3cret", body)},
    )
    assert result.status == "completed"


async def test_a_reply_that_overtakes_the_send_record_is_accepted() -> None:
    deliveries: list[asyncio.Task[Any]] = []
    holder: dict[str, LoomTestEnv] = {}

    async def fast_client(execution_id: str, message: CallFunctionMessage) -> None:
        # Answer before the send effect has even returned, so before its record exists.
        deliveries.append(
            asyncio.get_running_loop().create_task(
                deliver_function_response(
                    holder["env"].runtime, execution_id, reply(message, result={"locale": "fr-FR"})
                )
            )
        )
        await asyncio.sleep(0)

    env = holder["env"] = LoomTestEnv(make_app(RecordingSender(fast_client)))
    await env.start("one", "s1", execution_id="e6")
    await asyncio.gather(*deliveries)
    result = await env.runtime.result("e6")
    assert (result.status, result.output) == ("completed", {"locale": "fr-FR"})


async def test_a_client_error_reaches_the_flow_as_client_function_error(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e7")
    result = await deliver_function_response(
        env.runtime, "e7", reply(sender.sent[0], error={"code": "denied", "message": "no"})
    )
    assert result.status == "failed"
    assert result.error is not None and result.error["type"] == "ClientFunctionError"
    await env.start("tolerant", "s1", execution_id="e8")
    result = await deliver_function_response(
        env.runtime, "e8", reply(sender.sent[1], error="user said no")
    )
    assert result.output == {"fallback": "error"}


async def test_the_gate_times_out_and_a_reply_after_that_is_late(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e9")
    [result] = await env.skip(61)
    assert result.error is not None and result.error["type"] == "GateTimeoutError"
    with pytest.raises(CorrelationError, match="late"):
        await deliver_function_response(
            env.runtime, "e9", reply(sender.sent[0], result={"locale": "fr"})
        )


async def test_a_resume_by_another_path_is_still_checked_by_the_flow(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e10")
    forged = reply(sender.sent[0], result={"locale": "xx"})["functionResponse"]
    forged["callId"] = "e10:getLocale#99"
    result = await env.runtime.resume("e10", A2UI_FUNCTION_RESULT, "e10:getLocale#1", forged)
    assert result.status == "failed"
    assert result.error is not None and result.error["type"] == "CorrelationError"


async def test_the_http_workers_resume_authenticator_can_gate_grain_a(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    pytest.importorskip("werkzeug")
    from loom.workers.auth import SharedSecretAuth, sign

    await env.start("one", "s1", execution_id="e11")
    body = json.dumps(reply(sender.sent[0], result={"locale": "fr-FR"})).encode()
    authenticate = from_worker_authenticator(SharedSecretAuth("k" * 16), "e11")
    with pytest.raises(ResumeAuthenticationError):
        await deliver_function_response(
            env.runtime,
            "e11",
            body,
            authenticate=authenticate,
            headers={"X-Loom-Signature": sign("k" * 16, "resume", "another-execution", body)},
        )
    result = await deliver_function_response(
        env.runtime,
        "e11",
        body,
        authenticate=authenticate,
        headers={"x-loom-signature": sign("k" * 16, "resume", "e11", body)},
    )
    assert result.status == "completed"
