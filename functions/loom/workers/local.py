"""``LocalWorkerRuntime``: runs execution packages in this process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.base import WorkerRuntime

if TYPE_CHECKING:
    from loom.runtime import Runtime


class LocalWorkerRuntime(WorkerRuntime):
    """In-process worker over a :class:`~loom.runtime.Runtime`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def allocate(self, package: ExecutionPackage) -> Any:
        return package.execution_id

    async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
        return await self.runtime.execute(package)

    async def release(self, handle: Any) -> None:
        return None
