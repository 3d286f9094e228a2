"""Worker runtimes: where executions run.

``LocalWorkerRuntime`` runs them in this process, ``RemoteWorkerRuntime`` on an HTTP worker
(``loom serve`` or the functions-framework ``worker`` target, :mod:`loom.workers.server`).
"""

from loom.workers.base import WorkerRuntime
from loom.workers.local import LocalWorkerRuntime
from loom.workers.remote import RemoteWorkerRuntime

__all__ = ["LocalWorkerRuntime", "RemoteWorkerRuntime", "WorkerRuntime"]
