"""Operator tools over the kernel and its primitives: fork, dead letters, retention, the replay check, versions."""
