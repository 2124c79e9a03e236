"""What `chronicle_context_status` says of a conversation: its passes, the sections its handoff
carries, its pins and focus, and its ledgers added up. Built from what the engine read (its
lineage's context events and the sections the last pass shows); reads nothing itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..log.events import Decoded
from .events import ContextCompacted
from .handoff import ViewSection
from .policy import Policy

__all__ = ["status_of"]

_LAST_PASS = (
    "tokens_before",
    "tokens_after",
    "messages_before",
    "messages_after",
    "written",
    "reused",
    "rebased",
    "model_calls",
    "fell_back",
    "handoff_tokens",
    "duration_ms",
)


def status_of(
    passes: Sequence[Decoded[ContextCompacted]],
    pins: Mapping[tuple[int, int], str],
    focus: str,
    carried: Sequence[ViewSection],
    *,
    policy: Policy | None,
    summarizer: str,
    ledger: dict[str, object] | None,
) -> dict[str, object]:
    """The status of a conversation whose passes are `passes` (oldest first), whose last pass's
    handoff shows `carried`, with its `pins` and `focus` and its ledgers' totals (`ledger`)."""
    last = passes[-1].event if passes else None
    saved = sum(max(0, p.event.tokens_before - p.event.tokens_after) for p in passes)
    return {
        "engine": "chronicle",
        "policy": policy.describe() if policy is not None else None,
        "summarizer": summarizer,
        "passes": len(passes),
        "tokens_saved": saved,
        "last_pass": (
            {**{k: getattr(last, k) for k in _LAST_PASS}, "session": passes[-1].envelope.session}
            if last
            else None
        ),
        "handoff": {
            "sections": [
                {
                    "section_id": v.label,
                    "from_seq": v.from_seq,
                    "to_seq": v.to_seq,
                    "level": v.level,
                    "messages": (v.section.meta or {}).get("messages"),
                }
                for v in carried
            ],
            "tokens": last.handoff_tokens if last else 0,
        },
        "pins": [{"from_seq": lo, "to_seq": hi, "note": note} for (lo, hi), note in pins.items()],
        "focus": focus or None,
        "ledger": ledger,
    }
