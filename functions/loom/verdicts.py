"""Operator verdicts on in-doubt effects, checked before anything is appended."""

from __future__ import annotations

from typing import Any

from loom import events as ev
from loom.app import Loom, to_json_value
from loom.errors import InvalidPayloadError, VerdictError
from loom.payloads import check_exact


def verdict_event(
    app: Loom, effect: str, step_id: str, verdict: str, output: Any, error: str | None, by: str
) -> ev.EffectVerdict:
    """The event a verdict records, or :class:`VerdictError` naming what is wrong.

    ``performed`` carries the output the effect would have returned, validated against the
    effect's output type; ``not_performed`` asks for the effect again (same key); ``failed``
    raises an error into the flow.
    """
    if verdict == "performed":
        try:
            parsed = to_json_value(app.get_effect(effect).typed.parse_output(output))
            output = check_exact(parsed, "the verdict output")
        except InvalidPayloadError as exc:
            raise VerdictError(
                f"verdict output for step {step_id!r}: {exc.message}",
                details=exc.details,
                code="invalid_output",
            ) from None
        return ev.EffectVerdict(step_id=step_id, verdict="performed", output=output, by=by)
    if verdict == "not_performed":
        return ev.EffectVerdict(step_id=step_id, verdict="not_performed", by=by)
    if verdict == "failed":
        info = ev.ErrorInfo(
            code="verdict",
            type="OperatorVerdict",
            message=error or f"operator {by} said the effect failed",
        )
        return ev.EffectVerdict(step_id=step_id, verdict="failed", error=info, by=by)
    raise VerdictError(
        f"unknown verdict {verdict!r}: use performed, not_performed or failed",
        details={"verdict": verdict},
        code="invalid_verdict",
    )
