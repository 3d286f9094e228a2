"""A2UI v1.0 agent-initiated function calls: a renderer function called from a flow,
deterministically.

No renderer-side replay runtime is needed: the renderer's answer re-enters the log as a
recorded fact — a resume payload (grain A) or an ``EffectCompleted`` output (grain B) — and
replay serves it from the fold without contacting the renderer.

- Protocol models (:mod:`.protocol`, A2UI v1.0: ``callRendererFunction`` /
  ``rendererFunctionResponse``) and :class:`A2UISurfaceBridge`, which stamps requests with
  the catalog id and the caller's call id and checks replies; it creates no Loom event.
- The catalog (:func:`define_function`, :class:`A2UICatalog`) declares who may call each
  function (``allowedCallers``) and validates arguments and results; it writes the official
  v1.0 catalog document. :class:`RendererCapabilities` checks calls against what a renderer
  advertised.
- Grain A (:mod:`.gate`): send, ``ctx.suspend(on="A2UIFunctionResult",
  correlation_key=functionCallId)``; the application delivers the reply with
  :func:`deliver_function_response`, and every other route to the gate is checked the same.
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
from loom.plugins.a2ui.capabilities import RendererCapabilities
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
    LateReplyError,
    ResumeAuthenticationError,
)
from loom.plugins.a2ui.gate import (
    A2UI_FUNCTION_RESULT,
    SEND_EFFECT,
    A2UIMessageSender,
    SendCallFunction,
    SentCall,
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
    AgentToRendererMessage,
    CallRendererFunctionMessage,
    CallRendererFunctionPayload,
    CreateSurfaceMessage,
    DeleteSurfaceMessage,
    ErrorMessage,
    FunctionCall,
    FunctionResponse,
    FunctionResponseError,
    RendererFunctionResponseMessage,
    RendererToAgentMessage,
    UpdateComponentsMessage,
    UpdateDataModelMessage,
    function_outcome,
    is_action,
    is_call_renderer_function,
    is_function_response,
    parse_agent_message,
    parse_function_outcome,
    parse_renderer_message,
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
    "AgentToRendererMessage",
    "CallFunctionRequest",
    "CallRendererFunctionMessage",
    "CallRendererFunctionPayload",
    "CatalogFunctionSchema",
    "CatalogValidationError",
    "ClientFunctionError",
    "CorrelationError",
    "CreateSurfaceMessage",
    "DeleteSurfaceMessage",
    "ErrorMessage",
    "FunctionCall",
    "FunctionResponse",
    "FunctionResponseError",
    "LateReplyError",
    "RendererCapabilities",
    "RendererFunctionResponseMessage",
    "RendererToAgentMessage",
    "ResumeAuthenticationError",
    "ResumeAuthenticator",
    "SendCallFunction",
    "SentCall",
    "UpdateComponentsMessage",
    "UpdateDataModelMessage",
    "call_client_function",
    "define_function",
    "deliver_function_response",
    "from_worker_authenticator",
    "function_outcome",
    "gate_call_id",
    "hmac_authenticator",
    "is_action",
    "is_call_renderer_function",
    "is_function_response",
    "parse_agent_message",
    "parse_function_outcome",
    "parse_renderer_message",
    "pending_function_calls",
    "register_a2ui_call_function",
    "register_a2ui_sender",
    "request_client_function",
    "sign_body",
]
