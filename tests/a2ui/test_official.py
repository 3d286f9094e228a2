"""What Loom sends and accepts, checked by the official A2UI v1.0 packages nobody here wrote.

Every message Loom emits validates against the official JSON Schemas (npm
``@a2ui/web_core``) and the official pydantic models (PyPI ``a2ui-core``); every renderer
message Loom accepts, the official schema accepts too. And Loom flows are answered end to end
by a2ui-core's ``RpcHandler`` as the renderer, over the plugin's WebSocket transport.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from a2ui.core.schema import v1_0 as official
from examples.a2ui_callfunction.app import CATALOG
from examples.a2ui_callfunction.client import DemoClient
from pydantic import BaseModel

from loom import FlowContext, Loom
from loom.plugins.a2ui import (
    A2UIProtocolError,
    A2UISurfaceBridge,
    UpdateComponentsMessage,
    UpdateDataModelMessage,
    call_client_function,
    parse_renderer_message,
    register_a2ui_call_function,
)
from loom.plugins.a2ui.protocol import (
    DeleteSurfaceMessage,
    DeleteSurfacePayload,
    UpdateComponentsPayload,
    UpdateDataModelPayload,
)
from loom.plugins.a2ui.websocket import WebSocketCallFunctionTransport
from loom.testing import LoomTestEnv
from tests.a2ui.official import schema_errors

BRIDGE = A2UISurfaceBridge("checkout-1", catalog_id=CATALOG.catalog_id)
TEXT = {"id": "root", "component": "Text", "text": "Confirm your order"}


def emitted() -> list[tuple[str, BaseModel, type[BaseModel]]]:
    """Every kind of message Loom builds, with the official model that must accept it."""
    order = {"orderId": "A-1", "total": 5}
    return [
        ("createSurface", BRIDGE.create_surface(), official.CreateSurfaceMessage),
        (
            "updateComponents",
            UpdateComponentsMessage(
                updateComponents=UpdateComponentsPayload(surfaceId="checkout-1", components=[TEXT])
            ),
            official.UpdateComponentsMessage,
        ),
        (
            "updateDataModel-null",
            UpdateDataModelMessage(
                updateDataModel=UpdateDataModelPayload(
                    surfaceId="checkout-1", path="/x", value=None
                )
            ),
            official.UpdateDataModelMessage,
        ),
        (
            "deleteSurface",
            DeleteSurfaceMessage(deleteSurface=DeleteSurfacePayload(surfaceId="checkout-1")),
            official.DeleteSurfaceMessage,
        ),
        (
            "call-with-args",
            BRIDGE.call_function("confirmAndSubmit", order, call_id="e1:1"),
            official.CallRendererFunctionMessage,
        ),
        (
            "call-without-args",
            BRIDGE.call_function("getLocale", call_id="e1:getLocale#1"),
            official.CallRendererFunctionMessage,
        ),
    ]


@pytest.mark.parametrize("case", emitted(), ids=lambda c: c[0])
def test_every_message_loom_emits_is_valid_to_the_official_schema_and_models(
    case: tuple[str, BaseModel, type[BaseModel]],
) -> None:
    _, message, model = case
    wire = json.loads(json.dumps(message.to_wire()))  # type: ignore[attr-defined]
    assert schema_errors("agent_to_renderer.json", wire, catalog=_catalog_for(wire)) == []
    model.model_validate(wire)


def _catalog_for(wire: dict[str, Any]) -> dict[str, Any] | None:
    # A call names functions of Loom's catalog; components come from the basic catalog.
    return CATALOG.to_document() if "callRendererFunction" in wire else None


def test_the_official_schema_would_catch_what_loom_must_not_send() -> None:
    """The validator is not vacuous: the v0.9 draft shape and a call of an undeclared
    function both fail it."""
    call = BRIDGE.call_function("getLocale", call_id="e1:1").to_wire()
    draft = {"version": "v0.9", "callFunction": {"surfaceId": "s", "callId": "c", "name": "f"}}
    assert schema_errors("agent_to_renderer.json", draft, catalog=CATALOG.to_document())
    unknown = copy.deepcopy(call)
    unknown["callRendererFunction"]["callFunction"]["call"] = "notInTheCatalog"
    assert schema_errors("agent_to_renderer.json", unknown, catalog=CATALOG.to_document())
    with_surface = copy.deepcopy(call)
    with_surface["callRendererFunction"]["surfaceId"] = "s"
    assert schema_errors("agent_to_renderer.json", with_surface, catalog=CATALOG.to_document())


def test_loom_catalog_documents_are_valid_official_catalogs() -> None:
    document = CATALOG.to_document()
    assert schema_errors("catalog_definition.json", document) == []
    official.CatalogDefinition.model_validate(document)
    capabilities = {"v1.0": {"supportedCatalogIds": [], "inlineCatalogs": [document]}}
    assert schema_errors("renderer_capabilities.json", capabilities) == []


ACCEPTABLE: list[dict[str, Any]] = [
    {"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "e:1", "value": {"a": 1}}},
    {"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "e:1", "value": None}},
    {
        "version": "v1.0",
        "rendererFunctionResponse": {
            "functionCallId": "e:1",
            "error": {"code": "INVALID_FUNCTION_CALL", "message": "no"},
        },
    },
    {
        "version": "v1.0",
        "error": {"code": "EXECUTION_ERROR", "message": "boom", "functionCallId": "e:1"},
    },
    {
        "version": "v1.0",
        "error": {"code": "VALIDATION_FAILED", "surfaceId": "s", "path": "/a", "message": "x"},
    },
    {
        "version": "v1.0",
        "action": {
            "name": "submit",
            "surfaceId": "s",
            "sourceComponentId": "b",
            "timestamp": "2026-11-30T10:00:00Z",
            "context": {},
        },
    },
]

REFUSED: list[dict[str, Any]] = [
    {"version": "v0.9", "rendererFunctionResponse": {"functionCallId": "e:1", "value": 1}},
    {"rendererFunctionResponse": {"functionCallId": "e:1", "value": 1}},
    {"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "e:1"}},
    {
        "version": "v1.0",
        "rendererFunctionResponse": {"functionCallId": "e:1", "value": 1, "extra": True},
    },
    {
        "version": "v1.0",
        "rendererFunctionResponse": {
            "functionCallId": "e:1",
            "value": 1,
            "error": {"code": "x", "message": "y"},
        },
    },
    {"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "e:1", "error": {}}},
    {"version": "v1.0", "error": {"code": "X", "message": "m"}},
    {
        "version": "v1.0",
        "error": {"code": "X", "message": "m", "surfaceId": "s", "functionCallId": "e:1"},
    },
    {"version": "v1.0", "error": {"code": "VALIDATION_FAILED", "message": "m", "surfaceId": "s"}},
    {"version": "v1.0", "functionResponse": {"surfaceId": "s", "callId": "c", "name": "f"}},
    {"version": "v1.0", "action": {"name": "a", "surfaceId": "s"}},
    {
        "version": "v1.0",
        "rendererFunctionResponse": {"functionCallId": "e:1", "value": 1},
        "action": {},
    },
]


@pytest.mark.parametrize("wire", ACCEPTABLE + REFUSED, ids=lambda w: json.dumps(w)[:60])
def test_what_loom_accepts_the_official_schema_accepts(wire: dict[str, Any]) -> None:
    official_errors = schema_errors("renderer_to_agent.json", wire)
    try:
        parse_renderer_message(wire)
    except A2UIProtocolError:
        assert wire in REFUSED
        return
    assert official_errors == [], f"Loom accepted what the official schema refuses: {wire}"
    assert wire in ACCEPTABLE


@pytest.mark.parametrize("wire", ACCEPTABLE[:3], ids=["value", "null-value", "error"])
def test_accepted_replies_are_valid_to_the_official_models(wire: dict[str, Any]) -> None:
    official.RendererFunctionResponseMessage.model_validate(wire)
    assert parse_renderer_message(wire).to_wire() == wire


# -- end to end: a2ui-core's RpcHandler answers Loom over the WebSocket transport ------------


@pytest.fixture
async def renderer(
    tmp_path: Path,
) -> AsyncIterator[tuple[WebSocketCallFunctionTransport, DemoClient]]:
    transport = WebSocketCallFunctionTransport()
    port = await transport.start("127.0.0.1", 0)
    client = DemoClient(
        "http://127.0.0.1:9", f"ws://127.0.0.1:{port}", b"unused", tmp_path / "ledger.json"
    )
    try:
        yield transport, client
    finally:
        await client.aclose()
        await transport.aclose()


def rpc_app(transport: WebSocketCallFunctionTransport) -> Loom:
    app = Loom("rpc-tests")
    call_fn = register_a2ui_call_function(app, transport, 5.0)

    @app.flow("call")
    async def call(ctx: FlowContext, req: dict[str, Any]) -> Any:
        # No Loom-side catalog: what the renderer's official handler decides is final.
        return await call_client_function(
            ctx, call_fn, "checkout-1", req["name"], req.get("args"), catalog_id=CATALOG.catalog_id
        )

    return app


async def test_the_official_rpc_handler_answers_a_grain_b_step(
    renderer: tuple[WebSocketCallFunctionTransport, DemoClient],
) -> None:
    transport, client = renderer
    await client.connect("checkout-1")
    env = LoomTestEnv(rpc_app(transport))
    args = {"orderId": "A-7", "total": 12}
    result = await asyncio.wait_for(
        env.start("call", {"name": "confirmAndSubmit", "args": args}, execution_id="r1"), 10
    )
    assert result.status == "completed"
    assert result.output == client.ledger()["r1:1"]
    assert [c.functionCallId for c in client.received] == ["r1:1"]


async def test_a_call_the_catalog_keeps_from_agents_is_refused_by_the_renderer_as_a_step_failure(
    renderer: tuple[WebSocketCallFunctionTransport, DemoClient],
) -> None:
    transport, client = renderer
    await client.connect("checkout-1")
    env = LoomTestEnv(rpc_app(transport))
    result = await asyncio.wait_for(
        env.start("call", {"name": "openUrl", "args": {"url": "https://x"}}, execution_id="r2"),
        10,
    )
    assert result.status == "failed" and result.error is not None
    assert "INVALID_FUNCTION_CALL" in result.error["message"]
    assert "rendererOnly" in result.error["message"]
    failed = [e for e in await env.history("r2") if e.type == "EffectFailed"]
    assert len(failed) == 1 and failed[0].error.type == "ClientFunctionError"  # type: ignore[union-attr]
