"""Loom: durable execution for Python flows, embedded on SQLite or serverless on Google Cloud.

The public names::

    from loom import Loom, FlowContext, EffectContext, Retry, Limits
"""

from loom.app import EffectContext, FlowContext, Loom, Retry
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
from loom.kernel.execution_limits import Limits

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
