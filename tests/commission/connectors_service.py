"""A small Connectors service for the tests: real HTTP on loopback, ``v1alpha2`` (ADR 0009).

It serves one instance. By default it behaves: a ``mutation`` operation records an attempt and
answers success naming it; a ``query`` operation answers success with a complete audit record
and no attempt; an unknown operation or another instance is an error whose attempt is
``not_attempted``; a wrong bearer credential is 401. A test can script the next answers
(``answers``) to produce every row of ADR 0009's table, including malformed and dropped ones.
Every request is counted, so "invoked once, never resent" is asserted on what arrived.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DROP = "drop"  # close the connection without answering
Answer = tuple[int, Any] | str  # (status, JSON body or raw bytes), or DROP


@dataclass
class ConnectorsService:
    """The service's state; start it with :meth:`start`, stop it with :meth:`stop`."""

    instance: str = "github-main"
    token: str = "connector-secret"
    operations: dict[str, str] = field(
        default_factory=lambda: {"issues.comment.create": "mutation", "issues.get": "query"}
    )
    describe_as: str | None = None  # describe itself as another instance
    describe_answer: Answer | None = None  # script describe's answer
    answers: list[Answer] = field(default_factory=list[Answer])  # scripted invoke answers
    delay_s: float = 0.0  # wait before answering invoke
    describe_calls: int = 0
    invoke_calls: int = 0
    other_calls: list[str] = field(default_factory=list[str])
    invoked: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    headers: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    _attempts: dict[str, str] = field(default_factory=dict[str, str])
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> int:
        return self.describe_calls + self.invoke_calls + len(self.other_calls)

    def start(self) -> ConnectorsService:
        self._server = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def describe(self) -> Answer:
        if self.describe_answer is not None:
            return self.describe_answer
        operations = {name: {"profile": p} for name, p in self.operations.items()}
        body = {"api": "v1alpha2", "instance": self.describe_as or self.instance}
        return 200, {**body, "operations": operations}

    def invoke(self, call: dict[str, Any]) -> Answer:
        if self.answers:
            return self.answers.pop(0)
        profile = self.operations.get(call.get("operation", ""))
        if call.get("instance") != self.instance or profile is None:
            return 200, _error("unknown_operation", "att-none", "not_attempted")
        n = self.invoke_calls
        if profile == "mutation":
            attempt = self._attempts.setdefault(call["idempotency_key"], f"att-{n}")
            return 200, {
                "outcome": "success",
                "output": {"comment_id": n},
                "attempt": {"id": attempt, "status": "performed"},
                "audit": {"id": f"aud-{n}", "complete": True},
            }
        return 200, {
            "outcome": "success",
            "output": {"issue": {"number": 7, "title": "crash on start"}},
            "audit": {"id": f"aud-{n}", "complete": True},
        }


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (a timeout test) is expected; stay quiet about it."""


def _error(code: str, attempt: str, status: str) -> dict[str, Any]:
    return {
        "outcome": "error",
        "error": {"code": code, "message": code.replace("_", " ")},
        "attempt": {"id": attempt, "status": status},
    }


def error_answer(code: str, attempt_status: str | None) -> dict[str, Any]:
    """An error answer, with a recorded attempt of ``attempt_status`` or none."""
    body = _error(code, "att-err", attempt_status or "")
    if attempt_status is None:
        del body["attempt"]
    return body


def _handler(service: ConnectorsService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _authorized(self) -> bool:
            return self.headers.get("Authorization") == f"Bearer {service.token}"

        def do_GET(self) -> None:
            if self.path != "/v1alpha2/describe":
                return self._other()
            with service.lock:
                service.describe_calls += 1
            if not self._authorized():
                return self._send((401, {"code": "unauthenticated"}))
            self._send(service.describe())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            if self.path != "/v1alpha2/invoke":
                return self._other()
            with service.lock:
                service.invoke_calls += 1
                service.headers.append(dict(self.headers.items()))
                call: dict[str, Any] = json.loads(raw)
                service.invoked.append(call)
                answer: Answer = service.invoke(call) if self._authorized() else (401, {})
            if service.delay_s:
                time.sleep(service.delay_s)
            self._send(answer)

        def _other(self) -> None:
            with service.lock:
                service.other_calls.append(f"{self.command} {self.path}")
            self._send((404, {"code": "not_found"}))

        def _send(self, answer: Answer) -> None:
            if answer == DROP:
                self.close_connection = True
                self.connection.close()
                return
            assert not isinstance(answer, str)
            status, body = answer
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            if status in (301, 302, 307, 308):
                self.send_header("Location", "/v1alpha2/invoke-elsewhere")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
