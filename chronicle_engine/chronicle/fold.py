"""The chronicle fold: each closed unit of the log becomes one section.

It is the one generative fold. What it derives from the log alone (which units close, the range
each section cites, their order) replays exactly; the prose is the summariser's and is identical
on a rebuild only where its pinned calls still hit. The draw happens in `prepare`, before the
projector opens the write transaction; `apply` only writes what was prepared, with the units'
own state (if they keep any) in the same transaction as the fold's position. The fold builds no
pin key: the summariser draws through a PinnedModel, which keys the whole request, prompt
included.

What a unit is belongs to the application (`Units`): `BoundaryUnits` closes one at every event a
`UnitBoundary` names, in one chronicle; background consolidation closes each conversation's
units in that conversation's chronicle (`scheduler.consolidation.ConversationUnits`).
"""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Protocol, cast

from typing_extensions import TypeVar

from ..log.events import EventReader
from ..log.port import LogStore
from ..log.store import SQLiteEventStore, StoredEvent
from ..log.tables import SQLConnection
from .sections import (
    AsyncSummarizer,
    Section,
    Summarizer,
    UnitBoundary,
    is_async_summarizer,
)
from .store import ChronicleStoreBase, SQLiteChronicleStore
from .write import masked, section_from

__all__ = ["FOLD_NAME", "ChronicleFold", "Unit", "Units", "BoundaryUnits", "units_in"]

FOLD_NAME = "chronicle"

# The store a chronicle lives in, and the connection the projector hands the fold (its store's):
# SQLite's unless the store is another.
S = TypeVar("S", default=SQLiteEventStore)
C = TypeVar("C", bound=SQLConnection, default=sqlite3.Connection)
C_in = TypeVar("C_in", contravariant=True, default=sqlite3.Connection)


@dataclass(frozen=True, slots=True)
class Unit:
    """A closed unit: the chronicle its section goes to (None: the fold's own), the range the
    section cites, the events the summariser reads, and what the section's meta records."""

    chronicle: str | None
    from_seq: int
    to_seq: int
    events: Sequence[StoredEvent]
    meta: Mapping[str, object] = field(default_factory=dict)


class Units(Protocol[C_in]):
    """Where units close. `plan` is a pure function of the log and the state `save` kept.
    `C_in`: the connection the fold writes through (its store's)."""

    def plan(self, events: Sequence[StoredEvent]) -> tuple[list[Unit], object]:
        """The units `events` close, and the state to save with the fold's position."""
        ...

    def save(self, conn: C_in, state: object) -> None: ...

    def reset(self, conn: C_in) -> None: ...


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


class BoundaryUnits:
    """The simple case: a unit closes at every event `boundary` names; it runs from the end of
    the chronicle's consolidated past, and its section reads every event of it (or those
    `admit` accepts)."""

    def __init__(
        self,
        chronicle: SQLiteChronicleStore,
        reader: EventReader[LogStore],
        boundary: UnitBoundary,
        admit: Callable[[StoredEvent], bool] | None = None,
    ) -> None:
        self.chronicle = chronicle
        self.reader = reader
        self.boundary = boundary
        self.admit = admit

    def plan(self, events: Sequence[StoredEvent]) -> tuple[list[Unit], None]:
        start = self.chronicle.consolidated_through() + 1
        units = []
        for lo, hi in units_in(events, self.boundary, start):
            read = list(self.reader.read(after=lo - 1, upto=hi))
            admitted = [e for e in read if self.admit(e)] if self.admit else read
            units.append(Unit(None, lo, hi, admitted))
        return units, None

    def save(self, conn: sqlite3.Connection, state: object) -> None:
        return None

    def reset(self, conn: sqlite3.Connection) -> None:
        self.chronicle.reset(conn)


@dataclass(slots=True)
class Prepared:
    sections: list[tuple[str | None, Section]]
    state: object


class ChronicleFold(Generic[S, C]):
    """Consolidates every closed unit into a section. Give `boundary` (and `admit`) for units
    that close at named events in `chronicle`, or `units` for your own. `C`: the connection of
    the chronicle's store, which the projector hands `apply`."""

    generative: ClassVar[bool] = True

    def __init__(
        self,
        chronicle: ChronicleStoreBase[S, C],
        reader: EventReader[LogStore],
        *,
        summarize: Summarizer | AsyncSummarizer,
        boundary: UnitBoundary | None = None,
        units: Units[C] | None = None,
        name: str = FOLD_NAME,
        admit: Callable[[StoredEvent], bool] | None = None,
    ) -> None:
        if units is None:
            if boundary is None:
                raise TypeError("ChronicleFold needs a boundary or units")
            if not isinstance(chronicle, SQLiteChronicleStore):
                raise TypeError("a boundary's units are SQLite's; give `units` for another store")
            units = cast("Units[C]", BoundaryUnits(chronicle, reader, boundary, admit))
        self.chronicle = chronicle
        self.reader = reader
        self.units = units
        self.summarize = summarize
        self.name = name
        self._named: dict[str, ChronicleStoreBase[S, C]] = {}

    @property
    def prepares_async(self) -> bool:
        return is_async_summarizer(self.summarize)

    def chronicle_named(self, name: str | None) -> ChronicleStoreBase[S, C]:
        if name is None or name == self.chronicle.name:
            return self.chronicle
        found = self._named.get(name)
        if found is None:
            found = self._named[name] = self.chronicle.named(name)
        return found

    @staticmethod
    def _section(unit: Unit, result: object) -> Section:
        return section_from(unit.from_seq, unit.to_seq, masked(result), meta=unit.meta)

    def prepare(self, events: Sequence[StoredEvent]) -> Prepared:
        units, state = self.units.plan(events)
        prepared = Prepared([], state)
        for unit in units:
            result: object = self.summarize(unit.events)
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if callable(close):
                    close()
                raise TypeError(
                    f"{self.name!r} has an async summarizer: write it as an async def and drive "
                    "the projector with catch_up_async()"
                )
            prepared.sections.append((unit.chronicle, self._section(unit, result)))
        return prepared

    async def prepare_async(self, events: Sequence[StoredEvent]) -> Prepared:
        units, state = self.units.plan(events)
        prepared = Prepared([], state)
        for unit in units:
            result: object = self.summarize(unit.events)
            if inspect.isawaitable(result):
                result = await result
            prepared.sections.append((unit.chronicle, self._section(unit, result)))
        return prepared

    def apply(self, conn: C, events: Sequence[StoredEvent], prepared: object) -> None:
        if not isinstance(prepared, Prepared):
            return
        for name, section in prepared.sections:
            self.chronicle_named(name).append(section, conn)
        self.units.save(conn, prepared.state)

    def reset(self, conn: C) -> None:
        self.units.reset(conn)
