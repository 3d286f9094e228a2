"""The operations pages' blocks: the grant policy in the security page is one Loom reads,
and the tracing setup, copied into an app module, makes the spans the page lists."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from loom.grants import GrantPolicy
from tests.docs.blocks import Ref, block, commands, env

POLICY = Ref("docs/operations/security.md", '"grants"')
TRACING_APP = Ref("docs/operations/tracing.md", "ConsoleSpanExporter()")
TRACING_RUN = Ref("docs/operations/tracing.md", "--store sqlite:///.loom/traced.db")
RUNS = [POLICY, TRACING_APP, TRACING_RUN]


def test_the_grant_policy_shown_is_one_loom_reads() -> None:
    policy = GrantPolicy.from_json(block(POLICY).code)
    policy.check("shared-secret", "order.fulfil", ["payments"])
    policy.check("ops@project.iam.gserviceaccount.com", "order.express", ["payments"])
    assert json.loads(block(POLICY).code)["grants"]


@pytest.mark.slow
def test_the_tracing_setup_prints_the_spans_the_page_lists(tmp_path: Path) -> None:
    (tmp_path / "tracing_app.py").write_text(block(TRACING_APP).code)
    [(command, _)] = commands(block(TRACING_RUN).code)
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=tmp_path,
        env={**env(), "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("loom.execute", "loom.step", "loom.store.append"):
        assert f'"name": "{name}"' in done.stdout, name
    assert '"loom.flow": "order.express"' in done.stdout
    assert '"service.name": "orders"' in done.stdout
