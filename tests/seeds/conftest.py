"""The fixtures these checks share with the HTTP worker and Commission suites."""

from __future__ import annotations

from tests.commission.conftest import cases
from tests.functions.conftest import client, runtime, side_dir, worker_env

__all__ = ["cases", "client", "runtime", "side_dir", "worker_env"]
