"""The events the memory tools write. Forgetting and correcting are events, never edits, so a
rebuild of every recall projection from the log ends in the same state.

Each carries the user and profile of whoever asked, and the recall fold only applies it to memory
of that same scope: one user cannot forget, correct or read into another's memory.
"""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
from ..log.events import DomainEvent, EventTypeRegistry

__all__ = [
    "NAMESPACE",
    "MemoryRemembered",
    "MemoryForgotten",
    "MemoryCorrected",
    "register_recall_events",
]

NAMESPACE = "chronicle.recall"


class MemoryRemembered(DomainEvent, frozen=True):
    """The agent asked Chronicle to keep a note (chronicle_remember). The agent's words, not the
    person's: searchable and answerable, never used as the person's own statement."""

    text: str
    user_id: str | None = None
    profile: str | None = None


class MemoryForgotten(DomainEvent, frozen=True):
    """Hide `target` ("m<seq>", "b<seq>.<n>", "s:<chronicle>/<section>") from every read path.
    With `include_source`, a belief's source messages are hidden too."""

    target: str
    include_source: bool = False
    reason: str = ""
    user_id: str | None = None
    profile: str | None = None


class MemoryCorrected(DomainEvent, frozen=True):
    """`text` replaces what `target` says. A belief is superseded by the corrected one; a message
    keeps its words and gains a correction beside it."""

    target: str
    text: str
    user_id: str | None = None
    profile: str | None = None


def register_recall_events(types: EventTypeRegistry) -> None:
    types.register(NAMESPACE, "MemoryRemembered", MemoryRemembered)
    types.register(NAMESPACE, "MemoryForgotten", MemoryForgotten)
    types.register(NAMESPACE, "MemoryCorrected", MemoryCorrected)
