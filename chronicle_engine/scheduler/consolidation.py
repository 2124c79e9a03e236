"""Background consolidation: each closed unit of a conversation becomes a section of its chronicle.

The chronicle's own fold (`ChronicleFold`, the path every section of the log's units is written
by) with this project's units: each conversation's (`ConversationUnits`). It runs on its own
projector, so a slow summary never delays the folds that keep search and beliefs current. It is
generative: the summariser draws in `prepare`, before the projector opens the write transaction,
and `apply` only writes.

Invariants:
- Which units close, and the range each section cites, are functions of the log (see `units`),
  so replaying the same log produces the same anchors.
- A section never overlaps one already in the conversation's chronicle, whoever wrote it: a unit
  is clipped to start after `consolidated_through()`, exactly as the context engine extends from
  it. If the context engine wrote a section between our draw and our write, the store refuses the
  fork, the batch rolls back, the fold's position does not move, and the job is retried at the
  next tick (`RetryNextTick`): the unit is redrawn against the new end, never lost.
- The fold's own state (each conversation's open unit) commits with its position.
- Each batch is folded once, whichever hosts or threads run the fold: the projector's
  transaction first holds the fold's position (`Projector`: a locked row on PostgreSQL,
  SQLite's one writer at home) and reads it again; a batch another runner folded since this
  one drew it is given up (`FoldMoved`, nothing written), never written twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, TypedDict, TypeVar

from ..chronicle.fold import ChronicleFold, Unit
from ..chronicle.sections import AsyncSummarizer, Summarizer
from ..errors import ChronicleFork
from ..log.bookkeeping import is_bookkeeping
from ..log.events import EventReader, EventTypeRegistry
from ..log.port import LogStore
from ..log.projector import FoldMoved, Projector
from ..log.store import SQLiteEventStore, StoredEvent
from ..log.tables import SQLConnection
from .events import SessionReaped, register_scheduler_events
from .queue import RetryNextTick
from .stores import open_tables
from .sweeps import SweepReport
from .tables import SchedulerTables, SQLiteSchedulerTables
from .units import ClosedUnit, OpenUnit, UnitRules, advance

if TYPE_CHECKING:
    from ..log.postgres import Connection, PostgresEventStore
    from .postgres import PostgresSchedulerTables

__all__ = [
    "FOLD_NAME",
    "Conversations",
    "ConversationUnits",
    "Consolidator",
    "OpenUnitRow",
]

FOLD_NAME = "scheduler.consolidation"


class OpenUnitRow(TypedDict):
    """A unit not closed yet, as maintenance status reports it."""

    chronicle: str
    session: str
    from_seq: int
    last_seq: int
    turns: int


class Conversations(Protocol):
    """What consolidation needs from the session tree (`core.sessions` satisfies it)."""

    def chronicle_name(self, session_id: str) -> str: ...

    def message_events(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredEvent]: ...


@dataclass(slots=True)
class _Planned:
    units: dict[str, OpenUnit] = field(default_factory=dict)


_UNIT_COLUMNS = "chronicle, session, open_from, last_seq, last_at, turns, closed_through"
_REAP_LOCK = "scheduler.reap"

S = TypeVar("S")
C = TypeVar("C", bound=SQLConnection)


def _projector(
    parts: SchedulerTables[S, C],
    reader: EventReader[LogStore],
    units: ConversationUnits,
    summarize: Summarizer | AsyncSummarizer,
) -> tuple[ChronicleFold[S, C], Projector[C]]:
    fold = ChronicleFold(parts.chronicles, reader, units=units, summarize=summarize, name=FOLD_NAME)
    return fold, Projector(parts.folded, reader, [fold])


class ConversationUnits:
    """The units of every conversation (see `units`), each consolidated into that
    conversation's chronicle; the open units are kept in `consolidation_units`."""

    def __init__(
        self,
        parts: SQLiteSchedulerTables | PostgresSchedulerTables,
        *,
        conversations: Conversations,
        rules: UnitRules,
        forgotten: Callable[[], Collection[int]] | None = None,
    ) -> None:
        self.tables = parts.tables
        self.chronicles = parts.chronicles
        self.conversations = conversations
        self.rules = rules
        self.forgotten = forgotten

    def plan(self, events: Sequence[StoredEvent]) -> tuple[list[Unit], _Planned]:
        names: dict[str, str] = {}
        for e in events:
            session = e.envelope.session
            if session is not None and session not in names and not is_bookkeeping(e):
                names[session] = self.conversations.chronicle_name(session)
        units = self.load_units(set(names.values()))
        closed = advance(units, events, self.rules, names.__getitem__)
        return self._targets(closed), _Planned(units)

    def load_units(self, chronicles: Iterable[str]) -> dict[str, OpenUnit]:
        wanted = sorted(set(chronicles))
        units: dict[str, OpenUnit] = {}
        with self.tables.reading("reading open units") as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                rows = conn.execute(
                    f"SELECT {_UNIT_COLUMNS} FROM consolidation_units"
                    f" WHERE chronicle IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                for row in rows:
                    units[row[0]] = OpenUnit(*row)
        return units

    def _targets(self, closed: list[ClosedUnit]) -> list[Unit]:
        """Each closed unit clipped to what its chronicle does not hold yet, with its messages."""
        ends: dict[str, int] = {}
        out: list[Unit] = []
        hidden = set(self.forgotten()) if closed and self.forgotten is not None else set()
        for unit in closed:
            end = ends.get(unit.chronicle)
            if end is None:
                end = self.chronicles.named(unit.chronicle).consolidated_through()
            lo = max(unit.from_seq, end + 1)
            if lo > unit.to_seq:
                continue  # the context engine already folded this stretch
            messages = self.conversations.message_events(unit.session, lo, unit.to_seq)
            if not messages:
                continue
            meta = {
                "source": "consolidation",
                "boundary": unit.boundary,
                "session": unit.session,
                "messages": len(messages),
            }
            # The section covers the whole unit; a forgotten message in it is not summarised.
            kept = [m for m in messages if m.seq not in hidden] if hidden else messages
            out.append(Unit(unit.chronicle, messages[0].seq, unit.to_seq, kept, meta))
            ends[unit.chronicle] = unit.to_seq
        return out

    def save(self, conn: object, state: object) -> None:
        if not isinstance(state, _Planned):
            return
        self.tables.statements(conn).executemany(
            f"INSERT INTO consolidation_units({_UNIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(chronicle) DO UPDATE SET session = excluded.session,"
            " open_from = excluded.open_from, last_seq = excluded.last_seq,"
            " last_at = excluded.last_at, turns = excluded.turns,"
            " closed_through = excluded.closed_through",
            [
                (
                    u.chronicle,
                    u.session,
                    u.open_from,
                    u.last_seq,
                    u.last_at,
                    u.turns,
                    u.closed_through,
                )
                for u in state.units.values()
            ],
        )

    def reset(self, conn: object) -> None:
        # Only the open units: sections are carried, not dropped. A re-fold over the same log
        # derives the same ids, which the chronicle keeps (append is idempotent by id).
        self.tables.statements(conn).execute("DELETE FROM consolidation_units")


class Consolidator:
    """Drives the consolidation fold in bounded runs, and reaps idle conversations."""

    def __init__(
        self,
        store: SQLiteEventStore | PostgresEventStore,
        reader: EventReader[LogStore],
        types: EventTypeRegistry,
        *,
        conversations: Conversations,
        summarize: Summarizer | AsyncSummarizer,
        rules: UnitRules,
        forgotten: Callable[[], Collection[int]] | None = None,
        parts: SQLiteSchedulerTables | PostgresSchedulerTables | None = None,
    ) -> None:
        """`store`: either event store (`parts`: its scheduler tables, if opened already)."""
        self.parts = parts = parts if parts is not None else open_tables(store)
        register_scheduler_events(types)
        self.store = parts.log
        self.types = types
        self.rules = rules
        self.units = ConversationUnits(
            parts, conversations=conversations, rules=rules, forgotten=forgotten
        )
        self.fold: ChronicleFold[SQLiteEventStore] | ChronicleFold[PostgresEventStore, Connection]
        self.projector: Projector[sqlite3.Connection] | Projector[Connection]
        if isinstance(parts, SQLiteSchedulerTables):  # (each store's connection type)
            self.fold, self.projector = _projector(parts, reader, self.units, summarize)
        else:
            self.fold, self.projector = _projector(parts, reader, self.units, summarize)

    def backlog(self) -> tuple[int, int]:
        """(fold position, end of the log)."""
        return self.store.position(FOLD_NAME), self.store.last_seq()

    def _bounds(self, budget: int) -> tuple[int, int, int] | None:
        position, last = self.backlog()
        if position >= last:
            return None
        return position, last, min(last, position + max(1, budget))

    def run(self, budget: int) -> SweepReport:
        """Fold at most `budget` more events of the log."""
        bounds = self._bounds(budget)
        if bounds is None:
            return SweepReport("consolidate", cursor=self.backlog()[0])
        position, last, upto = bounds
        self.projector.batch_size = max(1, budget)
        try:
            read = self.projector.catch_up(upto=upto)
        except FoldMoved:
            return self._elsewhere()
        except ChronicleFork as fork:
            raise RetryNextTick(f"consolidation raced a compaction ({fork}); redrawing") from fork
        return SweepReport("consolidate", read, last - upto, upto)

    def _elsewhere(self) -> SweepReport:
        position, last = self.backlog()
        return SweepReport(
            "consolidate",
            remaining=max(0, last - position),
            cursor=position,
            detail={"folded_elsewhere": True},
        )

    async def run_async(self, budget: int) -> SweepReport:
        bounds = self._bounds(budget)
        if bounds is None:
            return SweepReport("consolidate", cursor=self.backlog()[0])
        position, last, upto = bounds
        self.projector.batch_size = max(1, budget)
        try:
            read = await self.projector.catch_up_async(upto=upto)
        except FoldMoved:
            return self._elsewhere()
        except ChronicleFork as fork:
            raise RetryNextTick(f"consolidation raced a compaction ({fork}); redrawing") from fork
        return SweepReport("consolidate", read, last - upto, upto)

    # -- reaping -------------------------------------------------------------------------------

    def reap(self, now: float, budget: int) -> SweepReport:
        """Close, as units, the conversations with no activity for the idle gap. Each decision is
        appended as a `SessionReaped` event, which the fold reads as a boundary."""
        gap = self.rules.idle_gap_seconds
        if gap <= 0:
            return SweepReport("reap", skipped="consolidation.idle_gap_minutes is 0")
        cutoff = now - gap
        stamp = datetime.fromtimestamp(now, UTC).isoformat(timespec="microseconds")
        reaped: list[str] = []
        with self.parts.tables.writing("reaping idle conversations") as conn:
            # One reaper at a time on every host: the look below and the append decide together.
            self.parts.lock(conn, _REAP_LOCK)
            rows = conn.execute(
                f"SELECT {_UNIT_COLUMNS} FROM consolidation_units"
                " WHERE open_from IS NOT NULL AND last_at < ? ORDER BY last_at LIMIT ?",
                (cutoff, max(1, budget)),
            ).fetchall()
            counted = conn.execute(
                "SELECT COUNT(*) FROM consolidation_units WHERE open_from IS NOT NULL AND last_at < ?",
                (cutoff,),
            ).fetchone()
            total = int(counted[0]) if counted else 0
            pending = []
            for row in rows:
                unit = OpenUnit(*row)
                # Anything of the session after the unit's last event (new talk the fold has not
                # read yet, or our own earlier decision) means this is not the moment to reap.
                if self.store.any_after(unit.last_seq, session=unit.session):
                    continue
                pending.append(
                    self.types.pending(
                        SessionReaped(
                            chronicle=unit.chronicle,
                            through_seq=unit.last_seq,
                            idle_seconds=round(now - unit.last_at, 3),
                        ),
                        session=unit.session,
                        created_at=stamp,
                    )
                )
                reaped.append(unit.chronicle)
            self.store.append(pending)
        return SweepReport(
            "reap",
            processed=len(reaped),
            remaining=max(0, int(total) - len(rows)),
            detail={"checked": len(rows), "reaped": reaped},
        )

    def open_units(self, limit: int = 20) -> list[OpenUnitRow]:
        with self.parts.tables.reading("reading open units") as conn:
            rows = conn.execute(
                f"SELECT {_UNIT_COLUMNS} FROM consolidation_units WHERE open_from IS NOT NULL"
                " ORDER BY last_at LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            OpenUnitRow(chronicle=r[0], session=r[1], from_seq=r[2], last_seq=r[3], turns=r[5])
            for r in rows
        ]
