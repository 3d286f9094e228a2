"""Bad input over every POST route: always the JSON error body with its status, never a 500."""

from __future__ import annotations

import io

import pytest
from flask.testing import FlaskClient

from tests.functions.conftest import BEARER
from tests.functions.helpers import assert_error

ROUTES = [
    "/execute",
    "/executions",
    "/executions/any/resume",
    "/executions/any/verdict",
    "/executions/any/messages",
]
JSON = "application/json"


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (b"{", JSON, 400, "malformed_json"),
        (b"", JSON, 400, "malformed_json"),
        (b"[1, 2]", JSON, 400, "malformed_json"),
        (b'"text"', JSON, 400, "malformed_json"),
        (b"\xff\xfe{}", JSON, 400, "malformed_json"),
        (b'{"flow": NaN}', JSON, 400, "malformed_json"),
        (b'{"flow": "\\ud800"}', JSON, 400, "malformed_json"),
        pytest.param(
            b"[" * 100_000 + b"]" * 100_000, JSON, 400, "malformed_json", id="deeply-nested"
        ),
        (b"{}", "text/plain", 415, "unsupported_media_type"),
        (b"{}", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
        (b"{}", None, 415, "unsupported_media_type"),
        (b'{"unexpected": true}', JSON, 400, "invalid_request"),
        (
            b'{"unexpected": true}',
            "application/problem+json; charset=utf-8",
            400,
            "invalid_request",
        ),
    ],
)
def test_bad_bodies(
    client: FlaskClient, path: str, body: bytes, content_type: str | None, status: int, code: str
) -> None:
    headers = dict(BEARER)
    if content_type is not None:
        headers["Content-Type"] = content_type
    assert_error(client.post(path, data=body, headers=headers), status, code)


@pytest.mark.parametrize("path", ROUTES)
def test_over_the_limit_by_content_length_and_by_bytes_read(
    client: FlaskClient, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOM_MAX_BODY_BYTES", "2048")
    big = b'{"pad": "' + b"x" * 4096 + b'"}'
    body = assert_error(
        client.post(path, data=big, headers={**BEARER, "Content-Type": JSON}), 413, "too_large"
    )
    assert body["details"] == {"limit": 2048}
    # A body with no Content-Length (chunked) is cut off at the limit as it is read.
    streamed = client.post(
        path,
        input_stream=io.BytesIO(big),
        headers={**BEARER, "Content-Type": JSON},
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert_error(streamed, 413, "too_large")
    small = client.post(path, data=b'{"x": 1}', headers={**BEARER, "Content-Type": JSON})
    assert small.status_code == 400  # under the limit: read, and refused for its content


def test_the_default_limit_is_one_mebibyte(client: FlaskClient) -> None:
    just_over = b'{"flow": "' + b"x" * (1024 * 1024) + b'"}'
    assert_error(client.post("/executions", data=just_over, content_type=JSON), 413)
    under = b'{"flow": "' + b"x" * (1024 * 1000) + b'"}'
    assert_error(
        client.post("/executions", data=under, content_type=JSON), 400, "invalid_request"
    )  # read and parsed; only the flow name is too long
