"""The kernel: the log, its fold, the decide/append discipline, sessions and the execute loop (see docs/architecture.md)."""
