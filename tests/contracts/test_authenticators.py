"""The authenticator contract (``loom.workers.auth.AuthRequest``) on every built-in check.

A check returns a principal or raises ``Unauthenticated`` (401) / ``Forbidden`` (403). It is
asked about the execution a request acts on, so its answer may depend on that id, but never
on whether the execution exists (it is given no store), and a request built the way checks
were called before ``flow`` existed (four fields) is answered exactly as one naming a flow.
The worker's side of the contract (which execution it names, when) is in
``tests/security/test_caller_scope.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from loom.workers.auth import (
    AuthError,
    AuthRequest,
    BearerTokenAuth,
    DenyAll,
    Forbidden,
    SharedSecretAuth,
    Unauthenticated,
    sign,
)

SECRET = "contract-secret-0123456789"
NOW = 1_800_000_000.0


def _verify(token: str) -> str:
    if token != "good-token":
        raise ValueError("unknown token")
    return "someone@example.com"


CHECKS: dict[str, Callable[[], Callable[[AuthRequest], str]]] = {
    "shared-secret": lambda: SharedSecretAuth(SECRET, clock=lambda: NOW),
    "bearer": lambda: BearerTokenAuth(_verify),
    "deny-all": lambda: DenyAll("nothing configured"),
}
GOOD = {
    "shared-secret": {"Authorization": f"Bearer {SECRET}"},
    "bearer": {"Authorization": "Bearer good-token"},
    "deny-all": {"Authorization": "Bearer anything"},
}


def answer(check: Callable[[AuthRequest], str], request: AuthRequest) -> str:
    try:
        return f"ok:{check(request)}"
    except AuthError as exc:
        assert isinstance(exc, Unauthenticated | Forbidden)
        assert exc.status in (401, 403) and exc.code in ("unauthenticated", "forbidden")
        return f"{exc.status}:{exc.message}"


@pytest.mark.parametrize("name", list(CHECKS))
@pytest.mark.parametrize("action", ["start", "execute", "retry", "resume", "read"])
@pytest.mark.parametrize("execution_id", ["", "e-1", "never-created"])
def test_a_request_with_a_flow_is_answered_as_one_without(
    name: str, action: str, execution_id: str
) -> None:
    check = CHECKS[name]()
    for headers in ({}, GOOD[name], {"Authorization": "Bearer wrong"}):
        old = AuthRequest(action, execution_id, headers, b"{}")
        new = AuthRequest(action, execution_id, headers, b"{}", "some.flow")
        assert answer(check, old) == answer(check, new)


@pytest.mark.parametrize("name", list(CHECKS))
def test_no_credential_is_refused_the_same_for_any_execution(name: str) -> None:
    check = CHECKS[name]()
    answers = {answer(check, AuthRequest("execute", eid, {}, b"")) for eid in ("a", "b", "")}
    assert len(answers) == 1
    status = answers.pop().split(":", 1)[0]
    assert status == ("403" if name == "deny-all" else "401")


def test_a_signature_is_good_for_the_execution_it_names_only() -> None:
    """What lets a signed request be scoped per execution: the execution is signed."""
    check = SharedSecretAuth(SECRET, clock=lambda: NOW)
    body = b'{"executionPackage": {"execution_id": "e-1"}}'
    signature = sign(SECRET, "execute", "e-1", body, expires=int(NOW) + 60)
    headers = {"X-Loom-Signature": signature}
    assert check(AuthRequest("execute", "e-1", headers, body, "f")) == "shared-secret"
    with pytest.raises(Forbidden):
        check(AuthRequest("execute", "e-2", headers, body, "f"))
