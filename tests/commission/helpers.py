"""Builders shared by the Commission tests: cases, a runtime, a scripted port and executor."""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from loom.commission import (
    AdmittedRequest,
    Assigned,
    AuthorityProvider,
    CallableExecutor,
    CaseState,
    CaseStore,
    Commission,
    CommissionRuntime,
    Draft,
    EffectOutcome,
    EffectPort,
    ExecutorOutcome,
    Performed,
    StaticAuthority,
    StepInput,
    require_admitted,
)

CHANGE = "software.change/1"


def draft(commission_id: str = "com-1") -> Commission[Draft]:
    return Commission[Draft](commission_id=commission_id, mandate="fix the crash", state=Draft())


async def open_case(
    cases: CaseStore,
    case_id: str = "case-1",
    *,
    frontier: Sequence[str] = (CHANGE,),
    assignee: str | None = "bot",
) -> CaseState:
    """Open a case under a draft commission, then assign it unless ``assignee`` is None."""
    await cases.open(case_id, draft(), frontier=frontier, subject={"title": "crash on start"})
    if assignee is not None:
        await cases.assign(case_id, assignee)
    return await cases.load(case_id)


async def _no_wait(_: float) -> None:
    return None


def make_runtime(
    cases: CaseStore,
    ports: Sequence[EffectPort],
    authority: AuthorityProvider | None = None,
    *,
    sleep: Callable[[float], Awaitable[None]] = _no_wait,
    max_iterations: int = 20,
) -> CommissionRuntime:
    """A runtime whose authority grants ``bot`` everything unless told otherwise."""
    return CommissionRuntime(
        cases,
        ports,
        authority or StaticAuthority({"bot": ["*"]}),
        sleep=sleep,
        max_iterations=max_iterations,
    )


Answer = EffectOutcome | Exception


class ScriptedPort(EffectPort):
    """Answers from a script (default: Performed), and records every invocation it gets."""

    def __init__(
        self,
        answers: Sequence[Answer] = (),
        *,
        actions: Sequence[str] = (CHANGE,),
        on_invoke: Callable[[AdmittedRequest], Awaitable[None]] | None = None,
    ) -> None:
        self.answers = list(answers)
        self.actions = set(actions)
        self.on_invoke = on_invoke
        self.invocations: list[AdmittedRequest] = []
        self.commissions: list[Commission[Assigned]] = []

    def performs(self, action: str) -> bool:
        return action in self.actions

    async def invoke(
        self, commission: Commission[Assigned], request: AdmittedRequest
    ) -> EffectOutcome:
        require_admitted(request)
        self.invocations.append(request)
        self.commissions.append(commission)
        if self.on_invoke is not None:
            await self.on_invoke(request)
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer or Performed(what="test.effect", ref=f"done-{len(self.invocations)}")


def scripted(
    *outcomes: ExecutorOutcome | Callable[[StepInput], Any],
) -> tuple[CallableExecutor, list[StepInput]]:
    """An executor answering ``outcomes`` in turn (a callable is called with the input);
    and the list of the inputs it received."""
    seen: list[StepInput] = []
    queue = list(outcomes)

    def step(step_input: StepInput) -> Any:
        seen.append(step_input)
        item = queue.pop(0)
        return item(step_input) if callable(item) else item

    return CallableExecutor(step), seen


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` (test setup and inspection, not through LocalEffects)."""
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def init_repo(work: Path) -> Path:
    """A work tree on ``main`` with one commit holding ``app.py``."""
    git(work.parent, "init", "-q", "-b", "main", str(work))
    (work / "app.py").write_text("print('hello')\n")
    git(work, "add", "-A")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
    return work
