"""``A2UISurfaceBridge``: requests stamped deterministically; replies checked before use."""

from __future__ import annotations

from typing import Any

import pytest

from loom.plugins.a2ui import (
    A2UIProtocolError,
    A2UISurfaceBridge,
    CorrelationError,
    FunctionResponse,
)

CAT = "example.com:cat/v1"


def reply(call_id: str = "e:getLocale#1", **outcome: Any) -> dict[str, Any]:
    body = {"functionCallId": call_id, **(outcome or {"value": {"locale": "fr"}})}
    return {"version": "v1.0", "rendererFunctionResponse": body}


def test_call_function_stamps_catalog_and_the_callers_call_id() -> None:
    bridge = A2UISurfaceBridge("s1", catalog_id=CAT)
    args = {"fallback": "en"}
    message = bridge.call_function("getLocale", args, call_id="e:getLocale#1")
    args["fallback"] = "changed later"
    assert message.to_wire() == {
        "version": "v1.0",
        "callRendererFunction": {
            "functionCallId": "e:getLocale#1",
            "callFunction": {"call": "getLocale", "args": {"fallback": "en"}, "catalogId": CAT},
        },
    }
    other = bridge.call_function("f", call_id="e:2", catalog_id="example.com:other")
    assert other.callRendererFunction.callFunction.catalogId == "example.com:other"


def test_the_bridge_is_deterministic_and_invents_nothing() -> None:
    a = A2UISurfaceBridge("s1", catalog_id=CAT).call_function("f", {"x": 1}, call_id="e:1")
    b = A2UISurfaceBridge("s1", catalog_id=CAT).call_function("f", {"x": 1}, call_id="e:1")
    assert a == b and a.to_json() == b.to_json()
    with pytest.raises(A2UIProtocolError, match="call id"):
        A2UISurfaceBridge("s1", catalog_id=CAT).call_function("f", call_id="")
    with pytest.raises(A2UIProtocolError):
        A2UISurfaceBridge("", catalog_id=CAT)
    with pytest.raises(A2UIProtocolError, match="catalogId"):
        A2UISurfaceBridge("s1", catalog_id="")


def test_create_surface_names_the_catalog() -> None:
    message = A2UISurfaceBridge("s1", catalog_id=CAT).create_surface(sendDataModel=True)
    assert message.to_wire() == {
        "version": "v1.0",
        "createSurface": {"surfaceId": "s1", "catalogId": CAT, "sendDataModel": True},
    }


def test_a_reply_is_matched_on_its_function_call_id_alone() -> None:
    got = A2UISurfaceBridge.ingest_function_response(reply(), "e:getLocale#1")
    assert got == FunctionResponse(functionCallId="e:getLocale#1", value={"locale": "fr"})
    with pytest.raises(CorrelationError, match="expected 'e:getLocale#2'"):
        A2UISurfaceBridge.ingest_function_response(reply(), "e:getLocale#2")


def test_an_error_for_the_call_is_its_outcome_and_other_messages_are_refused() -> None:
    refused = {
        "version": "v1.0",
        "error": {"code": "INVALID_FUNCTION_CALL", "message": "no", "functionCallId": "e:1"},
    }
    got = A2UISurfaceBridge.ingest_function_response(refused, "e:1")
    assert got.error is not None and got.error.code == "INVALID_FUNCTION_CALL"
    action = {
        "version": "v1.0",
        "action": {
            "name": "a",
            "surfaceId": "s1",
            "sourceComponentId": "b",
            "timestamp": "2026-01-01T00:00:00Z",
            "context": {},
        },
    }
    with pytest.raises(A2UIProtocolError):
        A2UISurfaceBridge.ingest_function_response(action, "e:1")
    with pytest.raises(A2UIProtocolError, match="not spoken"):
        A2UISurfaceBridge.ingest_function_response({**reply(), "version": "v0.9"}, "e:1")


def test_actions_are_checked_against_the_surface() -> None:
    bridge = A2UISurfaceBridge("s1", catalog_id=CAT)
    action = {
        "version": "v1.0",
        "action": {
            "name": "go",
            "surfaceId": "s1",
            "sourceComponentId": "b",
            "timestamp": "2026-01-01T00:00:00Z",
            "context": {"k": 1},
        },
    }
    assert bridge.ingest_action(action).context == {"k": 1}
    action["action"]["surfaceId"] = "s2"
    with pytest.raises(CorrelationError, match="surface 's2'"):
        bridge.ingest_action(action)
    with pytest.raises(A2UIProtocolError, match="expected an action"):
        bridge.ingest_action(reply())
