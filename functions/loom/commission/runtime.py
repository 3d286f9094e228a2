"""The Commission runtime: executors propose, the runtime rechecks and invokes.

One iteration of :meth:`CommissionRuntime.run_until_blocked`:

1. If a request is pending (the port answered ``Pending``), revalidate it against the case as
   it is now and append the verdict at exactly the seq the recheck read: the intent record
   ``RequestReinvoked`` (then invoke it again) or the refusal. A revision change during the
   check, or another runner re-invoking it first, makes the append conflict, and the
   request is rechecked on a fresh read; the executor is not asked.
2. Otherwise ask the executor for one step. A proposal is rechecked (commission assigned,
   revision unchanged, action on the frontier, a port performs it, authority grants it) on a
   fresh read of the case. The admission is appended as an intent record at exactly the seq
   the recheck read, so nothing can change the case between the recheck and the effect
   unseen. Then the port is invoked once.
3. The port's answer is recorded: ``Performed`` moves the case to the next revision;
   ``Pending`` keeps the request open; ``Refused`` is recorded with its reason; an error is
   recorded and stops the run. Refusals by the recheck are recorded too.

The run stops, and says why, when the executor needs a human, is suspended or sees nothing
useful to do, on an error, when the commission is not assigned (draft or closed), when a
request is in doubt (admitted with no recorded answer: in flight elsewhere or interrupted;
see :meth:`CommissionRuntime.resolve`), when another runner took the step, or after
``max_iterations``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence

from loom.commission.admission import (
    Admission,
    AdmittedRequest,
    Proposal,
    Refusal,
    _issue_key,  # pyright: ignore[reportPrivateUsage]  # (the one caller: this runtime)
)
from loom.commission.authority import AuthorityProvider
from loom.commission.errors import CaseConflictError, CommissionError, EffectError
from loom.commission.events import (
    CaseEvent,
    CaseState,
    EffectErrored,
    EffectPending,
    EffectPerformed,
    ExecutorStepped,
    OpenRequest,
    RequestAdmitted,
    RequestRefused,
    RequestReinvoked,
)
from loom.commission.executors import Executor
from loom.commission.model import RequestRecord, is_assigned
from loom.commission.outcomes import (
    CaseMoved,
    CompletedLocalReasoning,
    NeedsHumanJudgment,
    NoUsefulAction,
    ProposedAction,
    Suspended,
    parse_outcome,
)
from loom.commission.ports import EffectPort, Pending, Performed, Refused
from loom.commission.report import RunLog, RunReport, error_info
from loom.commission.store import CaseStore
from loom.errors import LoomError

FrontierRule = Callable[[CaseState, RequestRecord, Performed], Iterable[str]]
"""The frontier of the revision a performed request moves the case to."""

_RETRIES = 5


def keep_frontier(case: CaseState, request: RequestRecord, performed: Performed) -> Iterable[str]:
    """The default :data:`FrontierRule`: the frontier stays as it is."""
    return case.frontier


def _checked(answer: object) -> Performed | Pending | Refused:
    """A port's answer, if it is an effect outcome (a port bug is an effect error)."""
    if isinstance(answer, Performed | Pending | Refused):
        return answer
    raise EffectError(f"the effect port answered {answer!r}", reason="bad_answer")


class CommissionRuntime:
    """Runs executors on cases and invokes what it admits through effect ports.

    Args:
        cases: Where cases live.
        ports: The embedder's effect ports; the first that performs an action is used.
        authority: Asked before every invocation.
        advance: The frontier after a performed request (default: unchanged).
        sleep: Waits before a pending request is invoked again (injectable for tests).
        max_iterations: Default bound on iterations per run.
    """

    def __init__(
        self,
        cases: CaseStore,
        ports: Sequence[EffectPort],
        authority: AuthorityProvider,
        *,
        advance: FrontierRule = keep_frontier,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_iterations: int = 100,
    ) -> None:
        self._cases = cases
        self._ports = tuple(ports)
        # The mint key lives only inside this runtime's Admission: nobody else can admit.
        self._admission = Admission(
            authority, lambda action: self._port_for(action) is not None, _issue_key(self)
        )
        self._advance = advance
        self._sleep = sleep
        self._max_iterations = max_iterations

    def _port_for(self, action: str) -> EffectPort | None:
        return next((port for port in self._ports if port.performs(action)), None)

    async def run_until_blocked(
        self, case_id: str, executor: Executor, *, max_iterations: int | None = None
    ) -> RunReport:
        """Step ``executor`` on the case and invoke what is admitted, until something blocks.

        Raises:
            CaseNotFoundError: No such case.
        """
        run = RunLog(case=await self._cases.load(case_id))
        limit = max_iterations or self._max_iterations
        while run.iterations < limit:
            run.iterations += 1
            try:
                report = await self._iterate(run, executor)
            except LoomError as exc:  # the store failed or the case kept moving
                return run.stop("error", f"{type(exc).__name__}: {exc}", error_info(exc))
            if report is not None:
                return report
        return run.stop("iteration_limit", f"stopped after {limit} iterations")

    async def _iterate(self, run: RunLog, executor: Executor) -> RunReport | None:
        run.case = await self._cases.refresh(run.case)
        opened = run.case.open_request
        if opened is None:
            if not is_assigned(run.case.commission):
                kind = run.case.commission.state.kind
                return run.stop("not_assigned", f"the commission is {kind}: nobody works the case")
            return await self._step(run, executor)
        if opened.status == "admitted":
            return run.stop(
                "in_doubt",
                f"request {opened.request.request_id!r} was admitted and has no recorded "
                "answer: it is in flight elsewhere or was interrupted; resolve it",
            )
        return await self._reinvoke(run, opened)

    async def _step(self, run: RunLog, executor: Executor) -> RunReport | None:
        step_input = run.case.step_input()
        try:
            outcome = parse_outcome(await executor.step(step_input))
        except Exception as exc:
            return run.stop("error", f"the executor failed: {exc}", error_info(exc))
        run.outcome = outcome
        stepped = ExecutorStepped(
            step=step_input.step, revision=step_input.revision, outcome=outcome
        )
        if isinstance(outcome, ProposedAction):
            return await self._propose(run, stepped, outcome)
        if not await self._record_step(run, stepped):
            return run.stop("superseded", f"step {stepped.step} was taken by another runner")
        match outcome:
            case NeedsHumanJudgment(question=question):
                return run.stop("needs_human", question)
            case Suspended(waiting_on=waiting_on, correlation_key=key):
                return run.stop("suspended", f"waiting on {waiting_on} ({key})")
            case NoUsefulAction():
                return run.stop("no_useful_action", "the executor sees nothing useful to do")
            case CompletedLocalReasoning() | CaseMoved():
                return None

    @staticmethod
    def _taken(case: CaseState, stepped: ExecutorStepped) -> bool:
        """Whether another runner recorded this step, or holds a request, since it began."""
        return case.steps + 1 != stepped.step or case.open_request is not None

    async def _record_step(self, run: RunLog, stepped: ExecutorStepped) -> bool:
        """Record a step that proposed nothing; ``False`` if another runner took the step."""
        for _ in range(_RETRIES):
            if self._taken(run.case, stepped):
                return False
            try:
                run.case = await self._cases.append(run.case, [stepped])
                return True
            except CaseConflictError:
                run.case = await self._cases.refresh(run.case)
        raise CaseConflictError(f"case {run.case.case_id!r} kept moving")

    async def _admit(self, case: CaseState, proposal: Proposal) -> AdmittedRequest | Refusal:
        return await self._admission.check(
            commission=case.commission,
            revision=case.revision,
            frontier=case.frontier,
            proposal=proposal,
        )

    async def _propose(
        self, run: RunLog, stepped: ExecutorStepped, action: ProposedAction
    ) -> RunReport | None:
        proposal = Proposal(
            request_id=f"{run.case.case_id}:{stepped.revision}:{stepped.step}",
            case_id=run.case.case_id,
            action_id=action.action_id,
            args=action.args,
            revision=stepped.revision,
            step=stepped.step,
        )
        for _ in range(_RETRIES):
            run.case = await self._cases.refresh(run.case)  # recheck the case as it is now
            if self._taken(run.case, stepped):
                return run.stop("superseded", f"step {stepped.step} was taken by another runner")
            verdict = await self._admit(run.case, proposal)
            if isinstance(verdict, Refusal):
                events: list[CaseEvent] = [stepped, RequestRefused(refusal=verdict)]
            else:
                events = [stepped, RequestAdmitted(request=verdict.record)]
            try:  # the intent record lands at exactly the seq the recheck read
                run.case = await self._cases.append(run.case, events)
            except CaseConflictError:
                continue
            if isinstance(verdict, Refusal):
                run.refusals.append(verdict)
                return None
            return await self._invoke(run, verdict)
        raise CaseConflictError(f"case {run.case.case_id!r} kept moving during admission")

    async def _reinvoke(self, run: RunLog, opened: OpenRequest) -> RunReport | None:
        """Invoke a Pending request again, fenced like a first admission: the recheck's
        verdict is appended at exactly the seq it read (``RequestReinvoked`` or the
        refusal), so a revision change during the check is seen, and of racing runners
        only the one whose append lands invokes the port."""
        await self._sleep(opened.pending.retry_after_s if opened.pending else 0.0)
        request_id = opened.request.request_id
        for _ in range(_RETRIES):
            run.case = await self._cases.refresh(run.case)
            current = run.case.open_request
            if current is None or current.request.request_id != request_id:
                return None  # settled meanwhile (e.g. by an operator)
            if current.status != "pending":
                return run.stop("superseded", f"request {request_id!r} was taken by another runner")
            record = current.request
            proposal = Proposal.model_validate(
                record.model_dump(exclude={"commission_id", "grant"})
            )
            verdict = await self._admit(run.case, proposal)
            event = (
                RequestRefused(refusal=verdict)
                if isinstance(verdict, Refusal)
                else RequestReinvoked(request=verdict.record)
            )
            try:
                run.case = await self._cases.append(run.case, [event])
            except CaseConflictError:
                continue
            if isinstance(verdict, Refusal):
                run.refusals.append(verdict)
                return None
            return await self._invoke(run, verdict)
        raise CaseConflictError(f"case {run.case.case_id!r} kept moving during the recheck")

    async def _invoke(self, run: RunLog, request: AdmittedRequest) -> RunReport | None:
        port = self._port_for(request.action_id)
        commission = run.case.commission
        assert port is not None and is_assigned(commission), "admission checked both"
        run.invoked.append(request.request_id)
        try:
            outcome = _checked(await port.invoke(commission, request))
        except Exception as exc:
            info = error_info(exc)
            await self._settle(
                run,
                request.request_id,
                lambda _: EffectErrored(request_id=request.request_id, error=info),
            )
            return run.stop("error", f"invoking {request.request_id!r} failed: {exc}", info)
        await self._settle(
            run, request.request_id, lambda case: self._answer(case, request, outcome)
        )
        if isinstance(outcome, Performed):
            run.performed.append(request.request_id)
        elif isinstance(outcome, Refused):
            run.refusals.append(self._port_refusal(request, outcome))
        return None

    def _answer(
        self, case: CaseState, request: AdmittedRequest, outcome: Performed | Pending | Refused
    ) -> CaseEvent:
        match outcome:
            case Performed():
                frontier = tuple(self._advance(case, request.record, outcome))
                return EffectPerformed(
                    request_id=request.request_id, performed=outcome, frontier=frontier
                )
            case Pending():
                return EffectPending(request_id=request.request_id, pending=outcome)
            case Refused():
                return RequestRefused(refusal=self._port_refusal(request, outcome))

    @staticmethod
    def _port_refusal(request: AdmittedRequest, refused: Refused) -> Refusal:
        return Refusal(
            request_id=request.request_id,
            action_id=request.action_id,
            by="port",
            reason=refused.reason,
            detail=refused.detail,
        )

    async def _settle(
        self, run: RunLog, request_id: str, build: Callable[[CaseState], CaseEvent]
    ) -> None:
        """Record the answer to the open request ``request_id``; the answer stands even if the
        case moved meanwhile (the effect happened or not regardless), so conflicts retry."""
        for _ in range(_RETRIES):
            opened = run.case.open_request
            if opened is None or opened.request.request_id != request_id:
                raise CaseConflictError(f"request {request_id!r} was settled by someone else")
            try:
                run.case = await self._cases.append(run.case, [build(run.case)])
                return
            except CaseConflictError:
                run.case = await self._cases.refresh(run.case)
        raise CaseConflictError(f"case {run.case.case_id!r} kept moving")

    async def resolve(
        self, case_id: str, request_id: str, answer: Performed | Refused, *, by: str = "operator"
    ) -> CaseState:
        """Settle an open request by hand, e.g. one left in doubt by a crash.

        Args:
            case_id: The case.
            request_id: The open request.
            answer: ``Performed`` (moves the revision) or ``Refused``.
            by: Who decided, recorded in the answer's detail.

        Raises:
            CommissionError: ``request_id`` is not the case's open request.
        """

        def build(case: CaseState) -> list[CaseEvent]:
            opened = case.open_request
            if opened is None or opened.request.request_id != request_id:
                raise CommissionError(f"request {request_id!r} is not open on case {case_id!r}")
            if isinstance(answer, Performed):
                performed = answer.model_copy(update={"detail": {**answer.detail, "by": by}})
                frontier = tuple(self._advance(case, opened.request, performed))
                event = EffectPerformed(
                    request_id=request_id, performed=performed, frontier=frontier, by="operator"
                )
                return [event]
            refusal = Refusal(
                request_id=request_id,
                action_id=opened.request.action_id,
                by="operator",
                reason=answer.reason,
                detail={**answer.detail, "by": by},
            )
            return [RequestRefused(refusal=refusal)]

        return await self._cases.update(case_id, build)
