"""Scalar-typed effects: a value of exactly the declared type skips the validator, and
everything else is validated as before.

The engine skips pydantic for an input or output of exactly the declared ``int``, ``str``,
``float`` or ``bool`` (it would return the value itself). These tests pin that the skip
changes nothing a flow can see: a ``bool`` is not taken for an ``int`` without validation,
a value of another type is still coerced or refused, a recorded output is served typed.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from loom import EffectContext, EffectFailedError, FlowContext, Loom
from loom.app import EffectDef
from loom.errors import InvalidPayloadError
from loom.testing import LoomTestEnv, replay


async def _int_effect(ctx: EffectContext, n: int) -> float:
    return n


async def _str_effect(ctx: EffectContext, s: str) -> bool:
    return bool(s)


# (parser, declared type, value): the inputs of an ``int`` and a ``str`` effect, and the
# output of a ``float`` one.
CASES: list[tuple[str, Any, Any]] = [
    *(("parse_input", int, v) for v in (3, True, 2.0, 2.5, "4", None)),
    *(("parse_input", str, v) for v in ("a", 3, b"x", None)),
    *(("parse_output", float, v) for v in (1.5, 3, True, "2.5", None)),
]
EFFECTS = {int: _int_effect, str: _str_effect, float: _int_effect}


@pytest.mark.parametrize(("parser", "declared", "value"), CASES)
def test_parsing_matches_the_validator(parser: str, declared: Any, value: Any) -> None:
    parse = getattr(EffectDef("e", EFFECTS[declared]).typed, parser)
    try:
        expected = TypeAdapter(declared).validate_python(value)
    except ValidationError:
        with pytest.raises(InvalidPayloadError):
            parse(value)
        return
    got = parse(value)
    assert (got, type(got)) == (expected, type(expected))


async def test_a_flow_sees_declared_types_live_and_on_replay() -> None:
    app = Loom("scalars")
    app.effect("as_float")(_int_effect)

    @app.flow("f")
    async def f(ctx: FlowContext, n: int) -> list[Any]:
        out = await ctx.execute("as_float", n)
        try:
            await ctx.execute("as_float", "not a number")
        except EffectFailedError as exc:
            return [out, type(out).__name__, exc.error_code]
        return [out]

    env = LoomTestEnv(app)
    result = await env.start("f", 7)
    assert result.output == [7.0, "float", "invalid_input"]
    history = await env.history(result.execution_id)
    replayed = await replay(app, history[:-1])  # without its end: the replay computes it
    assert replayed.output == result.output
