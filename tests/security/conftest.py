"""The attack suite's fixtures: real worker processes (functions-framework on loopback) over
a per-test SQLite store, plus a runtime of this process over the same store to inspect what
was (not) appended. The worker fixtures are the HTTP worker tests' own."""

from __future__ import annotations

from tests.functions.conftest import client, runtime, side_dir, worker_env, workers
from tests.security.id_tokens import issuer

__all__ = ["client", "issuer", "runtime", "side_dir", "worker_env", "workers"]
