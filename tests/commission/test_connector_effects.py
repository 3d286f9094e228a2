"""Endpoints and bindings from YAML, and ``ConnectorEffects`` under the Commission runtime,
end to end against the loopback Connectors service."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from loom.commission import CaseStore, NoUsefulAction, ProposedAction, StepInput
from loom.commission.connectors import (
    ConnectorEffects,
    ConnectorsConfig,
    Effect,
    EnvCredentialResolver,
)
from loom.commission.errors import ConnectorsConfigError
from tests.commission.connectors_service import ConnectorsService, error_answer
from tests.commission.helpers import make_runtime, open_case, scripted

COMMENT, GET = "github.issue.comment/1", "github.issue.get/1"


def responsibility_yaml(url: str, *, allow_plain_http: bool = True) -> str:
    return f"""
connectors:
  endpoints:
    - instance: github-main
      url: {url}
      credential: env:LOOM_TEST_CONNECTOR_TOKEN
      allow_plain_http: {str(allow_plain_http).lower()}
  bindings:
    - action: {COMMENT}
      instance: github-main
      operation: issues.comment.create
      effect: write
    - action: {GET}
      instance: github-main
      operation: issues.get
      effect: read
"""


def test_endpoints_and_bindings_are_read_from_yaml() -> None:
    config = ConnectorsConfig.from_yaml(responsibility_yaml("https://connectors.example/"))

    (endpoint,) = config.endpoints
    assert (endpoint.instance, endpoint.url, endpoint.allow_plain_http) == (
        "github-main",
        "https://connectors.example/",
        True,
    )
    assert endpoint.credential == "env:LOOM_TEST_CONNECTOR_TOKEN"
    assert [(b.action, b.effect) for b in config.bindings] == [
        (COMMENT, Effect.WRITE),
        (GET, Effect.READ),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "connectors: [",
        "other: {}",
        "connectors:\n  endpoints:\n    - {instance: a, url: u}\n",
        "connectors:\n  bindings:\n    - {action: a, instance: i, operation: o, effect: delete}\n",
        "connectors:\n  endpoints:\n"
        "    - {instance: a, url: u, credential: c}\n    - {instance: a, url: v, credential: c}\n",
    ],
    ids=["bad yaml", "no section", "no credential", "unknown effect", "two endpoints"],
)
def test_malformed_declarations_are_configuration_errors(text: str) -> None:
    with pytest.raises(ConnectorsConfigError):
        ConnectorsConfig.from_yaml(text)


async def test_env_credential_references(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOM_TEST_CONNECTOR_TOKEN", "t0ken")
    resolver = EnvCredentialResolver()
    assert await resolver.resolve("env:LOOM_TEST_CONNECTOR_TOKEN") == "t0ken"
    assert await resolver.resolve("env:LOOM_TEST_NOT_SET") is None
    assert await resolver.resolve("vault:whatever") is None


@pytest.fixture
async def effects(
    connectors: ConnectorsService, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ConnectorEffects]:
    monkeypatch.setenv("LOOM_TEST_CONNECTOR_TOKEN", connectors.token)
    config = ConnectorsConfig.from_yaml(responsibility_yaml(connectors.url))
    port = ConnectorEffects.from_config(config, EnvCredentialResolver())
    yield port
    await port.aclose()


async def test_a_commission_reads_and_writes_through_connectors(
    cases: CaseStore, connectors: ConnectorsService, effects: ConnectorEffects
) -> None:
    await open_case(cases, frontier=[GET, COMMENT])

    def comment(step: StepInput) -> ProposedAction:
        assert step.last is not None and step.last.ref == "aud-1"
        title = step.last.detail["output"]["issue"]["title"]  # type: ignore[index,call-overload]
        return ProposedAction(action_id=COMMENT, args={"issue": 7, "body": f"Re: {title}"})

    executor, seen = scripted(
        ProposedAction(action_id=GET, args={"issue": 7}), comment, NoUsefulAction()
    )
    report = await make_runtime(cases, [effects]).run_until_blocked("case-1", executor)

    assert report.reason == "no_useful_action"
    assert report.performed == ("case-1:0:1", "case-1:1:2")
    assert report.revision == 2
    assert seen[2].last is not None and seen[2].last.ref == "att-2"
    assert connectors.invoke_calls == 2
    write = connectors.invoked[1]
    assert write["idempotency_key"] == "case-1:1:2"
    assert write["input"] == {"issue": 7, "body": "Re: crash on start"}
    assert write["context"]["revision"] == 1 and write["context"]["assignee"] == "bot"


async def test_a_connector_refusal_is_recorded_and_the_revision_stays(
    cases: CaseStore, connectors: ConnectorsService, effects: ConnectorEffects
) -> None:
    await open_case(cases, frontier=[COMMENT])
    connectors.answers.append((200, error_answer("rate_limited", "not_attempted")))
    executor, _ = scripted(ProposedAction(action_id=COMMENT), NoUsefulAction())

    report = await make_runtime(cases, [effects]).run_until_blocked("case-1", executor)

    assert [(r.by, r.reason) for r in report.refusals] == [("port", "rate_limited")]
    assert report.revision == 0 and connectors.invoke_calls == 1


async def test_a_connector_err_stops_the_run_before_anything_is_invoked(
    cases: CaseStore, connectors: ConnectorsService, effects: ConnectorEffects
) -> None:
    await open_case(cases, frontier=[COMMENT])
    connectors.describe_as = "github-staging"
    executor, _ = scripted(ProposedAction(action_id=COMMENT), NoUsefulAction())

    report = await make_runtime(cases, [effects]).run_until_blocked("case-1", executor)

    assert report.reason == "error"
    assert report.error is not None and report.error.code == "instance_mismatch"
    assert report.revision == 0
    assert (connectors.describe_calls, connectors.invoke_calls) == (1, 0)
    assert "EffectErrored" in [e.type for e in await cases.history("case-1")]


async def test_the_executor_never_holds_the_connector_or_its_credential(
    cases: CaseStore, connectors: ConnectorsService, effects: ConnectorEffects
) -> None:
    await open_case(cases, frontier=[COMMENT])
    executor, seen = scripted(ProposedAction(action_id=COMMENT), NoUsefulAction())
    await make_runtime(cases, [effects]).run_until_blocked("case-1", executor)

    for step in seen:
        assert connectors.token not in step.model_dump_json()
        assert connectors.url not in step.model_dump_json()
