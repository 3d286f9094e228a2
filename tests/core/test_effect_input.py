"""Effect inputs are validated into the effect's declared model before it is invoked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from loom import EffectContext, EffectFailedError, FlowContext, Loom
from loom.testing import LoomTestEnv


class Args(BaseModel):
    args: list[str]
    times: int = 1


def make_app(seen: list[Any]) -> Loom:
    app = Loom("inputs")

    @app.effect("run")
    async def run(ctx: EffectContext, a: Args) -> str:
        seen.append(a)
        return " ".join(a.args * a.times)

    @app.flow("call")
    async def call(ctx: FlowContext, value: dict[str, Any]) -> Any:
        try:
            return await ctx.execute(run, value)
        except EffectFailedError as exc:
            return {"failed": exc.error_code, "message": str(exc)}

    return app


async def test_a_dict_input_is_validated_into_the_effect_model():
    seen: list[Any] = []
    env = LoomTestEnv(make_app(seen))
    result = await env.start("call", {"args": ["a", "b"], "times": 2})
    assert (result.status, result.output) == ("completed", "a b a b")
    assert len(seen) == 1 and isinstance(seen[0], Args)


async def test_a_bad_input_fails_the_step_clearly_without_invoking_the_effect():
    seen: list[Any] = []
    env = LoomTestEnv(make_app(seen))
    result = await env.start("call", {"args": "not a list"}, execution_id="bad")
    assert result.status == "completed"
    assert result.output["failed"] == "invalid_input"
    assert "input for effect 'run' is invalid" in result.output["message"]
    assert "args" in result.output["message"]
    assert seen == []  # never invoked
    failed = [e for e in await env.history("bad") if e.type == "EffectFailed"]
    assert [e.attempts for e in failed] == [0]
