"""A stand-in for Cloud Run's front end in the end-to-end test: one URL for a service, each
request sent to the next instance that accepts a connection.

An instance that refuses connections (it was killed) is skipped, as Cloud Run routes away
from a dead instance. A request whose instance dies while handling it answers 502, as Cloud
Run answers a 5xx: the caller (Cloud Tasks) retries, and the retry reaches another instance.
"""

from __future__ import annotations

import http.client
import itertools
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests import procs

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Frontend:
    """Round-robin over ``backends`` (``127.0.0.1:PORT`` each), served on a loopback port.

    Attributes:
        backends: Where requests go; may be filled in after :meth:`start`.
        served: ``(backend, path, status)`` of every request answered by an instance.
    """

    backends: list[str] = field(default_factory=list[str])
    served: list[tuple[str, str, int]] = field(default_factory=list[tuple[str, str, int]])
    port: int = 0
    _httpd: ThreadingHTTPServer | None = None
    _turn: Any = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        """The service URL."""
        return f"http://{procs.LOOPBACK}:{self.port}"

    def _order(self) -> list[str]:
        with self._lock:
            first = next(self._turn) % max(1, len(self.backends))
        return self.backends[first:] + self.backends[:first]

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Any:
        """Send one request on; return ``(status, headers, body)``."""
        for backend in self._order():
            host, port = backend.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            try:
                conn.request(method, path, body=body, headers=headers)
            except ConnectionRefusedError:
                conn.close()
                continue  # a dead instance: route to the next one
            try:
                response = conn.getresponse()
                answer = response.status, response.getheaders(), response.read()
            except (OSError, http.client.HTTPException):
                answer = 502, [], b'{"code": "instance_died"}'
            finally:
                conn.close()
            self.served.append((backend, path, answer[0]))
            return answer
        return 503, [], b'{"code": "no_instance"}'

    def start(self) -> None:
        """Serve on a free loopback port."""
        frontend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                status, reply_headers, reply = frontend.forward(
                    self.command, self.path, headers, body
                )
                self.send_response(status)
                for key, value in reply_headers:
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_GET = do_POST = _relay

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._httpd = ThreadingHTTPServer((procs.LOOPBACK, 0), Handler)
        self.port = int(self._httpd.server_address[1])
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        """Stop serving."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
