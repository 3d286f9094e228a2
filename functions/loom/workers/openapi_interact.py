"""The routes of updates, queries and streams in the OpenAPI document
(:mod:`loom.workers.openapi` holds the rest). Their bodies and answers are pydantic models,
listed in :data:`MODELS` for the document's schemas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from loom.primitives.streams import MAX_LIMIT, StreamChunk
from loom.primitives.update_calls import UpdateOutcome
from loom.workers.update_routes import MAX_WAIT, QueryAnswer, QueryRequest, UpdateRequest

Operation = Callable[..., dict[str, Any]]

MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (UpdateRequest, "validation"),
    (QueryRequest, "validation"),
    (UpdateOutcome, "serialization"),
    (QueryAnswer, "serialization"),
    (StreamChunk, "serialization"),
]

_ACCEPTED = {
    "description": "Accepted, not answered yet: ask GET /executions/{execution_id}/updates/"
    "{update_id} (with wait) for the answer",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/UpdateOutcome"}}},
}


def _param(name: str, where: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": schema,
    }


def interaction_paths(operation: Operation, execution_id: dict[str, Any]) -> dict[str, Any]:
    """The paths of updates, queries and streams (``operation`` builds one as the
    document's own routes are built)."""
    send = operation(
        "sendUpdate",
        "Send an update to the flow's handler: validated on the flow as it stands (refused "
        "422 with nothing written), accepted, run in the flow; answered within wait seconds "
        "(200: completed with output, or failed with error) or 202 while it runs. A used "
        "update_id with the same body is the same update; with another 409",
        ("UpdateOutcome", "The update's answer (status completed or failed)"),
        [400, 401, 403, 404, 409, 413, 415, 422, 429],
        body="UpdateRequest",
        secured=True,
        params=[execution_id],
    )
    send["responses"]["202"] = _ACCEPTED
    get = operation(
        "getUpdate",
        "Where an update stands, waiting up to wait seconds (at most 60) for its answer",
        ("UpdateOutcome", "The update's answer"),
        [400, 401, 403, 404, 429],
        params=[
            execution_id,
            _param("update_id", "path", {"type": "string", "minLength": 1}, "The update."),
            _param(
                "wait",
                "query",
                {"type": "number", "minimum": 0, "maximum": MAX_WAIT},
                "Seconds to wait for the answer (default 0).",
            ),
        ],
    )
    get["responses"]["202"] = _ACCEPTED
    return {
        "/executions/{execution_id}/updates": {"post": send},
        "/executions/{execution_id}/updates/{update_id}": {"get": get},
        "/executions/{execution_id}/query": {
            "post": operation(
                "query",
                "The value the flow's query handler computes where the execution stands "
                "(a replay in memory: nothing written, nothing run). 404 unknown_query for "
                "a handler not registered there, 422 query_failed if it raised",
                ("QueryAnswer", "The handler's value"),
                [400, 401, 403, 404, 413, 415, 422],
                body="QueryRequest",
                params=[execution_id],
            )
        },
        "/executions/{execution_id}/streams/{key}": {"get": _stream_read(operation, execution_id)},
    }


def _stream_read(operation: Operation, execution_id: dict[str, Any]) -> dict[str, Any]:
    return operation(
        "readStream",
        "The values of the flow's stream key from offset on, waiting up to timeout seconds "
        "(at most 60) for one past offset; read again from next_offset until closed",
        ("StreamChunk", "The values, where to go on, and whether the stream is over"),
        [400, 401, 403, 404, 429],
        params=[
            execution_id,
            _param("key", "path", {"type": "string", "minLength": 1}, "The stream."),
            _param(
                "offset", "query", {"type": "integer", "minimum": 0}, "The first value's offset."
            ),
            _param(
                "limit",
                "query",
                {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                "Values at most (default 100).",
            ),
            _param(
                "timeout",
                "query",
                {"type": "number", "minimum": 0, "maximum": MAX_WAIT},
                "Seconds to wait for a first value past offset (default 0).",
            ),
        ],
    )
