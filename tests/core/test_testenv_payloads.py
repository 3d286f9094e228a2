"""``LoomTestEnv`` and large payloads: an in-memory blob store by default, and without one
an output over the limit is the step's recorded failure (``output_too_large``, saying a
blob store lifts it), never nondeterminism."""

from __future__ import annotations

from loom import EffectContext, FlowContext, Loom
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
        except Exception:  # the step's failure, recorded: the flow may handle it
            return -1
        return len(data)

    return app


async def test_outputs_over_the_inline_threshold_work_in_the_test_env():
    env = LoomTestEnv(make_app(), blob_threshold=1000)  # always_replay is on
    result = await env.start("make", 5000, execution_id="e")
    assert (result.status, result.output) == ("completed", 5000)
    outputs = [e.output for e in await env.history("e") if e.type == "EffectCompleted"]
    assert list(outputs[0]) == ["$blob"]  # it really went to the blob store


async def test_without_a_blob_store_the_step_fails_saying_so_and_is_not_nondeterminism():
    # (Before, the record raised ConfigurationError out of every execute call, running the
    # effect again on each redelivery: the step now fails once, recorded.)
    env = LoomTestEnv(make_app(), blob_threshold=1000, blobs=None)
    result = await env.start("make", 5000, execution_id="e")  # always_replay is on
    assert (result.status, result.output) == ("completed", -1)
    [failed] = [e for e in await env.history("e") if e.type == "EffectFailed"]
    assert failed.error.code == "output_too_large"  # type: ignore[attr-defined]
    assert "no blob store is configured" in failed.error.message  # type: ignore[attr-defined]
