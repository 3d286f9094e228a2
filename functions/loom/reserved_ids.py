"""Execution ids the engine derives, reserved for the engine: no outside start may take one.

Some executions are named by the engine, from facts an outsider can read or compute:

* ``child``: a child flow, ``{parent}.child.{step}`` (:func:`loom.primitives.children.child_id`);
* ``run``: ``{id}#run{n}``, the name of run ``n`` of an execution that continued as new
  (:func:`loom.primitives.continuation.run_id`; its steps' idempotency keys and message ids start
  with it, so an execution of that name would share them);
* ``schedule``: the tick of a schedule, ``schedule:{name}@{UTC time}`` (:mod:`loom.primitives.schedules`,
  readable from ``GET /schedules``);
* ``redrive``: the fork that re-drives a failed execution, ``{id}.redrive-{seq}``
  (:func:`loom.ops.deadletters.redrive_id`, computable from the history);
* ``pubsub``: a start from a Pub/Sub message without an id, ``pubsub-{messageId}``;
* ``signed``: a signed request's default id, ``sig-{digest}`` (:mod:`loom.workers.signed_ids`).

An outside start (HTTP, Pub/Sub, the CLI, ``Runtime.start`` and ``Runtime.fork`` from Python)
of an id of any of these forms is refused with
:class:`~loom.errors.ReservedExecutionIdError` (HTTP 400 ``reserved_execution_id``) before
anything is written. The engine names the form it derived (``derived=``) to let exactly
that form through, and before it reports on an execution that already holds such an id it
checks the execution is its own (the same principal for a signed, Pub/Sub or schedule start,
the same origin for a fork): a squatter's execution is never taken for the engine's.

Message ids have one engine form an outsider could copy: ``sig:{digest}``, a signed
message's default id; an outside message may not take it (:func:`check_outside_message_id`).

This module imports nothing of the engine's, so every entry point can use it.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from loom.errors import ReservedExecutionIdError

__all__ = [
    "IdForm",
    "check_outside_id",
    "check_outside_message_id",
    "reserved_form",
]

IdForm = Literal["child", "run", "schedule", "redrive", "pubsub", "signed"]

# Each form with a substring every id of it holds, so most ids cost a few ``in`` tests.
_FORMS: Final[tuple[tuple[IdForm, str, re.Pattern[str]], ...]] = (
    ("child", ".child.", re.compile(r".+\.child\.[0-9]+(?:\.[0-9]+)*", re.DOTALL)),
    ("run", "#run", re.compile(r".+#run[0-9]+", re.DOTALL)),
    (
        "schedule",
        "schedule:",
        re.compile(
            r"schedule:.+@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", re.DOTALL
        ),
    ),
    ("redrive", ".redrive-", re.compile(r".+\.redrive-[0-9]+", re.DOTALL)),
    ("pubsub", "pubsub-", re.compile(r"pubsub-.+", re.DOTALL)),
    ("signed", "sig-", re.compile(r"sig-[0-9a-f]{32}")),
)

_WHAT: Final[dict[IdForm, str]] = {
    "child": "child flows ('{parent}.child.{step}'); only the parent's child start may use it",
    "run": "the runs of an execution that continued as new ('{id}#run{n}')",
    "schedule": "schedule ticks ('schedule:{name}@{time}'); only the schedule may start one",
    "redrive": "re-drives ('{id}.redrive-{seq}'); only a re-drive of the failed execution "
    "may start one",
    "pubsub": "Pub/Sub starts ('pubsub-{messageId}'); only that message may start one",
    "signed": "signed requests' default ids ('sig-{digest}'); only that request may use one",
}

_SIGNED_MESSAGE: Final = re.compile(r"sig:[0-9a-f]{32}")


def reserved_form(execution_id: str) -> IdForm | None:
    """The engine's form ``execution_id`` has, or ``None`` for an id anyone may use."""
    for form, marker, pattern in _FORMS:
        if marker in execution_id and pattern.fullmatch(execution_id):
            return form
    return None


def _has_form(execution_id: str, form: IdForm) -> bool:
    for known, marker, pattern in _FORMS:
        if known == form:
            return marker in execution_id and pattern.fullmatch(execution_id) is not None
    return False


def check_outside_id(execution_id: str, *, derived: IdForm | None = None) -> str:
    """Return ``execution_id`` unless it has a form the engine reserves.

    Args:
        execution_id: The id a start or fork asks for.
        derived: The form the engine itself derived this id in (a schedule's tick, a
            Pub/Sub message's start...): an id of that form passes. Outside callers never
            pass it.

    Raises:
        ReservedExecutionIdError: It has an engine form (other than ``derived``).
    """
    if derived is not None and _has_form(execution_id, derived):
        return execution_id
    form = reserved_form(execution_id)
    if form is None:
        return execution_id
    raise ReservedExecutionIdError(
        f"execution id {execution_id!r} has the form the engine gives {_WHAT[form]}",
        details={"execution_id": execution_id, "form": form},
    )


def check_outside_message_id(message_id: str) -> str:
    """Return ``message_id`` unless it is a signed message's default id (``sig:{digest}``).

    Raises:
        ReservedExecutionIdError: It is (code ``reserved_message_id``).
    """
    if message_id.startswith("sig:") and _SIGNED_MESSAGE.fullmatch(message_id):
        raise ReservedExecutionIdError(
            f"message id {message_id!r} has the form of a signed message's default id "
            "('sig:{digest}'); only that signed request may use it",
            details={"message_id": message_id},
            code="reserved_message_id",
        )
    return message_id
