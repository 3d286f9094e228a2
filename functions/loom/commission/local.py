"""``LocalEffects``: performs ``software.change/1`` in a git work tree.

The change is applied in the work tree on a work branch (``loom/commission/<case_id>``, created
from the current ``HEAD`` the first time) and committed there. That is all: it never merges,
pushes, pulls, fetches or deploys. Every git command goes through :meth:`LocalEffects._git`,
which admits only the subcommands in :data:`GIT_SUBCOMMANDS`, and hooks are switched off
(``core.hooksPath`` points at the null device) so a repository's own hooks cannot push either.

Give it a work tree of its own (a clone or ``git worktree add``): it switches branches there.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loom.commission.admission import AdmittedRequest, require_admitted
from loom.commission.errors import EffectError
from loom.commission.model import Assigned, Commission
from loom.commission.ports import EffectOutcome, EffectPort, Performed, Refused

SOFTWARE_CHANGE = "software.change/1"

GIT_SUBCOMMANDS = frozenset(
    {"rev-parse", "status", "show-ref", "check-ref-format", "switch", "log"}
    | {"apply", "add", "diff", "commit", "reset", "clean"}
)
"""The only git subcommands LocalEffects runs. No merge, push, pull, fetch, remote, rebase."""


class FileChange(BaseModel):
    """One file's new content, or its removal.

    Attributes:
        path: Relative to the work tree root, POSIX style, inside the tree.
        content: The new content; ``None`` deletes the file.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(min_length=1)
    content: str | None = None


class SoftwareChange(BaseModel):
    """The arguments of ``software.change/1``: a unified diff, whole files, or both.

    Attributes:
        message: The commit message.
        patch: A unified diff (``git apply`` format), applied first.
        files: Whole-file writes and deletions, applied after the patch.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    message: str = Field(min_length=1)
    patch: str | None = None
    files: list[FileChange] = Field(default_factory=list[FileChange])

    @model_validator(mode="after")
    def _something(self) -> SoftwareChange:
        if not self.patch and not self.files:
            raise ValueError("a software change needs a patch or files")
        return self


@dataclass(frozen=True, slots=True)
class GitResult:
    """What a git command did."""

    returncode: int
    stdout: str
    stderr: str


class GitRunner:
    """Runs one git command. Replace it to observe or restrict what LocalEffects runs."""

    def run(self, argv: Sequence[str], *, cwd: Path, stdin: str | None = None) -> GitResult:
        """Run ``argv`` (starting with ``git``) in ``cwd``."""
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            env.pop(var, None)
        done = subprocess.run(
            list(argv), cwd=cwd, input=stdin, capture_output=True, text=True, env=env, check=False
        )
        return GitResult(done.returncode, done.stdout, done.stderr)


class _RefusedError(Exception):
    """Nothing was committed; the request is refused with ``reason``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class LocalEffects(EffectPort):
    """Commits ``software.change/1`` on a work branch of a git work tree.

    Args:
        worktree: The work tree (its own; LocalEffects switches its branch).
        branch_prefix: Work branches are ``{branch_prefix}{case_id}``.
        base: Where a new work branch starts. The default, ``HEAD``, is whatever is checked
            out; name a fixed base (e.g. ``main``) when one work tree serves several cases.
        git: The command runner (default: ``git`` in a subprocess).
        author: The commit author and committer, ``(name, email)``.
    """

    def __init__(
        self,
        worktree: Path,
        *,
        branch_prefix: str = "loom/commission/",
        base: str = "HEAD",
        git: GitRunner | None = None,
        author: tuple[str, str] = ("Loom Commission", "commission@loom.invalid"),
    ) -> None:
        self._root = Path(worktree)
        self._prefix = branch_prefix
        self._base = base
        self._runner = git or GitRunner()
        self._lock = threading.Lock()  # one change at a time in the one work tree
        name, email = author
        self._config = [
            *("-c", f"core.hooksPath={os.devnull}"),
            *("-c", "commit.gpgSign=false"),
            *("-c", f"user.name={name}", "-c", f"user.email={email}"),
        ]

    def performs(self, action: str) -> bool:
        return action == SOFTWARE_CHANGE

    async def invoke(
        self, commission: Commission[Assigned], request: AdmittedRequest
    ) -> EffectOutcome:
        require_admitted(request)
        try:
            change = SoftwareChange.model_validate(request.args)
        except ValidationError as exc:
            return Refused(reason="invalid_args", detail={"message": str(exc)})
        try:
            return await asyncio.to_thread(self._perform, request, change)
        except _RefusedError as exc:
            return Refused(reason=exc.reason, detail={"message": str(exc)})

    def _git(self, subcommand: str, *args: str, stdin: str | None = None) -> GitResult:
        if subcommand not in GIT_SUBCOMMANDS:
            raise EffectError(f"LocalEffects does not run `git {subcommand}`", reason="forbidden")
        argv = ["git", *self._config, subcommand, *args]
        return self._runner.run(argv, cwd=self._root, stdin=stdin)

    def _must(self, subcommand: str, *args: str, stdin: str | None = None) -> str:
        done = self._git(subcommand, *args, stdin=stdin)
        if done.returncode != 0:
            raise EffectError(
                f"`git {subcommand}` failed: {done.stderr.strip()}",
                reason="git",
                details={"subcommand": subcommand, "returncode": done.returncode},
            )
        return done.stdout.strip()

    def _perform(self, request: AdmittedRequest, change: SoftwareChange) -> Performed:
        with self._lock:
            return self._perform_locked(request, change)

    def _perform_locked(self, request: AdmittedRequest, change: SoftwareChange) -> Performed:
        branch = self._branch(request.case_id)
        trailer = f"Loom-Request: {request.request_id}"
        done = self._already_done(branch, trailer)
        if done is not None:  # a re-invocation after Pending or a crash: never commit twice
            return self._performed(done, branch, already=True)
        if self._must("status", "--porcelain", "--untracked-files=all"):
            raise _RefusedError("dirty_worktree", "the work tree has uncommitted changes")
        self._switch(branch)
        try:
            self._apply(change)
            if self._git("diff", "--cached", "--quiet").returncode == 0:
                raise _RefusedError("empty_change", "the change leaves the tree as it was")
            message = f"{change.message}\n\nLoom-Case: {request.case_id}\n{trailer}\n"
            self._must("commit", "--quiet", "--file=-", stdin=message)
        except BaseException:
            self._restore()
            raise
        return self._performed(self._must("rev-parse", "HEAD"), branch, already=False)

    def _branch(self, case_id: str) -> str:
        branch = f"{self._prefix}{case_id}"
        if self._git("check-ref-format", "--branch", branch).returncode != 0:
            raise _RefusedError("bad_branch", f"{branch!r} is not a valid branch name")
        return branch

    def _exists(self, branch: str) -> bool:
        return self._git("show-ref", "--verify", "--quiet", f"refs/heads/{branch}").returncode == 0

    def _already_done(self, branch: str, trailer: str) -> str | None:
        """The commit on ``branch`` that carries ``trailer`` as a line, if there is one."""
        if not self._exists(branch):
            return None
        found = self._must(
            "log",
            f"refs/heads/{branch}",
            "--fixed-strings",
            f"--grep={trailer}",
            "--format=%H%n%B%x1e",
        )
        for entry in filter(None, (e.strip() for e in found.split("\x1e"))):
            commit, _, body = entry.partition("\n")
            if trailer in body.splitlines():
                return commit
        return None

    def _switch(self, branch: str) -> None:
        if self._exists(branch):
            self._must("switch", "--quiet", branch)
        else:
            self._must("switch", "--quiet", "--create", branch, self._base)

    def _apply(self, change: SoftwareChange) -> None:
        files = [(self._inside(file.path), file.content) for file in change.files]
        self._check_resolved(files)  # before anything is written
        if change.patch:
            if self._git("apply", "--check", "-", stdin=change.patch).returncode != 0:
                raise _RefusedError("patch_does_not_apply", "the patch does not apply")
            self._must("apply", "--index", "-", stdin=change.patch)
            self._check_resolved(files)  # the patch may have added a symlink
        for target, content in files:
            if content is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
        self._must("add", "--all")

    def _inside(self, path: str) -> Path:
        """The file ``path`` names, refused if its text leaves the tree or enters ``.git``."""
        parts = PurePosixPath(path).parts
        lowered = {part.lower() for part in parts}
        if PurePosixPath(path).is_absolute() or ".." in parts or ".git" in lowered or "\\" in path:
            raise _RefusedError("path_outside_tree", f"{path!r} is not a path inside the tree")
        return self._root.joinpath(*parts)

    def _check_resolved(self, files: Sequence[tuple[Path, str | None]]) -> None:
        """Refuse any path whose directories resolve (through symlinks) outside the tree.

        The text check of :meth:`_inside` cannot see a committed ``link -> ../outside``: the
        directories are resolved as the file system will follow them, and a write to a file
        that is itself a symlink is refused (deleting one removes the link only).
        """
        root = self._root.resolve()
        git_dir = root / ".git"
        for target, content in files:
            name = target.relative_to(self._root).as_posix()
            try:
                parent = target.parent.resolve()
            except (RuntimeError, OSError) as exc:  # a symlink loop, a dangling mount
                raise _RefusedError(
                    "path_outside_tree", f"{name!r} does not resolve: {exc}"
                ) from None
            if (
                (parent != root and root not in parent.parents)
                or parent == git_dir
                or (git_dir in parent.parents)
            ):
                raise _RefusedError(
                    "path_outside_tree", f"{name!r} resolves outside the tree (to {parent})"
                )
            if content is not None and target.is_symlink():
                raise _RefusedError("path_is_symlink", f"{name!r} is a symlink; not written")
            if target.is_dir():
                raise _RefusedError("path_is_directory", f"{name!r} is a directory")

    def _restore(self) -> None:
        """Put the work branch back as it was after a failed change (the tree was clean)."""
        self._git("reset", "--quiet", "--hard", "HEAD")
        self._git("clean", "--quiet", "-d", "--force")

    @staticmethod
    def _performed(commit: str, branch: str, *, already: bool) -> Performed:
        return Performed(
            what="git.commit", ref=commit, detail={"branch": branch, "already_performed": already}
        )
