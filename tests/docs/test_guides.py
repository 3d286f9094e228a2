"""The guides' examples run as shown: the Python snippets of flows that compose and flows that
talk print what they say, and the command-line blocks run command by command.

Followed in order in one folder, the guides' command blocks leave a store ``loom
replay-check`` finds nothing wrong in: each guide whose app is not the orders example keeps
to a store of its own, so the check (which replays every live execution against the app it
is given) never meets a flow that app lacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, Ref, block, env, run_commands, run_python

COMPOSE = "docs/guides/compose.md"
MESSAGES = "docs/guides/messages.md"
CLI = "docs/guides/cli.md"
INTERACT = "docs/guides/interact.md"
QUEUES = "docs/guides/queues-and-schedules.md"
EXPECTED = {
    Ref(COMPOSE, 'Loom("trips")'): "undid flight\nundid hotel\ncancelled",
    Ref(COMPOSE, 'Loom("approvals")'): "a-2 cancelled the flow's timeout passed",
    Ref(COMPOSE, 'Loom("reports")'): "1000\n{'execution_id': 'r-1', 'step_id': '3'}",
    Ref(COMPOSE, 'Loom("travel")'): (
        "{'flight': 'booked flight seat 12A', 'hotel': 'cancelled'}\n"
        "{'execution_id': 't-9', 'step_id': '1'}"
    ),
    Ref(MESSAGES, 'Loom("mail")'): "['hello', 'hello', 'hi']",
    Ref(MESSAGES, 'Loom("shop")'): "https://pay.example/o-1",
    Ref(MESSAGES, 'Loom("tally")'): "3 10",
    Ref(INTERACT, 'Loom("tickets")'): "1\n0\n0\nupdate 'book' refused by its validator: sold out"
    "\n['ada', 'alan']\ncompleted",
    Ref(INTERACT, 'Loom("writer")'): "['depends', 'upon'] 4 True\nso much depends upon",
    Ref(INTERACT, 'Loom("handoff")'): "mail https://pay.example/o-9 (receipt: None)",
    Ref(
        QUEUES, 'Loom("mailer")'
    ): "queue_deduplicated w-1\n['first', 'welcome', 'high', 'low', 'later']",
    Ref(QUEUES, 'Loom("digests")'): "['schedule:daily@2026-06-01T09:00:00Z']\ncompleted\n"
    "['2026-05-30T09:00:00Z', '2026-05-31T09:00:00Z']\n[]",
}
COMPOSE_CLI = Ref(COMPOSE, "loom cancel t-1")
ORDERS_CLI = Ref(CLI, "loom start order.fulfil --id cli-1")
FORK_CLI = Ref(CLI, "loom fork o-7")
BULK_CLI = Ref(CLI, "loom bulk resume")
SCHEDULES_CLI = Ref(CLI, "loom schedules --fire")
QUEUES_CLI = Ref(CLI, "loom queues")
INTERACT_CLI = Ref(INTERACT, "loom update c-1 checkout")
REPLAY_CHECK = Ref("docs/guides/deploying-changes.md", "loom replay-check  ")
COMMISSION = Ref("docs/guides/commission.md", "python -m examples.commission_local")
IN_ORDER = [
    ORDERS_CLI,
    COMPOSE_CLI,
    FORK_CLI,
    BULK_CLI,
    SCHEDULES_CLI,
    QUEUES_CLI,
    INTERACT_CLI,
    REPLAY_CHECK,
]
RUNS = [*EXPECTED, *IN_ORDER, COMMISSION]


@pytest.mark.parametrize("ref", list(EXPECTED), ids=lambda r: r.marker)
def test_snippet_runs_and_prints_what_it_says(ref: Ref) -> None:
    assert run_python(ref, ROOT).strip() == EXPECTED[ref]


def test_each_python_snippet_of_the_two_guides_is_checked() -> None:
    from tests.docs.blocks import blocks

    for page in (COMPOSE, MESSAGES, INTERACT, QUEUES):
        python = [b for b in blocks(page) if b.lang == "python"]
        assert len(python) == sum(1 for r in EXPECTED if r.page == page)


@pytest.mark.slow
def test_the_command_line_blocks_run_in_order_and_the_replay_check_finds_nothing(
    tmp_path: Path,
) -> None:
    shell = env()
    outputs: dict[Ref, list[str]] = {}
    for ref in IN_ORDER:
        outputs[ref] = run_commands(ref, tmp_path, shell)
    composed = "".join(outputs[COMPOSE_CLI])
    assert "t-1  cancelled  error=cancelled: changed my mind" in composed
    assert "t-2  cancelled  error=cancelled: the flow's timeout passed" in composed
    assert "r-1  completed" in composed and "parent r-1 (step 1)" in composed
    forked = "".join(outputs[FORK_CLI])
    assert "forked from o-7 at step 6" in forked and "0 of 0" in forked
    bulk = outputs[BULK_CLI]
    assert "did resume 1 of 1" in bulk[3]
    assert bulk[4].strip().endswith("would cancel 2 of 2 execution(s)")  # bulk-1 on its timer
    assert "did cancel 2 of 2" in bulk[5]
    assert "2 schedule(s)" in "".join(outputs[SCHEDULES_CLI])
    assert "emails" in outputs[QUEUES_CLI][-1]
    talked = outputs[INTERACT_CLI]
    assert [talked[1].strip(), talked[2].strip()] == ["3", "12"]  # the totals so far
    assert talked[3].strip() == '["apple", "cheese"]'
    assert talked[4].split() == ['"apple:', '3"', '"cheese:', '9"']
    assert "shipping c-1 (12)" in talked[-1]
    checked = outputs[REPLAY_CHECK][-1]
    assert "0 would diverge" in checked, checked
    assert sorted(p.name for p in (tmp_path / ".loom").glob("*.db")) == [
        "cart.db",
        "compose.db",
        "loom.db",
        "queued.db",
        "scheduled.db",
    ]


@pytest.mark.slow
def test_the_check_would_have_caught_guides_sharing_one_store(tmp_path: Path) -> None:
    """What the newcomer saw: with every guide on the default store, the orders app's
    replay check meets the saga's and the fan-out's executions and reports them."""
    shell = env()
    code = block(COMPOSE_CLI).code.replace("LOOM_STORE=sqlite:///.loom/compose.db ", "")
    script = tmp_path / "compose.sh"
    script.write_text("set -e\n" + code)
    subprocess.run(["bash", str(script)], cwd=tmp_path, env=shell, check=True, capture_output=True, timeout=120)  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "loom", "--app", "loom.examples.orders:app", "replay-check"],
        cwd=tmp_path, env=shell, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "would diverge" in done.stdout, done.stdout


@pytest.mark.slow
def test_the_commission_example_prints_what_the_guide_shows() -> None:
    code = block(COMMISSION).code
    shown = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    done = subprocess.run(
        [sys.executable, "-m", "examples.commission_local"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown
