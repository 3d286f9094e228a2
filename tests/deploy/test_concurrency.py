"""The server runs as many requests at once as Cloud Run sends it.

Cloud Run sends an instance up to ``max_instance_request_concurrency`` requests; gunicorn
(under functions-framework) serves ``THREADS`` at once and every execute holds its thread to
the end. Both come from Terraform's ``var.max_concurrency`` (and the image's default
matches its default), and a real server started as the container starts it serves that many
executes at the same time, sync effects included.
"""

from __future__ import annotations

import asyncio
import copy
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from loom.config import open_store
from loom.runtime import Runtime
from loom.workers.admission import PROBE_RESERVE
from loom.workers.loop import effect_threads
from tests import procs
from tests.deploy import barrier_app
from tests.deploy import terraform_model as tm
from tests.deploy.local_env import entrypoint_argv, image_env, terraform_env
from tests.deploy.terraform_model import REPO_ROOT, TerraformDir
from tests.deploy.test_dockerfile import DOCKERFILE


def concurrency_problems(model: TerraformDir, dockerfile: str) -> list[str]:
    """Where THREADS and the Cloud Run concurrency disagree; empty when they agree.

    THREADS is the concurrency plus the threads kept for the probes
    (``loom.workers.admission.PROBE_RESERVE``): Cloud Run's own routing never meets the
    bound on the other requests, and a probe never waits for a thread.
    """
    problems: list[str] = []
    template = tm.block(model.resource("google_cloud_run_v2_service", "loom"), "template") or {}
    concurrency = str(template.get("max_instance_request_concurrency"))
    threads = tm.service_env(model).get("THREADS", {}).get("value")
    match = re.search(r"\$\{var\.(\w+)\}", concurrency)
    wanted = f"${{var.{match.group(1)} + {PROBE_RESERVE}}}" if match else None
    if str(threads) == "${local.request_threads}":
        threads = model.locals.get("request_threads")
    if threads is None:
        problems.append("the Cloud Run service sets no THREADS env")
    elif str(threads) != wanted:
        problems.append(f"THREADS is {threads}, not {wanted} (the concurrency plus the probes')")
    default = model.var_default(match.group(1)) if match else None
    image = re.search(r"\bTHREADS=(\d+)", dockerfile)
    if image is None:
        problems.append("the image sets no THREADS default")
    elif default is None or int(image.group(1)) != int(default) + PROBE_RESERVE:
        problems.append(
            f"the image's THREADS={image.group(1)} is not the default {default} + {PROBE_RESERVE}"
        )
    return problems


@pytest.fixture(scope="module")
def module_dir() -> TerraformDir:
    return tm.load_dir(tm.MODULE_DIR)


def test_threads_follow_the_cloud_run_concurrency(module_dir: TerraformDir) -> None:
    assert concurrency_problems(module_dir, DOCKERFILE.read_text(encoding="utf-8")) == []


def _other_threads(m: TerraformDir) -> None:
    tm.service_env(m)["THREADS"]["value"] = "4"
    m.locals.pop("request_threads", None)


def _no_threads(m: TerraformDir) -> None:
    service = m.resource("google_cloud_run_v2_service", "loom")
    container = tm.blocks(tm.block(service, "template") or {}, "containers")[0]
    container["env"] = [e for e in container["env"] if e.get("name") != "THREADS"]


def _other_default(m: TerraformDir) -> None:
    m.variables["max_concurrency"]["default"] = 250


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [(_other_threads, "THREADS is 4"), (_no_threads, "no THREADS"), (_other_default, "250")],
    ids=["threads-literal", "threads-missing", "default-changed"],
)
def test_concurrency_checker_catches(module_dir: TerraformDir, mutate: Any, expected: str) -> None:
    model = copy.deepcopy(module_dir)
    mutate(model)
    problems = concurrency_problems(model, DOCKERFILE.read_text(encoding="utf-8"))
    assert any(expected in p for p in problems), problems


def test_image_without_threads_is_caught(module_dir: TerraformDir) -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "THREADS=82" in text
    problems = concurrency_problems(module_dir, text.replace("THREADS=82", "NOTHREADS=82"))
    assert any("no THREADS default" in p for p in problems), problems


@pytest.mark.parametrize(
    ("threads", "expected"), [("80", 80), ("1", None), ("", None), ("many", None)]
)
def test_sync_effects_get_a_thread_per_server_thread(threads: str, expected: int | None) -> None:
    default = effect_threads({})
    assert effect_threads({"THREADS": threads}) == (expected or default)
    assert default >= 5  # asyncio's own default: min(32, cores + 4)


async def _create(store_url: str, n: int) -> list[str]:
    runtime = Runtime(barrier_app.app, open_store(store_url))
    ids = [f"meet-{i}" for i in range(n)]
    try:
        for eid in ids:
            await runtime.start("meet", eid, execution_id=eid, run=False)
    finally:
        await runtime.store.aclose()
    return ids


async def _execute_all(url: str, ids: list[str]) -> list[Any]:
    limits = httpx.Limits(max_connections=len(ids))
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=240) as client:

        async def one(eid: str) -> Any:
            package = {"execution_id": eid, "flow": "meet", "reason": "start"}
            reply = await client.post("/execute", json={"executionPackage": package})
            return reply.json()

        return await asyncio.gather(*(one(eid) for eid in ids))


@pytest.mark.slow
def test_the_served_image_command_runs_max_concurrency_executes_at_once(
    tmp_path: Path, module_dir: TerraformDir
) -> None:
    """The container's command line, the image's ENV and Terraform's env (SQLite and a
    directory for Firestore and the bucket): every step waits at one barrier for all the
    others, so the flows complete only if all run at the same time."""
    n = int(module_dir.var_default("max_concurrency"))
    env, _ = terraform_env(
        {
            "LOOM_APP": "tests.deploy.barrier_app:app",
            "LOOM_STORE": f"sqlite:///{tmp_path / 'loom.db'}",
            "LOOM_BLOBS": f"file://{tmp_path / 'blobs'}",
            "LOOM_RESUME_SECRET": "s3cret-for-tests",
        }
    )
    port = procs.free_port()
    env = {**image_env(), **env, "PORT": str(port), "PYTHONPATH": str(REPO_ROOT)}
    env |= {"LOOM_TEST_BARRIER": str(n), "LOOM_TEST_BARRIER_TIMEOUT": "60"}
    ids = asyncio.run(_create(env["LOOM_STORE"], n))
    with procs.running(
        "functions-framework",
        entrypoint_argv(),
        port=port,
        log_path=tmp_path / "server.log",
        ready_path="/health",
        env=env,
    ) as server:
        results = asyncio.run(_execute_all(f"http://{server.host}", ids))
    statuses = [r.get("status") for r in results]
    assert statuses == ["completed"] * n, (statuses, server.log_tail())
