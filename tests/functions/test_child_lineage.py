"""Child flows over HTTP: the lineage is in ``GET /executions/{id}`` (state and history)."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.functions.conftest import BEARER


def test_a_parent_and_its_child_show_their_lineage(client: FlaskClient) -> None:
    body = {"flow": "family", "input": {"n": 4}, "execution_id": "fam-1"}
    started = client.post("/executions", json=body, headers=BEARER)
    assert started.status_code == 200, started.json
    assert started.json is not None and started.json["status"] == "completed"
    assert started.json["output"] == {"child": {"echo": {"n": 4}, "doubled": 8}}

    parent = client.get("/executions/fam-1", headers=BEARER).json
    assert parent is not None
    assert parent["execution"]["state"]["children"] == {
        "1": {"child_id": "fam-1.child.1", "flow": "echo", "on_cancel": "cancel"}
    }
    assert "ChildStarted" in [e["type"] for e in parent["history"]]

    child = client.get("/executions/fam-1.child.1", headers=BEARER).json
    assert child is not None
    assert child["execution"]["state"]["parent"] == {"execution_id": "fam-1", "step_id": "1"}
    assert child["history"][0]["parent"] == {"execution_id": "fam-1", "step_id": "1"}
