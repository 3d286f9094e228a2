"""The example's catalog and flows: one client read (grain A), one client submission (grain B).

- ``profile.greet`` asks the client for its locale (``getLocale``) through a gate: the request
  goes down an SSE stream, the answer comes back in a signed POST and resumes the flow.
- ``checkout.submit`` asks the client to confirm and submit an order (``confirmAndSubmit``)
  as the non-idempotent effect ``a2ui.callFunction`` over WebSocket; the client dedups on
  the call id, and a crash mid-call leaves the step in doubt for an operator.

The transports are parameters, so the same flows can be replayed from their logs with
transports that refuse to be used (:func:`offline_app`).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from loom import FlowContext, Loom
from loom.plugins.a2ui import (
    A2UICallFunctionTransport,
    A2UICatalog,
    A2UIMessageSender,
    CallRendererFunctionMessage,
    call_client_function,
    define_function,
    register_a2ui_call_function,
    register_a2ui_sender,
    request_client_function,
)
from loom.plugins.a2ui.protocol import WireInput

CATALOG = A2UICatalog(
    [
        define_function(
            "getLocale",
            {"type": "object", "additionalProperties": False},
            {
                "type": "object",
                "properties": {
                    "locale": {"type": "string", "pattern": "^[a-z]{2}(-[A-Z]{2})?$"},
                    "timeZone": {"type": "string"},
                },
                "required": ["locale"],
                "additionalProperties": False,
            },
            description="The user's locale and time zone, as the renderer knows them.",
            allowed_callers="rendererOrAgent",
        ),
        define_function(
            "confirmAndSubmit",
            {
                "type": "object",
                "properties": {
                    "orderId": {"type": "string", "minLength": 1},
                    "total": {"type": "integer", "minimum": 0},
                },
                "required": ["orderId", "total"],
            },
            {
                "type": "object",
                "properties": {
                    "submissionId": {"type": "string", "minLength": 1},
                    "confirmed": {"type": "boolean"},
                },
                "required": ["submissionId", "confirmed"],
            },
            description="Ask the user to confirm, then submit the order from the renderer.",
            allowed_callers="agentOnly",
        ),
        define_function(
            "openUrl",
            {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
            {"type": "null"},
            description="Open a link; the renderer's own UI calls it, never an agent.",
            allowed_callers="rendererOnly",
        ),
    ],
    catalog_id="example.com:a2ui-callfunction/v1",
)

GREETINGS = {"fr": "Bonjour", "de": "Guten Tag", "es": "Hola", "ja": "Konnichiwa"}


class GreetRequest(BaseModel):
    """Whom to greet: the surface whose client we ask."""

    surface_id: str


class Greeting(BaseModel):
    """A greeting in the client's language."""

    locale: str
    greeting: str


class Order(BaseModel):
    """An order to submit from the client."""

    surface_id: str
    order_id: str
    total: int


class Submitted(BaseModel):
    """What the client's submission answered."""

    order_id: str
    submission_id: str
    confirmed: bool


def build_app(
    sender: A2UIMessageSender, transport: A2UICallFunctionTransport, request_timeout: float = 10.0
) -> Loom:
    """The example's app, its client calls going out through ``sender`` and ``transport``."""
    app = Loom("a2ui-callfunction")
    send = register_a2ui_sender(app, sender, catalogs=[CATALOG])
    call_fn = register_a2ui_call_function(app, transport, request_timeout, catalog=CATALOG)

    @app.flow("profile.greet")
    async def greet(ctx: FlowContext, req: GreetRequest) -> Greeting:
        answer = await request_client_function(
            ctx, send, req.surface_id, "getLocale", catalog=CATALOG, timeout=timedelta(minutes=5)
        )
        locale: str = answer["locale"]
        return Greeting(locale=locale, greeting=GREETINGS.get(locale[:2], "Hello"))

    @app.flow("checkout.submit")
    async def submit(ctx: FlowContext, order: Order) -> Submitted:
        result = await call_client_function(
            ctx,
            call_fn,
            order.surface_id,
            "confirmAndSubmit",
            {"orderId": order.order_id, "total": order.total},
            catalog=CATALOG,
        )
        return Submitted(
            order_id=order.order_id,
            submission_id=result["submissionId"],
            confirmed=result["confirmed"],
        )

    return app


class _Offline(A2UIMessageSender, A2UICallFunctionTransport):
    """Stands in for both transports when nothing may reach a client."""

    async def send(
        self, execution_id: str, surface_id: str, message: CallRendererFunctionMessage
    ) -> None:
        raise AssertionError(f"replay tried to contact the renderer: {message.to_json()}")

    async def call(self, surface_id: str, message: CallRendererFunctionMessage) -> WireInput:
        raise AssertionError(f"replay tried to contact the renderer: {message.to_json()}")


def offline_app() -> Loom:
    """The same flows with transports that fail if used: for replaying logs."""
    offline = _Offline()
    return build_app(offline, offline)
