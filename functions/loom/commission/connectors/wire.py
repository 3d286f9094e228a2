"""The Connectors ``v1alpha2`` wire format (ADR 0009) and the exact mapping of its answers.

Describe: ``GET {url}/v1alpha2/describe`` answers 200 with::

    {"api": "v1alpha2", "instance": "github-main",
     "operations": {"issues.comment.create": {"profile": "mutation"},
                    "issues.get": {"profile": "query"}}}

Invoke: ``POST {url}/v1alpha2/invoke`` with :class:`InvokeCall`; the service answers 200 with
:class:`InvokeAnswer` for every invocation it processed, success or error. Any other status
is a protocol failure.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictBool

from loom.commission.connectors.config import Effect
from loom.commission.errors import ConnectorError
from loom.commission.ports import EffectOutcome, Performed, Refused

API_VERSION = "v1alpha2"
DESCRIBE_PATH = f"/{API_VERSION}/describe"
INVOKE_PATH = f"/{API_VERSION}/invoke"
MUTATION_PROFILE = "mutation"
REFUSED_ATTEMPTS = frozenset({"refused", "not_attempted"})


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class OperationDescription(_Wire):
    """One operation as the service describes it; ``mutation`` means it writes."""

    profile: str

    @property
    def effect(self) -> Effect:
        """The effect the service describes."""
        return Effect.WRITE if self.profile == MUTATION_PROFILE else Effect.READ


class Description(_Wire):
    """The answer to describe."""

    api: str
    instance: str
    operations: dict[str, OperationDescription] = Field(default_factory=dict)


class InvokeCall(_Wire):
    """The body of ``POST /v1alpha2/invoke``.

    Attributes:
        instance: The instance the caller means (the service refuses another).
        operation: The operation to invoke.
        input: Its JSON input.
        idempotency_key: The Commission request id, the same for every invocation of it.
        context: Commission, case, revision and action, for the service's audit.
    """

    instance: str
    operation: str
    input: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])
    idempotency_key: str
    context: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class Attempt(_Wire):
    """The attempt the service recorded: ``performed``, ``refused``, ``not_attempted``, ..."""

    id: str = Field(min_length=1)
    status: str


class AuditRecord(_Wire):
    """The service's audit record of the call.

    ``complete`` must be the JSON boolean ``true``: ``"true"``, ``1`` or ``"yes"`` is a
    protocol failure, not a complete record (lax coercion would turn a malformed answer
    into a Performed read).
    """

    id: str = Field(min_length=1)
    complete: StrictBool


class WireError(_Wire):
    """An error the service reports."""

    code: str
    message: str = ""


class InvokeAnswer(_Wire):
    """The body of the service's 200 answer to invoke."""

    outcome: str
    output: JsonValue = None
    attempt: Attempt | None = None
    audit: AuditRecord | None = None
    error: WireError | None = None


def _err(reason: str, message: str, answer: InvokeAnswer) -> ConnectorError:
    return ConnectorError(message, reason=reason, details={"answer": answer.model_dump()})


def _success(answer: InvokeAnswer, effect: Effect) -> Performed:
    audit = answer.audit
    if effect is Effect.WRITE:
        if answer.attempt is None:
            raise _err("write_without_attempt", "a write succeeded naming no attempt", answer)
        if answer.attempt.status != "performed":
            status = answer.attempt.status
            raise _err(
                "attempt_not_performed", f"a write succeeded with a {status} attempt", answer
            )
        detail: dict[str, JsonValue] = {
            "output": answer.output,
            "audit": audit.id if audit is not None else None,
        }
        return Performed(what="connectors.attempt", ref=answer.attempt.id, detail=detail)
    if answer.attempt is not None:
        raise _err("read_with_attempt", "a read succeeded with an attempt", answer)
    if audit is None or not audit.complete:
        raise _err("audit_incomplete", "a read succeeded without a complete audit record", answer)
    return Performed(what="connectors.audit_record", ref=audit.id, detail={"output": answer.output})


def _error(answer: InvokeAnswer) -> Refused:
    attempt = answer.attempt
    if attempt is None:
        raise _err("error_without_attempt", "an error without a recorded attempt", answer)
    if attempt.status not in REFUSED_ATTEMPTS:
        raise _err(
            "attempt_" + attempt.status, f"an error whose attempt is {attempt.status}", answer
        )
    error = answer.error or WireError(code=attempt.status)
    return Refused(
        reason=error.code,
        detail={"attempt": attempt.id, "attempt_status": attempt.status, "message": error.message},
    )


def map_answer(answer: InvokeAnswer, effect: Effect) -> EffectOutcome:
    """Map the service's answer exactly as the Connectors table does.

    | the service answers                                   | the result                 |
    | a write's success, with the attempt it recorded       | Performed, naming it       |
    | a read's success, no attempt, audit record complete   | Performed, naming the record |
    | an error whose attempt is refused or not_attempted    | Refused                    |
    | anything else                                         | ConnectorError (Err)       |

    Raises:
        ConnectorError: Every "anything else" row.
    """
    if answer.outcome == "success":
        return _success(answer, effect)
    if answer.outcome == "error":
        return _error(answer)
    raise _err("unknown_outcome", f"the service answered outcome {answer.outcome!r}", answer)
