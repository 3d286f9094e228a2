"""The ``WorkerRuntime`` SPI: where an execution package runs.

Contract: ``allocate(package)`` returns a handle (a local slot, a remote instance…);
``execute(handle, package)`` runs one execute call and returns the
:class:`~loom.wire.ExecutionResult`, raising
:class:`~loom.errors.ExecutionSupersededError` when another holder owns the execution;
``release(handle)`` frees the handle whatever happened. Workers keep no execution state
between calls: every call rebuilds from the store.
"""

from __future__ import annotations

import abc
from typing import Any

from loom.scope import off_scope_methods
from loom.wire import ExecutionPackage, ExecutionResult


class WorkerRuntime(abc.ABC):
    """Places execution packages on compute."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        off_scope_methods(cls)  # a backend's calls take no flow step ids (loom.scope)

    @abc.abstractmethod
    async def allocate(self, package: ExecutionPackage) -> Any:
        """Reserve somewhere to run ``package``; return a handle for it."""

    @abc.abstractmethod
    async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
        """Run one execute call of ``package`` on ``handle``."""

    @abc.abstractmethod
    async def release(self, handle: Any) -> None:
        """Free ``handle``."""

    async def run(self, package: ExecutionPackage) -> ExecutionResult:
        """allocate → execute → release, as one call."""
        handle = await self.allocate(package)
        try:
            return await self.execute(handle, package)
        finally:
            await self.release(handle)

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release clients and connections."""
