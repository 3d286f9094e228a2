"""The ``Dispatcher`` SPI: get an execution run by a worker, now or at a time.

Contract:

* ``dispatch(package, dispatch_id, not_before=None)`` arranges for ``package`` to reach a
  worker at least once, not before ``not_before`` (epoch seconds) if given.
* ``dispatch_id`` names the cause (``{execution_id}:{seq}`` of the event that made work);
  dispatching the same id twice is harmless (deduplicated where the backend can, and the log
  append guards the rest).
* A superseded execution (another holder is live) is not redispatched by the dispatcher:
  that holder owns it, and expired claims are swept.
* A dispatcher that ``carries_jobs`` also delivers :class:`~loom.kernel.jobs.Job` s with
  ``dispatch_job(job, not_before=None)``: at least once, not before ``not_before``,
  deduplicated by ``job.job_id`` where the backend can (the job's handler tolerates a repeat).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from loom.errors import ConfigurationError
from loom.scope import off_scope_methods
from loom.wire import ExecutionPackage

if TYPE_CHECKING:
    from loom.kernel.jobs import Job


class Dispatcher(abc.ABC):
    """Delivers execution packages to workers.

    Attributes:
        inline: True when an immediate ``dispatch`` has run the execution (until it blocked)
            by the time it returns, so the caller can report the outcome.
        carries_jobs: True when :meth:`dispatch_job` delivers jobs.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        off_scope_methods(cls)  # a backend's calls take no flow step ids (loom.scope)

    inline: bool = False
    carries_jobs: bool = False

    async def dispatch_job(self, job: Job, not_before: float | None = None) -> None:
        """Arrange for ``job`` to run on a worker (see the module docstring).

        Raises:
            ConfigurationError: This dispatcher carries no jobs (``carries_jobs`` is false).
        """
        raise ConfigurationError(f"{type(self).__name__} carries no jobs")

    @abc.abstractmethod
    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        """Arrange for ``package`` to be executed (see the module docstring)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Stop timers and release resources."""
