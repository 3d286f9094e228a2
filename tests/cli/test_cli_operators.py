"""What a newcomer and an operator hit at the command line: the orders example run as its
docstring says, re-running a failed execution with a capability it lacked (``loom retry
--capability``, ``loom fork --capability``, still checked against the grant policy for the
local operator), ``loom ls`` filters and limits, and an ``--app`` naming a missing attribute."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from loom.cli import main
from loom.cli.authority import local_principal
from loom.examples import orders

ORDER = {"order_id": "x-1", "items": ["book"], "cooling_off_s": 0}


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # any folder: the example ships in the package
    monkeypatch.delenv("LOOM_GRANTS", raising=False)
    monkeypatch.delenv("LOOM_GRANTS_FILE", raising=False)
    runner = CliRunner()
    store = ["--store", f"sqlite:///{tmp_path}/loom.db"]

    def invoke(*args: str, app: str = "loom.examples.orders:app") -> tuple[int, str, str]:
        result = runner.invoke(main, ["--app", app, *store, *args], catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    return invoke


def _show(run: Any, eid: str) -> dict[str, Any]:
    code, out, err = run("show", eid, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_orders_docstring_commands_run_as_written(run) -> None:
    doc = orders.__doc__ or ""
    lines = [ln.strip() for ln in doc.splitlines() if ln.strip().startswith(("loom ", "export"))]
    assert any("--capability payments" in ln for ln in lines)
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "export":
            assert argv[1] == "LOOM_APP=loom.examples.orders:app"
            continue
        code, out, err = run(*argv[1:])
        assert code == 0, (line, out, err)
    doc_run = _show(run, "o-1")
    assert doc_run["status"] == "completed", doc_run
    assert doc_run["output"]["receipt"]["charge_id"] == "ch_o-1:6"


def _failed_for_want_of_payments(run: Any, eid: str) -> None:
    code, _, _ = run("start", "order.fulfil", "--id", eid, "--input", json.dumps(ORDER))
    assert code == 0
    code, out, _ = run(
        "resume", eid, "--on", "approval", "--key", f"{eid}:approval#1", "--wait", "2"
    )
    assert code == 1 and "failed" in out and "requires ['payments']" in out


def _redrive_of(out: str, eid: str, status: str) -> str:
    [line] = [ln for ln in out.splitlines() if ln.startswith(f"{eid} ")]
    found = re.search(rf"as (\S+): {status}", line)
    assert found, line
    return found.group(1)


def test_retry_with_a_capability_re_drives_a_failed_order_to_completion(run) -> None:
    _failed_for_want_of_payments(run, "x-1")
    code, out, err = run("retry", "x-1", "--capability", "payments")
    assert code == 0, out + err
    shown = _show(run, _redrive_of(out, "x-1", "completed"))
    assert shown["status"] == "completed"
    assert shown["events"][0]["capabilities"] == ["payments"]
    assert shown["events"][0]["by"] == local_principal()  # the authority: who runs loom


def test_a_redrive_that_failed_again_is_re_driven_with_the_capability(run) -> None:
    _failed_for_want_of_payments(run, "x-5")
    code, out, _ = run("retry", "x-5")  # without it, as before: the re-drive fails the same way
    assert code == 0
    again = _redrive_of(out, "x-5", "failed")
    code, out, err = run("retry", again, "--capability", "payments")
    assert code == 0, out + err
    assert _show(run, _redrive_of(out, again, "completed"))["status"] == "completed"


def test_fork_with_a_capability(run) -> None:
    _failed_for_want_of_payments(run, "x-2")
    code, out, err = run(
        "fork", "x-2", "--from-step", "5", "--id", "x-2b", "--capability", "payments", "--wait", "2"
    )
    assert code == 0 and "completed" in out, out + err
    assert _show(run, "x-2b")["events"][0]["capabilities"] == ["payments"]


def test_a_capability_the_grant_policy_refuses_is_refused(
    run, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failed_for_want_of_payments(run, "x-3")
    monkeypatch.setenv("LOOM_GRANTS", json.dumps({"grants": []}))  # the deployment's policy
    code, out, err = run("fork", "x-3", "--from-step", "5", "--capability", "payments")
    assert code == 2 and "may not grant payments" in err, out + err
    code, out, err = run("retry", "x-3", "--capability", "payments")
    assert code == 1 and "may not grant payments" in out, out + err
    code, out, err = run("ls", "--flow", "order.fulfil")
    assert "1 execution(s)" in out  # nothing was forked


def test_a_capability_for_a_parked_execution_says_why_not(run) -> None:
    code, _, _ = run("start", "order.fulfil", "--id", "x-4", "--input", json.dumps(ORDER))
    code, _, err = run("retry", "x-4", "--capability", "payments")
    assert code == 2 and "not failed" in err and "capabilities can be added only" in err
    code, _, err = run("retry", "--status", "failed", "--capability", "payments")
    assert code == 2 and "--capability goes with one EXECUTION_ID" in err


def test_ls_filters_limits_and_says_when_it_stopped(run) -> None:
    for n in range(5):
        run("start", "order.express", "--id", f"e-{n}", "--capability", "payments",
            "--input", json.dumps({"order_id": f"e-{n}", "items": ["pen"]}))  # fmt: skip
    run("start", "order.fulfil", "--id", "f-1", "--input", json.dumps(ORDER))
    code, out, _ = run("ls", "--flow", "order.express", "--limit", "3")
    assert code == 0
    assert [ln.split()[0] for ln in out.splitlines()[1:4]] == ["e-4", "e-3", "e-2"]
    assert "3 execution(s) shown, the newest; more match" in out and "--limit" in out
    code, out, _ = run("ls", "--status", "suspended")
    assert out.splitlines()[1].split()[0] == "f-1" and out.strip().endswith("1 execution(s)")
    code, out, _ = run("ls", "--flow", "order.express", "--json", "--limit", "2")
    assert [r["execution_id"] for r in json.loads(out)] == ["e-4", "e-3"]
    code, _, err = run("ls", "--limit", "0")
    assert code == 2 and "--limit" in err


def test_ls_never_breaks_a_name_mid_word(run) -> None:
    long_id = "invoice-2026-0001-" + "x" * 60
    run("start", "order.fulfil", "--id", long_id, "--input", json.dumps(ORDER))
    run("start", "order.fulfil", "--id", "short", "--input", json.dumps(ORDER))
    code, out, _ = run("ls")
    assert code == 0
    assert long_id in out.splitlines()  # whole, on a line of its own
    assert "short" in out.splitlines()
    assert all(len(line) <= 80 for line in out.splitlines() if line != long_id)


def test_an_app_reference_to_a_missing_attribute_says_so(run) -> None:
    code, _, err = run("start", "x", app="loom.examples.orders:nope")
    assert code == 2
    assert "has no attribute 'nope'" in err and "loom.examples.orders:app" in err
    code, _, err = run("start", "x", app="loom.examples.orders:PRICES")
    assert code == 2 and "is dict, not a loom.Loom app" in err
