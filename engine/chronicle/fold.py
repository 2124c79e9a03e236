"""The chronicle fold: each closed unit of the log becomes one section.

It is the one generative fold. What it derives from the log alone (which sections exist, their
ranges, boundaries, order) replays exactly; the prose is the summariser's and is identical on a
rebuild only where its pinned calls still hit. The draw happens in `prepare`, before the projector
opens the write transaction; `apply` only writes what was prepared. The fold builds no pin key:
the summariser draws through a PinnedModel, which keys the whole request, prompt included.
"""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..log.events import EventReader
from ..log.store import StoredEvent
from .sections import (
    Anchor,
    AsyncSummarizer,
    Consolidation,
    Section,
    Summarizer,
    UnitBoundary,
    is_async_summarizer,
    section_id_for,
)
from .store import SQLiteChronicleStore

__all__ = ["FOLD_NAME", "ChronicleFold", "units_in", "section_from"]

FOLD_NAME = "chronicle"


def units_in(
    events: Sequence[StoredEvent], boundary: UnitBoundary, start: int
) -> list[tuple[int, int]]:
    """The (from_seq, to_seq) of every unit that closes in `events`, the first one from `start`."""
    units: list[tuple[int, int]] = []
    for event in events:
        if event.seq < start:
            continue
        if boundary.closes(event):
            units.append((start, event.seq))
            start = event.seq + 1
    return units


def section_from(lo: int, hi: int, consolidation: Consolidation) -> Section:
    if not isinstance(consolidation, Consolidation):
        raise TypeError(
            f"a summarizer must return a Consolidation, got {type(consolidation).__name__}"
        )
    return Section(
        Anchor(section_id_for(lo, hi), lo, hi, unit=hi),
        consolidation.prose,
        tuple(consolidation.pins),
        meta=dict(consolidation.meta),
    )


class ChronicleFold:
    """Consolidates every closed unit into a section of `chronicle`."""

    generative: ClassVar[bool] = True

    def __init__(
        self,
        chronicle: SQLiteChronicleStore,
        reader: EventReader,
        *,
        boundary: UnitBoundary,
        summarize: Summarizer | AsyncSummarizer,
        name: str = FOLD_NAME,
        admit: Callable[[StoredEvent], bool] | None = None,
    ) -> None:
        self.chronicle = chronicle
        self.reader = reader
        self.boundary = boundary
        self.summarize = summarize
        self.name = name
        self.admit = admit

    @property
    def prepares_async(self) -> bool:
        return is_async_summarizer(self.summarize)

    def _units(self, events: Sequence[StoredEvent]) -> list[tuple[int, int]]:
        return units_in(events, self.boundary, self.chronicle.consolidated_through() + 1)

    def _range(self, lo: int, hi: int) -> list[StoredEvent]:
        events = list(self.reader.read(after=lo - 1, upto=hi))
        return [e for e in events if self.admit(e)] if self.admit else events

    def prepare(self, events: Sequence[StoredEvent]) -> list[Section]:
        prepared: list[Section] = []
        for lo, hi in self._units(events):
            result: Any = self.summarize(self._range(lo, hi))
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if callable(close):
                    close()
                raise TypeError(
                    f"{self.name!r} has an async summarizer: write it as an async def and drive "
                    "the projector with catch_up_async()"
                )
            prepared.append(section_from(lo, hi, result))
        return prepared

    async def prepare_async(self, events: Sequence[StoredEvent]) -> list[Section]:
        prepared: list[Section] = []
        for lo, hi in self._units(events):
            result: Any = self.summarize(self._range(lo, hi))
            if inspect.isawaitable(result):
                result = await result
            prepared.append(section_from(lo, hi, result))
        return prepared

    def apply(self, conn: sqlite3.Connection, events: Sequence[StoredEvent], prepared: Any) -> None:
        for section in prepared or ():
            self.chronicle.append(section, conn)

    def reset(self, conn: sqlite3.Connection) -> None:
        self.chronicle.reset(conn)
