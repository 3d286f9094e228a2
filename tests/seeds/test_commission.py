"""Where Loom ends: Loom proposes, Commission invokes (Commission's public API, with a Loom
flow as the executor over ``LoomTestEnv``'s real runtime and store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loom import FlowContext, Loom
from loom.commission import (
    Assigned,
    AuthorityDecision,
    AuthorityQuery,
    CaseStore,
    Commission,
    FlowExecutor,
    LocalEffects,
    NoUsefulAction,
    ProposedAction,
    StaticAuthority,
    StepInput,
)
from loom.commission.connectors import ConnectorEffects, ConnectorsConfig, EnvCredentialResolver
from loom.commission.events import RequestRefused
from loom.testing import LoomTestEnv
from tests.commission.helpers import ScriptedPort, make_runtime, open_case

GUARDED = "deploy.production/1"


class AskedAuthority(StaticAuthority):
    """A static authority that keeps every question it was asked."""

    def __init__(self, grants: dict[str, list[str]]) -> None:
        super().__init__(grants, name="policy")
        self.asked: list[AuthorityQuery] = []

    async def authorize(
        self, commission: Commission[Assigned], query: AuthorityQuery
    ) -> AuthorityDecision:
        self.asked.append(query)
        return await super().authorize(commission, query)


def make_app() -> Loom:
    app = Loom("seed-commission")

    @app.flow("deployer")
    async def deployer(ctx: FlowContext, step: StepInput) -> ProposedAction | NoUsefulAction:
        if step.last is not None:
            return NoUsefulAction()
        return ProposedAction(action_id=GUARDED, args={"service": "shop"})

    return app


async def run(cases: CaseStore, grants: dict[str, list[str]]) -> dict[str, Any]:
    env = LoomTestEnv(make_app())
    await open_case(cases, frontier=(GUARDED,))
    port = ScriptedPort(actions=(GUARDED,))
    authority = AskedAuthority(grants)
    runtime = make_runtime(cases, [port], authority)
    report = await runtime.run_until_blocked("case-1", FlowExecutor(env.runtime, "deployer"))
    step = await env.runtime.result("case-1:0:1")
    return {"report": report, "port": port, "authority": authority, "step": step}


async def test_an_action_needing_authority_is_proposed_and_the_runtime_asks(
    cases: CaseStore,
) -> None:
    """Checks: "An action that needs authority is proposed too. Loom never suspends for
    authority: the runtime rechecks the proposal and asks its authority provider." Denied,
    the flow's execution has still ended with its proposal, and nothing is invoked."""
    got = await run(cases, {"bot": []})
    step = got["step"]
    assert step.status == "completed" and step.waiting_on == []
    assert step.output == {
        "kind": "ProposedAction",
        "action_id": GUARDED,
        "args": {"service": "shop"},
    }
    assert [(q.action_id, q.args) for q in got["authority"].asked] == [
        (GUARDED, {"service": "shop"})
    ]
    assert got["port"].invocations == []
    refused = [e for e in await cases.history("case-1") if isinstance(e, RequestRefused)]
    assert [e.refusal.reason for e in refused] == ["authority_denied"]


async def test_granted_the_proposal_is_invoked_once_by_the_runtime_not_by_loom(
    cases: CaseStore,
) -> None:
    """Checks: "The executor returns a ProposedAction and invokes nothing" and
    "run_until_blocked invokes each admitted request once, and moves the case to a new
    revision only after an effect the port reports as Performed"."""
    got = await run(cases, {"bot": [GUARDED]})
    assert got["step"].status == "completed"
    [request] = got["port"].invocations
    assert (request.action_id, request.args) == (GUARDED, {"service": "shop"})
    report = got["report"]
    assert report.invoked == report.performed == (request.request_id,)
    assert report.revision == 1


def test_each_port_performs_only_its_own_actions(tmp_path: Path) -> None:
    """Checks: "The slice's LocalEffects performs software.change/1 actions" and "Commission's
    ConnectorEffects performs the actions a commission binds to Connector operations": a
    port says no to any other action (the runtime then refuses it as having no port)."""
    local = LocalEffects(tmp_path)
    assert local.performs("software.change/1")
    assert not local.performs(GUARDED) and not local.performs("software.change/2")
    config = ConnectorsConfig.from_yaml(
        """
connectors:
  endpoints:
    - {instance: github-main, url: "https://connectors.example", credential: "env:TOKEN"}
  bindings:
    - {action: github.issue.get/1, instance: github-main, operation: issues.get, effect: read}
"""
    )
    connectors = ConnectorEffects.from_config(config, EnvCredentialResolver())
    assert connectors.performs("github.issue.get/1")
    assert not connectors.performs("software.change/1") and not connectors.performs(GUARDED)
