"""What a parent gives its children: the capabilities each holds, and how many it starts.

**Capabilities: per-flow grant rules hold for children too.**
A principal grants capabilities to the flow it starts, as far as the grant policy lets it
grant them *to that flow* (:mod:`loom.grants`). A child flow is another flow: it holds the
capabilities of its parent that the same principal could have granted to the child's own
flow, and no others, so composing flows never carries a capability to a flow the policy
keeps it from. The principal is the one recorded on the parent's start (a child records it
as its own ``by``, so grandchildren are held to it as well); a parent started by the
process's own code (no principal, the trusted path) passes all of its capabilities on.

An effect of the child that requires a capability it lost fails without being invoked
(``unauthorized``), exactly as in an execution started without it.

**How many: ``max_children``** (:mod:`loom.kernel.execution_limits`). A child start past it fails in
the flow with :class:`~loom.errors.LimitExceededError`, recorded as the step's failure (so a
replay raises it again), and no child is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loom import events as ev
from loom.kernel.execution_limits import exceeded, of_flow

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session

_VIA = " (via "


def granting_principal(first: ev.ExecutionStarted) -> str | None:
    """Who granted the capabilities of the execution that ``first`` starts (``None``: the
    trusted path). A fork's ``by`` may carry an operator's note before the principal
    (``"{note} (via {principal})"``, :func:`loom.grants.recorded_by`): the principal is the
    last part."""
    by = first.by
    if by is None or first.forked_from is None or not by.endswith(")") or _VIA not in by:
        return by
    return by.rsplit(_VIA, 1)[1][:-1]


async def child_grants(
    rt: Runtime, parent_id: str, capabilities: list[str], flow: str
) -> tuple[list[str], str | None]:
    """The capabilities a child of flow ``flow`` holds, and the principal it records.

    Reads the parent's start only when the parent holds capabilities (most hold none).
    """
    if not capabilities:
        return [], None
    first = (await rt.store.read(parent_id))[0]
    principal = granting_principal(first) if isinstance(first, ev.ExecutionStarted) else None
    if principal is None:
        return list(capabilities), None
    allowed = rt.grants.grantable(principal, flow)
    return [c for c in capabilities if c in allowed], principal


async def check_children(session: Session, step_id: str, flow: str, effect: str) -> None:
    """Refuse a child start past ``max_children``: recorded as the step's failure (``effect``
    is the child step's record name), raised into the flow; no child made.

    Raises:
        LimitExceededError: The run started ``max_children`` children already.
    """
    state = session.state
    most = of_flow(session.rt.app, session.flow, state.budgets).value("max_children")
    if len(state.children) < most:
        return
    error = exceeded("max_children", most, len(state.children), f"child flow {flow!r} refused")
    info = ev.ErrorInfo(code=error.code, type=type(error).__name__, message=error.message)
    await session.append([ev.EffectFailed(step_id=step_id, effect=effect, error=info)])
    await session._turn(session.state.steps[step_id].get("seq", 0))  # pyright: ignore[reportPrivateUsage]
    raise error
