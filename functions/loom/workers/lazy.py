"""A runtime built on first use and then shared by every request of the process.

Loading the app and opening the store is a cold start's cost, not a request's; building it
lazily keeps importing ``functions/main.py`` from failing on a bad configuration.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from loom.runtime import Runtime


class LazyRuntime:
    """Holds a runtime, or the factory that builds it once, thread-safely."""

    def __init__(self, runtime: Runtime | Callable[[], Runtime]) -> None:
        self._factory = runtime
        self._built: Runtime | None = runtime if isinstance(runtime, Runtime) else None
        self._lock = threading.Lock()

    def get(self) -> Runtime:
        """The runtime, built on the first call."""
        with self._lock:
            if self._built is None:
                factory = self._factory
                assert not isinstance(factory, Runtime)
                built = factory()
                built.store.serve_off_loop()  # a slow store must not stall other requests
                self._built = built
            return self._built
