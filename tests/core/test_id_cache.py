"""``check_execution_id`` remembers ids it accepted (a set lookup instead of the rule on
every append); these tests pin that shortcut to the full check: the same ids pass, the same
ids fail with the same error, and a refused id is never remembered."""

from __future__ import annotations

import pytest

from loom import ids
from loom.errors import InvalidExecutionIdError
from tests.contracts.id_corpus import INVALID, VALID


def _error(value: str) -> str:
    with pytest.raises(InvalidExecutionIdError) as info:
        ids.check_execution_id(value)
    return info.value.message


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    ids._VALID.clear()  # pyright: ignore[reportPrivateUsage]


def test_a_valid_id_passes_the_full_check_then_the_remembered_one() -> None:
    for value in VALID:
        assert ids.id_problem(value) is None
        assert ids.check_execution_id(value) is value
        assert value in ids._VALID  # pyright: ignore[reportPrivateUsage]
        assert ids.check_execution_id(value) is value


def test_an_invalid_id_is_refused_alike_every_time_and_never_remembered() -> None:
    for value in INVALID:
        problem = ids.id_problem(value)
        assert problem is not None
        first = _error(value)
        assert problem in first and "the rule" in first
        assert _error(value) == first
        assert value not in ids._VALID  # pyright: ignore[reportPrivateUsage]


def test_an_invalid_id_keeps_its_own_name_in_the_message() -> None:
    with pytest.raises(InvalidExecutionIdError, match="invalid parent id 'a/b'"):
        ids.check_execution_id("a/b", what="parent id")


def test_a_str_subclass_is_checked_in_full_and_never_remembered() -> None:
    class Name(str):
        __slots__ = ()

    assert ids.check_execution_id(Name("ok")) == "ok"
    with pytest.raises(InvalidExecutionIdError, match="must not contain '/'"):
        ids.check_execution_id(Name("a/b"))
    assert not ids._VALID  # pyright: ignore[reportPrivateUsage]


def test_a_non_string_is_refused_as_before() -> None:
    with pytest.raises(InvalidExecutionIdError, match="must be a string, not list"):
        ids.check_execution_id(["e1"])  # type: ignore[arg-type]


def test_the_remembered_ids_are_bounded() -> None:
    bound = ids._VALID_MAX  # pyright: ignore[reportPrivateUsage]
    for n in range(bound * 2 + 10):
        ids.check_execution_id(f"id-{n}")
        assert len(ids._VALID) <= bound  # pyright: ignore[reportPrivateUsage]
    assert ids.check_execution_id("id-0") == "id-0"  # forgotten or not, still valid
