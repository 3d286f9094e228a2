"""Control calls from outside a flow that append one event: a resume and a verdict.

Each is decided from the loaded state and written with :func:`loom.kernel.decide.write` (on a
conflict: reload, decide again), and then hands the execution to the dispatcher (inline
with none). The bodies of
:meth:`Runtime.resume <loom.runtime.Runtime.resume>` and :meth:`Runtime.verdict
<loom.runtime.Runtime.verdict>`, whose docstrings are the contract.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loom import events as ev
from loom.errors import ExecutionFinishedError
from loom.kernel.decide import NOTHING, Decision, write
from loom.kernel.defs import to_json_value
from loom.kernel.execution_limits import check_room
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.late_replies import timed_out_gate
from loom.kernel.verdicts import current_episode, verdict_event
from loom.store.base import StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult


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
    key, at = resume_key(on, correlation_key), rt.clock()
    if _settled(state, key, on, correlation_key, at):
        return await rt.report(state, include_state=False)  # a redelivery, even after the end
    if not _opens(state, on, correlation_key) and not on.startswith("loom."):
        check_room(rt, state)  # (the engine's own resumes, a child's end among them, land)
    check = rt.app.resume_checks.get(on)
    if check is not None:
        payload = await check(rt, state, correlation_key, payload)
    stored, _ = await rt.payloads.encode(to_json_value(payload), f"{execution_id}/resume")

    def decide(now: ExecutionState) -> Decision:
        # Decided again on every reload: a resume that landed meanwhile (the same one,
        # delivered twice at once) or an end makes this one write nothing or be refused.
        # (The deadline as it stood when asked: the fold gives a gate whose deadline passes
        # before the append to the timeout by the event's own time, and the reply is refused.)
        if _settled(now, key, on, correlation_key, at):
            return NOTHING
        event = ev.ExecutionResumed(on=on, correlation_key=correlation_key, payload=stored, by=by)
        return Decision([event], _resume_change(now, on, correlation_key))

    state, wrote = await write(rt, state, decide)
    if not wrote:
        return await rt.report(state, include_state=False)
    ran = await rt._dispatch(  # pyright: ignore[reportPrivateUsage]
        execution_id, state.flow, "resume", f"{execution_id}:{state.last_seq}"
    )
    # The deadline passed while it was appended: the fold gave the gate to the timeout.
    late = timed_out_gate(state, on, correlation_key)
    if late is not None:
        raise late
    return ran or await rt.report(state, include_state=False)


def _settled(state: ExecutionState, key: str, on: str, correlation_key: str, now: float) -> bool:
    """Whether ``state`` holds the resume already (a redelivery: a no-op, even after the
    end); refuse it if its gate timed out (or its deadline passed by ``now``) or the
    execution ended without it.

    Raises:
        GateTimedOutError: The gate's timeout won.
        ExecutionFinishedError: The execution ended.
    """
    late = timed_out_gate(state, on, correlation_key, now)  # (``loom.kernel.late_replies``)
    if late is not None:
        raise late
    if key in state.resumes:
        return True
    if state.finished:
        raise ExecutionFinishedError(
            f"execution {state.execution_id!r} is {state.status}; resume refused",
            details={"status": state.status},
        )
    return False


def _opens(state: ExecutionState, on: str, correlation_key: str) -> bool:
    """Whether the resume meets a gate the flow has open (else it is buffered)."""
    return any(
        g["on"] == on and g["correlation_key"] == correlation_key
        for g in state.open_gates().values()
    )


def _resume_change(state: ExecutionState, on: str, correlation_key: str) -> StatusChange | None:
    """``running`` when the resume opens a gate of a suspended execution."""
    opens = _opens(state, on, correlation_key)
    return StatusChange("running") if opens and state.status == "suspended" else None


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
    effect, episode = current_episode(state, step_id, episode)  # pinned for every decision
    first = verdict_event(rt.app, effect, step_id, verdict, output, error, by, episode)
    stored = first.output
    if first.verdict == "performed":  # stored like an effect output: escaped or offloaded
        stored, _ = await rt.payloads.encode(first.output, f"{execution_id}/{step_id}/verdict")

    def decide(now: ExecutionState) -> Decision:
        # On every reload: a verdict that landed meanwhile settled the episode, so this one
        # is refused as stale rather than settling the step twice.
        if now.finished:  # (cancelled while in doubt: its steps stay listed, settled by none)
            raise ExecutionFinishedError(
                f"execution {execution_id!r} is {now.status}; verdict refused",
                details={"status": now.status},
            )
        current_episode(now, step_id, episode)
        event = first.model_copy(update={"output": stored})
        change = StatusChange("running") if len(now.in_doubt) == 1 else None
        return Decision([event], change)

    state, _ = await write(rt, state, decide)
    ran = None
    if not state.in_doubt:
        ran = await rt._dispatch(  # pyright: ignore[reportPrivateUsage]
            execution_id, state.flow, "verdict", f"{execution_id}:{state.last_seq}"
        )
    return ran or await rt.report(state, include_state=False)
