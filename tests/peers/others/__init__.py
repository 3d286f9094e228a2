"""Ports of DBOS, Restate, Inngest and AWS Lambda durable functions test scenarios."""
