"""``loom update``, ``loom query`` and ``loom stream`` on the embedded SQLite default with the
cart example."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from loom.cli import main

ROOT = Path(__file__).resolve().parents[2]
Run = Callable[..., tuple[int, str]]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.chdir(ROOT)  # examples.cart is importable from the checkout
    runner = CliRunner()
    base = ["--app", "examples.cart:app", "--store", f"sqlite:///{tmp_path}/loom.db"]

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, [*base, *args], catch_exceptions=False)
        return result.exit_code, result.output

    return invoke


def test_update_query_and_stream(run: Run) -> None:
    assert run("start", "cart", "--id", "c-1")[0] == 0
    code, out = run("update", "c-1", "add", '"apple"')
    assert (code, json.loads(out)) == (0, 3)
    code, out = run("update", "c-1", "add", '"cheese"', "--id", "u-2")
    assert (code, json.loads(out)) == (0, 12)
    code, again = run("update", "c-1", "add", '"cheese"', "--id", "u-2")
    assert (code, json.loads(again)) == (0, 12)  # the same update, answered the same
    assert json.loads(run("query", "c-1", "items")[1]) == ["apple", "cheese"]
    assert json.loads(run("query", "c-1", "total")[1]) == 12
    code, out = run("stream", "c-1", "receipt")
    assert (code, [json.loads(line) for line in out.splitlines()]) == (
        0,
        ["apple: 3", "cheese: 9"],
    )
    code, out = run("update", "c-1", "checkout", "--no-wait")
    assert code == 0 and json.loads(out)["status"] in ("accepted", "completed")
    code, out = run("stream", "c-1", "receipt", "--offset", "1", "--follow")
    assert [json.loads(line) for line in out.splitlines()] == ["cheese: 9", "total: 12"]
    assert run("start", "courier", "--id", "ship", "--input", '"c-1"')[0] == 0
    code, out = run("show", "ship", "--json")
    assert json.loads(out)["output"] == "shipping c-1 (12)"


def test_clear_errors(run: Run) -> None:
    run("start", "cart", "--id", "c-2")
    code, out = run("update", "c-2", "add", '" "')
    assert code == 2 and "an item needs a name" in out
    code, out = run("update", "c-2", "remove", '"apple"')
    assert code == 2 and "no update handler 'remove'" in out
    code, out = run("query", "c-2", "weight")
    assert code == 2 and "no query handler 'weight'" in out
    code, out = run("update", "c-2", "add", "{not json")
    assert code == 2 and "not valid JSON" in out
    code, out = run("update", "nobody", "add", '"apple"')
    assert code == 2 and "unknown" in out.lower()
    run("update", "c-2", "checkout")
    code, out = run("update", "c-2", "add", '"late"')
    assert code == 2 and "completed" in out
