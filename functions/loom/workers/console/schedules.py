"""The console's schedules page: every schedule, declared and made at run time, with its next
fire time, and an operator's actions on each: pause, unpause, trigger a run now.

The page is a read (the caller check, action ``list``); each action is a form posted with
CSRF, authorized as ``POST /schedules/{name}/...`` is (the verdict check, action
``schedule``) and recorded with who made it; it answers with a redirect to the page, which
shows what was done.
"""

from __future__ import annotations

from typing import Any

from flask import Request

from loom.primitives.schedule_admin import Schedules
from loom.workers.console.actions import Done, read_form
from loom.workers.console.security import actor, check_csrf
from loom.workers.http_base import HttpError, Services, run
from loom.workers.logs import bind

ACTIONS = ("pause", "unpause", "trigger")


def schedules_page(s: Services) -> dict[str, Any]:
    """The page's context: every schedule, by name."""
    return {"schedules": run(Schedules(s.runtime).list())}


def perform(s: Services, req: Request, name: str, action: str, who: str) -> Done:
    """Run ``action`` on the schedule ``name``; what the page shows next."""
    if action not in ACTIONS:
        raise HttpError(404, "not_found", f"the console has no schedule action {action!r}")
    raw, form = read_form(s, req)
    check_csrf(req, form)
    principal = actor(s.verdict_auth, req, "schedule", "", raw, who)
    operator = form.get("by", "").strip()[:256]
    by = f"{operator} (via {principal})" if operator else principal
    note = form.get("note", "").strip()[:1000]
    bind(principal=by, schedule=name)
    book = Schedules(s.runtime)
    if action == "pause":
        run(book.pause(name, note=note, by=by))
        return Done(f"schedule {name} paused")
    if action == "unpause":
        run(book.unpause(name, note=note, by=by))
        return Done(f"schedule {name} unpaused: it fires from its next tick")
    fired = run(book.trigger(name))
    if fired.error:
        return Done(f"schedule {name} was not triggered: {fired.error}")
    return Done(f"schedule {name} triggered: {fired.execution_id} is {fired.status}")
