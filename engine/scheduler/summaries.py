"""Consolidation's summariser is the context engine's section writer, not a second one.

A section written in the background must read like one a compaction writes, because the context
engine reuses it in place of drawing its own: the same writer (extractive by default, a model when
`context.summarizer` names one, falling back to extractive on any failure), and the same prose
budget a compaction of the default window gives one section.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..chronicle.sections import Consolidation, section_id_for
from ..compaction.policy import policy_from_config
from ..config import Config
from ..log.store import StoredEvent

if TYPE_CHECKING:
    from ..compaction.engine import Compaction


__all__ = ["WriterSummarizer"]


class WriterSummarizer:
    """A chronicle `Summarizer` over `core.compaction.writer`, read at each call so a writer the
    host swaps in later is the one used."""

    def __init__(self, compaction: Compaction, budget_chars: int) -> None:
        self.compaction = compaction
        self.budget_chars = budget_chars

    @classmethod
    def for_compaction(cls, compaction: Compaction, config: Config) -> WriterSummarizer:
        return cls(compaction, policy_from_config(config).section_chars)

    def __call__(self, events: Sequence[StoredEvent]) -> Consolidation:
        from ..compaction.summarizer import FoldInput

        messages = [e.payload.get("message", {}) for e in events]
        # The label is the section's own id, so the prose's "how to restore" line names it.
        label = section_id_for(events[0].seq, events[-1].seq) if events else ""
        drawn = self.compaction.writer.summarize(
            FoldInput(messages, label, None, self.budget_chars)
        )
        meta: dict[str, Any] = {"writer": drawn.writer}
        if drawn.fell_back:
            meta["fell_back"] = drawn.error or True
        return Consolidation(drawn.prose, tuple(drawn.pins), meta)
