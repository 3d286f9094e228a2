"""The A2UI wire models: every message kind round-trips its JSON; bad messages are refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loom.errors import InputError
from loom.plugins.a2ui import (
    A2UIProtocolError,
    ActionMessage,
    CallFunctionMessage,
    FunctionResponseMessage,
    is_action,
    is_call_function,
    is_function_response,
    parse_client_message,
    parse_server_message,
)

SERVER_WIRE: list[dict[str, Any]] = [
    {
        "version": "v0.9",
        "createSurface": {
            "surfaceId": "s1",
            "catalogId": "cat/v1",
            "theme": {"primaryColor": "#00f"},
        },
    },
    {
        "version": "v0.9",
        "updateComponents": {
            "surfaceId": "s1",
            "components": [{"id": "root", "component": "Text", "text": "hi"}],
        },
    },
    {
        "version": "v0.9",
        "updateDataModel": {
            "surfaceId": "s1",
            "path": "/user",
            "value": {"name": "Ada", "nick": None},
        },
    },
    {"version": "v0.9", "deleteSurface": {"surfaceId": "s1"}},
    {
        "version": "v0.9",
        "callFunction": {
            "surfaceId": "s1",
            "callId": "e-1:getLocale#1",
            "name": "getLocale",
            "args": {"fallback": "en"},
            "callableFrom": "agent",
        },
    },
    {
        "version": "v0.9",
        "callFunction": {"surfaceId": "s1", "callId": "e-1:2", "name": "confirmAndSubmit"},
    },
]

CLIENT_WIRE: list[dict[str, Any]] = [
    {
        "version": "v0.9",
        "action": {
            "name": "submit",
            "surfaceId": "s1",
            "sourceComponentId": "btn",
            "timestamp": "2026-07-24T10:00:00Z",
            "context": {"qty": 2},
        },
    },
    {
        "version": "v0.9",
        "error": {"code": "render", "surfaceId": "s1", "path": "/x", "message": "bad"},
    },
    {
        "version": "v0.9",
        "functionResponse": {
            "surfaceId": "s1",
            "callId": "e-1:getLocale#1",
            "name": "getLocale",
            "result": {"locale": "fr-FR", "tz": None},
        },
    },
    {
        "version": "v0.9",
        "functionResponse": {
            "surfaceId": "s1",
            "callId": "e-1:2",
            "name": "confirmAndSubmit",
            "error": {"code": "declined", "message": "no"},
        },
    },
]


@pytest.mark.parametrize("wire", SERVER_WIRE, ids=lambda w: next(k for k in w if k != "version"))
def test_server_messages_round_trip_their_wire_json(wire: dict[str, Any]) -> None:
    text = json.dumps(wire)
    for source in (wire, text, text.encode()):
        message = parse_server_message(source)
        assert message.to_wire() == wire
        assert json.loads(message.to_json()) == wire
        assert parse_server_message(message) == message


@pytest.mark.parametrize("wire", CLIENT_WIRE, ids=lambda w: next(k for k in w if k != "version"))
def test_client_messages_round_trip_their_wire_json(wire: dict[str, Any]) -> None:
    message = parse_client_message(json.dumps(wire))
    assert message.to_wire() == wire
    assert parse_client_message(message.to_wire()) == message


def test_narrowing_helpers_tell_the_kinds_apart() -> None:
    action, _, response, _ = (parse_client_message(w) for w in CLIENT_WIRE)
    assert is_action(action) and not is_function_response(action)
    assert is_function_response(response) and not is_action(response)
    assert isinstance(response, FunctionResponseMessage)
    assert isinstance(action, ActionMessage)
    call = parse_server_message(SERVER_WIRE[4])
    assert is_call_function(call) and isinstance(call, CallFunctionMessage)
    assert not is_call_function(parse_server_message(SERVER_WIRE[0]))


def test_reply_is_normalized_unknown_fields_dropped_and_bare_error_text_kept() -> None:
    reply = parse_client_message(
        {
            "functionResponse": {
                "surfaceId": "s1",
                "callId": "c",
                "name": "f",
                "error": "user cancelled",
                "injected": {"admin": True},
            },
            "extra": 1,
        }
    )
    assert reply.to_wire() == {
        "version": "v0.9",
        "functionResponse": {
            "surfaceId": "s1",
            "callId": "c",
            "name": "f",
            "error": {"code": "error", "message": "user cancelled"},
        },
    }


def test_open_payloads_keep_fields_this_plugin_does_not_model() -> None:
    message = parse_server_message(SERVER_WIRE[0])
    assert message.to_wire()["createSurface"]["theme"] == {"primaryColor": "#00f"}


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        {"version": "v0.9"},
        {
            "action": {"name": "a", "surfaceId": "s"},
            "functionResponse": {"surfaceId": "s", "callId": "c", "name": "f"},
        },
        {"functionResponse": {"surfaceId": "s", "name": "f"}},
        {"functionResponse": {"surfaceId": "", "callId": "c", "name": "f"}},
        {
            "functionResponse": {
                "surfaceId": "s",
                "callId": "c",
                "name": "f",
                "result": 1,
                "error": "both",
            }
        },
        {"callFunction": {"surfaceId": "s", "callId": "c", "name": "f"}},
        ["functionResponse"],
    ],
    ids=[
        "not-json",
        "no-kind",
        "two-kinds",
        "no-call-id",
        "empty-surface",
        "result-and-error",
        "server-kind",
        "not-an-object",
    ],
)
def test_malformed_client_messages_are_refused_as_input_errors(bad: Any) -> None:
    with pytest.raises(A2UIProtocolError) as caught:
        parse_client_message(bad)
    assert isinstance(caught.value, InputError)
    assert "client-to-server" in caught.value.message


def test_server_parser_refuses_client_kinds_and_extra_call_fields() -> None:
    with pytest.raises(A2UIProtocolError):
        parse_server_message(CLIENT_WIRE[2])
    with pytest.raises(A2UIProtocolError):
        parse_server_message(
            {"callFunction": {"surfaceId": "s", "callId": "c", "name": "f", "sneaky": 1}}
        )
