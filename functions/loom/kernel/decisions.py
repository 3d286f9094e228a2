"""Recorded decisions (``ctx.now()``, ``ctx.uuid()``, ``ctx.random()``) and the check that a
step id the flow reaches was not recorded as something else.

A decision is drawn once, live, and recorded with the session's next append
(``DecisionRecorded``); every replay serves the recorded value. A flow that reaches a step
id the log holds as another kind of step (an effect, a gate, another decision) changed
shape since the log was written: the execution is parked with both named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loom import events as ev

if TYPE_CHECKING:
    from loom.kernel.fold import ExecutionState
    from loom.kernel.session import Session


def decide(session: Session, step_id: str, kind: str) -> Any:
    """Serve the decision recorded at ``step_id`` or draw one and record it (see the module
    docstring); ``kind`` is ``"now"``, ``"uuid"`` or ``"random"``."""
    if session.signal is not None:
        raise session.signal
    recorded = session.state.decisions.get(step_id)
    if recorded is not None:
        if recorded["kind"] != kind:
            message = f"step {step_id}: log has {recorded['kind']}(), flow asked {kind}()"
            session._park(step_id, message)  # pyright: ignore[reportPrivateUsage]
        return recorded["value"]
    session._check_unused(step_id, f"{kind}()")  # pyright: ignore[reportPrivateUsage]
    value = session.rt.new_decision(kind)
    decision = ev.DecisionRecorded(step_id=step_id, kind=kind, value=value)  # type: ignore[arg-type]
    session.journal.pending.append(decision)
    session.state.decisions[step_id] = {"kind": kind, "value": value}
    return value


def clash(state: ExecutionState, step_id: str, what: str) -> str | None:
    """Why the flow may not call ``what`` at ``step_id``: the log has another step there
    (``None``: nothing is recorded at that id)."""
    if step_id in state.steps:
        recorded = f"effect {state.steps[step_id].get('effect')!r}"
    elif step_id in state.gates:
        recorded = f"a gate on {state.gates[step_id]['on']!r}"
    elif step_id in state.decisions:
        recorded = f"{state.decisions[step_id]['kind']}()"
    else:
        return None
    return f"step {step_id}: log has {recorded}, flow called {what}"
