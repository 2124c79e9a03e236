"""The events the context engine writes about itself (namespace "chronicle.context").

Pins and focus are the agent's or the person's decisions, so they are events (durable, keyed by
session, read along the lineage). `ContextCompacted` records one pass: what it folded, what the
handoff shows, what it cost; `PassLedger` what its prose kept and left out;
`chronicle_context_status` is read from these.
"""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
from ..log.events import DomainEvent, EventTypeRegistry

__all__ = [
    "NAMESPACE",
    "ContextPinned",
    "ContextUnpinned",
    "ContextFocused",
    "ContextCompacted",
    "PassLedger",
    "register_context_events",
]

NAMESPACE = "chronicle.context"


class ContextPinned(DomainEvent, frozen=True):  # type: ignore[misc]  # pydantic frozen model
    """Messages of the log in from_seq..to_seq stay verbatim in the context."""

    from_seq: int
    to_seq: int
    note: str = ""


class ContextUnpinned(DomainEvent, frozen=True):  # type: ignore[misc]  # pydantic frozen model
    from_seq: int
    to_seq: int


class ContextFocused(DomainEvent, frozen=True):  # type: ignore[misc]  # pydantic frozen model
    """The topic later compactions keep in full (empty: no focus)."""

    topic: str


class ContextCompacted(DomainEvent, frozen=True):  # type: ignore[misc]  # pydantic frozen model
    chronicle: str
    from_seq: int  # the range newly folded by this pass (0, 0 when it only dropped)
    to_seq: int
    written: list[str] = []  # section labels this pass wrote (level 1 and condensed)
    reused: list[str] = []  # labels of sections written earlier (background consolidation)
    view: list[str] = []  # labels the handoff shows, oldest first
    rebased: bool = False
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    handoff_tokens: int = 0
    model_calls: int = 0
    fell_back: bool = False
    writer: str = "extractive"
    focus: str = ""
    duration_ms: float = 0.0
    instructions: list[int] = []  # seqs of the standing instructions the handoff shows
    instructions_older: list[int] = []  # [count, from_seq, to_seq] of those counted only


class PassLedger(DomainEvent, frozen=True):  # type: ignore[misc]  # pydantic frozen model
    """What one pass folded, and what its prose kept and left out (see `ledger.py`).

    The pass records one right after its `ContextCompacted`, in the same transaction, with
    `counted` False: the folded seqs (`folded`), the sections whose prose counts (`sections`)
    and the text of each folded message the log does not hold as the pass did (`own`); its
    entity and message counts are 0 until counted. Counting appends a second one, `counted`,
    whose `of` is the first's seq (ledgers recorded before the split are counted, `of` 0)."""

    chronicle: str
    from_seq: int = 0  # the messages this pass folded (0, 0: none)
    to_seq: int = 0
    folded_messages: int = 0
    entities: int = 0  # distinct entities in the folded messages
    entities_in_handoff: int = 0  # named in the handoff the model sees
    entities_in_sections: int = 0  # named only in the prose of the pass's sections
    entities_left_out: int = 0  # named in neither (the log keeps them)
    in_handoff: list[str] = []  # the first LISTED of each, in order of appearance
    in_sections: list[str] = []
    left_out: list[str] = []
    messages_kept: int = 0  # folded messages the prose names or quotes
    messages_left_out: list[list[int]] = []  # [from_seq, to_seq] runs of the others
    counted: bool = True  # False: the pass's own record, to be counted (`Compaction.count_ledgers`)
    of: int = 0  # a count: the seq of the pass's record it counts
    folded: list[list[int]] = []  # [from_seq, to_seq] runs of the folded messages' seqs
    sections: list[str] = []  # level-1 section ids whose prose counts, in order
    own: list[tuple[int, str]] = []  # (seq, JSON of `ledger.scanned`'s text) the log lacks


def register_context_events(types: EventTypeRegistry) -> None:
    for cls in (ContextPinned, ContextUnpinned, ContextFocused, ContextCompacted, PassLedger):
        if not types.knows(NAMESPACE, cls.__name__):
            types.register(NAMESPACE, cls.__name__, cls)
