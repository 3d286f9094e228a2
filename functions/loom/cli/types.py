"""Command-line argument types that check their value before any command runs."""

from __future__ import annotations

import click

from loom.ids import id_problem, rule


class ExecutionIdType(click.ParamType):  # pyright: ignore[reportMissingTypeArgument]
    """An execution id (:mod:`loom.ids`): a bad one exits 2 naming the rule, nothing written."""

    name = "execution_id"

    def convert(self, value: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Return ``value`` if it follows the id rule; else fail the command (exit 2)."""
        problem = id_problem(value)
        if problem is not None:
            self.fail(f"{value!r}: an execution id {problem} (the rule: {rule()})", param, ctx)
        return value


EXECUTION_ID = ExecutionIdType()
