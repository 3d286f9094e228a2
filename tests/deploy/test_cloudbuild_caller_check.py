"""cloudbuild.yaml's deploy refuses to roll out onto a worker or tasks service that runs
without its caller check and grant policy.

The deploy step's script runs here as Cloud Build runs it (its substitutions filled in,
``$$`` unescaped) with a stand-in ``gcloud`` on ``PATH`` (no Cloud Run exists offline): it
answers ``run services describe`` with the service JSON the test gives and logs every
call, so the test sees whether any ``run deploy`` happened.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.terraform_model import REPO_ROOT

CHECKED = {"LOOM_CALLER_AUTH": "loom_gcp.auth:google_id_token", "LOOM_GRANTS": '{"grants":[]}'}


def deploy_script(substitutions: dict[str, str]) -> str:
    config = yaml.safe_load((REPO_ROOT / "cloudbuild.yaml").read_text(encoding="utf-8"))
    step = next(s for s in config["steps"] if s["id"] == "deploy")
    script = str(step["args"][-1])
    values = {**config["substitutions"], "PROJECT_ID": "p", "BUILD_ID": "b1", **substitutions}
    script = re.sub(r"\$\{(\w+)\}", lambda m: str(values.get(m.group(1), m.group(0))), script)
    return script.replace("$$", "$")


def run_deploy(tmp_path: Path, services: dict[str, dict[str, str]], **subs: str) -> Any:
    fake = tmp_path / "bin"
    fake.mkdir()
    (tmp_path / "services.json").write_text(json.dumps(services))
    gcloud = fake / "gcloud"
    gcloud.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"open({str(tmp_path / 'calls.log')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1:4] == ['run', 'services', 'describe']:\n"
        f"    env = json.load(open({str(tmp_path / 'services.json')!r}))[sys.argv[4]]\n"
        "    items = [{'name': k, 'value': v} for k, v in env.items()]\n"
        "    print(json.dumps({'spec': {'template': {'spec': {'containers': [{'env': items}]}}}}))\n"
    )
    gcloud.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", deploy_script(subs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    log = tmp_path / "calls.log"
    return done, log.read_text().splitlines() if log.exists() else []


@pytest.mark.skipif(shutil.which("python3") is None, reason="the step's check runs python3")
def test_the_deploy_rolls_out_onto_checked_services(tmp_path: Path) -> None:
    done, calls = run_deploy(tmp_path, {"loom-worker": CHECKED, "loom-tasks": CHECKED})
    assert done.returncode == 0, done.stderr
    assert [c.split()[:3] for c in calls if "deploy" in c] == [
        ["run", "deploy", f"loom-{t}"] for t in ("worker", "tasks", "events")
    ]


@pytest.mark.skipif(shutil.which("python3") is None, reason="the step's check runs python3")
@pytest.mark.parametrize(
    "worker",
    [{}, {**CHECKED, "LOOM_CALLER_AUTH": ""}, {"LOOM_CALLER_AUTH": CHECKED["LOOM_CALLER_AUTH"]}],
    ids=["no-env", "check-off", "no-grants"],
)
def test_the_deploy_stops_before_a_service_without_its_caller_check(
    tmp_path: Path, worker: dict[str, str]
) -> None:
    done, calls = run_deploy(tmp_path, {"loom-worker": worker, "loom-tasks": CHECKED})
    assert done.returncode != 0
    assert "loom-worker runs without" in done.stderr
    assert not [c for c in calls if c.startswith("run deploy")]
    # A deployment that relies on IAM alone says so in its substitutions.
    again = tmp_path / "again"
    again.mkdir()
    done, calls = run_deploy(
        again, {"loom-worker": worker, "loom-tasks": CHECKED}, _REQUIRE_CALLER_CHECK="false"
    )
    assert done.returncode == 0 and len([c for c in calls if c.startswith("run deploy")]) == 3
