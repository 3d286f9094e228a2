"""Commission, end to end on your machine: an executor proposes a code change, the Commission
runtime rechecks the case and its authority, and ``LocalEffects`` commits it on a work branch
of a throw-away git repository (it never merges, pushes or deploys).

    python -m examples.commission_local        # from the repository root; needs git

Cases are event-sourced on the same event stores as flows (SQLite here).
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from pathlib import Path

from loom.commission import (
    CallableExecutor,
    CaseStore,
    Commission,
    CommissionRuntime,
    Draft,
    LocalEffects,
    NoUsefulAction,
    ProposedAction,
    StaticAuthority,
    StepInput,
)
from loom.store.sqlite import SqliteEventStore

CHANGE = "software.change/1"  # the action LocalEffects performs


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def make_repo(work: Path) -> None:
    """A work tree on ``main`` with one commit: the code the commission will change."""
    git(work.parent, "init", "-q", "-b", "main", str(work))
    (work / "app.py").write_text("print('helo')\n")
    git(work, "add", "-A")
    git(work, "-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-qm", "init")


def propose(step: StepInput) -> ProposedAction | NoUsefulAction:
    """The executor: a fix on the first step, nothing more once the case has moved on."""
    if step.last is not None:  # the change was performed: nothing left to do
        return NoUsefulAction()
    fix = {"path": "app.py", "content": "print('hello')\n"}
    return ProposedAction(action_id=CHANGE, args={"message": "Fix the typo", "files": [fix]})


async def main(folder: Path) -> None:
    work = folder / "work"
    make_repo(work)
    store = SqliteEventStore(folder / "cases.db")
    cases = CaseStore(store)
    commission = Commission[Draft](commission_id="com-1", mandate="fix the typo", state=Draft())
    await cases.open("case-1", commission, frontier=[CHANGE], subject={"title": "typo"})
    await cases.assign("case-1", "bot")  # the executor's principal
    runtime = CommissionRuntime(cases, [LocalEffects(work)], StaticAuthority({"bot": [CHANGE]}))
    report = await runtime.run_until_blocked("case-1", CallableExecutor(propose))
    print(f"stopped: {report.reason}; performed: {list(report.performed)}")
    branch = "loom/commission/case-1"
    print(f"{branch}: {git(work, 'log', '-1', '--format=%s', branch)}")
    print(f"app.py there: {git(work, 'show', f'{branch}:app.py')}")
    print(f"main unchanged: {git(work, 'show', 'main:app.py')}")
    await store.aclose()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="loom-commission-") as tmp:
        asyncio.run(main(Path(tmp)))
