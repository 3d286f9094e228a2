"""Ports of peer engines' own test suites, run against Loom."""
