"""Commission: "Loom proposes. Commission invokes." (ADRs 0008 and 0009).

Executors (a Loom flow, a human tool, a plain callable) end each step with an
:data:`ExecutorOutcome` and invoke nothing. :class:`CommissionRuntime` rechecks every proposal
immediately before its effect (commission assigned, case revision, frontier, authority), turns
what it admits into an :class:`AdmittedRequest` that only it can build, and invokes the
embedder's :class:`EffectPort`: :class:`LocalEffects` for ``software.change/1`` in a git work
tree, or :class:`~loom.commission.connectors.ConnectorEffects` over a Connectors service.
Cases are event-sourced streams on any :class:`~loom.store.EventStore`.
"""

from loom.commission.admission import AdmittedRequest, Refusal, require_admitted
from loom.commission.authority import (
    AuthorityDecision,
    AuthorityProvider,
    AuthorityQuery,
    Denied,
    Granted,
    StaticAuthority,
)
from loom.commission.errors import (
    AdmissionError,
    CaseConflictError,
    CaseNotFoundError,
    CommissionError,
    ConnectorError,
    ConnectorsConfigError,
    EffectError,
    ExecutorError,
)
from loom.commission.events import CaseEvent, CaseState
from loom.commission.executors import (
    CallableExecutor,
    Executor,
    FlowExecutor,
    HumanToolExecutor,
)
from loom.commission.local import (
    SOFTWARE_CHANGE,
    FileChange,
    GitRunner,
    LocalEffects,
    SoftwareChange,
)
from loom.commission.model import (
    AnyCommission,
    Assigned,
    Closed,
    Commission,
    Draft,
    LastResult,
    StepInput,
)
from loom.commission.outcomes import (
    CaseMoved,
    CompletedLocalReasoning,
    ExecutorOutcome,
    NeedsHumanJudgment,
    NoUsefulAction,
    ProposedAction,
    Suspended,
    parse_outcome,
)
from loom.commission.ports import EffectOutcome, EffectPort, Pending, Performed, Refused
from loom.commission.report import RunReport, StopReason
from loom.commission.runtime import CommissionRuntime, FrontierRule
from loom.commission.store import CaseStore

__all__ = [
    "SOFTWARE_CHANGE",
    "AdmissionError",
    "AdmittedRequest",
    "AnyCommission",
    "Assigned",
    "AuthorityDecision",
    "AuthorityProvider",
    "AuthorityQuery",
    "CallableExecutor",
    "CaseConflictError",
    "CaseEvent",
    "CaseMoved",
    "CaseNotFoundError",
    "CaseState",
    "CaseStore",
    "Closed",
    "Commission",
    "CommissionError",
    "CommissionRuntime",
    "CompletedLocalReasoning",
    "ConnectorError",
    "ConnectorsConfigError",
    "Denied",
    "Draft",
    "EffectError",
    "EffectOutcome",
    "EffectPort",
    "Executor",
    "ExecutorError",
    "ExecutorOutcome",
    "FileChange",
    "FlowExecutor",
    "FrontierRule",
    "GitRunner",
    "Granted",
    "HumanToolExecutor",
    "LastResult",
    "LocalEffects",
    "NeedsHumanJudgment",
    "NoUsefulAction",
    "Pending",
    "Performed",
    "ProposedAction",
    "Refusal",
    "Refused",
    "RunReport",
    "SoftwareChange",
    "StaticAuthority",
    "StepInput",
    "StopReason",
    "Suspended",
    "parse_outcome",
    "require_admitted",
]
