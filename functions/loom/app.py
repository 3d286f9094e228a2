"""Where the app is assembled: the kernel, the primitives installed on it, ``Loom`` and
``FlowContext``.

The kernel (``loom.kernel``) imports no primitive. Each primitive hands the kernel a
``Primitive`` (``loom.kernel.primitive``); this module lists them, installs them once for
the process, and builds the two public classes from the kernel's and theirs:
``FlowContext`` (the kernel's ``ctx`` methods and each primitive's) and ``Loom`` (the
kernel's registry of flows and effects, with the primitives' declarations: queues and
schedules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from loom.kernel import primitive
from loom.kernel.app import App
from loom.kernel.context import EffectContext
from loom.kernel.defs import EffectDef, FlowDef, Retry, call_effect, to_json_value
from loom.ops import fork, retention, sweep
from loom.primitives import (
    children,
    continuation,
    event_reads,
    messages,
    patches,
    published,
    queries,
    queues,
    schedules,
    streams,
    updates,
)
from loom.primitives.children import ChildrenContext
from loom.primitives.continuation import ContinuationContext
from loom.primitives.event_reads import EventReadsContext
from loom.primitives.messages import MessagesContext
from loom.primitives.patches import PatchesContext
from loom.primitives.published import PublishedContext
from loom.primitives.queries import QueriesContext
from loom.primitives.streams import StreamsContext
from loom.primitives.updates import UpdatesContext

if TYPE_CHECKING:
    from loom.primitives.queues import QueueDef
    from loom.primitives.schedules import Schedule

__all__ = [
    "EffectContext",
    "EffectDef",
    "FlowContext",
    "FlowDef",
    "Loom",
    "Retry",
    "call_effect",
    "to_json_value",
]


class FlowContext(
    ChildrenContext,
    MessagesContext,
    PublishedContext,
    ContinuationContext,
    PatchesContext,
    UpdatesContext,
    QueriesContext,
    EventReadsContext,
    StreamsContext,
):
    """The flow's only door to the world. Every call is recorded or served from the log.

    The kernel's steps (``execute``, ``suspend``, ``sleep``, ``now``, ``uuid``,
    ``random``) and those of the installed primitives (child flows, messages, published
    values and reading another execution's, continue-as-new, patches, update and query
    handlers, streams).
    """

    __slots__ = ()


PRIMITIVES: tuple[primitive.Primitive, ...] = (
    children.PRIMITIVE,
    messages.PRIMITIVE,
    published.PRIMITIVE,
    continuation.PRIMITIVE,
    patches.PRIMITIVE,
    queues.PRIMITIVE,
    schedules.PRIMITIVE,
    updates.PRIMITIVE,
    queries.PRIMITIVE,
    event_reads.PRIMITIVE,
    streams.PRIMITIVE,
    fork.PRIMITIVE,
    retention.PRIMITIVE,
    sweep.PRIMITIVE,
)
"""What this assembly installs on the kernel, in order."""

primitive.install(PRIMITIVES, FlowContext)


class Loom(App):
    """The application object: flows and effects registered by name, and the queues and
    schedules declared for them.

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

    @property
    def queues(self) -> dict[str, QueueDef]:
        """The declared queues, by name (:mod:`loom.primitives.queues`)."""
        return queues.declared(self)

    @property
    def schedules(self) -> dict[str, Schedule]:
        """The declared schedules, by name (:mod:`loom.primitives.schedules`)."""
        return cast("dict[str, Schedule]", self.declared.setdefault("schedules", {}))

    def schedule(self, cron: str, *, flow: str, **options: Any) -> Schedule:
        """Start ``flow`` on every tick of ``cron``, once per tick: see :mod:`loom.primitives.schedules`
        (options: ``input``, ``name``, ``timezone``, ``catch_up``)."""
        from loom.primitives.schedules import (
            declare,  # imported on use: a cron parser costs cold starts
        )

        return declare(self.schedules, cron, flow=flow, **options)

    def queue(self, name: str, **limits: Any) -> QueueDef:
        """Declare a queue executions can start on: see :mod:`loom.primitives.queues` (limits:
        ``concurrency``, ``rate_per_second``, ``lease_ttl``, ``shards``)."""
        return queues.declare(self.queues, name, **limits)
