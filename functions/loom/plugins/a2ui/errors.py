"""Errors of the A2UI plugin, under :class:`~loom.errors.LoomError`.

The tree::

    A2UIError                        root of the plugin's errors
    ├── A2UIProtocolError            a message that is not the A2UI v1.0 message expected
    │                                (another version, malformed, another kind) (InputError)
    ├── CorrelationError             a reply for another call or surface, or for a call
    │                                nobody is waiting on (unsolicited, forged, late)
    │   └── LateReplyError           a reply to a call whose gate timed out (also a
    │                                GateTimedOutError: 409 ``gate_timed_out``)
    ├── CatalogValidationError       arguments or a result that fail the catalog's schema
    ├── ResumeAuthenticationError    a reply the configured authenticator refused
    ├── ClientFunctionError          the renderer answered with an error (or refused the call)
    └── A2UITimeoutError             the renderer did not answer within the request timeout

The first four are also :class:`~loom.errors.InputError`: they are raised on bad input from
a client, before anything is appended, so an HTTP layer answers them with a 4xx.
"""

from __future__ import annotations

from loom.errors import GateTimedOutError, InputError, LoomError


class A2UIError(LoomError):
    """Root of the A2UI plugin's errors."""

    code = "a2ui"


class A2UIProtocolError(A2UIError, InputError):
    """A message is malformed, or is not the kind of A2UI message expected."""

    code = "a2ui_protocol"


class CorrelationError(A2UIError, InputError):
    """A reply does not belong to the request it claims to answer.

    Raised for a reply to another call (or sent on another surface's connection), and for a
    reply to a call that is not awaiting one (never issued, or already answered).
    """

    code = "a2ui_correlation"


class LateReplyError(CorrelationError, GateTimedOutError):
    """A reply to a call whose gate timed out before it came: the timeout won.

    Refused as every route that resumes refuses a reply to a timed-out gate
    (``code="gate_timed_out"``, HTTP 409, ``details`` naming the gate and when it timed out),
    and still a :class:`CorrelationError` (``details["reason"] == "late"``).
    """

    code = "gate_timed_out"


class CatalogValidationError(A2UIError, InputError):
    """Arguments or a result fail the catalog's declared schema, or the function is unknown."""

    code = "a2ui_invalid"


class ResumeAuthenticationError(A2UIError, InputError):
    """The configured resume authenticator refused a reply."""

    code = "unauthenticated"


class ClientFunctionError(A2UIError):
    """The renderer refused the call, or ran the function and answered with an error."""

    code = "a2ui_client_error"


class A2UITimeoutError(A2UIError):
    """The renderer did not answer a ``callRendererFunction`` within the request timeout."""

    code = "a2ui_timeout"
