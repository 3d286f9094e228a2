"""Grain A: send, suspend on ``A2UIFunctionResult``, resume with a checked reply; replay."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import GateTimedOutError, UnknownExecutionError
from loom.events import TERMINAL_TYPES
from loom.plugins.a2ui import (
    A2UI_FUNCTION_RESULT,
    A2UICatalog,
    A2UIMessageSender,
    A2UIProtocolError,
    CallRendererFunctionMessage,
    CatalogValidationError,
    ClientFunctionError,
    CorrelationError,
    LateReplyError,
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
    ],
    catalog_id="example.com:gate-tests/v1",
)

Hook = Callable[[str, CallRendererFunctionMessage], Awaitable[None]]


class RecordingSender(A2UIMessageSender):
    """Keeps what was sent; optionally reacts (as a fast client would)."""

    def __init__(self, hook: Hook | None = None) -> None:
        self.sent: list[CallRendererFunctionMessage] = []
        self.surfaces: list[str] = []
        self.hook = hook

    async def send(
        self, execution_id: str, surface_id: str, message: CallRendererFunctionMessage
    ) -> None:
        self.sent.append(message)
        self.surfaces.append(surface_id)
        if self.hook is not None:
            await self.hook(execution_id, message)


class RefusingSender(A2UIMessageSender):
    async def send(
        self, execution_id: str, surface_id: str, message: CallRendererFunctionMessage
    ) -> None:
        raise AssertionError("replay contacted the renderer")


def make_app(sender: A2UIMessageSender) -> Loom:
    app = Loom("gate-tests")
    send = register_a2ui_sender(app, sender, catalogs=[CATALOG])

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
                request_client_function(
                    ctx, send, surface, "getLocale", call_id=name_only, catalog=CATALOG
                ),
                request_client_function(
                    ctx, send, surface, "getLocale", call_id=name_only, catalog=CATALOG
                ),
            )
        )

    @app.flow("tolerant")
    async def tolerant(ctx: FlowContext, surface: str) -> Any:
        try:
            return await request_client_function(
                ctx, send, surface, "getLocale", catalog_id=CATALOG.catalog_id
            )
        except ClientFunctionError as exc:
            return {"fallback": exc.details["error"]["code"]}

    return app


def reply(message: CallRendererFunctionMessage, **outcome: Any) -> dict[str, Any]:
    body = {"functionCallId": message.callRendererFunction.functionCallId}
    return {"version": "v1.0", "rendererFunctionResponse": {**body, **outcome}}


def call_id(message: CallRendererFunctionMessage) -> str:
    return message.callRendererFunction.functionCallId


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
    assert (sender.surfaces, call_id(sent)) == (["s1"], "e1:getLocale#1")
    assert sent.callRendererFunction.callFunction.catalogId == CATALOG.catalog_id

    result = await deliver_function_response(
        env.runtime, "e1", reply(sent, value={"locale": "fr-FR"})
    )
    assert (result.status, result.output) == ("completed", {"locale": "fr-FR"})
    history = await env.history("e1")
    resumed = [e for e in history if e.type == "ExecutionResumed"]
    assert [r.payload for r in resumed] == [
        reply(sent, value={"locale": "fr-FR"})["rendererFunctionResponse"]
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
        env.runtime, "e1", reply(sender.sent[0], value={"locale": "fr-FR"})
    )
    outcome = await replay(make_app(RefusingSender()), await env.history("e1"))
    assert (outcome.status, outcome.output) == ("completed", {"locale": "fr-FR"})


async def test_two_calls_of_one_function_get_call_site_unique_ids_and_their_own_replies(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    result = await env.start("both", "s1", execution_id="e2")
    first, second = sorted(sender.sent, key=call_id)
    assert call_id(first) == "e2:getLocale#1.1"
    assert call_id(second) == "e2:getLocale#2.1"
    assert len(result.waiting_on) == 2
    await deliver_function_response(env.runtime, "e2", reply(second, value={"locale": "de"}))
    assert (await env.runtime.result("e2")).status == "suspended"
    result = await deliver_function_response(
        env.runtime, "e2", reply(first, value={"locale": "fr"})
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
    forged = reply(sent, value={"locale": "xx"})
    forged["rendererFunctionResponse"]["functionCallId"] = "e3:getLocale#7"
    with pytest.raises(CorrelationError, match="unsolicited"):
        await deliver_function_response(env.runtime, "e3", forged, grace=0)
    with pytest.raises(CatalogValidationError, match="locale"):
        await deliver_function_response(
            env.runtime, "e3", reply(sent, value={"lang": "fr"}), catalog=CATALOG
        )
    with pytest.raises(A2UIProtocolError, match="not spoken"):
        stale = {**reply(sent, value={"locale": "fr"}), "version": "v0.9"}
        await deliver_function_response(env.runtime, "e3", stale)
    assert len(await env.history("e3")) == before
    assert (await env.runtime.result("e3")).status == "suspended"
    with pytest.raises(UnknownExecutionError):
        await deliver_function_response(env.runtime, "nope", reply(sent, value={}))


async def test_a_late_or_duplicate_reply_is_refused(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e4")
    good = reply(sender.sent[0], value={"locale": "fr-FR"})
    await deliver_function_response(env.runtime, "e4", good)
    with pytest.raises(CorrelationError, match="late"):
        await deliver_function_response(env.runtime, "e4", good)


async def test_the_resume_authenticator_gates_the_reply(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e5")
    body = json.dumps(reply(sender.sent[0], value={"locale": "fr-FR"})).encode()
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

    async def fast_client(execution_id: str, message: CallRendererFunctionMessage) -> None:
        # Answer before the send effect has even returned, so before its record exists.
        deliveries.append(
            asyncio.get_running_loop().create_task(
                deliver_function_response(
                    holder["env"].runtime, execution_id, reply(message, value={"locale": "fr-FR"})
                )
            )
        )
        await asyncio.sleep(0)

    env = holder["env"] = LoomTestEnv(make_app(RecordingSender(fast_client)))
    await env.start("one", "s1", execution_id="e6")
    await asyncio.gather(*deliveries)
    result = await env.runtime.result("e6")
    assert (result.status, result.output) == ("completed", {"locale": "fr-FR"})


async def test_a_renderer_error_reaches_the_flow_as_client_function_error(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e7")
    result = await deliver_function_response(
        env.runtime, "e7", reply(sender.sent[0], error={"code": "denied", "message": "no"})
    )
    assert result.status == "failed"
    assert result.error is not None and result.error["type"] == "ClientFunctionError"
    await env.start("tolerant", "s1", execution_id="e8")
    refused = {
        "version": "v1.0",
        "error": {
            "code": "INVALID_FUNCTION_CALL",
            "message": "not allowed",
            "functionCallId": call_id(sender.sent[1]),
        },
    }
    result = await deliver_function_response(env.runtime, "e8", refused)
    assert result.output == {"fallback": "INVALID_FUNCTION_CALL"}


async def test_the_gate_times_out_and_a_reply_after_that_is_late(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e9")
    [result] = await env.skip(61)
    assert result.error is not None and result.error["type"] == "GateTimeoutError"
    with pytest.raises(CorrelationError, match="late") as refused:
        await deliver_function_response(
            env.runtime, "e9", reply(sender.sent[0], value={"locale": "fr"})
        )
    # Refused as every route refuses a reply to a timed-out gate: 409 gate_timed_out.
    assert isinstance(refused.value, GateTimedOutError) and refused.value.code == "gate_timed_out"
    assert refused.value.details["functionCallId"] == call_id(sender.sent[0])
    assert refused.value.details["timed_out_at"] is not None


async def test_a_reply_after_the_deadline_is_late_even_before_the_timer_runs(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e11")
    before = await env.history("e11")
    env.clock.now += 61  # the deadline passed; the timer's call has not come yet
    with pytest.raises(LateReplyError, match="timed out"):
        await deliver_function_response(
            env.runtime, "e11", reply(sender.sent[0], value={"locale": "fr"})
        )
    assert await env.history("e11") == before  # nothing appended
    [result] = await env.skip(0)
    assert result.error is not None and result.error["type"] == "GateTimeoutError"


async def test_a_resume_by_another_path_is_checked_the_same_and_refused_with_nothing_appended(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    await env.start("one", "s1", execution_id="e10")
    before = await env.history("e10")
    good = reply(sender.sent[0], value={"locale": "fr-FR"})["rendererFunctionResponse"]
    key = "e10:getLocale#1"
    forged = [
        {**good, "functionCallId": "e10:getLocale#99"},  # another call's id
        {"functionCallId": key, "value": {"lang": "xx"}},  # fails the catalog
        {"functionCallId": key},  # neither value nor error
        "not a reply",
    ]
    for payload in forged:
        with pytest.raises((CorrelationError, CatalogValidationError, A2UIProtocolError)):
            await env.runtime.resume("e10", A2UI_FUNCTION_RESULT, key, payload)
    unsolicited = {**good, "functionCallId": "e10:getLocale#99"}
    with pytest.raises(CorrelationError, match="unsolicited"):
        await env.runtime.resume("e10", A2UI_FUNCTION_RESULT, "e10:getLocale#99", unsolicited)
    assert await env.history("e10") == before
    result = await env.runtime.resume("e10", A2UI_FUNCTION_RESULT, key, good)
    assert (result.status, result.output) == ("completed", {"locale": "fr-FR"})


async def test_the_http_workers_resume_authenticator_can_gate_grain_a(
    env: LoomTestEnv, sender: RecordingSender
) -> None:
    pytest.importorskip("werkzeug")
    from loom.workers.auth import SharedSecretAuth, sign

    await env.start("one", "s1", execution_id="e11")
    body = json.dumps(reply(sender.sent[0], value={"locale": "fr-FR"})).encode()
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
