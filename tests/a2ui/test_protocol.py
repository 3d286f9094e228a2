"""The A2UI v1.0 wire models: every message kind round-trips its JSON; bad messages are refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loom.errors import InputError
from loom.plugins.a2ui import (
    A2UIProtocolError,
    ActionMessage,
    CallRendererFunctionMessage,
    RendererFunctionResponseMessage,
    function_outcome,
    is_action,
    is_call_renderer_function,
    is_function_response,
    parse_agent_message,
    parse_function_outcome,
    parse_renderer_message,
)

AGENT_WIRE: list[dict[str, Any]] = [
    {"version": "v1.0", "createSurface": {"surfaceId": "s1", "catalogId": "example.com:cat/v1"}},
    {
        "version": "v1.0",
        "updateComponents": {
            "surfaceId": "s1",
            "components": [{"id": "root", "component": "Text", "text": "hi"}],
        },
    },
    {
        "version": "v1.0",
        "updateDataModel": {"surfaceId": "s1", "path": "/user", "value": {"name": "Ada"}},
    },
    {"version": "v1.0", "updateDataModel": {"surfaceId": "s1", "path": "/user", "value": None}},
    {"version": "v1.0", "deleteSurface": {"surfaceId": "s1"}},
    {
        "version": "v1.0",
        "callRendererFunction": {
            "functionCallId": "e-1:getLocale#1",
            "callFunction": {
                "call": "getLocale",
                "args": {"fallback": "en"},
                "catalogId": "example.com:cat/v1",
            },
        },
    },
    {
        "version": "v1.0",
        "callRendererFunction": {
            "functionCallId": "e-1:2",
            "callFunction": {"call": "confirmAndSubmit", "catalogId": "example.com:cat/v1"},
        },
    },
]

RENDERER_WIRE: list[dict[str, Any]] = [
    {
        "version": "v1.0",
        "action": {
            "name": "submit",
            "surfaceId": "s1",
            "sourceComponentId": "btn",
            "timestamp": "2026-07-24T10:00:00Z",
            "context": {"qty": 2},
        },
    },
    {
        "version": "v1.0",
        "error": {"code": "VALIDATION_FAILED", "surfaceId": "s1", "path": "/x", "message": "bad"},
    },
    {
        "version": "v1.0",
        "rendererFunctionResponse": {
            "functionCallId": "e-1:getLocale#1",
            "value": {"locale": "fr-FR", "tz": None},
        },
    },
    {"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "e-1:3", "value": None}},
    {
        "version": "v1.0",
        "rendererFunctionResponse": {
            "functionCallId": "e-1:2",
            "error": {"code": "declined", "message": "no"},
        },
    },
]


def _kind(wire: dict[str, Any]) -> str:
    return next(k for k in wire if k != "version")


@pytest.mark.parametrize("wire", AGENT_WIRE, ids=_kind)
def test_agent_messages_round_trip_their_wire_json(wire: dict[str, Any]) -> None:
    text = json.dumps(wire)
    for source in (wire, text, text.encode()):
        message = parse_agent_message(source)
        assert message.to_wire() == wire
        assert json.loads(message.to_json()) == wire
        assert parse_agent_message(message) == message


@pytest.mark.parametrize("wire", RENDERER_WIRE, ids=_kind)
def test_renderer_messages_round_trip_their_wire_json(wire: dict[str, Any]) -> None:
    message = parse_renderer_message(json.dumps(wire))
    assert message.to_wire() == wire
    assert parse_renderer_message(message.to_wire()) == message


def test_a_null_value_stays_on_the_wire() -> None:
    message = parse_renderer_message(RENDERER_WIRE[3])
    assert json.loads(message.to_json())["rendererFunctionResponse"] == {
        "functionCallId": "e-1:3",
        "value": None,
    }


def test_narrowing_helpers_tell_the_kinds_apart() -> None:
    action, _, response, _, _ = (parse_renderer_message(w) for w in RENDERER_WIRE)
    assert is_action(action) and not is_function_response(action)
    assert is_function_response(response) and not is_action(response)
    assert isinstance(response, RendererFunctionResponseMessage)
    assert isinstance(action, ActionMessage)
    call = parse_agent_message(AGENT_WIRE[5])
    assert is_call_renderer_function(call) and isinstance(call, CallRendererFunctionMessage)
    assert not is_call_renderer_function(parse_agent_message(AGENT_WIRE[0]))


def test_an_error_naming_a_call_is_that_calls_outcome() -> None:
    refused = {
        "version": "v1.0",
        "error": {"code": "INVALID_FUNCTION_CALL", "message": "no", "functionCallId": "e:1"},
    }
    outcome = parse_function_outcome(refused)
    assert outcome.functionCallId == "e:1"
    assert outcome.error is not None and outcome.error.code == "INVALID_FUNCTION_CALL"
    assert function_outcome(parse_renderer_message(RENDERER_WIRE[1])) is None  # a surface error
    with pytest.raises(A2UIProtocolError, match="got action"):
        parse_function_outcome(RENDERER_WIRE[0])


def test_a_reply_with_fields_the_schema_does_not_define_is_refused_not_trimmed() -> None:
    with pytest.raises(A2UIProtocolError):
        parse_renderer_message(
            {
                "version": "v1.0",
                "rendererFunctionResponse": {
                    "functionCallId": "c",
                    "value": 1,
                    "injected": {"admin": True},
                },
            }
        )
    action = json.loads(json.dumps(RENDERER_WIRE[0]))
    action["action"]["injected"] = True  # an action's payload is open: normalized instead
    assert parse_renderer_message(action).to_wire() == RENDERER_WIRE[0]


@pytest.mark.parametrize("version", ["v0.9", "v0.1", "1.0", None, 1])
def test_every_received_message_must_say_v1_0(version: Any) -> None:
    wire = {**RENDERER_WIRE[2], "version": version}
    with pytest.raises(A2UIProtocolError, match="not spoken here"):
        parse_renderer_message(wire)
    with pytest.raises(A2UIProtocolError, match="not spoken here"):
        parse_agent_message({**AGENT_WIRE[5], "version": version})
    del wire["version"]
    with pytest.raises(A2UIProtocolError, match="not spoken here"):
        parse_renderer_message(wire)


_V = {"version": "v1.0"}


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        _V,
        {**_V, "action": RENDERER_WIRE[0]["action"], **{k: v for k, v in RENDERER_WIRE[2].items()}},
        {**_V, "rendererFunctionResponse": {"value": 1}},
        {**_V, "rendererFunctionResponse": {"functionCallId": "c"}},
        {**_V, "rendererFunctionResponse": {"functionCallId": "", "value": 1}},
        {
            **_V,
            "rendererFunctionResponse": {
                "functionCallId": "c",
                "value": 1,
                "error": {"code": "x", "message": "both"},
            },
        },
        {**_V, "rendererFunctionResponse": {"functionCallId": "c", "error": {"code": "x"}}},
        {**_V, "action": {**RENDERER_WIRE[0]["action"], "timestamp": ""}},
        AGENT_WIRE[5],
        ["rendererFunctionResponse"],
        {**_V, "functionResponse": {"surfaceId": "s", "callId": "c", "name": "f"}},
    ],
    ids=[
        "not-json",
        "no-kind",
        "two-kinds",
        "no-call-id",
        "neither-value-nor-error",
        "empty-call-id",
        "value-and-error",
        "error-without-message",
        "empty-timestamp",
        "agent-kind",
        "not-an-object",
        "the-draft-shape",
    ],
)
def test_malformed_renderer_messages_are_refused_as_input_errors(bad: Any) -> None:
    with pytest.raises(A2UIProtocolError) as caught:
        parse_renderer_message(bad)
    assert isinstance(caught.value, InputError)


def test_agent_parser_refuses_renderer_kinds_extra_fields_and_empty_lists() -> None:
    with pytest.raises(A2UIProtocolError):
        parse_agent_message(RENDERER_WIRE[2])
    call = json.loads(json.dumps(AGENT_WIRE[5]))
    call["callRendererFunction"]["surfaceId"] = "s1"  # not in the v1.0 schema
    with pytest.raises(A2UIProtocolError):
        parse_agent_message(call)
    with pytest.raises(A2UIProtocolError):
        parse_agent_message({**_V, "updateComponents": {"surfaceId": "s1", "components": []}})
    with pytest.raises(A2UIProtocolError):
        parse_agent_message({**_V, "createSurface": {"surfaceId": "s1"}})  # no catalogId
