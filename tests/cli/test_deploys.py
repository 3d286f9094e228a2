"""Deploying new code under running executions, end to end on SQLite.

Every ``loom`` call is a fresh process, and the app module on disk is rewritten between
calls, exactly as a deploy swaps the code: a patch lets an old execution finish on the old
branch while a new one takes the new branch; a breaking change is named by
``loom replay-check`` (exit 1); two versions of a flow run side by side across restarts.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEADER = """
from loom import EffectContext, FlowContext, Loom

app = Loom("shop")

@app.effect("reserve")
async def reserve(ctx: EffectContext, order: str) -> str:
    return f"reserved {order}"

@app.effect("notify")
async def notify(ctx: EffectContext, order: str) -> str:
    return f"notified {order}"

@app.effect("ship")
async def ship(ctx: EffectContext, order: str) -> str:
    return f"shipped {order}"
"""

V1 = """
@app.flow("order.fulfil")
async def fulfil(ctx: FlowContext, order: str) -> list[str]:
    done = [await ctx.execute("reserve", order)]
    await ctx.suspend("approval", order)
    done.append(await ctx.execute("ship", order))
    return done
"""

PATCHED = """
@app.flow("order.fulfil")
async def fulfil(ctx: FlowContext, order: str) -> list[str]:
    done = [await ctx.execute("reserve", order)]
    if ctx.patched("notify-before-approval"):
        done.append(await ctx.execute("notify", order))
    await ctx.suspend("approval", order)
    done.append(await ctx.execute("ship", order))
    return done
"""

BROKEN = """
@app.flow("order.fulfil")
async def fulfil(ctx: FlowContext, order: str) -> list[str]:
    done = [await ctx.execute("reserve", order)]
    done.append(await ctx.execute("notify", order))
    await ctx.suspend("approval", order)
    done.append(await ctx.execute("ship", order))
    return done
"""

V2_BESIDE_V1 = (
    V1
    + """
@app.flow("order.fulfil", version=2)
async def fulfil_v2(ctx: FlowContext, order: str) -> list[str]:
    await ctx.suspend("approval", order)
    return [await ctx.execute("ship", order), "v2"]
"""
)

V2_ONLY = """
@app.flow("order.fulfil", version=2)
async def fulfil_v2(ctx: FlowContext, order: str) -> list[str]:
    await ctx.suspend("approval", order)
    return [await ctx.execute("ship", order), "v2"]
"""


class Deployment:
    """An app module in a directory, rewritten by :meth:`deploy`; ``loom`` run as a process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = f"sqlite:///{root / 'loom.db'}"

    def deploy(self, flows: str) -> None:
        (self.root / "shop.py").write_text(textwrap.dedent(HEADER + flows), encoding="utf-8")
        for cached in (self.root / "__pycache__").glob("shop*"):
            cached.unlink()  # same size and second: never trust a stale bytecode cache

    def loom(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        return subprocess.run(
            [sys.executable, "-m", "loom", "--app", "shop:app", "--store", self.store, *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def ok(self, *args: str) -> str:
        done = self.loom(*args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def state(self, eid: str) -> dict:
        return json.loads(self.ok("show", eid, "--json"))


@pytest.fixture
def shop(tmp_path: Path) -> Deployment:
    return Deployment(tmp_path)


def _diverging(stdout: str) -> dict[str, dict]:
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert lines[-1]["kind"] == "summary"
    return {x["execution_id"]: x for x in lines if x["kind"] == "divergence"}


def _output(d: Deployment, eid: str) -> tuple[str, object]:
    execution = d.state(eid)
    return execution["status"], execution["output"]


def test_a_patch_keeps_old_executions_on_the_old_branch_and_a_break_is_named(shop):
    shop.deploy(V1)
    shop.ok("start", "order.fulfil", "--input", '"o-old"', "--id", "old")
    assert _output(shop, "old")[0] == "suspended"

    shop.deploy(PATCHED)
    check = shop.loom("replay-check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "checked 1 executions" in check.stdout and "0 would diverge" in check.stdout
    shop.ok("start", "order.fulfil", "--input", '"o-new"', "--id", "new")
    shop.ok("resume", "old", "--on", "approval", "--key", "o-old")
    shop.ok("resume", "new", "--on", "approval", "--key", "o-new")
    assert _output(shop, "old") == ("completed", ["reserved o-old", "shipped o-old"])
    assert _output(shop, "new") == (
        "completed",
        ["reserved o-new", "notified o-new", "shipped o-new"],
    )

    shop.ok("start", "order.fulfil", "--input", '"o-3"', "--id", "third")  # patched, waiting
    shop.deploy(V1)  # a rollback to code without the change breaks what took the new branch
    rollback = shop.loom("replay-check", "--json")
    assert rollback.returncode == 1
    assert _diverging(rollback.stdout).keys() == {"third", "new"}  # live, and sampled finished
    shop.ok("start", "order.fulfil", "--input", '"o-4"', "--id", "fourth")
    shop.deploy(BROKEN)  # the change without a patch breaks what started on old code
    check = shop.loom("replay-check", "--json")
    assert check.returncode == 1, check.stdout + check.stderr
    found = _diverging(check.stdout)
    assert found.keys() == {"fourth", "old"}
    assert found["old"]["status"] == "completed"
    assert found["fourth"]["status"] == "suspended"
    assert found["fourth"]["step_id"] == "2"
    assert found["fourth"]["flow"] == "order.fulfil" and found["fourth"]["version"] == "1"
    assert "'notify'" in found["fourth"]["code"] and "approval" in found["fourth"]["history"]
    text = shop.loom("replay-check")
    assert text.returncode == 1
    assert "fourth" in text.stdout and "step 2" in text.stdout
    assert text.stderr == ""  # progress goes to a terminal only


def test_two_versions_run_their_own_executions_to_completion_across_restarts(shop):
    shop.deploy(V2_BESIDE_V1)
    shop.ok("start", "order.fulfil", "--input", '"a"', "--id", "on-v1", "--version", "1")
    shop.ok("start", "order.fulfil", "--input", '"b"', "--id", "on-v2")
    started = {eid: shop.state(eid)["events"][0]["flow_version"] for eid in ("on-v1", "on-v2")}
    assert started == {"on-v1": "1", "on-v2": "2"}
    table = json.loads(shop.ok("versions", "--json"))["versions"]
    assert [(r["version"], r["live"], r["latest"]) for r in table] == [
        ("1", 1, False),
        ("2", 1, True),
    ]

    shop.deploy(V2_ONLY)  # deleting v1 too early: caught before deploy, refused by workers
    check = shop.loom("replay-check")
    assert check.returncode == 1 and "on-v1" in check.stdout and "no version 1" in check.stdout
    # The resume is recorded; the worker refuses to run v1 and writes nothing after it.
    refused = shop.loom("resume", "on-v1", "--on", "approval", "--key", "a")
    assert "no version 1" in refused.stderr
    assert shop.state("on-v1")["events"][-1]["type"] == "ExecutionResumed"
    refused = shop.loom("execute", "on-v1")
    assert refused.returncode == 2 and "no version 1" in refused.stderr
    assert shop.state("on-v1")["events"][-1]["type"] == "ExecutionResumed"
    assert "MISSING" in shop.ok("versions")

    shop.deploy(V2_BESIDE_V1)  # v1 back: the redelivery (here by hand) runs it
    shop.ok("execute", "on-v1")
    shop.ok("resume", "on-v2", "--on", "approval", "--key", "b")
    assert _output(shop, "on-v1") == ("completed", ["reserved a", "shipped a"])
    assert _output(shop, "on-v2") == ("completed", ["shipped b", "v2"])
    table = json.loads(shop.ok("versions", "--json"))["versions"]
    assert [(r["version"], r["live"]) for r in table] == [("1", 0), ("2", 0)]


def test_starting_a_version_that_is_not_registered_is_refused(shop):
    shop.deploy(V1)
    done = shop.loom("start", "order.fulfil", "--input", '"x"', "--version", "7")
    assert done.returncode == 2 and "no version 7" in done.stderr
    assert "order.fulfil" not in shop.ok("ls")


def test_progress_goes_to_stderr_when_it_is_a_terminal(shop):
    shop.deploy(V1)
    shop.ok("start", "order.fulfil", "--input", '"o"', "--id", "one")
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "loom",
                "--app",
                "shop:app",
                "--store",
                shop.store,
                "replay-check",
            ],
            cwd=shop.root,
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            timeout=120,
            check=False,
        )
        os.close(follower)
        shown = b""
        with contextlib.suppress(OSError):  # EIO once the pty has nothing more
            while chunk := os.read(leader, 4096):
                shown += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0
    assert b"checked 1" in shown and b"diverging 0" in shown
    assert "checked 1 executions" in done.stdout and "diverging" not in done.stdout
