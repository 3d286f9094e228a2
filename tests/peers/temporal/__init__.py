"""Temporal's SDK and server test scenarios, ported to Loom's API."""
