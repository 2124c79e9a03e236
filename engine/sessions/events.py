"""The session events, for the layers above sessions (defined in `tree/events.py`, below capture,
which writes some of them)."""

from ..tree.events import (
    ENTRY_KINDS,
    NAMESPACE,
    SWITCH_REASONS,
    BranchSummarized,
    CompactionRecorded,
    ContextEdited,
    Labeled,
    LeafMoved,
    SessionNamed,
    SessionSwitched,
    SwitchReason,
    UsageRecorded,
    register_session_events,
)

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
