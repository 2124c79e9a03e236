"""Forgetting reaches the chronicle: a section whose range holds a forgotten message is drawn
again without it, as the next generation of that range, and every older generation's words are
purged.

Invariants:
- The log is never touched. It stays append-only, and the forgetting is the event in it (a
  rebuild of recall hides the same messages again). What leaves is derived: the prose of the
  superseded generations, blanked in place (`SQLiteChronicleStore.purge`, the one update a
  section takes), and with it their full-text index entries (a trigger follows the prose).
- Anchors stay: a new generation covers exactly its predecessor's range, so a handoff's citation
  still resolves (to the new words) and expand still returns the range's messages.
- Levels are redrawn bottom-up: a level-1 section from the log's messages of its range minus the
  forgotten ones, a condensed section from the current generations of its children, so no level
  keeps words its children lost.
- Draws happen before the write transaction; one transaction writes every new generation and
  purges the old ones. A section written over the range meanwhile makes the store refuse the
  fork; nothing is written and the caller may try again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ..log.events import EventReader
from ..log.store import SQLiteEventStore, StoredEvent
from .reconsolidate import announce, next_generation
from .sections import Section, level_name, level_of
from .store import SQLiteChronicleStore
from .stores import chronicle_of
from .write import WriterSummarizer, draw_condensed
from .writers import SectionWriter

__all__ = ["Rederived", "covering", "rederive"]

Messages = Callable[[str, int, int], Sequence[StoredEvent]]
"""(chronicle name, from_seq, to_seq) -> the conversation's captured messages in that range."""

# What a new generation keeps of its predecessor's meta (memory_context is another provider's
# text, which may quote what was forgotten: it is not carried).
_KEPT_META = ("source", "boundary", "session", "focus")


@dataclass(frozen=True, slots=True)
class Rederived:
    """A section drawn again after a forget: its chronicle, the one it supersedes, its range."""

    chronicle: str
    old: str
    new: str
    from_seq: int
    to_seq: int


def covering(store: SQLiteEventStore, seqs: Collection[int]) -> list[tuple[str, Section]]:
    """The current sections, of every chronicle and level, whose range holds one of `seqs`:
    level 1 first, then each condensed level (the order they must be redrawn in)."""
    if not seqs:
        return []
    lo, hi = min(seqs), max(seqs)
    found: list[tuple[int, str, Section]] = []
    wanted = sorted(seqs)
    for name in chronicle_of(store).chronicles_over(lo, hi):
        chronicle = chronicle_of(store, name)
        for section in chronicle.current(from_seq=lo, to_seq=hi):
            a = section.anchor
            if any(a.from_seq <= s <= a.to_seq for s in wanted):
                found.append((level_of(name)[1], name, section))
    found.sort(key=lambda f: (f[0], f[1], f[2].anchor.from_seq))
    return [(name, section) for _, name, section in found]


def _label(level: int, section_id: str) -> str:
    return section_id if level <= 1 else f"L{level}:{section_id}"


def _child(
    store: SQLiteEventStore, base: str, label: str, redrawn: dict[tuple[str, str], Section]
) -> tuple[str, Section] | None:
    """A condensed section's child, by its handoff label ("12-31", "L2:1-90"), at its current
    generation (the one just drawn, if it was redrawn in this pass)."""
    level_text, _, section_id = label.rpartition(":")
    level = int(level_text[1:]) if level_text.startswith("L") else 1
    name = level_name(base, level)
    chronicle = chronicle_of(store, name)
    current = chronicle.current_of(section_id)
    found = redrawn.get((name, current)) or chronicle.get(current)
    return None if found is None else (_label(level, found.anchor.section_id), found)


def _redraw(
    store: SQLiteEventStore,
    reader: EventReader,
    writer: SectionWriter,
    name: str,
    old: Section,
    forgotten: Collection[int],
    messages: Messages,
    budget_chars: int,
    redrawn: dict[tuple[str, str], Section],
) -> Section:
    a = old.anchor
    meta: dict[str, object] = {k: old.meta[k] for k in _KEPT_META if k in (old.meta or {})}
    meta["rederived"] = "forgotten messages left out"
    base, level = level_of(name)
    kept_focus = meta.get("focus")
    focus = kept_focus if isinstance(kept_focus, str) else None
    if level > 1:
        labels = (old.meta or {}).get("children", [])
        children = [
            child
            for label in (labels if isinstance(labels, list) else [])
            if (child := _child(store, base, str(label), redrawn)) is not None
        ]
        if children:
            meta.update(children=[label for label, _ in children], children_count=len(children))
            meta["messages"] = old.meta.get("messages")
            section, _ = draw_condensed(
                writer,
                children,
                label=_label(level, a.section_id),
                budget_chars=budget_chars,
                focus=focus,
                meta=meta,
                supersedes=old,
            )
            return section
    chronicle = chronicle_of(store, name)
    kept = {e.seq for e in messages(base, a.from_seq, a.to_seq)} - set(forgotten)
    # The seed's re-consolidation, with the section writer: the range read again from the log,
    # only the conversation's remembered messages admitted.
    return next_generation(
        chronicle,
        reader,
        a.section_id,
        WriterSummarizer(lambda: writer, budget_chars, focus),
        admit=lambda e: e.seq in kept,
        meta=meta,
    )


def rederive(
    store: SQLiteEventStore,
    reader: EventReader,
    writer: SectionWriter,
    forgotten: Collection[int],
    messages: Messages,
    *,
    budget_chars: int,
    reason: str = "forgotten",
) -> list[Rederived]:
    """Redraw every current section holding a `forgotten` seq without those messages, write
    each as the next generation of its range, and purge the words of every generation before
    it. Returns what was redrawn, lowest level first."""
    targets = covering(store, forgotten)
    if not targets:
        return []
    redrawn: dict[tuple[str, str], Section] = {}
    new: list[tuple[str, Section, Section]] = []
    for name, old in targets:
        section = _redraw(
            store, reader, writer, name, old, forgotten, messages, budget_chars, redrawn
        )
        redrawn[(name, old.anchor.section_id)] = section
        new.append((name, old, section))
    with store.atomic() as conn:
        for name, old, section in new:
            chronicle = chronicle_of(store, name)
            chronicle.append_new(section, conn)
            _purge_range(chronicle, old, section, reason, conn)
    for _, _, section in new:
        announce(section)
    return [
        Rederived(
            name, old.anchor.section_id, s.anchor.section_id, s.anchor.from_seq, s.anchor.to_seq
        )
        for name, old, s in new
    ]


def _purge_range(
    chronicle: SQLiteChronicleStore,
    old: Section,
    new: Section,
    reason: str,
    conn: sqlite3.Connection,
) -> None:
    """Blank every generation of the range before `new` (each may have said the same)."""
    section_id: str | None = old.anchor.section_id
    while section_id is not None:
        chronicle.purge(section_id, reason, conn)
        found = chronicle.get(section_id, conn)
        section_id = found.anchor.supersedes if found is not None else None
