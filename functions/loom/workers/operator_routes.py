"""What the operator's routes on one execution share (verdict, retry, cancel, fork): the
id checked, the verdict authenticator's approval, the body, and who acts; and the verdict
route itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from loom.grants import recorded_by
from loom.ids import check_execution_id
from loom.workers.auth import Action
from loom.workers.http_base import (
    Reply,
    Request,
    Services,
    authorize,
    bind,
    bind_result,
    parse_json,
    parse_model,
    read_body,
    run,
)
from loom.workers.http_models import VerdictRequest


@dataclass(frozen=True)
class OperatorCall:
    """An operator's request on one execution (verdict, retry, cancel, fork), checked.

    Attributes:
        execution_id: The execution in the path.
        body: The parsed body.
        principal: Who the checks authenticated: the only authority the call carries.
        note: The body's ``by``, free text recorded beside the principal, authorizing
            nothing.
    """

    execution_id: str
    body: Any
    principal: str
    note: str | None = None
    raw: bytes = b""

    @property
    def by(self) -> str:
        """What the log records as who acted: ``"{note} (via {principal})"``, or the
        principal."""
        return recorded_by(self.principal, self.note) or self.principal


def operator_call(
    s: Services,
    request: Request,
    args: Sequence[str],
    action: Action,
    model: type[BaseModel],
    *,
    optional: bool = False,
) -> OperatorCall:
    """Check the id, authorize ``action`` with the verdict authenticator and parse the body
    (``model()`` when ``optional`` and the body is empty): what every operator route reads
    before it acts."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    raw = read_body(request, s.max_body)
    principal = authorize(s.verdict_auth, action, execution_id, request, raw)
    empty = optional and not raw.strip()
    body = model() if empty else parse_model(model, parse_json(request, raw))
    return OperatorCall(execution_id, body, principal, getattr(body, "by", None), raw)


def verdict(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/verdict``: authorized, recorded with who gave it."""
    call = operator_call(s, request, args, "verdict", VerdictRequest)
    body: VerdictRequest = call.body
    bind(step_id=body.step_id, episode=body.episode)
    result = run(
        s.runtime.verdict(
            call.execution_id,
            body.step_id,
            body.verdict,
            output=body.output,
            error=body.error,
            by=call.by,
            episode=body.episode,
        )
    )
    bind_result(result)
    return 200, result
