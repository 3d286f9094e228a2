"""A Firestore emulator JVM a fault test may pause (SIGSTOP), kill and restart by PID."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests import procs

PROJECT = "loom-test"


@dataclass
class Emulator:
    """One Firestore emulator JVM on a fixed port, which the test may pause or kill."""

    jar: Path
    port: int
    work: Path
    server: procs.Server | None = None

    @property
    def host(self) -> str:
        return f"{procs.LOOPBACK}:{self.port}"

    def start(self, import_data: Path | None = None) -> None:
        argv = [
            str(shutil.which("java")),
            "-Duser.language=en",
            "-cp",
            str(self.jar),
            "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
            "start",
            f"--host={procs.LOOPBACK}",
            f"--port={self.port}",
        ]
        if import_data is not None:
            argv.append(f"--import-data={import_data}")
        log = self.work / f"emulator-{time.monotonic_ns()}.log"
        self.server = procs.start("firestore-emulator", argv, port=self.port, log_path=log)
        procs.wait_http_ready(self.server, timeout=90)

    def signal(self, sig: signal.Signals) -> None:
        assert self.server is not None
        os.kill(self.server.proc.pid, sig)

    def export(self, database: str) -> Path:
        """Export one database; returns the metadata file to restart from."""
        target = self.work / f"export-{uuid.uuid4().hex[:8]}"
        target.mkdir()
        body = {
            "database": f"projects/{PROJECT}/databases/{database}",
            "export_directory": str(target),
        }
        request = urllib.request.Request(
            f"http://{self.host}/emulator/v1/projects/{PROJECT}:export",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200
        return next(target.rglob("*.overall_export_metadata"))

    def kill(self) -> None:
        """SIGCONT (it may be paused), then SIGKILL, and reap it."""
        assert self.server is not None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.server.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.server is not None and self.server.proc.poll() is None:
            self.signal(signal.SIGCONT)
            procs.stop(self.server)
