"""Limits per execution: how far one execution may grow, whoever drives it.

An execution that loops forever (continue-as-new with no end, a flow that never stops
taking steps), or that others flood (messages on a topic it never reads), would otherwise
grow its log, its state and every answer about it without bound, long after whoever started
it left. Five limits bound it:

* ``max_events``: events in its log (across all its runs: continue-as-new keeps one log);
* ``max_runs``: runs (``ctx.continue_as_new`` past it fails the execution);
* ``max_children``: child flows one run starts;
* ``max_messages``: messages one run holds: delivered to it, or carried into it unread by a
  continue-as-new (see below why not "unread" alone);
* ``max_stream_values``: values its streams hold in all (``loom.primitives.streams``; a
  write past it raises :class:`~loom.errors.LimitExceededError` into the flow, recorded
  nowhere: the log decides it alike on every replay).

Each has a default (:data:`DEFAULT_LIMITS`); an app sets its own (``Loom(limits=...)``), a
flow its own (``@app.flow(..., limits=...)``), and a start may ask for others
(``Runtime.start(budgets=...)``, ``limits`` on ``POST /executions``, on a Pub/Sub start, and
``loom start --limit``): lower is always allowed, higher only as far as the grant policy
lets the principal raise that limit for that flow (:meth:`loom.grants.GrantPolicy.check_limits`).
What a start asked for is recorded in ``ExecutionStarted.budgets`` and holds for the
execution's life; the app's and flow's own are read from the code deployed now.

What reaching one does, with nothing half-written:

* the flow's next new step (an effect not yet invoked, a gate, a timer, a child, a message,
  a published value, a continue) fails the execution with ``limit_exceeded``; what began
  before (an effect that ran) still has its outcome recorded, so the log never loses one;
* a run at ``max_runs`` that continues as new fails the same way instead;
* a child start past ``max_children`` fails in the flow with
  :class:`~loom.errors.LimitExceededError` (recorded with the step: the flow may handle it);
* a message to a run holding ``max_messages`` is refused with
  :class:`~loom.errors.MailboxFullError` (HTTP 429 with ``Retry-After``): from a flow it is
  recorded with the sending step; a resume to a full log with
  :class:`~loom.errors.LimitExceededError` (HTTP 409).

Why messages *held*: a ``ctx.recv`` served from the mailbox appends nothing, so the log does
not say which buffered messages a flow already took; only the running flow knows. What a run
holds is known, costs what unread ones cost (every one is in the run's state and in every
answer about it), and drops to the unread ones at each continue-as-new, which is how a flow
that reads many messages keeps going.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Final

from loom.errors import (
    ConfigurationError,
    InputError,
    LimitExceededError,
    MailboxFullError,
    UnknownFlowError,
)

if TYPE_CHECKING:
    from loom.kernel.app import App as Loom
    from loom.kernel.defs import FlowDef
    from loom.kernel.fold import ExecutionState
    from loom.kernel.runtime import Runtime

__all__ = [
    "BUDGET_NAMES",
    "DEFAULT_LIMITS",
    "LIMIT_NAMES",
    "Limits",
    "check_requested",
    "check_room",
    "effective",
    "event_limit",
    "exceeded",
    "for_state",
    "held_messages",
    "of_flow",
]


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits of an execution; ``None`` leaves one to the level below (flow → app →
    engine default).

    Attributes:
        max_events: Events in the execution's log.
        max_runs: Runs of the execution (1 + how often it continued as new).
        max_children: Child flows one run starts.
        max_messages: Messages one run holds (delivered, or carried in unread).
        max_stream_values: Values the execution's streams hold in all.
    """

    max_events: int | None = None
    max_runs: int | None = None
    max_children: int | None = None
    max_messages: int | None = None
    max_stream_values: int | None = None

    def __post_init__(self) -> None:
        for name in LIMIT_NAMES:
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise ConfigurationError(f"limit {name} must be a positive integer, not {value!r}")

    def over(self, other: Limits) -> Limits:
        """These limits, each one unset here taken from ``other``."""
        return replace(
            other, **{n: getattr(self, n) for n in LIMIT_NAMES if getattr(self, n) is not None}
        )

    def as_dict(self) -> dict[str, int]:
        """The limits that are set, by name."""
        return {n: v for n in LIMIT_NAMES if (v := getattr(self, n)) is not None}

    def value(self, name: str) -> int:
        """The limit ``name`` (set: :func:`effective` fills every one)."""
        found: int | None = getattr(self, name)
        assert found is not None, name
        return found


LIMIT_NAMES: Final = tuple(f.name for f in fields(Limits))
BUDGET_NAMES: Final = ("max_effect_calls", "max_attempts", "max_effect_seconds", "max_bytes_stored")
"""The effect budgets (:func:`loom.kernel.effects.budget_exceeded`): a start may set any of them,
since they only ever stop an execution sooner."""

DEFAULT_LIMITS: Final = Limits(
    max_events=50_000,
    max_runs=1_000,
    max_children=1_000,
    max_messages=1_000,
    max_stream_values=10_000,
)
"""The engine's defaults: about Temporal's event-history limit (51,200), a thousand of
runs, children and messages, ten thousand stream values; raise them per app or flow for
executions meant to grow further."""


def effective(app: Loom, flow: str, version: str | None, budgets: Mapping[str, float]) -> Limits:
    """The limits of an execution of ``flow`` (``version``) that recorded ``budgets``.

    The flow's own limits are those of the version the execution runs on; a flow or version
    this deployment lacks falls back to the app's.
    """
    limits: Limits = getattr(app, "limits", None) or Limits()
    try:
        defn = app.get_flow(flow, version)
    except UnknownFlowError:
        defn = None
    own: Limits | None = getattr(defn, "limits", None)
    if own is not None:
        limits = own.over(limits)
    if budgets:
        asked = {n: int(budgets[n]) for n in LIMIT_NAMES if n in budgets}
        if asked:
            limits = Limits(**asked).over(limits)
    return limits.over(DEFAULT_LIMITS)


def event_limit(app: Loom, flow: FlowDef, budgets: Mapping[str, float]) -> int:
    """``max_events`` of an execution of ``flow`` (a session's, computed once per execute
    call: a few lookups, no ``Limits`` built)."""
    asked = budgets.get("max_events") if budgets else None
    if asked:
        return int(asked)
    own = flow.limits.max_events if flow.limits is not None else None
    app_limits: Limits | None = getattr(app, "limits", None)
    default = DEFAULT_LIMITS.max_events
    assert default is not None
    return own or (app_limits.max_events if app_limits is not None else None) or default


# Events that begin something (an effect's intent, a gate or timer, a published value, a
# stream value, a wait for another's value, a continue, a patch marker): refused once the
# log is full. Outcomes of what began (an effect's result, a child or message already made,
# an update's answer) and ends are always recorded.
OPENING: Final = frozenset(
    {
        "EffectStarted",
        "ExecutionSuspended",
        "EventPublished",
        "StreamWritten",
        "EventAwaited",
        "ExecutionContinued",
        "PatchRecorded",
    }
)


def of_flow(app: Loom, flow: FlowDef, budgets: Mapping[str, float]) -> Limits:
    """:func:`effective` for an execution of the flow definition ``flow`` (a session's)."""
    limits: Limits = getattr(app, "limits", None) or Limits()
    if flow.limits is not None:
        limits = flow.limits.over(limits)
    asked = {n: int(budgets[n]) for n in LIMIT_NAMES if n in budgets} if budgets else {}
    if asked:
        limits = Limits(**asked).over(limits)
    return limits.over(DEFAULT_LIMITS)


def for_state(app: Loom, state: ExecutionState) -> Limits:
    """:func:`effective` for a folded execution."""
    return effective(app, state.flow, state.flow_version, state.budgets)


def check_requested(requested: Mapping[str, Any]) -> dict[str, float]:
    """The limits and budgets a start asks for, checked: known names, positive numbers
    (whole ones for the limits).

    Raises:
        InputError: An unknown name, or a value that is not a positive number (code
            ``invalid_limit``).
    """
    checked: dict[str, float] = {}
    for name, value in requested.items():
        if name not in LIMIT_NAMES and name not in BUDGET_NAMES:
            known = ", ".join((*LIMIT_NAMES, *BUDGET_NAMES))
            raise InputError(
                f"{name!r} is no limit or budget (known: {known})",
                details={"limit": name},
                code="invalid_limit",
            )
        whole = name in LIMIT_NAMES
        good = type(value) is int or (not whole and type(value) is float)
        if not good or not value > 0 or value != value:
            kind = "a positive integer" if whole else "a positive number"
            raise InputError(
                f"limit {name} must be {kind}, not {value!r}",
                details={"limit": name},
                code="invalid_limit",
            )
        checked[name] = value
    return checked


def exceeded(name: str, limit: int, used: int, what: str) -> LimitExceededError:
    """The error of an execution that reached ``name``."""
    return LimitExceededError(
        f"{what}: the execution reached its limit {name}={limit} ({used} used); raise it for "
        "the flow (@app.flow(limits=...)) or the start, where the grant policy allows",
        details={"limit": name, "value": limit, "used": used},
    )


def held_messages(state: ExecutionState) -> int:
    """Messages the execution's current run holds (delivered in it, or carried into it)."""
    return sum(1 for slot in state.message_ids.values() if slot)


def check_room(rt: Runtime, state: ExecutionState, topic: str | None = None) -> None:
    """Refuse a write from outside the flow (a message on ``topic``, a buffered resume)
    that the execution has no room for.

    Raises:
        LimitExceededError: The log holds ``max_events`` events.
        MailboxFullError: A message, and the run holds ``max_messages`` messages.
    """
    limits = for_state(rt.app, state)
    most = limits.value("max_events")
    if state.last_seq >= most:
        raise exceeded("max_events", most, state.last_seq, f"{state.execution_id!r} is full")
    if topic is None:
        return
    held, most = held_messages(state), limits.value("max_messages")
    if held >= most:
        raise MailboxFullError(
            f"execution {state.execution_id!r} holds {held} messages, its limit "
            f"max_messages={most}; message on {topic!r} refused, retry once it has read some",
            details={"limit": "max_messages", "value": most, "used": held},
        )
