"""``App``: the registry of flows and effects a deployment serves, as the kernel sees it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from loom.errors import (
    ConfigurationError,
    InputError,
    UnknownEffectError,
    UnknownFlowError,
    UnknownFlowVersionError,
)
from loom.grants import GrantPolicy
from loom.kernel.defs import (
    EffectDef,
    F,
    FlowDef,
    ResumeCheck,
    Retry,
    check_durability,
    check_version,
    flow_limits,
    seconds,
    version_key,
)
from loom.kernel.execution_limits import Limits
from loom.kernel.primitive import INSTALLED

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.state import ExecutionState

KERNEL_GATES = ("loom.timer", "loom.loop_timer")
"""Gates whose resumes the kernel appends itself: a durable timer, a loop timer."""


def own_gate_checks(gates: Sequence[str]) -> dict[str, ResumeCheck]:
    """Resume checks that refuse every resume from outside on ``gates``, Loom's own: a
    resume there would wake a sleep early, expire a deadline or slip a message into a
    mailbox past its id (Loom appends their resumes itself)."""
    return {on: _own_gate(on) for on in gates}


def _own_gate(on: str) -> ResumeCheck:
    async def refuse(runtime: Runtime, state: ExecutionState, key: str, payload: Any) -> Any:
        raise InputError(
            f"{on!r} is a gate of Loom's own: timers fire when they fall due and messages "
            "arrive through send; a resume cannot fill it",
            code="reserved_gate",
            details={"on": on, "correlation_key": key},
        )

    return refuse


class App:
    """The kernel's view of an application: flows and effects registered by name.

    ``loom.Loom`` (where the app is assembled) adds the declarations of primitives
    (queues, schedules) on top; the kernel reads only what is here.

    Example::

        app = Loom("orders")

        @app.effect("payments.charge", idempotent=False, retry=Retry(max_attempts=3))
        async def charge(ctx: EffectContext, req: Charge) -> Receipt: ...

        @app.flow("order.fulfil")
        async def fulfil(ctx: FlowContext, order: Order) -> Outcome: ...

    Attributes:
        flows: The latest version of each flow, by name.
        versions: Every registered version of each flow, by name then version.
    """

    def __init__(
        self,
        name: str,
        *,
        grants: GrantPolicy | None = None,
        durability: str = "strict",
        limits: Limits | None = None,
    ) -> None:
        self.name = name
        self.limits = limits or Limits()  # every execution's (loom.kernel.execution_limits)
        # The default of every flow (loom.kernel.durability).
        self.durability = check_durability(durability)
        self.flows: dict[str, FlowDef] = {}
        self.versions: dict[str, dict[str, FlowDef]] = {}
        self.effects: dict[str, EffectDef] = {}
        self.grants = grants or GrantPolicy()  # who may grant which capabilities
        # Resumes of Loom's own gates are refused from outside; a primitive's gates are
        # checked as it says (``loom.kernel.primitive``: a child's end, read from its log).
        own = own_gate_checks([*KERNEL_GATES, *INSTALLED.own_gates])
        self.resume_checks: dict[str, ResumeCheck] = {**own, **INSTALLED.resume_checks}
        # What primitives declared on the app (queues, schedules), by primitive: each reads
        # its own through a typed accessor of its module.
        self.declared: dict[str, dict[str, Any]] = {}

    def resume_check(self, on: str) -> Callable[[ResumeCheck], ResumeCheck]:
        """Register the check every resume of gates on ``on`` must pass, whatever its route.

        A plugin whose gates take structured replies (A2UI's function results) registers one,
        so a reply sent through a generic resume endpoint is validated exactly as the
        plugin's own endpoint validates it: refused with nothing appended, or admitted.
        """

        def register(check: ResumeCheck) -> ResumeCheck:
            if on in self.resume_checks:
                raise ConfigurationError(f"a resume check for {on!r} is registered twice")
            self.resume_checks[on] = check
            return check

        return register

    def flow(
        self,
        name: str,
        *,
        version: str | int = "1",
        timeout: float | timedelta | None = None,
        cleanup_timeout: float | timedelta = 300.0,
        durability: str | None = None,
        limits: Limits | None = None,
    ) -> Callable[[F], F]:
        """Register an ``async def f(ctx, input)`` as version ``version`` of the flow ``name``.

        Versions of one flow live side by side: new executions start on the latest (numbers
        compare numerically), and each execution runs to its end on the version it started
        on, so a version can be deleted once no live execution uses it (``loom versions``).

        ``timeout`` bounds an execution from its start (a start may override it): past it
        the execution is cancelled. A cancelled execution's ``except``/``finally`` blocks
        may run effects for ``cleanup_timeout`` (see :mod:`loom.kernel.cancellation`).
        ``durability`` (default: the app's) is ``"strict"`` or ``"batched"``: see
        :mod:`loom.kernel.durability`. ``limits`` (default: the app's) bound each execution's
        events, runs, children and messages: see :mod:`loom.kernel.execution_limits`.
        """
        tag = check_version(version)
        bounds = flow_limits(name, timeout, cleanup_timeout)

        def register(fn: F) -> F:
            known = self.versions.setdefault(name, {})
            if tag in known:
                raise ConfigurationError(f"flow {name!r} version {tag} is registered twice")
            known[tag] = FlowDef(name, fn, tag, *bounds, durability or self.durability, limits)
            self.flows[name] = known[max(known, key=version_key)]
            return fn

        return register

    def effect(
        self,
        name: str,
        *,
        idempotent: bool = True,
        retry: Retry | None = None,
        timeout: float | timedelta | None = None,
        requires: Iterable[str] = (),
    ) -> Callable[[Callable[..., Any]], EffectDef]:
        """Register ``def/async def e(ctx, input)`` as the effect ``name``.

        Args:
            name: The effect's stable name; it is recorded in the log.
            idempotent: False makes the runtime write an intent record before each
                invocation and park the step in doubt if a crash hides the outcome.
            retry: Retry policy inside one execute call (default: 3 attempts).
            timeout: Bound on each invocation; a timed-out attempt is cancelled.
            requires: Capabilities the execution must have been granted.
        """

        def register(fn: Callable[..., Any]) -> EffectDef:
            if name in self.effects:
                raise ConfigurationError(f"effect {name!r} is registered twice")
            definition = EffectDef(
                name, fn, idempotent, retry or Retry(), seconds(timeout), frozenset(requires)
            )
            self.effects[name] = definition
            return definition

        return register

    def get_flow(self, name: str, version: str | int | None = None) -> FlowDef:
        """Version ``version`` of the flow ``name`` (default: the latest).

        Raises:
            UnknownFlowError: No flow is registered as ``name``.
            UnknownFlowVersionError: The flow exists, but not in that version.
        """
        try:
            known = self.versions[name]
        except KeyError:
            names = ", ".join(sorted(self.flows)) or "none"
            raise UnknownFlowError(
                f"unknown flow {name!r} (registered: {names})", details={"flow": name}
            ) from None
        if version is None:
            return self.flows[name]
        try:
            return known[str(version)]
        except KeyError:
            have = sorted(known, key=version_key)
            raise UnknownFlowVersionError(
                f"flow {name!r} has no version {version} in this deployment (registered: "
                f"{', '.join(have)})",
                details={"flow": name, "version": str(version), "registered": have},
            ) from None

    def get_effect(self, name: str) -> EffectDef:
        """The effect registered as ``name``, or :class:`UnknownEffectError`."""
        try:
            return self.effects[name]
        except KeyError:
            raise UnknownEffectError(f"unknown effect {name!r}", details={"effect": name}) from None
