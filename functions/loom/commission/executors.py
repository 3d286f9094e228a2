"""Executors: whatever works a case, one step at a time, and ends each step with an outcome.

An executor receives a :class:`~loom.commission.model.StepInput` (plain data: no effect port,
no connector handle, no credential) and returns an
:data:`~loom.commission.outcomes.ExecutorOutcome`. It invokes nothing. Three adapters:

* :class:`CallableExecutor`: a plain function, sync or async.
* :class:`HumanToolExecutor`: a person deciding through a tool.
* :class:`FlowExecutor`: a Loom flow, one durable execution per step.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from loom.commission.errors import ExecutorError
from loom.commission.model import StepInput
from loom.commission.outcomes import (
    ExecutorOutcome,
    NeedsHumanJudgment,
    Suspended,
    parse_outcome,
)
from loom.errors import NotPermittedError


class Executor(abc.ABC):
    """Works a case one step at a time.

    Contract: ``step`` returns exactly one outcome and has no effect on the world that the
    case depends on; everything that needs an effect is proposed (``ProposedAction``), also
    when it needs authority. It may raise; the runtime then stops with ``error``. Called again
    with the same ``StepInput`` (after a crash), it should answer the same way.
    """

    @abc.abstractmethod
    async def step(self, step: StepInput) -> ExecutorOutcome:
        """End one step with an outcome."""


class CallableExecutor(Executor):
    """A plain function as an executor.

    Args:
        fn: Takes the step input, returns an outcome (or its JSON form), sync or async.
    """

    def __init__(self, fn: Callable[[StepInput], object | Awaitable[object]]) -> None:
        self._fn = fn

    async def step(self, step: StepInput) -> ExecutorOutcome:
        result = self._fn(step)
        if inspect.isawaitable(result):
            result = await result
        return parse_outcome(result)


class HumanToolExecutor(Executor):
    """A person works the case through a tool that records their decisions.

    The tool calls :meth:`submit` with the person's outcome for a case revision; the next step
    on that revision returns it, once. Until then the step is ``Suspended`` on ``human.tool``
    with the correlation key ``{case_id}:{revision}``.
    """

    WAITING_ON = "human.tool"

    def __init__(self) -> None:
        self._decisions: dict[tuple[str, int], ExecutorOutcome] = {}

    def submit(self, case_id: str, revision: int, outcome: ExecutorOutcome) -> None:
        """Record the person's decision for ``case_id`` at ``revision``."""
        self._decisions[(case_id, revision)] = outcome

    async def step(self, step: StepInput) -> ExecutorOutcome:
        decision = self._decisions.pop((step.case_id, step.revision), None)
        if decision is not None:
            return decision
        return Suspended(
            waiting_on=self.WAITING_ON,
            correlation_key=f"{step.case_id}:{step.revision}",
            reason="waiting for a person's decision",
        )


class ExecutionResultLike(Protocol):
    """What :class:`FlowExecutor` reads of a Loom ``ExecutionResult``."""

    @property
    def status(self) -> str:
        """``running``, ``suspended``, ``in_doubt``, ``completed``, ``failed`` or ``cancelled``."""
        ...

    @property
    def output(self) -> Any:
        """The flow's JSON output, when completed."""
        ...


class FlowRuntime(Protocol):
    """What :class:`FlowExecutor` needs of a Loom runtime: an idempotent ``start``."""

    async def start(
        self,
        flow: str,
        input: Any,
        /,
        *,
        execution_id: str,
        capabilities: frozenset[str] = ...,
        by: str | None = ...,
    ) -> ExecutionResultLike:
        """Start (or find) an execution as ``by`` and run it until it blocks.

        Raises:
            NotPermittedError: ``by`` may not grant ``capabilities`` (the runtime's policy).
        """
        ...


class FlowExecutor(Executor):
    """A Loom flow as an executor: each step is one durable execution of the flow.

    The execution id is ``{case_id}:{revision}:{step}``, so asking again for the same step
    (after a crash, or after a suspended execution was resumed) finds the same execution
    instead of starting a second one. The flow receives the step input as JSON and returns an
    outcome (a model or its JSON form). The execution's status maps to:

    * ``completed``: the outcome it returned (anything else is an :class:`ExecutorError`);
    * ``suspended`` or ``running``: ``Suspended(waiting_on="loom.execution")`` keyed by the
      execution id: resume the execution, then run the case again;
    * ``in_doubt``: ``NeedsHumanJudgment``: an operator's verdict on the execution is needed;
    * ``failed`` or ``cancelled``: :class:`ExecutorError`, which stops the run with ``error``.

    The runtime rechecks authority: each start names ``principal``, and the Loom runtime's
    grant policy decides whether that principal may grant ``capabilities`` to the flow. A
    start it refuses is an :class:`ExecutorError` (``not_permitted``) and nothing is written.

    Args:
        runtime: A Loom runtime (``loom.runtime.Runtime``).
        flow_name: The registered flow.
        capabilities: What each execution should hold (granted only per the policy).
        principal: Who the executor starts executions as.
    """

    WAITING_ON = "loom.execution"

    def __init__(
        self,
        runtime: FlowRuntime,
        flow_name: str,
        *,
        capabilities: frozenset[str] = frozenset(),
        principal: str = "commission",
    ) -> None:
        self._runtime = runtime
        self._flow = flow_name
        self._capabilities = frozenset(capabilities)
        self._principal = principal

    @staticmethod
    def execution_id(step: StepInput) -> str:
        """The deterministic execution id of a step."""
        return f"{step.case_id}:{step.revision}:{step.step}"

    async def step(self, step: StepInput) -> ExecutorOutcome:
        execution_id = self.execution_id(step)
        try:
            result = await self._runtime.start(
                self._flow,
                step.model_dump(mode="json"),
                execution_id=execution_id,
                capabilities=self._capabilities,
                by=self._principal,
            )
        except NotPermittedError as exc:
            raise ExecutorError(exc.message, details={**exc.details, "code": exc.code}) from exc
        status = str(result.status)
        if status == "completed":
            return parse_outcome(result.output)
        if status in ("suspended", "running"):
            return Suspended(
                waiting_on=self.WAITING_ON,
                correlation_key=execution_id,
                reason=f"execution {execution_id!r} is {status}",
            )
        if status == "in_doubt":
            return NeedsHumanJudgment(
                question=f"execution {execution_id!r} has an effect in doubt: give a verdict",
                context={"execution_id": execution_id},
            )
        error = getattr(result, "error", None)
        raise ExecutorError(
            f"execution {execution_id!r} of flow {self._flow!r} is {status}: {error}",
            details={"execution_id": execution_id, "status": status},
        )
