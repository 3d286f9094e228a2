"""Control calls from outside a flow that append one event: a resume and a verdict.

Each appends at the log's end with a fence (:func:`append_control`), retrying over concurrent
appends, and then hands the execution to the dispatcher (inline with none). The bodies of
:meth:`Runtime.resume <loom.runtime.Runtime.resume>` and :meth:`Runtime.verdict
<loom.runtime.Runtime.verdict>`, whose docstrings are the contract.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loom import events as ev
from loom.app import to_json_value
from loom.errors import AppendConflictError, ExecutionFinishedError, ExecutionSupersededError
from loom.execution_limits import check_room
from loom.fold import ExecutionState, fold, resume_key
from loom.late_replies import timed_out_gate
from loom.store.base import AppendRequest, StatusChange
from loom.timeouts import overdue
from loom.verdicts import current_episode, verdict_event

if TYPE_CHECKING:
    from loom.runtime import Runtime
    from loom.wire import ExecutionResult


async def append_control(
    rt: Runtime,
    state: ExecutionState,
    events: list[ev.Event],
    change: StatusChange | None,
    recheck: Callable[[ExecutionState], object] | None = None,
) -> ExecutionState:
    """Append control events at the log's end, retrying over concurrent appends.

    ``recheck`` runs again on the reloaded state before each retry (and may raise), so a
    check made before the first try still holds for the append that lands.
    """
    events = [*overdue(rt, state), *events]
    for attempt in range(20):
        if attempt and recheck is not None:
            recheck(state)
        ev.number(events, state.last_seq, rt.clock())
        try:
            await rt.store.append(
                AppendRequest(state.execution_id, state.last_seq, events, change, fence=True)
            )
            return fold(events, state)
        except AppendConflictError:
            state = await rt.load_state(state.execution_id)
    raise ExecutionSupersededError(f"log of {state.execution_id!r} keeps changing")


async def resume(
    rt: Runtime,
    execution_id: str,
    on: str,
    correlation_key: str,
    payload: Any = None,
    *,
    by: str | None = None,
) -> ExecutionResult:
    """The body of :meth:`Runtime.resume <loom.runtime.Runtime.resume>`."""
    state = await rt.load_state(execution_id)
    key = resume_key(on, correlation_key)
    late = timed_out_gate(state, on, correlation_key, rt.clock())  # (``loom.late_replies``)
    if late is not None:
        raise late
    if key in state.resumes:
        # A redelivered resume (at-least-once transports) is a no-op, even after the end.
        return await rt.report(state, include_state=False)
    if state.finished:
        raise ExecutionFinishedError(
            f"execution {execution_id!r} is {state.status}; resume refused",
            details={"status": state.status},
        )
    opens = any(
        g["on"] == on and g["correlation_key"] == correlation_key
        for g in state.open_gates().values()
    )
    if not opens and not on.startswith("loom."):  # (the engine's own resumes, a child's
        check_room(rt, state)  # end among them, always land: loom.execution_limits)
    check = rt.app.resume_checks.get(on)
    if check is not None:
        payload = await check(rt, state, correlation_key, payload)
    stored, _ = await rt.payloads.encode(to_json_value(payload), f"{execution_id}/resume")
    event = ev.ExecutionResumed(on=on, correlation_key=correlation_key, payload=stored, by=by)
    change = StatusChange("running") if opens and state.status == "suspended" else None
    state = await append_control(rt, state, [event], change)
    ran = await rt._dispatch(  # pyright: ignore[reportPrivateUsage]
        execution_id, state.flow, "resume", f"{execution_id}:{state.last_seq}"
    )
    # The deadline passed while it was appended: the fold gave the gate to the timeout.
    late = timed_out_gate(state, on, correlation_key)
    if late is not None:
        raise late
    return ran or await rt.report(state, include_state=False)


async def verdict(
    rt: Runtime,
    execution_id: str,
    step_id: str,
    verdict: str,
    output: Any,
    error: str | None,
    by: str,
    episode: int | None,
) -> ExecutionResult:
    """The body of :meth:`Runtime.verdict <loom.runtime.Runtime.verdict>`."""
    state = await rt.load_state(execution_id)
    effect, episode = current_episode(state, step_id, episode)
    event = verdict_event(rt.app, effect, step_id, verdict, output, error, by, episode)
    if event.verdict == "performed":  # stored like an effect output: escaped or offloaded
        stored, _ = await rt.payloads.encode(event.output, f"{execution_id}/{step_id}/verdict")
        event = event.model_copy(update={"output": stored})
    change = StatusChange("running") if len(state.in_doubt) == 1 else None

    # A concurrent verdict on the same episode must not land twice.
    def recheck(now: ExecutionState) -> None:
        current_episode(now, step_id, episode)

    state = await append_control(rt, state, [event], change, recheck)
    ran = None
    if not state.in_doubt:
        ran = await rt._dispatch(  # pyright: ignore[reportPrivateUsage]
            execution_id, state.flow, "verdict", f"{execution_id}:{state.last_seq}"
        )
    return ran or await rt.report(state, include_state=False)
