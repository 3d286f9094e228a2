"""What every audit test checks of a refused request: the JSON error body with the status
and code it calls for, and nothing in it that should stay inside the server."""

from __future__ import annotations

import json
from typing import Any

from tests.functions.conftest import REPO, SECRET
from tests.functions.helpers import assert_error

JSON = {"Content-Type": "application/json"}


def refused(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """``status`` with the JSON error body, naming ``code``, and leaking nothing."""
    body = assert_error(response, status, code)
    assert_no_leak(json.dumps(body))
    return body


def assert_no_leak(text: str) -> None:
    """No traceback, no path of the server's files, no secret in an answer."""
    assert "Traceback" not in text, text
    assert str(REPO) not in text, text
    assert SECRET not in text, text
