"""The HTTP worker's request and response models; the OpenAPI document is generated from
these, and :mod:`loom.workers.http_routes` parses request bodies into them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from loom.events import Event
from loom.ids import ExecutionId
from loom.wire import ExecutionPackage, ExecutionResult


class ExecuteRequest(BaseModel):
    """``POST /execute``: one execute call (ADR 0002)."""

    model_config = ConfigDict(extra="forbid")

    executionPackage: ExecutionPackage  # camelCase: the wire name fixed by ADR 0002


class StartRequest(BaseModel):
    """``POST /executions``: start a flow; idempotent by ``execution_id``."""

    # The route refuses a partition key without a queue (400); the schema says so too.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "dependentRequired": {
                k: ["queue"]
                for k in ("partition_key", "priority", "deduplication_id", "delay", "queue_timeout")
            }
        },
    )

    flow: str = Field(min_length=1, max_length=256)
    input: Any = None
    execution_id: ExecutionId | None = None
    capabilities: list[str] = Field(
        default_factory=list[str],
        max_length=256,
        description="Asked for, granted only if the caller may grant them (the grant policy).",
    )
    version: Annotated[str, Field(min_length=1, max_length=64)] | StrictInt | None = Field(
        default=None, description="The flow version to start; default: the latest"
    )
    queue: str | None = Field(
        default=None, min_length=1, max_length=200, description="A declared queue to run on"
    )
    partition_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="With queue: executions of one key run one at a time",
    )
    priority: StrictInt | None = Field(
        default=None, ge=0, le=2**31 - 1, description="With queue: lower is granted first"
    )
    deduplication_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="With queue: refused (409 queue_deduplicated) while an execution started "
        "with it is queued or running",
    )
    delay: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="With queue: seconds before it may be admitted",
    )
    queue_timeout: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="With queue: seconds it may run from when the queue first admits it",
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds from the start, more than 0 and finite; overrides the flow's",
    )
    limits: dict[str, StrictInt | float] | None = Field(
        default=None,
        max_length=16,
        description="The execution's limits (max_events, max_runs, max_children, "
        "max_messages) and effect budgets (max_effect_calls, max_attempts, "
        "max_effect_seconds, max_bytes_stored): lower than the flow's own always, higher "
        "only as far as the grant policy lets the caller raise them.",
    )


class ResumeRequest(BaseModel):
    """``POST /executions/{id}/resume``: deliver a resume to a gate (buffered if early)."""

    model_config = ConfigDict(extra="forbid")

    on: str = Field(min_length=1, max_length=256)
    correlation_key: str = Field(min_length=1, max_length=1024)
    payload: Any = None


class VerdictRequest(BaseModel):
    """``POST /executions/{id}/verdict``: resolve an in-doubt step."""

    model_config = ConfigDict(extra="forbid")

    step_id: str = Field(min_length=1, max_length=256)
    episode: int = Field(
        ge=1,
        description="The seq of the EffectInDoubt this verdict settles (the execution's "
        "in_doubt[].episode); a verdict for another or a settled episode is refused (409).",
    )
    verdict: Literal["performed", "not_performed", "failed"]
    output: Any = None
    error: str | None = Field(default=None, max_length=4096)
    by: str | None = Field(default=None, min_length=1, max_length=256)


class ErrorBody(BaseModel):
    """The JSON error body of every non-2xx answer."""

    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict[str, Any])


class Health(BaseModel):
    """``GET /health``: readiness (the app loads, the store answers in time)."""

    healthy: bool
    version: str
    error: ErrorBody | None = None


class Liveness(BaseModel):
    """``GET /live``: the process answers HTTP (checks nothing else)."""

    alive: bool
    version: str


class ExecutionView(BaseModel):
    """``GET /executions/{id}``: where the execution stands, and its events."""

    execution: ExecutionResult
    history: list[Event] = Field(default_factory=list[Event])
    runs: list[dict[str, Any]] = Field(
        default_factory=list[dict[str, Any]],
        description="The chain of runs (continue-as-new), oldest first, with the history "
        "(in a page of it: the runs the page's events belong to, where the page says)",
    )
    next_after: int | None = Field(
        default=None,
        description="More events follow: ask again with ?after= this seq (the history is "
        "paged, at most ?limit= events a page)",
    )
