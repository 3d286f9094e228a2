"""The core routes: an execute call, a start, a resume (request and response models:
:mod:`loom.workers.http_models`). Nothing here keeps state between requests: each call reads
what it needs from the store through the runtime.
"""

from __future__ import annotations

from collections.abc import Sequence

from flask import Request

from loom.errors import UnknownExecutionError
from loom.grants import ANONYMOUS
from loom.ids import check_execution_id
from loom.primitives.queues import queue_ref
from loom.runtime import Runtime
from loom.workers.http_base import (
    Reply,
    Services,
    authorize,
    bind_result,
    caller,
    check_caller,
    parse_json,
    parse_model,
    read_body,
    run,
)
from loom.workers.http_models import (
    ExecuteRequest,
    ResumeRequest,
    StartRequest,
)
from loom.workers.logs import bind
from loom.workers.signed_ids import signed_default_id


def execute(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /execute``: allocate → execute → release on the injected worker.

    The caller check is told the flow the execution *is* (read from the store), never the
    package's ``flow``, which the caller writes: ``None`` for an execution that does not
    exist, so a check scoped per flow refuses it as it refuses another flow's.
    """
    raw = read_body(request, s.max_body)
    body = parse_model(ExecuteRequest, parse_json(request, raw))
    package = body.executionPackage
    if s.caller_auth is not None:
        flow = run(_stored_flow(s.runtime, package.execution_id))
        check_caller(s, request, "execute", package.execution_id, raw, flow, disclose=False)
    bind(execution_id=package.execution_id)
    result = run(s.worker.run(package))
    bind_result(result)
    return 200, result


async def _stored_flow(runtime: Runtime, execution_id: str) -> str | None:
    """The flow of the stored execution, or ``None`` when there is none."""
    try:
        return (await runtime.store.summary(execution_id)).flow
    except UnknownExecutionError:
        return None


def start(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions``: start (idempotent), then run until it blocks."""
    raw = read_body(request, s.max_body)
    body = parse_model(StartRequest, parse_json(request, raw))
    check_caller(s, request, "start", body.execution_id or "", raw, body.flow)
    by = _start_principal(s, request, raw, body)
    eid, derived = body.execution_id, None
    if eid is None:  # a signed request's copy is the same start (loom.workers.signed_ids)
        eid = signed_default_id(request.headers, "start", "", "sig-")
        derived = "signed" if eid is not None else None
    bind(execution_id=eid, flow=body.flow)
    result = run(
        s.runtime.start(
            body.flow,
            body.input,
            execution_id=eid,
            capabilities=body.capabilities,
            by=by,
            version=body.version,
            queue=queue_ref(
                body.queue,
                body.partition_key,
                priority=body.priority,
                deduplication_id=body.deduplication_id,
                delay=body.delay,
                timeout=body.queue_timeout,
            ),
            timeout=body.timeout,
            budgets=body.limits,
            derived=derived,
        )
    )
    bind_result(result)
    return 200, result


def _start_principal(s: Services, request: Request, raw: bytes, body: StartRequest) -> str:
    """Who starts: the caller; else whoever the resume check accepts; else ``anonymous``.

    The grant policy then decides which of the asked capabilities that principal may grant.
    """
    who = caller(request)
    if who is not None:
        return who
    if "Authorization" in request.headers or "X-Loom-Signature" in request.headers:
        return authorize(s.resume_auth, "start", body.execution_id or "", request, raw)
    bind(principal=ANONYMOUS)
    return ANONYMOUS


def resume(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/resume``: authenticated, then appended and run."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    raw = read_body(request, s.max_body)
    by = authorize(s.resume_auth, "resume", execution_id, request, raw)
    body = parse_model(ResumeRequest, parse_json(request, raw))
    result = run(s.runtime.resume(execution_id, body.on, body.correlation_key, body.payload, by=by))
    bind_result(result)
    return 200, result
