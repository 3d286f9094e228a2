"""Worker runtimes: where executions run.

``LocalWorkerRuntime`` runs them in this process, ``RemoteWorkerRuntime`` on an HTTP worker
(``loom serve`` or the functions-framework ``worker`` target, :mod:`loom.workers.server`).
"""

from typing import TYPE_CHECKING, Any

from loom.workers.base import WorkerRuntime
from loom.workers.local import LocalWorkerRuntime

if TYPE_CHECKING:
    from loom.workers.remote import RemoteWorkerRuntime

__all__ = ["LocalWorkerRuntime", "RemoteWorkerRuntime", "WorkerRuntime"]


def __getattr__(name: str) -> Any:
    # httpx (and its certificate bundle) load only for a remote worker: a Cloud Run cold
    # start of a local worker does not pay for them.
    if name == "RemoteWorkerRuntime":
        from loom.workers.remote import RemoteWorkerRuntime

        return RemoteWorkerRuntime
    raise AttributeError(f"module 'loom.workers' has no attribute {name!r}")
