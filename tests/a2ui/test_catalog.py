"""The catalog: results are checked against the declared ``returns`` before anyone uses them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from loom.errors import ConfigurationError, InputError
from loom.plugins.a2ui import (
    A2UICatalog,
    A2UIProtocolError,
    CatalogValidationError,
    RendererCapabilities,
    define_function,
)
from loom.plugins.a2ui.schema import validate

LOCALE = define_function(
    "getLocale",
    {"type": "object", "additionalProperties": False},
    {
        "type": "object",
        "properties": {"locale": {"type": "string", "pattern": "^[a-z]{2}-[A-Z]{2}$"}},
        "required": ["locale"],
        "additionalProperties": False,
    },
    description="the user's locale",
)


def test_a_valid_result_passes_unchanged() -> None:
    assert LOCALE.validate_result({"locale": "fr-FR"}) == {"locale": "fr-FR"}


@pytest.mark.parametrize(
    ("result", "complaint"),
    [
        ({"locale": "french"}, "$.locale: does not match"),
        ({}, "missing required property 'locale'"),
        ({"locale": "fr-FR", "admin": True}, "$.admin: no value is allowed here"),
        ("fr-FR", "expected object, got string"),
        (None, "expected object, got null"),
    ],
)
def test_an_invalid_result_is_a_clear_input_error(result: Any, complaint: str) -> None:
    with pytest.raises(CatalogValidationError) as caught:
        LOCALE.validate_result(result)
    assert complaint in caught.value.message
    assert "'getLocale'" in caught.value.message and "returns" in caught.value.message
    assert isinstance(caught.value, InputError)
    assert caught.value.details["function"] == "getLocale"


def test_arguments_are_checked_against_args() -> None:
    assert LOCALE.validate_args(None) == {}
    with pytest.raises(CatalogValidationError, match="args"):
        LOCALE.validate_args({"unexpected": 1})


class Receipt(BaseModel):
    submission_id: str
    items: list[int] = []


def test_a_pydantic_model_can_stand_in_for_a_schema() -> None:
    fn = define_function("submit", Receipt, Receipt)
    assert fn.validate_result({"submission_id": "s-1", "items": [1, 2]})
    with pytest.raises(CatalogValidationError, match=r"\$.items\[1\]: expected integer"):
        fn.validate_result({"submission_id": "s-1", "items": [1, "two"]})


def test_schemas_this_plugin_cannot_enforce_are_refused_up_front() -> None:
    with pytest.raises(ConfigurationError, match="patternProperties"):
        define_function("f", returns_schema={"type": "object", "patternProperties": {}})
    with pytest.raises(ConfigurationError, match="points at nothing"):
        define_function("f", returns_schema={"$ref": "#/$defs/Missing"})
    with pytest.raises(ConfigurationError, match="only local"):
        define_function("f", returns_schema={"$ref": "https://example.com/s.json"})


def test_catalog_looks_functions_up_by_name() -> None:
    catalog = A2UICatalog([LOCALE], catalog_id="example.com:cat/v1")
    assert "getLocale" in catalog and "nope" not in catalog
    assert catalog.validate_result("getLocale", {"locale": "de-DE"}) == {"locale": "de-DE"}
    with pytest.raises(CatalogValidationError, match="not in catalog"):
        catalog.validate_result("nope", {})
    with pytest.raises(ConfigurationError, match="twice"):
        catalog.add(LOCALE)
    wire = catalog.to_wire()  # Loom's own form keeps the richer returns schema
    assert wire["catalogId"] == "example.com:cat/v1"
    assert wire["functions"][0]["name"] == "getLocale"
    assert wire["functions"][0]["returns"]["required"] == ["locale"]
    with pytest.raises(ConfigurationError, match="catalogId"):
        A2UICatalog([LOCALE], catalog_id="")


def test_allowed_callers_decide_what_an_agent_may_call() -> None:
    shared = define_function("getLocale", allowed_callers="rendererOrAgent")
    ui_only = define_function("openUrl", allowed_callers="rendererOnly")
    catalog = A2UICatalog(
        [LOCALE, shared.model_copy(update={"name": "g2"}), ui_only], catalog_id="c"
    )
    assert catalog.callable_by_agent("getLocale") is LOCALE  # agentOnly by default
    assert catalog.callable_by_agent("g2").allowedCallers == "rendererOrAgent"
    with pytest.raises(CatalogValidationError, match="rendererOnly"):
        catalog.callable_by_agent("openUrl")
    with pytest.raises(ConfigurationError, match="user activation"):
        define_function("pay", requires_user_activation=True)
    gesture = define_function("pay", requires_user_activation=True, allowed_callers="rendererOnly")
    assert not gesture.agent_may_call


def test_return_type_is_derived_from_returns_or_declared() -> None:
    assert LOCALE.returnType == "object"
    assert define_function("n", returns_schema={"type": "integer"}).returnType == "number"
    assert define_function("v", returns_schema={"type": "null"}).returnType == "void"
    assert define_function("a").returnType == "any"
    assert define_function("s", return_type="string").returnType == "string"


def test_the_v1_0_document_and_the_v0_9_inline_form() -> None:
    catalog = A2UICatalog([LOCALE], catalog_id="example.com:cat/v1")
    doc = catalog.to_document()
    assert doc["catalogId"] == "example.com:cat/v1" and doc["protocolVersion"] == "1.0"
    definition = doc["functions"]["getLocale"]
    assert definition["properties"]["call"] == {"const": "getLocale"}
    assert definition["returnType"] == "object" and definition["allowedCallers"] == "agentOnly"
    assert "returns" not in definition  # Loom's extension stays on Loom's side
    assert doc["$defs"]["anyFunction"] == {"oneOf": [{"$ref": "#/functions/getLocale"}]}
    inline = catalog.to_inline_v09()
    assert inline["functions"] == [
        {
            "name": "getLocale",
            "description": "the user's locale",
            "parameters": LOCALE.args,
            "returnType": "object",
        }
    ]


def test_renderer_capabilities_bound_what_may_be_called() -> None:
    caps = RendererCapabilities.from_wire(
        {
            "v1.0": {
                "supportedCatalogIds": ["example.com:known/v1"],
                "inlineCatalogs": [
                    {
                        "catalogId": "example.com:inline/v1",
                        "functions": {
                            "ask": {"allowedCallers": "agentOnly"},
                            "ui": {"returnType": "void"},
                        },
                    }
                ],
            }
        }
    )
    caps.check_call("example.com:known/v1", "anything")
    caps.check_call("example.com:inline/v1", "ask")
    with pytest.raises(CatalogValidationError, match="did not advertise"):
        caps.check_call("example.com:other/v1", "ask")
    with pytest.raises(CatalogValidationError, match="rendererOnly"):
        caps.check_call("example.com:inline/v1", "ui")  # the official default
    with pytest.raises(CatalogValidationError, match="has no function"):
        caps.check_call("example.com:inline/v1", "missing")
    with pytest.raises(A2UIProtocolError, match=r"v1\.0"):
        RendererCapabilities.from_wire({"v0.9": {"supportedCatalogIds": []}})
    with pytest.raises(A2UIProtocolError, match="list of strings"):
        RendererCapabilities.from_wire({"v1.0": {"supportedCatalogIds": "x"}})


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "integer"}, 3, True),
        ({"type": "integer"}, 3.0, 3.5),
        ({"type": "number", "minimum": 0, "exclusiveMaximum": 10}, 9.5, 10),
        ({"type": ["string", "null"]}, None, 1),
        ({"enum": ["a", 1]}, 1, True),
        ({"const": False}, False, 0),
        ({"type": "string", "minLength": 2, "maxLength": 3}, "abc", "abcd"),
        ({"type": "array", "items": {"type": "string"}, "maxItems": 2}, ["a"], ["a", "b", "c"]),
        ({"type": "array", "uniqueItems": True}, [1, 2], [{"a": 1}, {"a": 1}]),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, 1, 1.5),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1.5, 1),
        ({"allOf": [{"minimum": 1}, {"maximum": 2}]}, 2, 3),
        ({"not": {"type": "null"}}, 0, None),
        ({"multipleOf": 5}, 15, 7),
        (False, None, 0),
        (
            {
                "$defs": {"Id": {"type": "string"}},
                "type": "object",
                "properties": {"id": {"$ref": "#/$defs/Id"}},
            },
            {"id": "x"},
            {"id": 7},
        ),
    ],
)
def test_the_schema_subset_accepts_and_rejects(schema: Any, good: Any, bad: Any) -> None:
    if schema is not False:
        assert validate(good, schema) == []
    assert validate(bad, schema) != []
