"""OpenTelemetry costs nothing to a process that does not use it: not imported by
``import loom`` nor by the Cloud Run entry point, and not by a run of a flow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import asyncio, sys
import main
from loom import FlowContext, Loom, EffectContext
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore

app = Loom("lazy")

@app.effect("e")
async def e(ctx: EffectContext, n: int) -> int:
    return n + 1

@app.flow("f")
async def f(ctx: FlowContext, n: int) -> int:
    return await ctx.execute(e, n)

async def run() -> str:
    result = await Runtime(app, SqliteEventStore(sys.argv[1])).start("f", 1, execution_id="x")
    return result.status

print(asyncio.run(run()), sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_opentelemetry_is_not_imported_unless_used(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path / "loom.db")],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{ROOT / 'functions'}:{ROOT / 'infra'}:{ROOT}", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "completed []"
