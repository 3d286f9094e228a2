"""The SQLite-backed env every Temporal port runs on."""

from tests.peers.temporal.harness import make_env

__all__ = ["make_env"]
