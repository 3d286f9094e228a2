"""An ``AdmittedRequest`` is built only by the runtime's admission; nothing else gets one."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest

from loom.commission import (
    AdmissionError,
    AdmittedRequest,
    CaseStore,
    LocalEffects,
    NoUsefulAction,
    ProposedAction,
    require_admitted,
)
from loom.commission.connectors import (
    ConnectorBinding,
    ConnectorEffects,
    ConnectorsInvoker,
    Effect,
    MappingCredentialResolver,
)
from loom.commission.model import Assigned, Commission, Grant, RequestRecord
from tests.commission.helpers import CHANGE, ScriptedPort, make_runtime, open_case, scripted

RECORD = RequestRecord(
    request_id="case-1:0:1",
    case_id="case-1",
    commission_id="com-1",
    action_id=CHANGE,
    args={"message": "fix"},
    revision=0,
    step=1,
    grant=Grant(by="me"),
)
ASSIGNED = Commission[Assigned](commission_id="com-1", state=Assigned(assignee="bot"))


def forged() -> AdmittedRequest:
    """An instance made around the constructor."""
    request = object.__new__(AdmittedRequest)
    object.__setattr__(request, "_record", RECORD)
    return request


async def admitted_by_the_runtime(cases: CaseStore) -> AdmittedRequest:
    await open_case(cases)
    port = ScriptedPort()
    executor, _ = scripted(
        ProposedAction(action_id=CHANGE, args={"message": "fix"}), NoUsefulAction()
    )
    await make_runtime(cases, [port]).run_until_blocked("case-1", executor)
    return port.invocations[0]


def test_constructing_an_admitted_request_outside_the_runtime_fails() -> None:
    with pytest.raises(AdmissionError, match="only by the Commission runtime"):
        AdmittedRequest(RECORD)
    with pytest.raises(AdmissionError):
        AdmittedRequest(RECORD, _mint=object())


def test_it_cannot_be_subclassed_into_something_constructible() -> None:
    with pytest.raises(TypeError, match="cannot be subclassed"):
        type("Mine", (AdmittedRequest,), {})


def test_a_forged_instance_is_refused_by_require_admitted() -> None:
    with pytest.raises(AdmissionError):
        require_admitted(forged())
    with pytest.raises(AdmissionError):
        require_admitted(RECORD)


async def test_the_ports_refuse_forged_requests(tmp_path: Path) -> None:
    binding = ConnectorBinding(action="x/1", instance="i", operation="o", effect=Effect.READ)
    invoker = ConnectorsInvoker([], MappingCredentialResolver({}))
    for port in (LocalEffects(tmp_path), ConnectorEffects(invoker, [binding])):
        with pytest.raises(AdmissionError):
            await port.invoke(ASSIGNED, forged())
    await invoker.aclose()


async def test_a_runtime_admitted_request_is_read_only_and_keeps_one_identity(
    cases: CaseStore,
) -> None:
    request = await admitted_by_the_runtime(cases)

    assert require_admitted(request) is request
    assert copy.copy(request) is request and copy.deepcopy(request) is request
    with pytest.raises(AdmissionError):
        pickle.dumps(request)
    with pytest.raises(AttributeError):
        request._record = RECORD  # type: ignore[misc]
    request.args["message"] = "tampered"
    assert request.args == {"message": "fix"}
    assert request.record.grant.by == "static"
