"""``LoomTestEnv`` and large payloads: an in-memory blob store by default, and a missing
blob store is reported as the configuration error it is, never as nondeterminism."""

from __future__ import annotations

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import ConfigurationError, NondeterminismError
from loom.testing import LoomTestEnv


def make_app() -> Loom:
    app = Loom("big")

    @app.effect("big")
    async def big(ctx: EffectContext, n: int) -> str:
        return "x" * n

    @app.flow("make")
    async def make(ctx: FlowContext, n: int) -> int:
        try:
            data = await ctx.execute(big, n)
        except Exception:  # a flow that catches everything must not swallow a config error
            return -1
        return len(data)

    return app


async def test_outputs_over_the_inline_threshold_work_in_the_test_env():
    env = LoomTestEnv(make_app(), blob_threshold=1000)  # always_replay is on
    result = await env.start("make", 5000, execution_id="e")
    assert (result.status, result.output) == ("completed", 5000)
    outputs = [e.output for e in await env.history("e") if e.type == "EffectCompleted"]
    assert list(outputs[0]) == ["$blob"]  # it really went to the blob store


async def test_without_a_blob_store_the_error_says_so_and_is_not_nondeterminism():
    env = LoomTestEnv(make_app(), blob_threshold=1000, blobs=None)
    with pytest.raises(ConfigurationError, match="no blob store is configured") as caught:
        await env.start("make", 5000, execution_id="e")
    assert not isinstance(caught.value, NondeterminismError)
    types = [e.type for e in await env.history("e")]
    assert "ExecutionFailed" not in types and "ExecutionCompleted" not in types
