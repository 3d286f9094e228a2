"""Operator verdicts on in-doubt effects, checked before anything is appended.

A verdict answers one *episode*: the :class:`~loom.events.EffectInDoubt` event (named by its
seq) that put the step in doubt. Once settled, the step leaves doubt; if it falls in doubt
again, that is a new episode with a new seq, so a verdict captured for the first episode
(a replayed request) is refused as stale instead of settling the second one.
"""

from __future__ import annotations

from typing import Any

from loom import events as ev
from loom.errors import InvalidPayloadError, StaleVerdictError, VerdictError
from loom.kernel.app import App
from loom.kernel.claims import claim_is_live
from loom.kernel.decide import NOTHING, Decide, Decision
from loom.kernel.defs import to_json_value
from loom.kernel.fold import ExecutionState
from loom.kernel.payloads import check_exact
from loom.store.base import StatusChange


def current_episode(
    state: ExecutionState, step_id: str, episode: int | None
) -> tuple[str, int | None]:
    """The effect of the in-doubt step and the episode a verdict on it settles.

    Args:
        state: The execution as it stands.
        step_id: The step the verdict names.
        episode: The seq of the ``EffectInDoubt`` the verdict answers; ``None`` (trusted
            Python callers only) settles whatever episode is open.

    Raises:
        VerdictError: The step is not in doubt.
        StaleVerdictError: ``episode`` is not the open episode (settled, or another one).
    """
    rec = state.steps.get(step_id)
    if step_id not in state.in_doubt or rec is None:
        known = ", ".join(state.in_doubt) or "none"
        raise VerdictError(
            f"step {step_id!r} of {state.execution_id!r} is not in doubt (in doubt: {known})",
            details={"step_id": step_id, "in_doubt": list(state.in_doubt), "episode": episode},
        )
    open_episode: int | None = rec.get("episode")
    if episode is not None and episode != open_episode:
        raise StaleVerdictError(
            f"the verdict answers episode {episode} of step {step_id!r}, but the open "
            f"episode is {open_episode}: it was already settled; look the step up again",
            details={"step_id": step_id, "episode": episode, "open_episode": open_episode},
        )
    return rec.get("effect", "?"), open_episode


def verdict_event(
    app: App,
    effect: str,
    step_id: str,
    verdict: str,
    output: Any,
    error: str | None,
    by: str,
    episode: int | None = None,
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
        return ev.EffectVerdict(
            step_id=step_id, verdict="performed", output=output, by=by, episode=episode
        )
    if verdict == "not_performed":
        return ev.EffectVerdict(step_id=step_id, verdict="not_performed", by=by, episode=episode)
    if verdict == "failed":
        info = ev.ErrorInfo(
            code="verdict",
            type="OperatorVerdict",
            message=error or f"operator {by} said the effect failed",
        )
        return ev.EffectVerdict(
            step_id=step_id, verdict="failed", error=info, by=by, episode=episode
        )
    raise VerdictError(
        f"unknown verdict {verdict!r}: use performed, not_performed or failed",
        details={"verdict": verdict},
        code="invalid_verdict",
    )


def decide_in_doubt(now: float) -> Decide:
    """The decider that parks intent records with no outcome in doubt (``EffectInDoubt`` for
    each), on the state it is given: a step whose outcome landed meanwhile, or a call that
    claimed the execution meanwhile, leaves nothing to park."""

    def decide(state: ExecutionState) -> Decision:
        if state.finished or claim_is_live(state.claim, now):
            return NOTHING
        doubts: list[ev.Event] = [
            ev.EffectInDoubt(step_id=sid, effect=rec.get("effect", "?"))
            for sid, rec in state.steps.items()
            if rec.get("status") == "started"
        ]
        return Decision(doubts, StatusChange("in_doubt")) if doubts else NOTHING

    return decide


def has_open_intents(state: ExecutionState) -> bool:
    """Whether an intent record (``EffectStarted``) has no outcome: a rebuild parks it."""
    return any(rec.get("status") == "started" for rec in state.steps.values())
