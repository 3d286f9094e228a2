"""Dispatchers: how executions reach workers."""

from loom.dispatch.base import Dispatcher
from loom.dispatch.inprocess import InProcessDispatcher

__all__ = ["Dispatcher", "InProcessDispatcher"]
