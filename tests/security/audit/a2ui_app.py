"""An app asking a renderer for its locale through an A2UI grain-A gate
(``LOOM_APP=tests.security.audit.a2ui_app:app``). The sender only counts what it would send:
the tests read each call's id from the gate the flow waits on, as a renderer's reply names
it."""

from __future__ import annotations

from loom import FlowContext, Loom
from loom.plugins.a2ui import (
    A2UICatalog,
    A2UIMessageSender,
    CallRendererFunctionMessage,
    define_function,
    register_a2ui_sender,
    request_client_function,
)

CATALOG = A2UICatalog(
    [
        define_function(
            "getLocale",
            None,
            {
                "type": "object",
                "properties": {"locale": {"type": "string", "minLength": 2, "maxLength": 35}},
                "required": ["locale"],
                "additionalProperties": False,
            },
        )
    ],
    catalog_id="example.com:audit/v1",
)


class QuietSender(A2UIMessageSender):
    """Sends nothing (the renderer is the test itself); counts the requests."""

    sent = 0

    async def send(
        self, execution_id: str, surface_id: str, message: CallRendererFunctionMessage
    ) -> None:
        QuietSender.sent += 1


app = Loom("a2ui-audit")
send = register_a2ui_sender(app, QuietSender(), catalogs=[CATALOG])


@app.flow("locale")
async def locale(ctx: FlowContext, surface: str) -> object:
    """The renderer's locale, validated against the catalog."""
    return await request_client_function(ctx, send, surface, "getLocale", catalog=CATALOG)
