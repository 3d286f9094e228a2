"""A task queue in the manner of Cloud Tasks, but harsher: every task goes to two or three
workers at once.

Cloud Tasks delivers at least once and retries a task until a delivery answers 2xx. The
chaos runs need more than its emulator does (it delivers one task at a time per queue,
never two copies at once), so this queue is the test's own: a fault injector standing in
for Cloud Tasks, not a model of it. Workers hand it their dispatches over HTTP
(``LOOM_DISPATCH=inprocess://`` with ``LOOM_WORKER`` set to its URL: the worker's
dispatcher posts ``/execute`` here and gets a placeholder result back at once); the test
process puts its own dispatches (starts, verdicts, sweeps) directly. A task is done when
one of its deliveries is answered 2xx; otherwise it is delivered again after a backoff.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from loom.dispatch.base import Dispatcher
from loom.wire import ExecutionPackage

Deliver = Callable[[str, dict[str, Any]], int]  # (worker base URL, package) -> HTTP status


class TaskQueue:
    """Tasks delivered ``copies`` at a time to distinct workers, retried until one is 2xx.

    Args:
        workers: The base URLs of the workers that are up now.
        copies: How many deliveries of one attempt (each attempt draws from this range).
        backoff: Seconds before a failed task is first delivered again, and at most
            (doubling in between, with jitter, as Cloud Tasks' retry config does).
        threads: Deliveries in flight at most.
        seed: For the draws.
    """

    def __init__(
        self,
        workers: Callable[[], list[str]],
        *,
        copies: tuple[int, int] = (2, 3),
        backoff: tuple[float, float] = (0.2, 10.0),
        threads: int = 48,
        seed: int = 0,
    ) -> None:
        self._workers = workers
        self._copies = copies
        self._backoff = backoff
        self._rng = random.Random(seed)
        self._heap: list[tuple[float, int, dict[str, Any], int]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="deliver")
        self._client = httpx.Client(timeout=httpx.Timeout(60.0, connect=2.0))
        self._closed = False
        self._busy = 0
        self._names: set[str] = set()
        self.stats: Counter[str] = Counter()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._threads = [
            threading.Thread(target=self._server.serve_forever, daemon=True),
            threading.Thread(target=self._pump, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def url(self) -> str:
        """Where workers post their dispatches (``LOOM_WORKER``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def put(
        self, package: dict[str, Any], not_before: float | None = None, *, again: int = 0
    ) -> None:
        """Add a task, due at ``not_before`` (epoch seconds) or now. A task named (by its
        ``dispatch_id``) like one added before is dropped, as Cloud Tasks refuses a task
        name it has seen (ALREADY_EXISTS, which the dispatcher takes for success);
        ``again``: the same task, delivered again after that many failed attempts."""
        name = package.get("dispatch_id")
        with self._cond:
            if name is not None and not again:
                if name in self._names:
                    self.stats["deduplicated"] += 1
                    return
                self._names.add(name)
            self.stats["tasks" if not again else "attempts again"] += 1
            due = not_before or time.time()
            heapq.heappush(self._heap, (due, next(self._order), package, again))
            self._cond.notify()

    def pending(self, due_by: float | None = None) -> int:
        """Tasks queued (due by ``due_by``, if given) or being delivered."""
        with self._cond:
            due = [t for t in self._heap if due_by is None or t[0] <= due_by]
            return len(due) + self._busy

    def close(self) -> None:
        """Stop delivering and serving."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    # -- delivery ---------------------------------------------------------------------------

    def _pump(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.time()):
                    delay = self._heap[0][0] - time.time() if self._heap else None
                    self._cond.wait(timeout=delay if delay is None or delay > 0 else 0)
                if self._closed:
                    return
                _, _, package, failed = heapq.heappop(self._heap)
                self._busy += 1
            self._pool.submit(self._attempt, package, failed)

    def _attempt(self, package: dict[str, Any], failed: int) -> None:
        try:
            ok = self._deliver_copies(package)
        finally:
            with self._cond:
                self._busy -= 1
        if not ok and not self._closed:
            low, high = self._backoff
            wait_s = min(high, low * 2**failed) * self._rng.uniform(0.8, 1.2)
            self.put(package, time.time() + wait_s, again=failed + 1)

    def _deliver_copies(self, package: dict[str, Any]) -> bool:
        up = self._workers()
        waited = time.monotonic()
        while not up and not self._closed and time.monotonic() - waited < 10:
            time.sleep(0.05)  # every worker is starting again: Cloud Run would queue it too
            up = self._workers()
        if not up:
            self.stats["no worker up"] += 1
            return False
        count = min(len(up), self._rng.randint(*self._copies))
        targets = self._rng.sample(up, count)
        self.stats["deliveries"] += count
        with ThreadPoolExecutor(count) as each:
            futures = [each.submit(self._post, base, package) for base in targets]
            wait(futures)
        return any(200 <= f.result() < 300 for f in futures)

    def _post(self, base: str, package: dict[str, Any]) -> int:
        try:
            answer = self._client.post(f"{base}/execute", json={"executionPackage": package})
        except httpx.HTTPError:
            self.stats["unreachable"] += 1
            return 0
        self.stats[f"http {answer.status_code}"] += 1
        return answer.status_code

    # -- the endpoint workers dispatch to ------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        queue = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    package = body["executionPackage"]
                except (ValueError, KeyError, TypeError, OSError):  # a worker killed mid-post
                    self.send_error(400)
                    return
                queue.put(package)
                queue.stats["dispatched by workers"] += 1
                placeholder = {
                    "execution_id": package["execution_id"],
                    "flow": package.get("flow") or "",
                    "status": "running",
                    "last_seq": 0,
                }
                data = json.dumps(placeholder).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the worker died meanwhile
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        return Handler


class QueueDispatcher(Dispatcher):
    """The test process's own dispatches (starts, verdicts, sweeps) go on the queue.

    ``arrivals``: when each execution created ahead arrives; a dispatch before that (the
    sweep finds the execution idle since its creation) waits for it, as the execution
    would not exist yet outside this test.
    """

    inline = False

    def __init__(self, queue: TaskQueue, arrivals: dict[str, float] | None = None) -> None:
        self.queue = queue
        self.arrivals = arrivals if arrivals is not None else {}

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        arrival = self.arrivals.get(package.execution_id, 0.0)
        if arrival > (not_before or time.time()):
            return  # its own arrival dispatches it
        body = package.model_dump(mode="json") | {"dispatch_id": dispatch_id}
        self.queue.put(body, not_before)
