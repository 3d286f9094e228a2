"""Errors raised by :mod:`loom.commission`, under :class:`loom.errors.LoomError`.

The tree::

    CommissionError                    any Commission failure
    ├── CaseNotFoundError              no case with that id
    ├── CaseConflictError              another definition under the same id, or a writer overtook
    ├── AdmissionError                 an AdmittedRequest that the runtime did not build
    ├── ExecutorError                  an executor failed or returned no outcome
    └── EffectError                    an effect port failed (a port's ``Err``)
        └── ConnectorError             the Connectors invoker answered ``Err``
    ConnectorsConfigError              a bad Connectors endpoint/binding declaration
"""

from __future__ import annotations

from typing import Any

from loom.errors import ConfigurationError, LoomError


class CommissionError(LoomError):
    """Root of every Commission error."""

    code = "commission"


class CaseNotFoundError(CommissionError):
    """No case exists with the requested id."""

    code = "unknown_case"


class CaseConflictError(CommissionError):
    """The case changed under the caller, or its id is taken by another definition.

    Nothing was written by the call that raised it.
    """

    code = "case_conflict"


class AdmissionError(CommissionError):
    """An ``AdmittedRequest`` was built, copied or forged outside the Commission runtime."""

    code = "not_admitted"


class ExecutorError(CommissionError):
    """An executor raised, or ended a step with something that is not an outcome."""

    code = "executor"


class EffectError(CommissionError):
    """An effect port could not give an outcome: a port's ``Err``.

    Nobody knows for certain whether the effect happened, so the runtime records the error
    and stops; it never re-invokes the request.

    Attributes:
        reason: A short machine-readable reason, e.g. ``transport`` or ``no_endpoint``.
    """

    code = "effect_error"

    def __init__(
        self, message: str, *, reason: str = "error", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, details={"reason": reason, **(details or {})})
        self.reason = reason


class ConnectorError(EffectError):
    """The Connectors invoker answered ``Err`` (see ADR 0009 for every reason)."""

    code = "connector_error"


class ConnectorsConfigError(CommissionError, ConfigurationError):
    """A Connectors endpoint or binding declaration is malformed."""

    code = "configuration"
