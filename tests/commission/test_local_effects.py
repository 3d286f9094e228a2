"""``LocalEffects`` in a temporary git repository: it applies ``software.change/1`` and commits
on a work branch, and it never merges, pushes or deploys."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loom.commission import (
    AdmittedRequest,
    Assigned,
    CaseStore,
    Commission,
    EffectError,
    EffectOutcome,
    EffectPort,
    LocalEffects,
    NoUsefulAction,
    Pending,
    ProposedAction,
    RunReport,
)
from loom.commission.local import GIT_SUBCOMMANDS, GitResult, GitRunner
from tests.commission.helpers import CHANGE, git, init_repo, make_runtime, open_case, scripted

NEVER = {"merge", "push", "pull", "fetch", "remote", "rebase", "cherry-pick", "am", "send-email"}
BRANCH = "loom/commission/case-1"


@dataclass
class Repo:
    work: Path
    remote: Path
    hook_marker: Path

    def remote_state(self) -> tuple[str, str]:
        return git(self.remote, "for-each-ref"), git(self.remote, "count-objects", "-v")


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    """A work tree on ``main`` with a bare ``origin`` and a post-commit hook that pushes."""
    remote, work, marker = tmp_path / "remote.git", tmp_path / "work", tmp_path / "hook-ran"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    init_repo(work)
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    hook = work / ".git" / "hooks" / "post-commit"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\ngit push -q origin HEAD:refs/heads/hooked\n")
    hook.chmod(0o755)
    return Repo(work, remote, marker)


class RecordingGit(GitRunner):
    """Records the argv of every git command LocalEffects runs."""

    def __init__(self) -> None:
        self.argv: list[list[str]] = []

    def run(self, argv: Sequence[str], *, cwd: Path, stdin: str | None = None) -> GitResult:
        self.argv.append(list(argv))
        return super().run(argv, cwd=cwd, stdin=stdin)

    def subcommands(self) -> list[str]:
        out: list[str] = []
        for argv in self.argv:
            args = argv[1:]
            while args and args[0] == "-c":
                args = args[2:]
            out.append(args[0])
        return out


def change(**args: Any) -> ProposedAction:
    return ProposedAction(action_id=CHANGE, args={"message": "Fix the crash", **args})


async def run(cases: CaseStore, port: EffectPort, proposal: ProposedAction) -> RunReport:
    await open_case(cases)
    executor, _ = scripted(proposal, NoUsefulAction())
    return await make_runtime(cases, [port]).run_until_blocked("case-1", executor)


async def test_a_change_is_committed_on_a_work_branch_and_nothing_else(
    cases: CaseStore, repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[list[str]] = []
    real_popen = subprocess.Popen

    def recording_popen(args: Any, *rest: Any, **kwargs: Any) -> Any:
        spawned.append([str(a) for a in args])
        return real_popen(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    recorder = RecordingGit()
    main_before, remote_before = git(repo.work, "rev-parse", "main"), repo.remote_state()

    files = [
        {"path": "app.py", "content": "print('fixed')\n"},
        {"path": "docs/NOTE.md", "content": "n\n"},
    ]
    spawned.clear()
    report = await run(cases, LocalEffects(repo.work, git=recorder), change(files=files))
    during = list(spawned)

    assert report.performed == ("case-1:0:1",)
    state = await cases.load("case-1")
    assert state.last is not None and state.last.ref == git(repo.work, "rev-parse", BRANCH)
    assert state.last.detail["branch"] == BRANCH
    assert git(repo.work, "show", f"{BRANCH}:app.py") == "print('fixed')"
    message = git(repo.work, "log", "-1", "--format=%B", BRANCH)
    assert "Loom-Case: case-1" in message and "Loom-Request: case-1:0:1" in message
    assert git(repo.work, "rev-parse", f"{BRANCH}~1") == main_before

    # Never merged, pushed or deployed: what ran, what the remote holds, what main is.
    subcommands = recorder.subcommands()
    assert set(subcommands) <= GIT_SUBCOMMANDS and not set(subcommands) & NEVER
    assert "commit" in subcommands
    assert during == recorder.argv  # every process spawned was one of these git commands
    assert all(argv[0] == "git" for argv in during)
    assert repo.remote_state() == remote_before
    assert not repo.hook_marker.exists()  # hooks are off, so the pushing hook never ran
    assert git(repo.work, "rev-parse", "main") == main_before


async def test_a_unified_diff_is_applied(cases: CaseStore, repo: Repo) -> None:
    patch = "--- a/app.py\n+++ b/app.py\n@@ -1 +1,2 @@\n print('hello')\n+print('world')\n"
    report = await run(cases, LocalEffects(repo.work), change(patch=patch))

    assert report.performed == ("case-1:0:1",)
    assert git(repo.work, "show", f"{BRANCH}:app.py") == "print('hello')\nprint('world')"


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"files": [{"path": "../outside.txt", "content": "x"}]}, "path_outside_tree"),
        ({"files": [{"path": ".git/config", "content": "x"}]}, "path_outside_tree"),
        ({"files": [{"path": "/etc/passwd", "content": "x"}]}, "path_outside_tree"),
        ({"patch": "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"}, "patch_does_not_apply"),
        ({"files": [{"path": "app.py", "content": "print('hello')\n"}]}, "empty_change"),
        ({}, "invalid_args"),
    ],
)
async def test_a_change_that_cannot_be_made_is_refused_and_leaves_the_tree_clean(
    cases: CaseStore, repo: Repo, args: dict[str, Any], reason: str
) -> None:
    report = await run(cases, LocalEffects(repo.work), change(**args))

    assert [(r.by, r.reason) for r in report.refusals] == [("port", reason)]
    assert report.revision == 0
    assert git(repo.work, "status", "--porcelain") == ""
    assert not (repo.work.parent / "outside.txt").exists()
    assert git(repo.work, "branch", "--list", BRANCH) in ("", f"* {BRANCH}", f"  {BRANCH}")
    if git(repo.work, "branch", "--list", BRANCH):
        assert git(repo.work, "rev-parse", BRANCH) == git(repo.work, "rev-parse", "main")


async def test_a_dirty_work_tree_is_refused(cases: CaseStore, repo: Repo) -> None:
    (repo.work / "scratch.txt").write_text("someone's work in progress\n")
    report = await run(
        cases, LocalEffects(repo.work), change(files=[{"path": "a", "content": "b"}])
    )

    assert [r.reason for r in report.refusals] == ["dirty_worktree"]
    assert (repo.work / "scratch.txt").read_text() == "someone's work in progress\n"


class PendingAfterFirst(EffectPort):
    """Performs through LocalEffects but answers Pending the first time (a lost answer)."""

    def __init__(self, inner: LocalEffects) -> None:
        self.inner = inner
        self.answers: list[EffectOutcome] = []

    def performs(self, action: str) -> bool:
        return self.inner.performs(action)

    async def invoke(
        self, commission: Commission[Assigned], request: AdmittedRequest
    ) -> EffectOutcome:
        answer = await self.inner.invoke(commission, request)
        self.answers.append(answer)
        return Pending(reason="answer lost") if len(self.answers) == 1 else answer


async def test_invoking_the_same_request_again_does_not_commit_twice(
    cases: CaseStore, repo: Repo
) -> None:
    port = PendingAfterFirst(LocalEffects(repo.work))
    report = await run(cases, port, change(files=[{"path": "app.py", "content": "x\n"}]))

    assert report.invoked == ("case-1:0:1", "case-1:0:1") and report.performed == ("case-1:0:1",)
    first, second = port.answers
    assert first.outcome == second.outcome == "performed"
    assert first.ref == second.ref  # type: ignore[union-attr]
    assert second.detail["already_performed"] is True  # type: ignore[union-attr]
    assert git(repo.work, "rev-list", "--count", f"main..{BRANCH}") == "1"


def test_a_forbidden_git_subcommand_is_never_run(repo: Repo) -> None:
    recorder = RecordingGit()
    effects = LocalEffects(repo.work, git=recorder)
    for subcommand in sorted(NEVER):
        with pytest.raises(EffectError, match="does not run"):
            effects._git(subcommand, "origin")  # pyright: ignore[reportPrivateUsage]
    assert recorder.argv == []


async def test_each_case_gets_its_own_work_branch_from_the_base(
    cases: CaseStore, repo: Repo
) -> None:
    effects = LocalEffects(repo.work, base="main")
    runtime = make_runtime(cases, [effects])
    for case_id, content in (("case-1", "one\n"), ("case-2", "two\n")):
        await open_case(cases, case_id)
        executor, _ = scripted(
            change(files=[{"path": "app.py", "content": content}]), NoUsefulAction()
        )
        assert (await runtime.run_until_blocked(case_id, executor)).revision == 1

    main = git(repo.work, "rev-parse", "main")
    for case_id in ("case-1", "case-2"):
        assert git(repo.work, "rev-parse", f"loom/commission/{case_id}~1") == main
    assert git(repo.work, "show", "loom/commission/case-2:app.py") == "two"
