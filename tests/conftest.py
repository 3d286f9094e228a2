"""Shared fixtures. Emulator fixtures live in ``tests/emulators.py`` (loaded as a plugin)."""

from __future__ import annotations

# Imported up front: hypothesis' pytest plugin otherwise imports it lazily in the terminal
# summary, where CPython 3.11's AST validator can report a spurious "recursion depth
# mismatch" after asyncio-heavy sessions.
import hypothesis  # noqa: F401  # pyright: ignore[reportUnusedImport]

pytest_plugins = ["tests.emulators", "tests.gcp_emulators"]
