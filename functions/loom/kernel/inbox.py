"""Fan-in through an inbox: deliveries many writers make to one execution, drained at once.

A child's result told to its parent, or a resume or a message that keeps losing the race
for the receiver's log, is *posted* to the receiver's inbox (:mod:`loom.store.inbox`: one
independent write, keyed so a repeat is the same item) and the receiver is *woken*: a
dispatch named ``{id}:inbox@{t}``, where ``t`` is the end of the wake interval the post
fell in (``Inbox.wake_interval``: one second on Firestore), so every post of an interval
makes the same wake and a parent whose thousand children end together is woken a handful
of times, not a thousand.

The woken call *drains* the inbox before it decides anything else (:func:`drain`): it
reads the items, decides them from the state it loaded like any control write (a resume
already there or refused, a message already delivered, is dropped; nothing lands after the
end) and appends the rest in one append conditioned on that state's seq, then removes the
items it read. A crash in between leaves items whose events are already in the log: the
next drain finds them settled and only removes them. The sweep wakes inboxes whose wake
was lost.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Final

from loom import events as ev
from loom.errors import LoomError
from loom.kernel.decide import MAX_DECISIONS, Decision, write
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.primitive import INSTALLED
from loom.kernel.resumes import resume_decision
from loom.store.inbox import InboxItem

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionPackage, ExecutionResult

log = logging.getLogger("loom")

WAKE_MARK: Final = ":inbox@"
"""What the dispatch id of an inbox wake holds (``{execution_id}:inbox@{t}``)."""
CONTENDED: Final = 3
"""Decisions a resume or a message makes on a log that keeps moving before it goes to the
receiver's inbox instead (where the store keeps one)."""


def contended_attempts(rt: Runtime) -> int:
    """How many decisions a delivery makes before it goes to the inbox."""
    return CONTENDED if rt.store.inbox() is not None else MAX_DECISIONS


def resume_item(
    on: str, correlation_key: str, payload: Any, by: str | None, at: float
) -> InboxItem:
    """The inbox item of a resume (``payload`` already stored: escaped or offloaded)."""
    body = {"on": on, "correlation_key": correlation_key, "payload": payload, "by": by}
    return InboxItem(f"resume:{resume_key(on, correlation_key)}", "resume", body, at)


def message_item(
    topic: str, message_id: str, payload: Any, sender: str | None, by: str | None, at: float
) -> InboxItem:
    """The inbox item of a message (``payload`` already stored)."""
    body = {
        "topic": topic,
        "message_id": message_id,
        "payload": payload,
        "sender": sender,
        "by": by,
    }
    return InboxItem(f"message:{message_id}", "message", body, at)


async def post(rt: Runtime, execution_id: str, item: InboxItem, flow: str = "") -> bool:
    """Post ``item`` to ``execution_id``'s inbox and wake it; whether this call posted it
    (``False``: the same item was there).

    Raises:
        ConfigurationError: The store keeps no inboxes.
    """
    inbox = rt.store.inbox()
    if inbox is None:
        from loom.errors import ConfigurationError

        raise ConfigurationError(f"{type(rt.store).__name__} keeps no inboxes")
    posted = await inbox.post(execution_id, item)
    await wake(rt, execution_id, flow)
    return posted


async def wake(rt: Runtime, execution_id: str, flow: str = "", tag: str = "") -> None:
    """Dispatch the execution to drain its inbox: at the end of the current wake interval
    (every post of the interval makes this same dispatch), or at once without one (or
    when it runs in this process); ``tag`` makes it a dispatch of its own (a wake after a
    call, which the interval's wake already used up)."""
    inbox = rt.store.inbox()
    interval = 0.0 if inbox is None else inbox.wake_interval
    if rt.dispatcher is None or rt.dispatcher.inline:
        interval = 0.0  # it runs here: at once (nothing to coalesce over a network)
    now = rt.clock()
    if interval > 0:
        at: float | None = (math.floor(now / interval) + 1) * interval
        dispatch_id = f"{execution_id}{WAKE_MARK}{at:.3f}"
    else:
        at, dispatch_id = None, f"{execution_id}{WAKE_MARK}{now!r}"
    if tag:
        dispatch_id = f"{dispatch_id}:{tag}"
    await rt._dispatch(execution_id, flow, "resume", dispatch_id, not_before=at)  # pyright: ignore[reportPrivateUsage]


_WAKE_AFTER: dict[str, str] = {}
"""Holders of this process's running calls that an inbox wake found running their
execution: holder -> execution id, to wake again when that call is over."""


def wake_after(holder: str, execution_id: str) -> None:
    """Have the call of ``holder`` (this process's, running) wake ``execution_id`` once it
    is over: a wake that finds it running drains nothing rather than race its session."""
    _WAKE_AFTER[holder] = execution_id


async def after_call(rt: Runtime, holder: str, flow: str = "") -> bool:
    """At the end of ``holder``'s call: the wake :func:`wake_after` asked for, if any (a
    failed dispatch is logged: the sweep wakes inboxes left undrained); whether it woke."""
    execution_id = _WAKE_AFTER.pop(holder, None)
    if execution_id is None:
        return False
    try:
        await wake(rt, execution_id, flow, tag=f"after-{holder}")
    except Exception:
        log.warning("the wake of %s after its call failed", execution_id, exc_info=True)
        return False
    return True


async def reported_after(rt: Runtime, result: ExecutionResult, woke: bool) -> ExecutionResult:
    """What a call answers: ``result``, or where the execution stands now when the wake
    after the call ran it here (no dispatcher, or an inline one) further than ``result``
    says."""
    if not woke or (rt.dispatcher is not None and not rt.dispatcher.inline):
        return result
    return await rt.report(await rt.load_state(result.execution_id))


def wants_drain(package: ExecutionPackage) -> bool:
    """Whether an execute call was dispatched to drain the inbox (an inbox wake, a sweep)."""
    return WAKE_MARK in (package.dispatch_id or "") or package.reason == "sweep"


async def drain(rt: Runtime, state: ExecutionState) -> list[str]:
    """Append what the inbox holds for ``state``'s execution (see the module docstring);
    the keys of the items it read, to :func:`remove` once the call that drained them has
    run (until then a sweep finds them and wakes the execution again, should the call die).

    The append changes no status: the call goes on to run the execution, and its own end
    writes where it stands (one write of the execution document per wake, not two).
    """
    inbox = rt.store.inbox()
    if inbox is None:
        return []
    keys: list[str] = []
    while True:
        items = await inbox.items(state.execution_id, DRAIN_PAGE + len(keys))
        items = [i for i in items if i.key not in keys]
        if not items:
            return keys
        state, wrote = await write(rt, state, lambda now, got=items: _decide(now, got, rt.clock()))
        keys += [i.key for i in items]
        if wrote:
            log.info("drained %d inbox item(s) of %s", len(items), state.execution_id)
        if len(items) < DRAIN_PAGE:
            return keys


async def remove(rt: Runtime, execution_id: str, keys: list[str]) -> None:
    """Remove drained items (their events are in the log)."""
    inbox = rt.store.inbox()
    if inbox is not None and keys:
        await inbox.remove(execution_id, keys)


DRAIN_PAGE: Final = 500


def _decide(state: ExecutionState, items: list[InboxItem], now: float) -> Decision:
    """The events of the items ``state`` does not hold yet (nothing after the end)."""
    if state.finished:
        return Decision()
    events: list[ev.Event] = []
    seen: set[str] = set()
    for item in items:
        if item.key in seen:
            continue
        seen.add(item.key)
        try:
            found = _event(state, item, now)
        except LoomError as exc:  # refused on this state (a gate that timed out): dropped
            log.info("inbox item %s of %s dropped: %s", item.key, state.execution_id, exc)
            continue
        if found is not None:
            events.append(found[0])
    return Decision(events)


def _event(state: ExecutionState, item: InboxItem, now: float) -> tuple[ev.Event, bool] | None:
    """The event of one item on ``state`` and whether it wakes it; ``None`` when ``state``
    holds it already."""
    body = item.body
    if item.kind == "resume":
        return resume_decision(
            state, body["on"], body["correlation_key"], body.get("payload"), body.get("by"), now
        )
    decide = INSTALLED.inbox.get(item.kind)  # a primitive's kind (``Primitive.inbox``)
    if decide is None:
        log.warning("inbox item %s of an unknown kind %r dropped", item.key, item.kind)
        return None
    return decide(state, body, now)
