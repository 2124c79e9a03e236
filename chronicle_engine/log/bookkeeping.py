"""The events the log appends about itself: recorded model answers (pins).

Invariant: this module imports no model library, so every process (the CLI, a Hermes start, a
reader) knows the vocabulary and can tell bookkeeping apart from conversation without loading
pydantic-ai; only `pins.py`, which draws from models, needs it.
"""

from __future__ import annotations

from .events import DomainEvent, EventTypeRegistry
from .store import Envelope, StoredEvent

__all__ = ["BOOKKEEPING_NAMESPACE", "PinPromoted", "is_bookkeeping", "register_builtin_events"]

BOOKKEEPING_NAMESPACE = "chronicle.pins"


class PinPromoted(DomainEvent, frozen=True):
    """A model call's response, recorded so a replay can answer it without the model."""

    key: str
    response: str  # ModelMessagesTypeAdapter JSON of [response]


def register_builtin_events(types: EventTypeRegistry) -> None:
    types.register(BOOKKEEPING_NAMESPACE, "PinPromoted", PinPromoted)


def is_bookkeeping(event: StoredEvent | Envelope) -> bool:
    """True for the events the pin ledger appends about itself (leave them out of a tail)."""
    envelope = event.envelope if isinstance(event, StoredEvent) else event
    return envelope.namespace == BOOKKEEPING_NAMESPACE
