"""The example end to end: a server process, a client, a SIGKILL, a verdict, two replays.

1. Grain A: ``profile.greet`` reads the client's locale — the request goes down SSE, the
   signed answer comes up in a POST and resumes the gate. Then three bad replies are refused:
   a late duplicate, an unsolicited one and an unsigned one.
2. Grain B: ``checkout.submit`` asks the client to ``confirmAndSubmit`` over WebSocket. The
   client submits (recording the call id in its ledger) and, before its reply is sent, the
   server process is killed with SIGKILL. A fresh server process rebuilds the execution,
   finds the intent record with no outcome and parks the step ``in_doubt``; the operator
   finds the call id in the client's ledger and records the verdict ``performed`` with the
   client's result; the flow completes. The client submitted exactly once.
3. Both logs replayed with transports that fail if touched: same outputs, no client contact.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from examples.a2ui_callfunction.app import offline_app
from examples.a2ui_callfunction.client import DemoClient
from loom.kernel.fold import fold
from loom.plugins.a2ui import CallRendererFunctionPayload, sign_body
from loom.store import SqliteEventStore
from loom.testing import replay

ROOT = Path(__file__).resolve().parents[2]
Say = Callable[[str], None]


@dataclass
class Report:
    """What the run came to, for the console and for tests."""

    ids: dict[str, str] = field(default_factory=dict[str, str])
    outputs: dict[str, Any] = field(default_factory=dict[str, Any])
    call_ids: dict[str, str] = field(default_factory=dict[str, str])
    refused: dict[str, int] = field(default_factory=dict[str, int])
    in_doubt: dict[str, Any] = field(default_factory=dict[str, Any])
    killed_exit: int | None = None
    submissions: int = 0
    replays: dict[str, Any] = field(default_factory=dict[str, Any])
    client_calls_during_replay: int = 0


@dataclass
class Server:
    """A server child process and its ports."""

    proc: asyncio.subprocess.Process
    http: int
    ws: int

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws}"


class Processes:
    """Every server process started, each stopped by its PID at the end."""

    def __init__(
        self, store: Path, secret: bytes, logs: Path, ports: tuple[int, int] = (0, 0)
    ) -> None:
        self.store, self.secret, self.logs = store, secret, logs
        self.ports = ports  # (http, ws): 0 picks a free port
        self.started: list[asyncio.subprocess.Process] = []

    async def start(self) -> Server:
        """Start a server on the shared store and wait for its READY line."""
        log = self.logs / f"server-{len(self.started) + 1}.log"
        env = {
            **os.environ,
            "A2UI_DEMO_SECRET": self.secret.decode(),
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), str(ROOT / "functions"), os.environ.get("PYTHONPATH", "")]
            ),
        }
        with log.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "examples.a2ui_callfunction.server",
                "--store",
                str(self.store),
                "--http-port",
                str(self.ports[0]),
                "--ws-port",
                str(self.ports[1]),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        self.started.append(proc)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if not line.startswith(b"READY "):
            raise RuntimeError(f"server did not start:\n{log.read_text()[-2000:]}")
        ports = json.loads(line[6:])
        return Server(proc, ports["http"], ports["ws"])

    async def stop_all(self) -> None:
        """SIGTERM each live process, SIGKILL it if it lingers."""
        for proc in self.started:
            if proc.returncode is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                await proc.wait()


class Control:
    """The operator's HTTP calls to a server (signed like every POST)."""

    def __init__(self, server: Server, secret: bytes) -> None:
        self.http = httpx.AsyncClient(base_url=server.http_url, trust_env=False, timeout=15.0)
        self.secret = secret

    async def __aenter__(self) -> Control:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"X-A2UI-Signature": sign_body(self.secret, data)}
        response = await self.http.post(path, content=data, headers=headers)
        response.raise_for_status()
        return response.json()

    async def wait(self, eid: str, status: str, within: float = 15.0) -> dict[str, Any]:
        """Poll until the execution reaches ``status``."""
        async with asyncio.timeout(within):
            while True:
                result = (await self.http.get(f"/executions/{eid}")).json()
                if result.get("status") == status:
                    return result
                await asyncio.sleep(0.02)


async def grain_a(
    server: Server, client: DemoClient, secret: bytes, report: Report, say: Say
) -> str:
    """Read the client's locale through a gate; then show three bad replies refused."""
    say("— grain A: getLocale over SSE down + signed POST up (a gate)")
    await client.follow_events("profile-7")
    eid = report.ids["greet"]
    async with Control(server, secret) as control:
        await control.post(
            "/executions",
            {"flow": "profile.greet", "execution_id": eid, "input": {"surface_id": "profile-7"}},
        )
        result = await control.wait(eid, "completed")
    call = client.received[-1]
    call_id, name = call.functionCallId, call.callFunction.call
    report.outputs[eid], report.call_ids[eid] = result["output"], call_id
    say(
        f"  renderer answered {name} (functionCallId {call_id}); flow completed: {result['output']}"
    )
    answered = _reply_body(call_id, {"locale": "de-DE"})
    report.refused["late duplicate"] = await client.post_reply("profile-7", answered)
    forged = _reply_body(f"{eid}:getLocale#9", {"locale": "de-DE"})
    report.refused["unsolicited"] = await client.post_reply("profile-7", forged)
    report.refused["unsigned"] = await client.post_reply("profile-7", answered, sign=False)
    say(f"  refused replies (HTTP status): {report.refused}")
    return eid


def _reply_body(call_id: str, value: Any) -> bytes:
    body = {
        "version": "v1.0",
        "rendererFunctionResponse": {"functionCallId": call_id, "value": value},
    }
    return json.dumps(body).encode()


async def grain_b(
    procs: Processes, first: Server, client: DemoClient, report: Report, say: Say
) -> str:
    """Submit from the client over WebSocket; kill the server mid-call; verdict; complete."""
    say("— grain B: confirmAndSubmit over WebSocket (a non-idempotent effect)")
    killed = asyncio.Event()

    async def crash(call: CallRendererFunctionPayload) -> None:
        if call.callFunction.call == "confirmAndSubmit" and not killed.is_set():
            os.kill(first.proc.pid, signal.SIGKILL)  # a real process death, mid-call
            report.killed_exit = await first.proc.wait()
            say(
                f"  renderer submitted (functionCallId {call.functionCallId}); server pid "
                f"{first.proc.pid} "
                f"killed before the reply (exit {report.killed_exit})"
            )
            killed.set()

    client.before_reply = crash
    await client.connect("checkout-42")
    eid = report.ids["submit"]
    order = {"surface_id": "checkout-42", "order_id": "A-1001", "total": 4200}
    async with Control(first, procs.secret) as control:
        await control.post(
            "/executions", {"flow": "checkout.submit", "execution_id": eid, "input": order}
        )
    await asyncio.wait_for(killed.wait(), 15)
    second = await procs.start()
    say(
        f"  fresh server pid {second.proc.pid} (http {second.http}, ws {second.ws}) "
        "rebuilds the execution from the log"
    )
    async with Control(second, procs.secret) as control:
        return await _resolve(control, eid, client, report, say)


async def _resolve(control: Control, eid: str, client: DemoClient, report: Report, say: Say) -> str:
    """Rebuild → in doubt → the operator's verdict from the client's ledger → completed."""
    result = await control.post(f"/executions/{eid}/execute", {})
    doubt = result["in_doubt"][0]
    report.in_doubt = {"status": result["status"], **doubt}
    say(
        f"  status {result['status']}: step {doubt['step_id']} ({doubt['effect']}), "
        f"key {doubt['idempotency_key']}"
    )
    record = client.ledger().get(doubt["idempotency_key"])
    say(f"  operator finds the call id in the client's ledger: {record}")
    result = await control.post(
        f"/executions/{eid}/verdict",
        {
            "step_id": doubt["step_id"],
            "verdict": "performed",
            "output": record,
            "by": "ops@example.com",
        },
    )
    report.outputs[eid], report.call_ids[eid] = result["output"], doubt["idempotency_key"]
    report.submissions = client.submissions
    say(
        f"  verdict performed → {result['status']}: {result['output']} "
        f"(client submissions: {client.submissions})"
    )
    return eid


async def replay_logs(
    store_path: Path, ids: list[str], client: DemoClient, report: Report, say: Say
) -> None:
    """Replay each log with transports that fail if used; compare with the recorded outputs."""
    say("— replay from the logs, with no way to reach the client")
    store = SqliteEventStore(store_path)
    before = len(client.received)
    try:
        for eid in ids:
            events = await store.read(eid)
            outcome = await replay(offline_app(), events)
            same = outcome.status == "completed" and outcome.output == fold(events).output
            report.replays[eid] = {"status": outcome.status, "same_output": same}
            say(f"  {eid}: replay {outcome.status}, same output: {same}")
    finally:
        await store.aclose()
    report.client_calls_during_replay = len(client.received) - before


async def run_example(workdir: Path, say: Say = print, ports: tuple[int, int] = (0, 0)) -> Report:
    """Run the whole example in ``workdir``; every process it starts is stopped at the end.

    ``ports`` are the servers' HTTP and WebSocket ports (0: free ones); the server that
    replaces the killed one listens on the same ports.
    """
    secret = secrets.token_hex(16).encode()
    procs = Processes(workdir / "loom.db", secret, workdir, ports)
    tag = secrets.token_hex(3)  # a fresh pair of execution ids on every run
    report = Report(ids={"greet": f"greet-{tag}", "submit": f"submit-{tag}"})
    try:
        first = await procs.start()
        say(
            f"server pid {first.proc.pid}: http {first.http}, ws {first.ws}, "
            f"store {procs.store.name}"
        )
        client = DemoClient(first.http_url, first.ws_url, secret, workdir / "ledger.json")
        try:
            ids = [
                await grain_a(first, client, secret, report, say),
                await grain_b(procs, first, client, report, say),
            ]
            await replay_logs(procs.store, ids, client, report, say)
        finally:
            await client.aclose()
    finally:
        await procs.stop_all()
    return report
