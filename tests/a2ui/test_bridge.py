"""``A2UISurfaceBridge``: requests stamped deterministically; replies checked before use."""

from __future__ import annotations

from typing import Any

import pytest

from loom.plugins.a2ui import (
    A2UIProtocolError,
    A2UISurfaceBridge,
    CorrelationError,
    FunctionResponsePayload,
)


def reply(
    surface: str = "s1", call_id: str = "e:getLocale#1", name: str = "getLocale", **more: Any
) -> dict[str, Any]:
    body = {"surfaceId": surface, "callId": call_id, "name": name, **more}
    return {"version": "v0.9", "functionResponse": body}


def test_call_function_stamps_surface_and_the_callers_call_id() -> None:
    bridge = A2UISurfaceBridge("s1")
    args = {"fallback": "en"}
    message = bridge.call_function(
        "getLocale", args, call_id="e:getLocale#1", callable_from="agent"
    )
    args["fallback"] = "changed later"
    assert message.to_wire() == {
        "version": "v0.9",
        "callFunction": {
            "surfaceId": "s1",
            "callId": "e:getLocale#1",
            "name": "getLocale",
            "args": {"fallback": "en"},
            "callableFrom": "agent",
        },
    }


def test_same_inputs_give_the_same_request_no_clock_no_randomness() -> None:
    first = A2UISurfaceBridge("s1").call_function("f", {"a": 1}, call_id="k")
    second = A2UISurfaceBridge("s1").call_function("f", {"a": 1}, call_id="k")
    assert first.to_json() == second.to_json()


def test_call_function_needs_a_call_id_and_a_bridge_a_surface() -> None:
    with pytest.raises(A2UIProtocolError):
        A2UISurfaceBridge("s1").call_function("f", call_id="")
    with pytest.raises(A2UIProtocolError):
        A2UISurfaceBridge("")


def test_ingest_function_response_normalizes_a_reply_for_this_surface() -> None:
    got = A2UISurfaceBridge("s1").ingest_function_response(
        reply(result={"locale": "fr-FR"}), "e:getLocale#1", expected_name="getLocale"
    )
    assert got == FunctionResponsePayload(
        surfaceId="s1", callId="e:getLocale#1", name="getLocale", result={"locale": "fr-FR"}
    )


def test_a_reply_for_another_surface_is_refused() -> None:
    with pytest.raises(CorrelationError, match="surface 's2'"):
        A2UISurfaceBridge("s1").ingest_function_response(reply(surface="s2"))


def test_given_the_expected_call_id_a_reply_for_another_call_is_refused() -> None:
    bridge = A2UISurfaceBridge("s1")
    forged = reply(call_id="e:getLocale#2", result={"locale": "xx"})
    with pytest.raises(CorrelationError, match="expected 'e:getLocale#1'"):
        bridge.ingest_function_response(forged, "e:getLocale#1")
    # Without it only the surface is checked: that is why callers pass it.
    assert bridge.ingest_function_response(forged).callId == "e:getLocale#2"


def test_a_reply_naming_another_function_is_refused() -> None:
    with pytest.raises(CorrelationError, match="'confirmAndSubmit'"):
        A2UISurfaceBridge("s1").ingest_function_response(
            reply(name="confirmAndSubmit"), "e:getLocale#1", expected_name="getLocale"
        )


def test_ingest_function_response_refuses_other_message_kinds() -> None:
    action = {"action": {"name": "go", "surfaceId": "s1"}}
    with pytest.raises(A2UIProtocolError, match="got action"):
        A2UISurfaceBridge("s1").ingest_function_response(action)


def test_ingest_action_checks_the_surface_too() -> None:
    bridge = A2UISurfaceBridge("s1")
    action = {"action": {"name": "go", "surfaceId": "s1", "context": {"n": 1}}}
    assert bridge.ingest_action(action).context == {"n": 1}
    with pytest.raises(CorrelationError):
        bridge.ingest_action({"action": {"name": "go", "surfaceId": "s2"}})
    with pytest.raises(A2UIProtocolError, match="got functionResponse"):
        bridge.ingest_action(reply())
