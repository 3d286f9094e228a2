"""A fake of the Cloud Run Admin API (``google.cloud.run.v2.Services``), served over gRPC.

Why a fake: Google ships no emulator for the Cloud Run Admin API, and the parts of it Loom
uses are small — ``GetService`` answering a service's ``uri``, ``generation``,
``observed_generation``, ``terminal_condition``, ``latest_ready_revision`` and
``traffic_statuses``. Serving exactly that from an in-process
gRPC server lets the tests drive the real ``google-cloud-run`` client (its request
serialization, routing headers and error mapping) instead of mocking it; every other method
answers ``UNIMPLEMENTED``, as an API this fake does not cover should.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from google.cloud import run_v2
from google.cloud.run_v2.services.services.transports import ServicesGrpcTransport

from tests import procs

_SUCCEEDED = run_v2.Condition.State.CONDITION_SUCCEEDED
_RECONCILING = run_v2.Condition.State.CONDITION_RECONCILING
_LATEST = run_v2.TrafficTargetAllocationType.TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST
_REVISION = run_v2.TrafficTargetAllocationType.TRAFFIC_TARGET_ALLOCATION_TYPE_REVISION


@dataclass
class FakeCloudRunAdmin:
    """Services by full name, served on ``127.0.0.1:port``.

    Attributes:
        services: ``projects/P/locations/L/services/S`` → the ``Service`` answered.
        calls: Names asked for by ``GetService``, in order.
        metadata: Request metadata of each call (e.g. the ``x-goog-request-params``
            routing header the real client adds).
    """

    services: dict[str, run_v2.Service] = field(default_factory=dict[str, run_v2.Service])
    calls: list[str] = field(default_factory=list[str])
    metadata: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    port: int = 0
    _server: grpc.Server | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"{procs.LOOPBACK}:{self.port}"

    def put(
        self,
        name: str,
        uri: str,
        *,
        ready: bool = True,
        generation: int = 1,
        observed_generation: int | None = None,
        state: run_v2.Condition.State | None = None,
        latest_ready_revision: str | None = None,
        traffic: list[tuple[str, int]] | None = None,
    ) -> run_v2.Service:
        """Define (or replace) a service as the API would describe it.

        Args:
            ready: Shorthand: the newest generation is ready (and serves all traffic).
            state: The terminal condition's state (default from ``ready``).
            latest_ready_revision: Default: the newest revision if ``ready``, else none.
            traffic: ``(revision, percent)`` as in ``traffic_statuses``; ``""`` for a
                ``LATEST`` entry. Default: all to ``LATEST``.
        """
        state = state if state is not None else (_SUCCEEDED if ready else _RECONCILING)
        short = name.rsplit("/", 1)[-1]
        if latest_ready_revision is None:
            latest_ready_revision = f"{short}-{generation:05d}" if ready else ""
        statuses = [
            run_v2.TrafficTargetStatus(
                type_=_REVISION if revision else _LATEST, revision=revision, percent=percent
            )
            for revision, percent in (traffic if traffic is not None else [("", 100)])
        ]
        service = run_v2.Service(
            name=name,
            uri=uri,
            generation=generation,
            observed_generation=generation if observed_generation is None else observed_generation,
            terminal_condition=run_v2.Condition(type_="Ready", state=state),
            latest_ready_revision=latest_ready_revision,
            traffic_statuses=statuses,
        )
        with self._lock:
            self.services[name] = service
        return service

    def client(self) -> run_v2.ServicesClient:
        """A real ``ServicesClient`` talking to this fake over plain gRPC."""
        channel = grpc.insecure_channel(self.host)
        return run_v2.ServicesClient(transport=ServicesGrpcTransport(channel=channel))

    def _get_service(
        self, request: run_v2.GetServiceRequest, context: grpc.ServicerContext
    ) -> run_v2.Service:
        with self._lock:
            self.calls.append(request.name)
            self.metadata.append({k: str(v) for k, v in context.invocation_metadata()})
            service = self.services.get(request.name)
        if service is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Resource '{request.name}' was not found")
        return service

    def start(self) -> None:
        """Serve on a free loopback port."""
        handler = grpc.method_handlers_generic_handler(
            "google.cloud.run.v2.Services",
            {
                "GetService": grpc.unary_unary_rpc_method_handler(
                    self._get_service,
                    request_deserializer=run_v2.GetServiceRequest.deserialize,
                    response_serializer=run_v2.Service.serialize,
                )
            },
        )
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((handler,))
        self.port = server.add_insecure_port(f"{procs.LOOPBACK}:0")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.stop(grace=0)
            self._server = None
