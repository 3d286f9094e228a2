"""The primitive interface: the one way a flow primitive plugs into the kernel.

The kernel runs flows: it folds logs, decides and appends (``loom.kernel.decide``), runs
sessions, hands over cancels and loop timers, and answers ``execute``. A *primitive* adds a
kind of step or a kind of control on top (a child flow, a mailbox, published values,
continue-as-new, patches, queues, schedules). It lives in one module of ``loom.primitives``
(an operator tool in ``loom.ops`` may plug in the same way), imports the kernel, and is
never imported by it: it hands the kernel a :class:`Primitive`, and the app's assembly
(``loom.app``) installs it with :func:`install`. What a primitive can bring:

* **fold handlers** (``head``, ``step``): how its events change the state. The event
  schema itself is one module (``loom.events``: a log must be readable as a whole, by
  every store and auditor); the state's fields are the kernel's ``ExecutionState``.
* **a context mixin** (``context``): its ``ctx`` methods, a subclass of the kernel's
  :class:`~loom.kernel.context.FlowContext` with ``__slots__ = ()``; the assembly's
  ``loom.FlowContext`` inherits every installed mixin.
* **resume checks** (``resume_checks``): how a resume of one of its gates is admitted
  (``own_gates``: gates only it fills, refused from outside).
* **hooks**: ``follow_up`` after an execute call (what an end tells others),
  ``admission`` before a claim (a queue's lease), ``reserves`` (the ids it derives,
  refused to outside starts).
* **jobs** (``jobs``): handlers of the jobs it dispatches (``loom.kernel.jobs``: an admit
  pass, a shard's purge), by kind.
* **inbox items** (``inbox``): how a kind of item posted to an execution's inbox is
  decided when it is drained (``loom.kernel.inbox``: a message), by kind.
* **deliveries** (``deliveries``): the event types it appends from outside a running
  session (a delivery, as a resume is): a live session merges them on a conflict and goes
  on, and the fold does not count them as progress.

Every write a primitive makes goes through ``loom.kernel.decide.write`` (control calls) or
its session's appends; a primitive never appends around them.

A worked example, a ``ctx.tally(n)`` step recording a running total::

    # loom/primitives/tally.py
    from loom import events as ev            # TallyAdded(step_id, n) added to the schema
    from loom.kernel.context import FlowContext, next_step_id
    from loom.kernel.primitive import Primitive

    def _added(state, event):                # head: applied to every event at once
        state.published["tally"] = {"value": ..., "seq": event.seq}

    class TallyContext(FlowContext):
        __slots__ = ()

        async def tally(self, n: int) -> None:
            step_id = next_step_id(self)     # the step's deterministic id
            session = self._session
            if step_id not in session.state.steps:
                await session.append([ev.TallyAdded(step_id=step_id, n=n)])

    PRIMITIVE = Primitive("tally", head={"TallyAdded": _added}, context=TallyContext)

then list ``tally.PRIMITIVE`` in ``loom.app.PRIMITIVES`` and add ``TallyContext`` to the
bases of ``loom.app.FlowContext``. ``docs/architecture.md`` walks through it.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loom import reserved_ids
from loom.errors import ConfigurationError
from loom.kernel import fold, journal
from loom.kernel.context import FlowContext

if TYPE_CHECKING:
    from loom.events import Event
    from loom.kernel.defs import ResumeCheck
    from loom.kernel.jobs import Job
    from loom.kernel.runtime import Runtime
    from loom.kernel.state import ExecutionState
    from loom.reserved_ids import IdForm
    from loom.wire import ExecutionResult

FollowUp = Callable[["Runtime", "ExecutionState"], Awaitable[None]]
"""``follow_up(runtime, state)``: what an execute call that found ``state`` arranges."""
JobHandler = Callable[["Runtime", "Job"], Awaitable[dict[str, Any]]]
"""``handler(runtime, job)``: runs one job (``loom.kernel.jobs``); what it did."""
InboxDecide = Callable[["ExecutionState", dict[str, Any], float], "tuple[Event, bool] | None"]
"""``decide(state, body, now)``: the event of an inbox item on ``state`` (``None``: held
already), and whether it wakes the execution; raises a ``LoomError`` to refuse it."""


class Admission(abc.ABC):
    """What an execute call must be granted before it claims (a queue's lease).

    The grant belongs to the call (``owner``, the holder of its claim): only that call
    releases it.
    """

    @abc.abstractmethod
    async def admit(self, rt: Runtime, state: ExecutionState, owner: str) -> bool:
        """Take the grant for ``owner``; False when the execution must wait."""

    @abc.abstractmethod
    async def release(self, rt: Runtime, state: ExecutionState, owner: str) -> None:
        """Give back what :meth:`admit` granted ``owner`` (a no-op if nothing)."""

    @abc.abstractmethod
    async def defer(self, rt: Runtime, state: ExecutionState) -> ExecutionResult:
        """Arrange for the execution to be tried again later; where it stands."""

    @abc.abstractmethod
    def applies(self, state: ExecutionState) -> bool:
        """Whether executions like ``state`` need a grant at all."""

    def holds(self, rt: Runtime, state: ExecutionState, owner: str) -> Awaitable[bool] | None:
        """Whether ``owner``'s grant still holds, asked right before each effect starts.

        ``None`` when it surely does (nothing to await: the usual answer, and the default);
        else an awaitable that renews the grant and answers. False means it lapsed (a
        renewal came too late, another call may hold its place): the call starts nothing
        more, gives its claim back and the execution waits again (``LapsedSignal``).
        """
        return None

    def on_claim(self, rt: Runtime, state: ExecutionState, now: float) -> list[Event]:
        """Events the claim of an admitted call writes with it, in the same append (a
        queue's first dequeue); decided from ``state`` like the claim. None by default."""
        return []


@dataclass(frozen=True)
class Primitive:
    """What one primitive brings to the kernel (see the module docstring).

    Attributes:
        name: The primitive's name (unique among those installed).
        head: Fold handlers applied to every event of their type at once.
        step: Fold handlers of per-step records (deferred while a snapshot's records are
            unparsed).
        context: Its ``ctx`` methods: a ``FlowContext`` subclass with empty ``__slots__``.
        resume_checks: Checks admitting resumes of its gates, by ``on``.
        own_gates: Gates only it fills: every resume from outside is refused.
        follow_up: Awaited after an execute call when ``follows_up(state)`` is true.
        follows_up: Whether ``follow_up`` has anything to do for a state (cheap).
        admission: The grant an execute call needs before it claims, if any.
        reserves: Raises ``ReservedExecutionIdError`` for an id of a form it derives
            (beyond the engine's own forms, :mod:`loom.reserved_ids`).
        jobs: Handlers of its jobs, by kind.
        inbox: Deciders of its inbox items, by kind.
        deliveries: Event types it appends beside a live session (deliveries from outside).
    """

    name: str
    head: Mapping[str, fold.Handler] = field(default_factory=dict[str, fold.Handler])
    step: Mapping[str, fold.Handler] = field(default_factory=dict[str, fold.Handler])
    context: type[FlowContext] | None = None
    resume_checks: Mapping[str, ResumeCheck] = field(default_factory=dict[str, "ResumeCheck"])
    own_gates: Sequence[str] = ()
    follow_up: FollowUp | None = None
    follows_up: Callable[[ExecutionState], bool] | None = None
    admission: Admission | None = None
    reserves: Callable[[str], object] | None = None
    jobs: Mapping[str, JobHandler] = field(default_factory=dict[str, JobHandler])
    inbox: Mapping[str, InboxDecide] = field(default_factory=dict[str, InboxDecide])
    deliveries: Sequence[str] = ()


@dataclass
class Installed:
    """The primitives installed, as the kernel reads them."""

    names: list[str] = field(default_factory=list[str])
    follow_ups: list[tuple[Callable[[ExecutionState], bool], FollowUp]] = field(
        default_factory=list[tuple[Callable[["ExecutionState"], bool], FollowUp]]
    )
    admission: Admission | None = None
    context: type[FlowContext] = FlowContext
    resume_checks: dict[str, ResumeCheck] = field(default_factory=dict[str, "ResumeCheck"])
    own_gates: list[str] = field(default_factory=list[str])
    reserves: list[Callable[[str], object]] = field(default_factory=list[Callable[[str], object]])
    jobs: dict[str, JobHandler] = field(default_factory=dict[str, JobHandler])
    inbox: dict[str, InboxDecide] = field(default_factory=dict[str, InboxDecide])


INSTALLED = Installed()
"""What :func:`install` registered (one assembly per process: ``loom.app``)."""


def install(primitives: Sequence[Primitive], context: type[FlowContext]) -> None:
    """Register ``primitives`` with the kernel, and ``context`` as the flows' ``ctx`` class.

    Raises:
        ConfigurationError: A name installed twice, two admissions, two step handlers for
            one event type, or a ``context`` that lacks a primitive's mixin.
    """
    for primitive in primitives:
        _install_one(primitive)
        if primitive.context is not None and not issubclass(context, primitive.context):
            raise ConfigurationError(
                f"the flow context {context.__name__} lacks the ctx methods of "
                f"{primitive.name!r} ({primitive.context.__name__})"
            )
    INSTALLED.context = context


def _install_one(p: Primitive) -> None:
    if p.name in INSTALLED.names:
        raise ConfigurationError(f"primitive {p.name!r} is installed twice")
    if p.admission is not None and INSTALLED.admission is not None:
        raise ConfigurationError(f"primitive {p.name!r} brings a second admission")
    INSTALLED.names.append(p.name)
    fold.register(p.head, p.step)
    if p.follow_up is not None:
        INSTALLED.follow_ups.append((p.follows_up or _always, p.follow_up))
    INSTALLED.admission = p.admission or INSTALLED.admission
    INSTALLED.resume_checks.update(p.resume_checks)
    INSTALLED.own_gates.extend(p.own_gates)
    if p.reserves is not None:
        INSTALLED.reserves.append(p.reserves)
    for what, mine, theirs in (
        ("job", p.jobs, INSTALLED.jobs),
        ("inbox item", p.inbox, INSTALLED.inbox),
    ):
        for kind in mine:
            if kind in theirs:
                raise ConfigurationError(f"primitive {p.name!r} brings a second {what} {kind!r}")
    INSTALLED.jobs.update(p.jobs)
    INSTALLED.inbox.update(p.inbox)
    if p.deliveries:
        journal.add_deliveries(p.deliveries)
        fold.keep_park(p.deliveries)


def _always(_: ExecutionState) -> bool:
    return True


def follows_up(state: ExecutionState) -> bool:
    """Whether an installed primitive has a follow-up to make for ``state``."""
    return any(wants(state) for wants, _ in INSTALLED.follow_ups)


async def follow_up(rt: Runtime, state: ExecutionState) -> None:
    """Run the installed primitives' follow-ups that apply to ``state``."""
    for wants, hook in INSTALLED.follow_ups:
        if wants(state):
            await hook(rt, state)


def check_outside_id(execution_id: str, *, derived: IdForm | None = None) -> str:
    """``execution_id`` if it has no form the engine derives (:mod:`loom.reserved_ids`,
    ``derived`` excepted: the engine names the form it derived) and no installed primitive
    reserves it; else raise ``ReservedExecutionIdError`` (an outside start, a fork's
    target)."""
    reserved_ids.check_outside_id(execution_id, derived=derived)
    for reserves in INSTALLED.reserves:
        reserves(execution_id)
    return execution_id


def resume_checks() -> dict[str, Any]:
    """The resume checks every app starts with: the primitives' own gates and checks."""
    return dict(INSTALLED.resume_checks)
