"""The one path from a range of the log to a section: a writer draws the prose, the range makes
the anchor.

Compaction (a pass's gaps and the condensed levels of its handoff), background consolidation
(`ChronicleFold` with `WriterSummarizer`) and re-consolidation all draw here, so a section reads
the same whoever wrote it, and its id always comes from the range it covers.

Invariants:
- The anchor is a function of the range alone (`section_id_for`); the writer's words never shape it.
- A writer masks what it writes (see `writers`), so nothing here masks again: a compaction pass
  does not pay for a second scan of prose that is already clean.
- Drawing happens before any write transaction; the caller writes the returned section through
  the chronicle store (`append`, `append_new`) in its own transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..capture.secrets import MASK_MARK, mask
from ..log.store import StoredEvent
from .sections import Anchor, Consolidation, Section, section_id_for
from .writers import Drawn, FoldInput, SectionWriter

FORGOTTEN_RANGE = "Every message of this range was forgotten."

__all__ = [
    "FORGOTTEN_RANGE",
    "section_from",
    "masked",
    "draw",
    "draw_condensed",
    "WriterSummarizer",
]


def section_from(
    lo: int,
    hi: int,
    consolidation: Consolidation,
    *,
    meta: Mapping[str, object] | None = None,
    supersedes: Section | None = None,
) -> Section:
    """The section a consolidation of lo..hi becomes: generation 1, or the one after
    `supersedes` (which must cover the same range; the store refuses anything else)."""
    generation = 1 if supersedes is None else supersedes.anchor.generation + 1
    anchor = Anchor(
        section_id_for(lo, hi, generation),
        lo,
        hi,
        unit=hi if supersedes is None else supersedes.anchor.unit,
        supersedes=None if supersedes is None else supersedes.anchor.section_id,
    )
    return Section(
        anchor,
        consolidation.prose,
        tuple(consolidation.pins),
        meta={**dict(consolidation.meta), **dict(meta or {})},
    )


def masked(result: object) -> Consolidation:
    """A summariser's answer, checked, with no credential left in its prose (whatever summariser
    wrote it: the fold and re-consolidation take any)."""
    if not isinstance(result, Consolidation):
        raise TypeError(f"a summarizer must return a Consolidation, got {type(result).__name__}")
    return Consolidation(mask(result.prose), tuple(result.pins), result.meta)


def _meta(drawn: Drawn, focus: str | None) -> dict[str, object]:
    meta: dict[str, object] = {"writer": drawn.writer}
    if focus:
        meta["focus"] = focus
    if drawn.fell_back:
        meta["fell_back"] = drawn.error or True
    return meta


def draw(
    writer: SectionWriter,
    lo: int,
    hi: int,
    messages: Sequence[dict[str, object]],
    *,
    budget_chars: int,
    focus: str | None = None,
    deadline: float | None = None,
    clean: frozenset[int] = frozenset(),
    meta: Mapping[str, object] | None = None,
    supersedes: Section | None = None,
) -> tuple[Section, Drawn]:
    """A section over lo..hi from `messages` (the wire messages of that range). `clean`: indices
    of messages capture found no credential in (read as they are); `deadline`: the
    `time.monotonic()` past which no model is asked."""
    generation = 1 if supersedes is None else supersedes.anchor.generation + 1
    if not messages:
        # Every message of the range was forgotten: the range stays covered, and says so.
        note = Consolidation(FORGOTTEN_RANGE, meta={"messages": 0, "writer": "none"})
        return section_from(lo, hi, note, meta=meta, supersedes=supersedes), Drawn(
            FORGOTTEN_RANGE, writer="none"
        )
    # The label is the section's own id, so the prose's "how to restore" line names it.
    label = section_id_for(lo, hi, generation)
    drawn = writer.summarize(FoldInput(messages, label, focus, budget_chars, deadline, clean))
    consolidation = Consolidation(
        drawn.prose, tuple(drawn.pins), {"messages": len(messages), **_meta(drawn, focus)}
    )
    return section_from(lo, hi, consolidation, meta=meta, supersedes=supersedes), drawn


def draw_condensed(
    writer: SectionWriter,
    children: Sequence[tuple[str, Section]],
    *,
    label: str,
    budget_chars: int,
    focus: str | None = None,
    deadline: float | None = None,
    meta: Mapping[str, object] | None = None,
    supersedes: Section | None = None,
) -> tuple[Section, Drawn]:
    """One section over the whole range of consecutive `children` ((label, section) pairs),
    drawn from their prose; `label` names it in the handoff (its level and id)."""
    lo = children[0][1].anchor.from_seq
    hi = children[-1][1].anchor.to_seq
    drawn = writer.condense(
        [(child_label, child.prose) for child_label, child in children],
        label=label,
        focus=focus,
        budget_chars=budget_chars,
        deadline=deadline,
    )
    consolidation = Consolidation(drawn.prose, tuple(drawn.pins), _meta(drawn, focus))
    return section_from(lo, hi, consolidation, meta=meta, supersedes=supersedes), drawn


class WriterSummarizer:
    """A chronicle `Summarizer` over a section writer, for the fold and re-consolidation: a
    section written in the background reads like one a compaction writes, because it is drawn
    the same way. `writer` is read at each call, so a writer the host swaps in later is used."""

    def __init__(
        self, writer: Callable[[], SectionWriter], budget_chars: int, focus: str | None = None
    ) -> None:
        self.writer = writer
        self.budget_chars = budget_chars
        self.focus = focus

    def __call__(self, events: Sequence[StoredEvent]) -> Consolidation:
        messages = [_message(e) for e in events]
        # Capture masks every message it records: one whose masked text holds no mark had no
        # credential, and is read as it is (masking again is most of what a long draw costs).
        clean = frozenset(
            i for i, e in enumerate(events) if MASK_MARK not in str(e.payload.get("text") or "")
        )
        lo, hi = (events[0].seq, events[-1].seq) if events else (1, 1)
        section, _ = draw(
            self.writer(),
            lo,
            hi,
            messages,
            budget_chars=self.budget_chars,
            focus=self.focus,
            clean=clean,
        )
        return Consolidation(section.prose, section.pins, section.meta)


def _message(event: StoredEvent) -> dict[str, object]:
    """The wire message a captured event holds ({} when it holds none)."""
    message = event.payload.get("message", {})
    return message if isinstance(message, dict) else {}
