"""First-party plugins built on the engine's public API (``loom.plugins.a2ui``)."""
