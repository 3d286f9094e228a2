"""The wire contract between dispatchers and workers: ``ExecutionPackage`` in,
``ExecutionResult`` out. Both round-trip through JSON unchanged, so a remote worker's answer
compares equal to an in-process one modulo ids and timestamps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from loom.events import unvalidated
from loom.ids import ExecutionId

if TYPE_CHECKING:
    from loom.kernel.state import ExecutionState

Reason = Literal["start", "resume", "timer", "verdict", "sweep", "manual"]
M = TypeVar("M", bound=BaseModel)


def known_valid(cls: type[M], fields: dict[str, Any]) -> M:
    """A model of ``fields``: every field of ``cls``, in its order, with values the engine
    made and knows valid (no aliases, no extras, no private attributes on ``cls``).

    What validating them gives (tests pin the two), for a third of the cost, on the path
    every execution takes: :func:`loom.events.unvalidated`, every field given.
    """
    return unvalidated(cls, fields, set(fields))


class ExecutionPackage(BaseModel):
    """What a worker needs to run one ``execute`` call: which execution, and why.

    The worker keeps no state between calls; it rebuilds the execution from the store.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: ExecutionId
    flow: str | None = None
    reason: Reason = "manual"
    dispatch_id: str | None = None


class WaitingGate(BaseModel):
    """A gate or timer the execution waits on."""

    step_id: str
    on: str
    correlation_key: str
    wake_at: float | None = None


class InDoubtStep(BaseModel):
    """A non-idempotent step whose outcome is unknown, awaiting an operator verdict."""

    step_id: str
    effect: str
    idempotency_key: str | None = None
    started_at: float | None = None
    episode: int | None = None


# Where a result keeps what its ``state`` will be built from until then: a key of the
# instance's ``__dict__`` that is no field (a private attribute would cost every result,
# the many that never had a ``state`` to build included, a few microseconds).
_FOLDED = "_loom_unbuilt_state"


class ExecutionResult(BaseModel):
    """Where an execution stands after an ``execute`` call (or any control call)."""

    # (The docstring is the wire schema's description: keep it as it is.) ``state``, every
    # field of the folded state, is built when it is first read, compared, printed or
    # serialized, not when the result is made: most callers never look at it, and building
    # it cost more than the rest of the result. Whoever looks sees the dict it would have
    # been when made.

    model_config = ConfigDict(extra="forbid")

    execution_id: str
    flow: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None
    last_seq: int
    wake_at: float | None = None
    waiting_on: list[WaitingGate] = Field(default_factory=list[WaitingGate])
    in_doubt: list[InDoubtStep] = Field(default_factory=list[InDoubtStep])
    parked_reason: str | None = None
    meter: dict[str, Any] = Field(default_factory=dict[str, Any])
    state: dict[str, Any] = Field(default_factory=dict[str, Any])

    @classmethod
    def from_state(
        cls, state: ExecutionState, *, include_state: bool = True, settled: bool = False
    ) -> ExecutionResult:
        """Summarize a folded state.

        Args:
            state: The state.
            include_state: Whether the result shows every field of the state as ``state``.
            settled: Nothing changes ``state`` any more (its caller drops it): ``state`` is
                then built from it as it is when first read, without taking a copy of its
                small fields now.
        """
        waiting = (
            [
                WaitingGate(
                    step_id=sid,
                    on=g["on"],
                    correlation_key=g["correlation_key"],
                    wake_at=g["wake_at"],
                )
                for sid, g in state.open_gates().items()
            ]
            if state.status == "suspended"
            else []
        )
        doubts = (
            [
                InDoubtStep(
                    step_id=sid,
                    effect=state.steps[sid].get("effect", "?"),
                    idempotency_key=state.steps[sid].get("idempotency_key"),
                    started_at=state.steps[sid].get("started_at"),
                    episode=state.steps[sid].get("episode"),
                )
                for sid in state.in_doubt
            ]
            if state.in_doubt
            else []
        )  # (most are not in doubt: no comprehension to run)
        error = state.error
        fields: dict[str, Any] = {  # (the fold made them: no validation, see ``known_valid``)
            "execution_id": state.execution_id,
            "flow": state.flow,
            "status": state.status,
            "output": state.output,
            "error": None if error is None else dict(error),  # (as validating copies it)
            "last_seq": state.last_seq,
            "wake_at": state.next_wake_at() if state.status == "suspended" else None,
            "waiting_on": waiting,
            "in_doubt": doubts,
            "parked_reason": state.parked_reason,
            "meter": state.meter.__dict__.copy(),
            "state": {},
        }
        result = known_valid(cls, fields)
        if include_state:
            # The small fields are copied now, the step records (shared with the state, as
            # ever) parsed later: what ``state`` shows is what it would have shown at once.
            fields = _fields(result)
            del fields["state"]
            fields[_FOLDED] = (None if settled else state.head_json(), state)
        return result

    def _build_state(self) -> None:
        fields = _fields(self)
        folded: tuple[bytes | None, ExecutionState] | None = fields.pop(_FOLDED, None)
        if folded is not None and "state" not in fields:  # (not assigned meanwhile)
            fields["state"] = folded[1].to_dict(folded[0])

    if not TYPE_CHECKING:  # (pydantic hides its own ``__getattr__`` from type checkers)

        def __getattr__(self, name: str) -> Any:
            if name == "state" and _FOLDED in self.__dict__:
                self._build_state()
                return self.__dict__["state"]
            return super().__getattr__(name)

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):
        # Unannotated on purpose: an annotation would become the wire schema of the result.
        self._build_state()
        return handler(self)

    def __eq__(self, other: object) -> bool:
        self._build_state()
        if isinstance(other, ExecutionResult):
            other._build_state()
        return super().__eq__(other)

    def __iter__(self) -> Any:
        self._build_state()
        return super().__iter__()

    def __repr_args__(self) -> Any:
        self._build_state()
        return super().__repr_args__()


def _fields(model: BaseModel) -> dict[str, Any]:
    """A model's field values, as the writable dict they are (typed as read-only)."""
    return model.__dict__  # pyright: ignore[reportReturnType]  # (not ``cast``: a call per result)
