"""A store operation runs unwrapped until a tracer or meter provider is found, then gets
its ``loom.store.<op>`` span: the same spans as a wrapper that looked up whether to trace on
every call, without that wrapper's call on every append of a process that never traces.

In a fresh process (a tracer provider is set once per process): the store's operations are
untraced at first (the classes' own functions behind the guard that keeps them off a flow's
step scope, ``loom.scope``), and traced once ``refresh`` finds the provider, both for a
store class defined before it and one defined after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import asyncio, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from loom import telemetry
from loom.events import EffectCompleted, ExecutionStarted
from loom.store import AppendRequest, SqliteEventStore

class Before(SqliteEventStore):
    async def summary(self, execution_id):
        return await super().summary(execution_id)

async def calls(store):
    await store.create(ExecutionStarted(execution_id="x", flow="f"))
    await store.append(AppendRequest("x", 1, [EffectCompleted(seq=2, step_id="1", effect="e")]))
    await store.summary("x")

def wrapped(cls):
    return [op for op in ("create", "append", "summary") if getattr(cls.__dict__.get(op), "_loom_traced", False)]

exporter = InMemorySpanExporter()
print(wrapped(SqliteEventStore), wrapped(Before))
asyncio.run(calls(Before(sys.argv[1] + "/a.db")))
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
print(len(exporter.get_finished_spans()), telemetry.refresh())

class After(SqliteEventStore):
    async def summary(self, execution_id):
        return await super().summary(execution_id)

print(wrapped(SqliteEventStore), wrapped(Before), wrapped(After))
asyncio.run(calls(Before(sys.argv[1] + "/b.db")))
asyncio.run(calls(After(sys.argv[1] + "/c.db")))
print(sorted(s.name for s in exporter.get_finished_spans()))
"""


def test_store_operations_are_wrapped_once_a_provider_is_found(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path)],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{ROOT / 'functions'}:{ROOT / 'infra'}:{ROOT}", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "[] []"  # nobody traces yet: the operations themselves
    assert lines[1] == "0 True"  # nothing traced before the provider
    both = "['create', 'append', 'summary']"
    assert lines[2] == f"{both} ['summary'] ['summary']"
    spans = ["loom.store.append", "loom.store.create", "loom.store.summary"]
    assert lines[3] == str(sorted(spans * 2))
