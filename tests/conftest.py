"""Shared fixtures. Emulator fixtures live in ``tests/emulators.py`` (loaded as a plugin)."""

from __future__ import annotations

pytest_plugins = ["tests.emulators"]
