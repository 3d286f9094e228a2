"""A2UI ``callFunction``: a client-side function called from a flow, deterministically.

No client-side replay runtime is needed: the client's answer re-enters the log as a recorded
fact — a resume payload (grain A) or an ``EffectCompleted`` output (grain B) — and replay
serves it from the fold without contacting the client (ADR 0070).

- Protocol models (:mod:`.protocol`) and :class:`A2UISurfaceBridge`, which stamps requests
  with its surface and the caller's call id and checks replies; it creates no Loom event.
- The catalog (:func:`define_function`, :class:`A2UICatalog`) validates arguments and results.
- Grain A (:mod:`.gate`): send, ``ctx.suspend(on="A2UIFunctionResult", correlation_key=callId)``;
  the application checks and delivers the reply with :func:`deliver_function_response`.
- Grain B (:mod:`.effect`): :func:`register_a2ui_call_function` registers the non-idempotent
  effect ``a2ui.callFunction`` over an :class:`A2UICallFunctionTransport`;
  :class:`WebSocketCallFunctionTransport` (``loom.plugins.a2ui.websocket``, needs the
  ``a2ui`` extra) is one.
"""

from loom.plugins.a2ui.auth import (
    ResumeAuthenticator,
    from_worker_authenticator,
    hmac_authenticator,
    sign_body,
)
from loom.plugins.a2ui.bridge import A2UISurfaceBridge
from loom.plugins.a2ui.catalog import A2UICatalog, CatalogFunctionSchema, define_function
from loom.plugins.a2ui.effect import (
    CALL_FUNCTION_EFFECT,
    A2UICallFunctionTransport,
    CallFunctionRequest,
    call_client_function,
    register_a2ui_call_function,
)
from loom.plugins.a2ui.errors import (
    A2UIError,
    A2UIProtocolError,
    A2UITimeoutError,
    CatalogValidationError,
    ClientFunctionError,
    CorrelationError,
    ResumeAuthenticationError,
)
from loom.plugins.a2ui.gate import (
    A2UI_FUNCTION_RESULT,
    SEND_EFFECT,
    A2UIMessageSender,
    SendCallFunction,
    deliver_function_response,
    gate_call_id,
    pending_function_calls,
    register_a2ui_sender,
    request_client_function,
)
from loom.plugins.a2ui.protocol import (
    A2UI_VERSION,
    ActionMessage,
    ActionPayload,
    CallFunctionMessage,
    CallFunctionPayload,
    ClientToServerMessage,
    CreateSurfaceMessage,
    DeleteSurfaceMessage,
    ErrorMessage,
    FunctionError,
    FunctionResponseMessage,
    FunctionResponsePayload,
    ServerToClientMessage,
    UpdateComponentsMessage,
    UpdateDataModelMessage,
    is_action,
    is_call_function,
    is_function_response,
    parse_client_message,
    parse_server_message,
)

__all__ = [
    "A2UI_FUNCTION_RESULT",
    "A2UI_VERSION",
    "CALL_FUNCTION_EFFECT",
    "SEND_EFFECT",
    "A2UICallFunctionTransport",
    "A2UICatalog",
    "A2UIError",
    "A2UIMessageSender",
    "A2UIProtocolError",
    "A2UISurfaceBridge",
    "A2UITimeoutError",
    "ActionMessage",
    "ActionPayload",
    "CallFunctionMessage",
    "CallFunctionPayload",
    "CallFunctionRequest",
    "CatalogFunctionSchema",
    "CatalogValidationError",
    "ClientFunctionError",
    "ClientToServerMessage",
    "CorrelationError",
    "CreateSurfaceMessage",
    "DeleteSurfaceMessage",
    "ErrorMessage",
    "FunctionError",
    "FunctionResponseMessage",
    "FunctionResponsePayload",
    "ResumeAuthenticationError",
    "ResumeAuthenticator",
    "SendCallFunction",
    "ServerToClientMessage",
    "UpdateComponentsMessage",
    "UpdateDataModelMessage",
    "call_client_function",
    "define_function",
    "deliver_function_response",
    "from_worker_authenticator",
    "gate_call_id",
    "hmac_authenticator",
    "is_action",
    "is_call_function",
    "is_function_response",
    "parse_client_message",
    "parse_server_message",
    "pending_function_calls",
    "register_a2ui_call_function",
    "register_a2ui_sender",
    "request_client_function",
    "sign_body",
]
