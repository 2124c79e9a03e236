"""The events of the session tree (namespace "chronicle.session").

Invariant: nothing in a session is ever rewritten. A branch, a compaction, a hidden message, a
label, the tokens of a model call: each is a new event. Tree entries carry `parent`, the id of the
entry they follow: an entry id, `""` for a root, or None for "the session's leaf when folded" (the
convention `MessageCaptured.parent` shares, so events written without a parent still chain).
"""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
from typing import Literal

from ..log.events import DomainEvent, EventTypeRegistry

__all__ = [
    "NAMESPACE",
    "SwitchReason",
    "SWITCH_REASONS",
    "SessionSwitched",
    "LeafMoved",
    "CompactionRecorded",
    "BranchSummarized",
    "ContextEdited",
    "Labeled",
    "SessionNamed",
    "UsageRecorded",
    "ENTRY_KINDS",
    "register_session_events",
]

NAMESPACE = "chronicle.session"

SwitchReason = Literal["compression", "resume", "branch", "reset", "rewound", "new"]
SWITCH_REASONS: frozenset[str] = frozenset(
    {"compression", "resume", "branch", "reset", "rewound", "new"}
)


class SessionSwitched(DomainEvent, frozen=True):
    """Hermes moved to `envelope.session`. Compression continues the parent's conversation and
    chronicle; a branch continues its tree from the parent's leaf under a chronicle of its own;
    resume, reset and new start or reopen a conversation of their own."""

    parent_session: str = ""
    reason: SwitchReason = "new"


class LeafMoved(DomainEvent, frozen=True):
    """The session's leaf moved to an earlier entry (the old branch stays in the tree)."""

    target: str


class _Entry(DomainEvent, frozen=True):
    parent: str | None = None


class CompactionRecorded(_Entry, frozen=True):
    """Older entries were replaced in the context (never in the log) by chronicle sections."""

    section_ids: list[str] = []
    first_kept_entry: str | None = None  # the first message still verbatim in the context
    first_kept_seq: int | None = None
    head_entries: list[str] = []  # protected head messages kept before the summary
    # Older messages kept verbatim after the summary, before the first kept one (the latest
    # request, standing instructions, pins); compactions recorded before this field count them
    # in head_entries.
    kept_entries: list[str] = []
    # entry id -> the shortened copy the context holds in place of that message (a kept tool
    # result cut to fit, its note naming the original's seq)
    shortened: dict[str, dict[str, object]] = {}
    tokens_before: int = 0
    tokens_after: int = 0
    summary: str = ""  # the handoff text the model sees in place of the folded entries


class BranchSummarized(_Entry, frozen=True):
    """A short account of an abandoned branch, attached where the new branch continues."""

    abandoned_leaf: str
    summary: str
    abandoned_entries: int = 0


class ContextEdited(_Entry, frozen=True):
    """Hide (`replacement` None) or replace an earlier entry in future context. Branch-relative:
    only edits on the active path count, and the latest one for a target wins."""

    target: str
    replacement: dict[str, object] | None = None


class Labeled(_Entry, frozen=True):
    target: str
    label: str | None = None  # None clears the target's label


class SessionNamed(_Entry, frozen=True):
    name: str


class UsageRecorded(_Entry, frozen=True):
    """Tokens of one model call: the host's turns and Chronicle's own summaries alike."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    source: str = "host"


ENTRY_KINDS: dict[str, str] = {
    "CompactionRecorded": "compaction",
    "BranchSummarized": "branch_summary",
    "ContextEdited": "context_edit",
    "Labeled": "label",
    "SessionNamed": "session_info",
    "UsageRecorded": "usage",
}


def register_session_events(types: EventTypeRegistry) -> None:
    for cls in (
        SessionSwitched,
        LeafMoved,
        CompactionRecorded,
        BranchSummarized,
        ContextEdited,
        Labeled,
        SessionNamed,
        UsageRecorded,
    ):
        types.register(NAMESPACE, cls.__name__, cls)
