"""The audit suite's fixtures: the HTTP worker tests' own (the ``worker`` target built by
functions-framework over a per-test SQLite file, and a runtime of this process over the
same store to inspect what was, and was not, appended), and the console tests' (the same
target serving their shop app)."""

from __future__ import annotations

from tests.console.conftest import console, shop, shop_env
from tests.functions.conftest import client, runtime, side_dir, worker_env

__all__ = ["client", "console", "runtime", "shop", "shop_env", "side_dir", "worker_env"]
