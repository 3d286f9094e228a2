"""OpenTelemetry traces and metrics, through ``opentelemetry-api`` only.

Spans: ``loom.execute`` per execute call, ``loom.step`` per step attempt and
``loom.store.<op>`` per event-store operation, with ``loom.execution_id``, ``loom.flow``,
``loom.step_id``, ``loom.effect`` and ``loom.attempt`` as attributes. Counters, derived
from the events a store append made durable (so they count what the log records, once):
``loom.kernel.steps`` (``outcome``: completed/failed), ``loom.retries``, ``loom.in_doubt`` and
``loom.kernel.verdicts`` (``verdict``).

The HTTP targets continue the caller's trace (W3C ``traceparent``, or Cloud Run's
``X-Cloud-Trace-Context``), and a dispatcher that sends work over the network passes the
current context on (:func:`outgoing_headers`), so the execute calls of one flow across
Cloud Tasks hops and crashes land in one trace.

Cost when nobody traces: ``import loom`` never imports OpenTelemetry. It is imported when
an HTTP request carries a trace header, or when the process has imported it already (an
app that configures the SDK). Whether a tracer or meter provider is set is looked up at
each execute call and traced request; until one is, no span is started, a step pays one
global lookup, and a store call nothing at all: the store operations are wrapped only once
a provider is found (:func:`trace_store_methods`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import sys
import weakref
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from loom.scope import off_scope_method

if TYPE_CHECKING:
    from werkzeug.datastructures import Headers

T = TypeVar("T")

_CLOUD_TRACE = re.compile(r"^([0-9a-fA-F]{32})/(\d+)(?:;o=([01]))?")
_STORE_OPS = (
    "create",
    "append",
    "load",
    "load_many",
    "read",
    "save_snapshot",
    "summary",
    "list",
    "delete_execution",
    "purge",
    "scan",
    "browse",
    "count_by_status",
)
_UNTRACED = contextlib.nullcontext()  # reusable: it holds nothing
# The operations whose first argument names one execution (an id, a request, a start).
_ONE_EXECUTION = frozenset(
    ("create", "append", "load", "read", "save_snapshot", "summary", "delete_execution")
)
# The flow of the execute call in progress: step spans are deeper than the call that knows it.
_FLOW: contextvars.ContextVar[str | None] = contextvars.ContextVar("loom_otel_flow", default=None)
# Set inside a store span: a store delegating to another store (or to super()) adds none.
_IN_STORE: contextvars.ContextVar[bool] = contextvars.ContextVar("loom_otel_store", default=False)


def _version() -> str:
    """The installed distribution's version (the instrumentation's), without importing the
    package ``loom`` this module sits under."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loom-cloudrun")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "0"


class _Api:
    """The imported OpenTelemetry API, the tracer and the counters (once per process)."""

    def __init__(self) -> None:
        from opentelemetry import metrics, propagate, trace

        __version__ = _version()
        self.trace = trace
        self.metrics = metrics
        self.propagate = propagate
        self.tracer = trace.get_tracer("loom", __version__)
        meter = metrics.get_meter("loom", __version__)
        self.steps = meter.create_counter("loom.steps", description="Steps that ended")
        self.retries = meter.create_counter("loom.retries", description="Step retries")
        self.in_doubt = meter.create_counter("loom.in_doubt", description="In-doubt parks")
        self.verdicts = meter.create_counter("loom.verdicts", description="Verdicts given")

    def tracing(self) -> bool:
        """Whether a tracer provider (an SDK) is set: spans are worth starting."""
        return not isinstance(self.trace.get_tracer_provider(), self.trace.ProxyTracerProvider)

    def metering(self) -> bool:
        """Whether a meter provider is set (the API's stand-in is a private proxy class)."""
        return "Proxy" not in type(self.metrics.get_meter_provider()).__name__


_api: _Api | None = None
# Cached answers, refreshed by every execute call and traced request (a provider, once set,
# stays set): the per-step and per-store-call checks are one global lookup each.
_tracing_on = False
_active = False  # tracing or metering


def _load() -> _Api | None:
    """The API, imported on first use; ``None`` when opentelemetry-api is not installed."""
    global _api
    if _api is None:
        try:
            _api = _Api()
        except ImportError:
            return None
    return _api


def api() -> _Api | None:
    """The API if this process uses OpenTelemetry (imported it), else ``None`` (cheap)."""
    if _api is not None:
        return _api
    return _load() if "opentelemetry.trace" in sys.modules else None


def refresh() -> bool:
    """Look again whether the process set a tracer or meter provider; True if tracing."""
    global _tracing_on, _active
    found = api()
    if found is not None and not (_tracing_on and _active):
        _tracing_on = _tracing_on or found.tracing()
        _active = _tracing_on or found.metering()
        if _active:
            _wrap_pending_stores()
    return _tracing_on


def tracing_on() -> bool:
    """Whether step spans are started (as :func:`refresh` last found): one global lookup."""
    return _tracing_on


def _tracing() -> _Api | None:
    return _api if _tracing_on else None


# -- spans -------------------------------------------------------------------------------


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any]) -> Generator[Any, None, None]:
    """A span named ``name`` under the current one, or nothing when nobody traces."""
    found = _tracing()
    if found is None:
        yield None
        return
    attrs = {k: v for k, v in attributes.items() if v is not None}
    with found.tracer.start_as_current_span(name, attributes=attrs) as current:
        yield current


def execute_attributes(execution_id: str, flow: str | None) -> dict[str, Any]:
    """The attributes of an execute call's span."""
    return {"loom.execution_id": execution_id, "loom.flow": flow or _FLOW.get()}


def traced_execute(
    fn: Callable[[Any, Any], Awaitable[T]],
) -> Callable[[Any, Any], Awaitable[T]]:
    """Wrap ``Runtime.execute``: one ``loom.execute`` span per call, with its outcome.

    Untraced, the wrapper hands back ``fn``'s own coroutine: no extra frame per call.
    """

    @functools.wraps(fn)
    def execute(self: Any, package: Any) -> Awaitable[T]:
        if not refresh():
            return fn(self, package)
        return _traced_execute(fn, self, package)

    return execute


async def _traced_execute(fn: Callable[[Any, Any], Awaitable[T]], self: Any, package: Any) -> T:
    with span("loom.execute", execute_attributes(package.execution_id, package.flow)) as sp:
        sp.set_attribute("loom.reason", package.reason)
        result = await fn(self, package)
        status = getattr(result, "status", None)
        if status is not None:
            sp.set_attribute("loom.status", str(status))
        if status == "failed":  # the execution failed: the span says so to any backend
            error: dict[str, Any] = getattr(result, "error", None) or {}
            described = f"{error.get('code', 'failed')}: {error.get('message', '')}"
            sp.set_status(_api.trace.Status(_api.trace.StatusCode.ERROR, described))  # type: ignore[union-attr]
        # The claim names the flow when the package did not, in this task; a call whose
        # claim ran in another task (the CLI's execute) reads it from the result.
        flow = package.flow or _FLOW.get() or getattr(result, "flow", None)
        if flow:
            sp.set_attribute("loom.flow", flow)
        return result


def flow_scope(flow: str) -> None:
    """Name the flow of the execute call in progress, for the step spans below it."""
    _FLOW.set(flow)


def step_span(ectx: Any) -> contextlib.AbstractContextManager[Any]:
    """The span of one attempt of a step (``ectx`` is its :class:`EffectContext`)."""
    if not _tracing_on:
        return _UNTRACED
    return span(
        "loom.step",
        {
            "loom.execution_id": ectx.execution_id,
            "loom.flow": _FLOW.get(),
            "loom.step_id": ectx.step_id,
            "loom.effect": ectx.effect,
            "loom.attempt": ectx.attempt,
            "loom.idempotency_key": ectx.idempotency_key,
        },
    )


def trace_store_methods(cls: type) -> None:
    """Wrap the event-store operations ``cls`` defines in ``loom.store.<op>`` spans: now if
    a tracer or meter provider is set, else as soon as :func:`refresh` finds one.

    Until then a store call runs the operation itself, not a wrapper that would only look
    up whether to trace (a call frame and an argument tuple on every append).
    """
    if _active:
        _wrap_store_methods(cls)
    else:
        _PENDING_STORES.add(cls)
        if _active:  # turned on meanwhile (another thread): wrap it now, once
            _wrap_pending_stores()


# Store classes whose operations are not wrapped yet (weakly: a class may go away).
_PENDING_STORES: weakref.WeakSet[type] = weakref.WeakSet()


def _wrap_pending_stores() -> None:
    while True:
        try:
            cls = _PENDING_STORES.pop()  # (one thread takes each class: wrapped once)
        except KeyError:
            return
        _wrap_store_methods(cls)


def _wrap_store_methods(cls: type) -> None:
    for op in _STORE_OPS:
        fn = cls.__dict__.get(op)
        if fn is not None and not getattr(fn, "__isabstractmethod__", False):
            # Off the flow's scope outermost: a span processor's work is no flow step either.
            setattr(cls, op, off_scope_method(_traced_store_op(op, fn)))


def _traced_store_op(op: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    name = f"loom.store.{op}"

    @functools.wraps(fn)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        # Untraced (or inside another store's span), ``fn``'s own coroutine: no extra frame.
        if not _active or _IN_STORE.get():
            return fn(self, *args, **kwargs)
        return _traced_store_call(op, name, fn, self, args, kwargs)

    traced._loom_traced = True  # type: ignore[attr-defined]  # (what tests look for)
    return traced


async def _traced_store_call(
    op: str,
    name: str,
    fn: Callable[..., Awaitable[Any]],
    store: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    token = _IN_STORE.set(True)
    try:
        with span(name, _store_attributes(op, store, args)):
            result = await fn(store, *args, **kwargs)
    finally:
        _IN_STORE.reset(token)
    if op == "append" and args:
        count_events(getattr(args[0], "events", ()))
    return result


def _store_attributes(op: str, store: Any, args: Sequence[Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"loom.store": type(store).__name__}
    first = args[0] if args else None
    eid = first if isinstance(first, str) else getattr(first, "execution_id", None)
    if isinstance(eid, str) and op in _ONE_EXECUTION:
        attrs["loom.execution_id"] = eid
    events = getattr(first, "events", None)
    if isinstance(events, list):
        attrs["loom.events"] = len(events)  # type: ignore[arg-type]
    return attrs


# -- counters ----------------------------------------------------------------------------


def count_events(events: Sequence[Any]) -> None:
    """Count the steps, retries, in-doubt parks and verdicts a durable append recorded."""
    found = _api
    if found is None or not _active:
        return
    for event in events:
        kind = type(event).__name__
        effect = getattr(event, "effect", None)
        attrs = {"effect": effect} if isinstance(effect, str) else {}
        if kind == "EffectCompleted":
            found.steps.add(1, {**attrs, "outcome": "completed"})
        elif kind == "EffectFailed":
            found.steps.add(1, {**attrs, "outcome": "failed"})
        elif kind == "EffectRetried":
            found.retries.add(1, attrs)
        elif kind == "EffectInDoubt":
            found.in_doubt.add(1, attrs)
        elif kind == "EffectVerdict":
            found.verdicts.add(1, {"verdict": str(getattr(event, "verdict", ""))})


# -- propagation -------------------------------------------------------------------------


@contextlib.contextmanager
def incoming(headers: Headers | Mapping[str, str]) -> Generator[None, None, None]:
    """Continue the trace an HTTP request carries (``traceparent``, else Cloud Run's
    ``X-Cloud-Trace-Context``) for the block; a request without one changes nothing."""
    carrier = _carrier(headers)
    found = _load() if carrier else None
    if found is None:
        yield
        return
    refresh()
    from opentelemetry import context

    token = context.attach(found.propagate.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


def _carrier(headers: Headers | Mapping[str, str]) -> dict[str, str]:
    parent = headers.get("traceparent")
    if parent:
        carrier = {"traceparent": parent}
        state = headers.get("tracestate")
        if state:
            carrier["tracestate"] = state
        return carrier
    return cloud_trace_to_traceparent(headers.get("X-Cloud-Trace-Context", ""))


def cloud_trace_to_traceparent(value: str) -> dict[str, str]:
    """``X-Cloud-Trace-Context: TRACE/SPAN;o=1`` as a W3C ``traceparent`` carrier."""
    match = _CLOUD_TRACE.match(value.strip())
    if match is None:
        return {}
    span_id = int(match.group(2))
    if not 0 < span_id < 2**64:
        return {}
    flags = "01" if match.group(3) == "1" else "00"
    return {"traceparent": f"00-{match.group(1).lower()}-{span_id:016x}-{flags}"}


def outgoing_headers() -> dict[str, str]:
    """The headers that carry the current trace to the next hop (``{}`` when none)."""
    found = api()
    if found is None:
        return {}
    carrier: dict[str, str] = {}
    found.propagate.inject(carrier)
    return carrier
