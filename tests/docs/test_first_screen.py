"""The README's first screen is the ten-minute path, and its blocks (and the same ones in
Getting started) run as shown: the first flow, and the example from the command line through
to the served console."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.docs.blocks import ROOT, Ref, env, run_commands, run_python

PAGES = ["README.md", "docs/getting-started.md"]
RUNS = [Ref(page, 'Loom("hello")') for page in PAGES] + [
    Ref(page, "loom start order.fulfil --id first-1") for page in PAGES
]


def test_the_first_screen_is_the_ten_minute_path() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == ["Two commands", "A first flow", "Where to go next"]
    intro = text.split("\n## ", 1)[0]
    assert "durable-execution engine for Python" in intro
    commands = re.findall(r"```bash\n(.*?)```", text, re.S)[0]
    assert "pip install . && loom demo" in commands and "bash .ci/run" in commands
    assert len(text.split()) < 1000  # ten minutes of reading, not a reference
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"the README links to {target}, which is missing"


@pytest.mark.parametrize("page", PAGES)
def test_the_first_flow_runs(page: str, tmp_path: Path) -> None:
    assert run_python(Ref(page, 'Loom("hello")'), tmp_path).strip() == "completed hello ada"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_the_example_runs_from_the_command_line_to_the_console(page: str, tmp_path: Path) -> None:
    ref = Ref(page, "loom start order.fulfil --id first-1")
    shell = env()
    outputs = run_commands(ref, tmp_path, shell, stop_at="loom serve")
    assert "completed" in outputs[1], outputs  # resumed, and its timer fired
    assert "first-1" in outputs[2] and "ExecutionCompleted" in outputs[2]
    port = procs.free_port()
    store = shell["LOOM_STORE"].replace("sqlite:///", f"sqlite:///{tmp_path}/")
    argv = [sys.executable, "-m", "loom", "--store", store, "serve", "--port", str(port)]
    with procs.running(
        "loom-serve-docs",
        argv,
        port=port,
        log_path=tmp_path / "serve.log",
        ready_path="/health",
        env={"LOOM_APP": shell["LOOM_APP"]},
    ) as server:
        page_html = httpx.get(f"http://{server.host}/console/executions", timeout=30).text
    assert 'data-id="first-1"' in page_html
