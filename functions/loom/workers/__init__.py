"""Worker runtimes: where executions run."""

from loom.workers.base import WorkerRuntime
from loom.workers.local import LocalWorkerRuntime

__all__ = ["LocalWorkerRuntime", "WorkerRuntime"]
