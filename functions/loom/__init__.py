"""Loom: durable execution for Python flows, embedded on SQLite or serverless on Google Cloud.

The public names::

    from loom import Loom, FlowContext, EffectContext, Retry, Limits
"""

from loom.app import Loom, Retry
from loom.context import EffectContext, FlowContext
from loom.errors import (
    ChildFlowFailedError,
    ChildIdTakenError,
    EffectFailedError,
    ExecutionSupersededError,
    GateTimeoutError,
    LimitExceededError,
    LoomError,
    NondeterminismError,
)
from loom.execution_limits import Limits

__version__ = "0.1.0"

__all__ = [
    "ChildFlowFailedError",
    "ChildIdTakenError",
    "EffectContext",
    "EffectFailedError",
    "ExecutionSupersededError",
    "FlowContext",
    "GateTimeoutError",
    "LimitExceededError",
    "Limits",
    "Loom",
    "LoomError",
    "NondeterminismError",
    "Retry",
    "__version__",
]
