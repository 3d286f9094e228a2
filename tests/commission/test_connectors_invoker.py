"""``ConnectorsInvoker`` against a real Connectors service on loopback: every row of ADR 0009's
table, every Err before the invocation, and always at most one invocation, never resent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from loom.commission import ConnectorError, Performed, Refused
from loom.commission.connectors import (
    ConnectorBinding,
    ConnectorCall,
    ConnectorEndpoint,
    ConnectorsInvoker,
    CredentialResolver,
    Effect,
    MappingCredentialResolver,
)
from tests.commission.connectors_service import DROP, Answer, ConnectorsService, error_answer

WRITE = ConnectorBinding(
    action="github.issue.comment/1",
    instance="github-main",
    operation="issues.comment.create",
    effect=Effect.WRITE,
)
READ = ConnectorBinding(
    action="github.issue.get/1", instance="github-main", operation="issues.get", effect=Effect.READ
)
CALL = ConnectorCall(
    input={"issue": 7, "body": "Fixed in abc123"},
    idempotency_key="case-1:0:1",
    context={"case_id": "case-1"},
)
CREDENTIALS = MappingCredentialResolver({"secret://github": "connector-secret"})
Invoker = Callable[..., ConnectorsInvoker]


def endpoint(service: ConnectorsService, **changes: Any) -> ConnectorEndpoint:
    fields = {
        "instance": "github-main",
        "url": service.url,
        "credential": "secret://github",
        "allow_plain_http": True,  # the loopback service speaks plain http
        "timeout_s": 2.0,
        **changes,
    }
    return ConnectorEndpoint.model_validate(fields)


@pytest.fixture
async def make(connectors: ConnectorsService) -> AsyncIterator[Invoker]:
    """Builds invokers for the loopback service, and closes them."""
    made: list[ConnectorsInvoker] = []

    def build(
        resolver: CredentialResolver = CREDENTIALS, **endpoint_changes: Any
    ) -> ConnectorsInvoker:
        invoker = ConnectorsInvoker([endpoint(connectors, **endpoint_changes)], resolver)
        made.append(invoker)
        return invoker

    yield build
    for invoker in made:
        await invoker.aclose()


def success(**fields: Any) -> Answer:
    return 200, {"outcome": "success", "output": {"ok": True}, **fields}


ATTEMPT = {"id": "att-9", "status": "performed"}
AUDIT = {"id": "aud-9", "complete": True}


# -- the table: Performed and Refused ------------------------------------------------------


async def test_a_writes_success_with_its_attempt_is_performed_naming_the_attempt(
    make: Invoker, connectors: ConnectorsService
) -> None:
    outcome = await make().invoke(WRITE, CALL)

    assert isinstance(outcome, Performed)
    assert (outcome.what, outcome.ref) == ("connectors.attempt", "att-1")
    assert outcome.detail["output"] == {"comment_id": 1}
    assert (connectors.describe_calls, connectors.invoke_calls) == (1, 1)
    sent = connectors.invoked[0]
    assert sent["instance"] == "github-main" and sent["operation"] == "issues.comment.create"
    assert sent["input"] == CALL.input and sent["idempotency_key"] == "case-1:0:1"
    assert connectors.headers[0]["Authorization"] == "Bearer connector-secret"


async def test_a_reads_success_with_a_complete_audit_record_is_performed_naming_it(
    make: Invoker, connectors: ConnectorsService
) -> None:
    outcome = await make().invoke(READ, CALL)

    assert isinstance(outcome, Performed)
    assert (outcome.what, outcome.ref) == ("connectors.audit_record", "aud-1")
    assert outcome.detail["output"] == {"issue": {"number": 7, "title": "crash on start"}}
    assert connectors.invoke_calls == 1


@pytest.mark.parametrize("attempt_status", ["refused", "not_attempted"])
async def test_an_error_whose_attempt_is_refused_or_not_attempted_is_refused(
    make: Invoker, connectors: ConnectorsService, attempt_status: str
) -> None:
    connectors.answers.append((200, error_answer("policy_denied", attempt_status)))

    outcome = await make().invoke(WRITE, CALL)

    assert isinstance(outcome, Refused)
    assert outcome.reason == "policy_denied"
    assert outcome.detail["attempt_status"] == attempt_status
    assert connectors.invoke_calls == 1


# -- the table: anything else is Err, after exactly one invocation -------------------------

ANYTHING_ELSE: list[tuple[str, ConnectorBinding, Answer, str]] = [
    ("write success naming no attempt", WRITE, success(audit=AUDIT), "write_without_attempt"),
    ("write success, attempt not performed", WRITE,
     success(attempt={"id": "a", "status": "refused"}), "attempt_not_performed"),
    ("read success with an attempt", READ, success(attempt=ATTEMPT, audit=AUDIT),
     "read_with_attempt"),
    ("read success, audit incomplete", READ, success(audit={"id": "aud", "complete": False}),
     "audit_incomplete"),
    ("read success, no audit record", READ, success(), "audit_incomplete"),
    ("error without an attempt", WRITE, (200, error_answer("boom", None)),
     "error_without_attempt"),
    ("error whose attempt failed", WRITE, (200, error_answer("boom", "failed")),
     "attempt_failed"),
    ("error whose attempt is unknown", WRITE, (200, error_answer("boom", "unknown")),
     "attempt_unknown"),
    ("unknown outcome", WRITE, (200, {"outcome": "accepted", "attempt": ATTEMPT}),
     "unknown_outcome"),
    ("HTTP 500", WRITE, (500, {"outcome": "success", "attempt": ATTEMPT}), "protocol"),
    ("HTTP 202", WRITE, (202, {"outcome": "success", "attempt": ATTEMPT}), "protocol"),
    ("a redirect", WRITE, (307, {}), "protocol"),
    ("not JSON", WRITE, (200, b"<html>gateway</html>"), "protocol"),
    ("no outcome field", WRITE, (200, {"attempt": ATTEMPT}), "protocol"),
    ("a malformed attempt", WRITE, (200, {"outcome": "success", "attempt": {"id": ""}}),
     "protocol"),
    ("audit complete as the string true", READ,
     success(audit={"id": "aud", "complete": "true"}), "protocol"),
    ("audit complete as 1", READ, success(audit={"id": "aud", "complete": 1}), "protocol"),
    ("audit complete as yes", READ, success(audit={"id": "aud", "complete": "yes"}), "protocol"),
    ("connection dropped", WRITE, DROP, "transport"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("binding", "answer", "reason"),
    [row[1:] for row in ANYTHING_ELSE],
    ids=[row[0] for row in ANYTHING_ELSE],
)
async def test_anything_else_is_err_after_one_invocation_never_resent(
    make: Invoker,
    connectors: ConnectorsService,
    binding: ConnectorBinding,
    answer: Answer,
    reason: str,
) -> None:
    connectors.answers.append(answer)

    with pytest.raises(ConnectorError) as caught:
        await make().invoke(binding, CALL)

    assert caught.value.reason == reason
    assert (connectors.describe_calls, connectors.invoke_calls) == (1, 1)
    assert connectors.other_calls == []  # no redirect followed, nothing sent elsewhere


async def test_a_timeout_is_err_and_is_not_resent(
    make: Invoker, connectors: ConnectorsService
) -> None:
    connectors.delay_s = 1.0

    with pytest.raises(ConnectorError) as caught:
        await make(timeout_s=0.2).invoke(WRITE, CALL)

    assert caught.value.reason == "transport"
    assert connectors.invoke_calls == 1


# -- Err before the operation is invoked ---------------------------------------------------


class BrokenResolver(CredentialResolver):
    async def resolve(self, reference: str) -> str | None:
        raise OSError("secret manager unreachable")


@pytest.mark.parametrize(
    ("resolver", "endpoint_changes", "binding", "reason"),
    [
        (CREDENTIALS, {}, WRITE.model_copy(update={"instance": "gitlab"}), "no_endpoint"),
        (MappingCredentialResolver({}), {}, WRITE, "credential_unresolved"),
        (BrokenResolver(), {}, WRITE, "credential_unresolved"),
        (CREDENTIALS, {"allow_plain_http": False}, WRITE, "plain_http"),
        (CREDENTIALS, {"url": "ftp://127.0.0.1/"}, WRITE, "bad_url"),
    ],
    ids=["no endpoint", "credential unresolved", "resolver fails", "plain http", "bad url"],
)
async def test_err_before_anything_is_sent(
    make: Invoker,
    connectors: ConnectorsService,
    resolver: CredentialResolver,
    endpoint_changes: dict[str, Any],
    binding: ConnectorBinding,
    reason: str,
) -> None:
    with pytest.raises(ConnectorError) as caught:
        await make(resolver, **endpoint_changes).invoke(binding, CALL)

    assert caught.value.reason == reason
    assert connectors.requests == 0


def as_declared(service: ConnectorsService) -> None:
    """Leave the service as it is."""


def describe_as_other(service: ConnectorsService) -> None:
    service.describe_as = "github-other"


def describe_broken(service: ConnectorsService) -> None:
    service.describe_answer = (500, {"code": "internal"})


def describe_other_api(service: ConnectorsService) -> None:
    service.describe_answer = (200, {"api": "v1", "instance": "github-main", "operations": {}})


def wrong_token(service: ConnectorsService) -> None:
    service.token = "rotated"


@pytest.mark.parametrize(
    ("setup", "binding", "reason"),
    [
        (describe_as_other, WRITE, "instance_mismatch"),
        (as_declared, WRITE.model_copy(update={"operation": "issues.get"}), "effect_mismatch"),
        (as_declared, READ.model_copy(update={"operation": "issues.comment.create"}),
         "effect_mismatch"),
        (as_declared, WRITE.model_copy(update={"operation": "repos.delete"}),
         "unknown_operation"),
        (describe_broken, WRITE, "protocol"),
        (describe_other_api, WRITE, "protocol"),
        (wrong_token, WRITE, "protocol"),
    ],
    ids=["another instance", "write bound to a query", "read bound to a mutation",
         "unknown operation", "describe fails", "another api", "credential rejected"],
)  # fmt: skip
async def test_err_after_describing_and_before_invoking(
    make: Invoker,
    connectors: ConnectorsService,
    setup: Callable[[ConnectorsService], None],
    binding: ConnectorBinding,
    reason: str,
) -> None:
    setup(connectors)

    with pytest.raises(ConnectorError) as caught:
        await make().invoke(binding, CALL)

    assert caught.value.reason == reason
    assert (connectors.describe_calls, connectors.invoke_calls) == (1, 0)


async def test_a_redirect_is_not_followed_even_by_a_client_that_follows_them(
    connectors: ConnectorsService,
) -> None:
    connectors.answers.append((307, {}))
    async with httpx.AsyncClient(follow_redirects=True) as client:
        invoker = ConnectorsInvoker([endpoint(connectors)], CREDENTIALS, client=client)
        with pytest.raises(ConnectorError) as caught:
            await invoker.invoke(WRITE, CALL)

    assert caught.value.reason == "protocol"
    assert connectors.invoke_calls == 1 and connectors.other_calls == []
