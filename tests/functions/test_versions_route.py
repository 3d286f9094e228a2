"""``GET /versions`` and ``POST /executions`` with a ``version``, through the worker target."""

from __future__ import annotations

from flask.testing import FlaskClient


def _start(client: FlaskClient, eid: str, **extra: object) -> dict:
    reply = client.post("/executions", json={"flow": "versioned", "execution_id": eid, **extra})
    assert reply.status_code == 200, reply.get_json()
    return reply.get_json()


def test_versions_lists_live_executions_per_version(client: FlaskClient) -> None:
    assert _start(client, "old", version=1)["status"] == "suspended"
    _start(client, "new-1")
    _start(client, "new-2", version="2")
    reply = client.get("/versions")
    assert reply.status_code == 200
    rows = {(r["flow"], r["version"]): r for r in reply.get_json()["versions"]}
    assert (rows[("versioned", "1")]["live"], rows[("versioned", "1")]["latest"]) == (1, False)
    assert (rows[("versioned", "2")]["live"], rows[("versioned", "2")]["latest"]) == (2, True)
    assert rows[("echo", "1")] == {
        "flow": "echo",
        "version": "1",
        "live": 0,
        "registered": True,
        "latest": True,
    }


def test_an_unknown_version_is_a_404_naming_it(client: FlaskClient) -> None:
    reply = client.post("/executions", json={"flow": "versioned", "version": 5})
    assert reply.status_code == 404
    body = reply.get_json()
    assert body["code"] == "unknown_flow_version" and "no version 5" in body["message"]
    assert client.get("/versions").get_json()["versions"][-1]["live"] == 0
