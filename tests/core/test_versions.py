"""Flow versions side by side: registration, starts, and workers that lack a version."""

from __future__ import annotations

import pytest

from loom import FlowContext, Loom
from loom.errors import ConfigurationError, UnknownFlowError, UnknownFlowVersionError
from loom.ops.versions import live_counts, version_table
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.wire import ExecutionPackage


def two_versions(*versions: int | str) -> Loom:
    app = Loom("v")
    for version in versions:
        app.flow("f", version=version)(_flow(str(version)))
    return app


def _flow(tag: str):
    async def flow(ctx: FlowContext, _: None) -> str:
        await ctx.suspend("go", ctx.execution_id)
        return f"ran v{tag}"

    return flow


def test_versions_register_side_by_side_and_the_latest_is_numeric():
    app = two_versions(1, 9, 10)
    assert app.flows["f"].version == "10"
    assert sorted(app.versions["f"]) == ["1", "10", "9"]
    assert app.get_flow("f").version == "10"
    assert app.get_flow("f", 9).version == "9"
    with pytest.raises(ConfigurationError, match="version 9 is registered twice"):
        app.flow("f", version="9")(app.versions["f"]["9"].fn)
    with pytest.raises(UnknownFlowVersionError, match="registered: 1, 9, 10"):
        app.get_flow("f", 2)
    with pytest.raises(UnknownFlowError):
        app.get_flow("g")
    with pytest.raises(ConfigurationError):
        app.flow("f", version="")


async def test_new_executions_start_on_the_latest_or_the_version_asked():
    store = InMemoryEventStore()
    rt = Runtime(two_versions(1, 2), store)
    await rt.start("f", execution_id="latest")
    await rt.start("f", execution_id="old", version=1)
    assert (await store.summary("latest")).flow_version == "2"
    assert (await store.summary("old")).flow_version == "1"
    assert (await rt.resume("latest", "go", "latest")).output == "ran v2"
    assert (await rt.resume("old", "go", "old")).output == "ran v1"


async def test_a_worker_without_the_recorded_version_refuses_and_writes_nothing():
    store = InMemoryEventStore()
    await Runtime(two_versions(1, 2), store).start("f", execution_id="e", version=1, run=False)
    before = await store.read("e")
    newer = Runtime(two_versions(2, 3), store)
    with pytest.raises(UnknownFlowVersionError, match="no version 1"):
        await newer.execute(ExecutionPackage(execution_id="e"))
    assert await store.read("e") == before


async def test_the_version_table_counts_live_executions_only():
    store = InMemoryEventStore()
    rt = Runtime(two_versions(1, 2), store)
    for i in range(3):
        await rt.start("f", execution_id=f"a{i}", version=1)
    await rt.start("f", execution_id="b")
    await rt.resume("a0", "go", "a0")  # finished: no longer live
    rows = version_table(await live_counts(store, page=1), two_versions(2, 3))
    assert [(r.version, r.live, r.registered, r.latest) for r in rows] == [
        ("1", 2, False, False),
        ("2", 1, True, False),
        ("3", 0, True, True),
    ]
    bare = version_table(await live_counts(store), None)
    assert [(r.version, r.live, r.registered) for r in bare] == [("1", 2, None), ("2", 1, None)]
