"""The events the scheduler appends to the log: decisions worth keeping, not its bookkeeping.

`SessionReaped` is what makes an idle boundary replayable. Whether a conversation has gone quiet
depends on the wall clock, which a replay does not have; the reaper's decision is therefore recorded,
and the consolidation fold reads the decision from the log like any other boundary.
"""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
from ..log.events import DomainEvent, EventTypeRegistry

__all__ = ["NAMESPACE", "SessionReaped", "JobFailed", "register_scheduler_events"]

NAMESPACE = "chronicle.scheduler"


class SessionReaped(DomainEvent):
    """A conversation had no activity for `idle_seconds`; its open unit closes here.

    `through_seq` is the unit's last event when the reaper decided. If anything of the
    conversation landed after it, the decision was stale and the fold ignores it.
    """

    chronicle: str
    through_seq: int
    idle_seconds: float


class JobFailed(DomainEvent):
    """A background job used up its attempts; `reason` is the last failure."""

    kind: str
    key: str
    attempts: int
    reason: str


def register_scheduler_events(types: EventTypeRegistry) -> None:
    types.register(NAMESPACE, "SessionReaped", SessionReaped)
    types.register(NAMESPACE, "JobFailed", JobFailed)
