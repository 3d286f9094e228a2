"""Commission's walls: only a runtime admits, and ``LocalEffects`` writes only inside its tree.

``AdmittedRequest`` needs the mint key a Commission runtime alone is issued: an
``Admission`` built outside one admits nothing, and a request forged around the constructor
is refused by every port. ``LocalEffects`` resolves each path (symlinks, ``..``, absolute)
before anything is written, so a committed ``link -> ../outside`` cannot carry a write out
of the work tree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from loom.commission import (
    AdmissionError,
    CaseStore,
    LocalEffects,
    NoUsefulAction,
    ProposedAction,
    StaticAuthority,
    require_admitted,
)
from loom.commission.admission import (
    _MINT,  # pyright: ignore[reportPrivateUsage]
    Admission,
    AdmittedRequest,
    MintKey,
    Proposal,
)
from loom.store import InMemoryEventStore
from tests.commission.helpers import CHANGE, git, init_repo, make_runtime, open_case, scripted


def proposal() -> Proposal:
    return Proposal(
        request_id="case-1:0:1", case_id="case-1", action_id=CHANGE, args={}, revision=0, step=1
    )


async def test_an_admission_outside_a_runtime_admits_nothing() -> None:
    with pytest.raises(TypeError):
        Admission(StaticAuthority({"bot": ["*"]}), lambda _: True)  # type: ignore[call-arg]
    with pytest.raises(AdmissionError):
        MintKey()
    forged_key = object.__new__(MintKey)
    with pytest.raises(AdmissionError):
        Admission(StaticAuthority({"bot": ["*"]}), lambda _: True, forged_key)


def test_a_request_forged_around_the_constructors_is_refused() -> None:
    from loom.commission.model import RequestRecord

    record = RequestRecord.model_construct(request_id="x", case_id="c", action_id=CHANGE)
    with pytest.raises(AdmissionError):
        AdmittedRequest(record, _mint=_MINT)  # the module's token, but no runtime's key
    with pytest.raises(AdmissionError):
        AdmittedRequest(record, _mint=_MINT, _key=object.__new__(MintKey))
    forged = object.__new__(AdmittedRequest)
    with pytest.raises(AdmissionError):
        require_admitted(forged)


async def test_local_effects_refuses_a_forged_request_and_writes_nothing(tmp_path: Path) -> None:
    work = init_repo(tmp_path / "work")
    forged = object.__new__(AdmittedRequest)
    port = LocalEffects(work)
    commission: Any = object()
    with pytest.raises(AdmissionError):
        await port.invoke(commission, forged)
    assert git(work, "status", "--porcelain") == ""


def change(*files: dict[str, Any]) -> ProposedAction:
    return ProposedAction(action_id=CHANGE, args={"message": "m", "files": list(files)})


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (not following symlinks) with its content or link target."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            found[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_text()
    return found


@pytest.mark.parametrize(
    "path",
    [
        "link/escaped.txt",
        "link/deeper/escaped.txt",
        "inner/../link/escaped.txt",
        "abs/escaped.txt",
        "gitlink/config",
        ".GIT/config",
        "loop/escaped.txt",
    ],
)
async def test_a_path_through_a_symlink_out_of_the_tree_is_refused_before_any_write(
    tmp_path: Path, path: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("untouched\n")
    work = init_repo(tmp_path / "work")
    (work / "link").symlink_to("../outside")
    (work / "abs").symlink_to(outside)
    (work / "gitlink").symlink_to(".git")
    (work / "loop").symlink_to("loop")
    git(work, "add", "-A")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "links")
    before_tree, before_outside = tree(work), tree(tmp_path)
    head = git(work, "rev-parse", "HEAD")

    cases = CaseStore(InMemoryEventStore())
    await open_case(cases)
    executor, _ = scripted(change({"path": path, "content": "pwned\n"}), NoUsefulAction())
    report = await make_runtime(cases, [LocalEffects(work)]).run_until_blocked("case-1", executor)

    assert [(r.by, r.reason) for r in report.refusals] == [("port", "path_outside_tree")], report
    assert report.performed == ()
    assert tree(tmp_path) == before_outside and tree(work) == before_tree
    assert git(work, "status", "--porcelain") == ""
    assert git(work, "rev-parse", "HEAD") == head
    assert "escaped.txt" not in str(sorted(tree(tmp_path)))


async def test_a_write_to_a_symlink_itself_is_refused(tmp_path: Path) -> None:
    work = init_repo(tmp_path / "work")
    (work / "inside").symlink_to("app.py")
    git(work, "add", "-A")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "links")
    cases = CaseStore(InMemoryEventStore())
    await open_case(cases)
    executor, _ = scripted(change({"path": "inside", "content": "x\n"}), NoUsefulAction())
    report = await make_runtime(cases, [LocalEffects(work)]).run_until_blocked("case-1", executor)
    assert [r.reason for r in report.refusals] == ["path_is_symlink"]
    assert (work / "app.py").read_text() == "print('hello')\n"


def test_no_code_outside_a_runtime_is_issued_a_mint_key() -> None:
    """Key issuance is no public name, and refuses every owner but a Commission runtime
    that holds no key yet: code outside one cannot mint an ``AdmittedRequest`` that
    ``require_admitted`` accepts."""
    import loom.commission.admission as admission

    assert not hasattr(admission, "issue_key")
    issue = admission._issue_key  # pyright: ignore[reportPrivateUsage]

    class Impostor:
        pass

    Impostor.__qualname__ = "CommissionRuntime"  # same name, another module
    for owner in (object(), Impostor()):
        with pytest.raises(AdmissionError):
            issue(owner)
    runtime = make_runtime(CaseStore(InMemoryEventStore()), [])
    with pytest.raises(AdmissionError, match="already"):
        issue(runtime)  # its key was issued as it was built, to it alone
