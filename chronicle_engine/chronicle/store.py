"""The chronicle store: sections in their own table, never updated, never deleted one by one.

Invariants (checked on every write, through `append`, `append_new` and `load`):
- current sections (those nothing supersedes) of one chronicle never overlap;
- a superseding section covers exactly the range of the section it supersedes, and only the
  current section of a range can be superseded, so no consolidated range is ever left uncovered.
A write that would break either raises `ChronicleFork`. `reset` is the one bulk removal, for a
rebuild that was acknowledged (`discard_generated=True`). `purge` is the one change a row may
take: forgetting blanks a superseded generation's prose once a new generation that leaves the
forgotten messages out has replaced it (a trigger refuses any other update).

One database holds many chronicles, told apart by name (one per conversation lineage, plus the
condensed levels), each with its own invariants.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Self, TypeVar

from ..errors import ChronicleFork, SectionCollision, UsageError
from ..log.store import Migration, Row, SQLiteEventStore, run_script, utc_now
from ..log.tables import SQLConnection, SQLiteTables, Tables
from .blocks import stamped
from .sections import Anchor, Section, level_of

__all__ = ["ChronicleStoreBase", "SQLiteChronicleStore", "CHRONICLE_MIGRATIONS"]

Conn = TypeVar("Conn", bound=SQLConnection)
Store = TypeVar("Store")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sections (
    written    INTEGER PRIMARY KEY AUTOINCREMENT,
    chronicle  TEXT    NOT NULL,
    section_id TEXT    NOT NULL,
    from_seq   INTEGER NOT NULL,
    to_seq     INTEGER NOT NULL,
    unit       INTEGER NOT NULL,
    supersedes TEXT,
    prose      TEXT    NOT NULL,
    pins       TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    meta       TEXT    NOT NULL DEFAULT '{}',
    UNIQUE (chronicle, section_id)
);
CREATE INDEX IF NOT EXISTS sections_by_range ON sections(chronicle, from_seq, to_seq);
CREATE INDEX IF NOT EXISTS sections_by_supersedes ON sections(chronicle, supersedes);
CREATE TRIGGER IF NOT EXISTS sections_never_update BEFORE UPDATE ON sections
BEGIN SELECT RAISE(ABORT, 'chronicle: sections are never updated; supersede instead'); END;
"""


# Forgetting is the one change a stored section may take: a superseded generation's prose is
# blanked (its meta then says why), and nothing else of the row moves.
_PURGE = """
DROP TRIGGER IF EXISTS sections_never_update;
CREATE TRIGGER sections_never_update BEFORE UPDATE ON sections
WHEN NOT (
    new.prose = '' AND new.written = old.written AND new.chronicle = old.chronicle
    AND new.section_id = old.section_id AND new.from_seq = old.from_seq
    AND new.to_seq = old.to_seq AND new.unit = old.unit AND new.supersedes IS old.supersedes
    AND new.pins = old.pins AND new.created_at = old.created_at
    AND EXISTS (SELECT 1 FROM sections nx WHERE nx.chronicle = old.chronicle
                AND nx.supersedes = old.section_id)
)
BEGIN SELECT RAISE(ABORT, 'chronicle: sections are never updated; supersede instead'); END;
"""


def _m001_sections(conn: sqlite3.Connection) -> None:
    run_script(conn, _SCHEMA)


def _m002_purge(conn: sqlite3.Connection) -> None:
    run_script(conn, _PURGE)


CHRONICLE_MIGRATIONS = (
    Migration("chronicle.m001_sections", _m001_sections),
    Migration("chronicle.m002_purge", _m002_purge),
)

_COLUMNS = "section_id, from_seq, to_seq, unit, supersedes, prose, pins, created_at, meta"
_CURRENT = (
    "NOT EXISTS (SELECT 1 FROM sections nx WHERE nx.chronicle = s.chronicle"
    " AND nx.supersedes = s.section_id)"
)


def _row(row: Row) -> Section:
    section_id, from_seq, to_seq, unit, supersedes, prose, pins, created_at, meta = row
    return Section(
        Anchor(section_id, from_seq, to_seq, unit, supersedes),
        prose,
        tuple(json.loads(pins)),
        created_at,
        json.loads(meta),
    )


class ChronicleStoreBase(Tables[Store, Conn]):
    """One named chronicle in a database: its reads, the checks that refuse a fork, and its
    writes, written once for every database (SQL with `?` placeholders, which `_sql` turns into
    the driver's). A database's store gives its transaction, its reads, its error mapping and
    `_serialise`, which makes a write transaction the chronicle's one writer."""

    def __init__(self, store: Store, name: str = "default") -> None:
        super().__init__(store)
        self.name = name
        self._level = level_of(name)[1]  # (how the handoff shows its sections: `stamped`)

    def named(self, name: str) -> Self:
        """Another chronicle in the same database."""
        return type(self)(self.store, name)

    def _serialise(self, conn: Conn) -> None:
        """Hold this chronicle's writes to one transaction at a time until `conn`'s ends (the
        checks below read, then write). Nothing where the database has one writer already."""

    @contextlib.contextmanager
    def _conn(self, conn: Conn | None) -> Iterator[Conn]:
        if conn is not None:
            yield conn
        else:
            with self._reading() as c:
                yield c

    def _one(self, c: Conn, sql: str, params: Sequence[object]) -> Row | None:
        return c.execute(self._sql(sql), params).fetchone()

    # -- reads ---------------------------------------------------------------------------

    def get(self, section_id: str, conn: Conn | None = None) -> Section | None:
        with self._errors("reading a section"), self._conn(conn) as c:
            row = self._one(
                c,
                f"SELECT {_COLUMNS} FROM sections WHERE chronicle = ? AND section_id = ?",
                (self.name, section_id),
            )
        return _row(row) if row else None

    def successor(self, section_id: str, conn: Conn | None = None) -> str | None:
        with self._errors("reading a section"), self._conn(conn) as c:
            row = self._one(
                c,
                "SELECT section_id FROM sections WHERE chronicle = ? AND supersedes = ?",
                (self.name, section_id),
            )
        return str(row[0]) if row else None

    def current_of(self, section_id: str, conn: Conn | None = None) -> str:
        """Follow supersession to the current generation of a section's range."""
        seen = section_id
        while (nxt := self.successor(seen, conn)) is not None:
            seen = nxt
        return seen

    def current(
        self,
        conn: Conn | None = None,
        *,
        from_seq: int | None = None,
        to_seq: int | None = None,
    ) -> list[Section]:
        """Current sections ordered by range; optionally only those overlapping from..to."""
        where = ["s.chronicle = ?", _CURRENT]
        params: list[object] = [self.name]
        if to_seq is not None:
            where.append("s.from_seq <= ?")
            params.append(to_seq)
        if from_seq is not None:
            where.append("s.to_seq >= ?")
            params.append(from_seq)
        with self._errors("reading sections"), self._conn(conn) as c:
            rows = c.execute(
                self._sql(
                    f"SELECT {', '.join('s.' + x.strip() for x in _COLUMNS.split(','))}"
                    f" FROM sections s WHERE {' AND '.join(where)} ORDER BY s.from_seq"
                ),
                params,
            ).fetchall()
        return [_row(r) for r in rows]

    def consolidated_through(self, conn: Conn | None = None) -> int:
        with self._errors("reading sections"), self._conn(conn) as c:
            row = self._one(
                c,
                f"SELECT MAX(s.to_seq) FROM sections s WHERE s.chronicle = ? AND {_CURRENT}",
                (self.name,),
            )
        return int(row[0] or 0) if row else 0

    def export(self) -> list[Section]:
        """Every row, superseded ones included, in the order they were written."""
        with self._errors("exporting sections"), self._reading() as c:
            rows = c.execute(
                self._sql(f"SELECT {_COLUMNS} FROM sections WHERE chronicle = ? ORDER BY written"),
                (self.name,),
            ).fetchall()
        return [_row(r) for r in rows]

    def chronicles(self) -> list[str]:
        """The name of every chronicle this database holds sections of (byte order)."""
        with self._errors("listing chronicles"), self._reading() as c:
            rows = c.execute("SELECT DISTINCT chronicle FROM sections").fetchall()
        return sorted(str(r[0]) for r in rows)

    def summary(self) -> list[tuple[str, int, int, int]]:
        """(chronicle, sections, current sections, highest to_seq) for every chronicle, by name."""
        with self._errors("listing chronicles"), self._reading() as c:
            rows = c.execute(
                "SELECT s.chronicle, COUNT(*),"
                " SUM(CASE WHEN NOT EXISTS (SELECT 1 FROM sections nx WHERE nx.chronicle ="
                " s.chronicle AND nx.supersedes = s.section_id) THEN 1 ELSE 0 END),"
                " MAX(s.to_seq) FROM sections s GROUP BY s.chronicle ORDER BY s.chronicle"
            ).fetchall()
        return [(str(name), int(n), int(cur), int(hi)) for name, n, cur, hi in rows]

    def chronicles_over(self, lo: int, hi: int) -> list[str]:
        """The name of every chronicle with a section (of any generation) overlapping lo..hi."""
        with self._errors("reading sections"), self._reading() as c:
            rows = c.execute(
                self._sql(
                    "SELECT DISTINCT chronicle FROM sections WHERE from_seq <= ? AND to_seq >= ?"
                ),
                (hi, lo),
            ).fetchall()
        return sorted(str(r[0]) for r in rows)

    def __len__(self) -> int:
        with self._errors("counting sections"), self._reading() as c:
            row = self._one(c, "SELECT COUNT(*) FROM sections WHERE chronicle = ?", (self.name,))
        return int(row[0]) if row else 0

    # -- writes --------------------------------------------------------------------------

    def append(self, section: Section, conn: Conn | None = None) -> bool:
        """Write a section unless its id is already stored (a replayed fold batch keeps the
        existing row). Returns whether it was written. Raises ChronicleFork on a fork."""
        section = stamped(section, self._level)  # (scanned before the write lock is taken)
        with self._writing(conn) as c:
            if self.get(section.anchor.section_id, c) is not None:
                return False
            self._check(c, section)
            self._insert(c, section)
            return True

    def append_new(self, section: Section, conn: Conn | None = None) -> Section:
        """The strict write: raises SectionCollision if the id is already stored."""
        section = stamped(section, self._level)
        with self._writing(conn) as c:
            existing = self.get(section.anchor.section_id, c)
            if existing is not None:
                raise SectionCollision(
                    f"section {section.anchor.section_id!r} is already stored in chronicle "
                    f"{self.name!r}; supersede the current one ({self.current_of(existing.anchor.section_id, c)!r}) instead"
                )
            self._check(c, section)
            return self._insert(c, section)

    def load(self, sections: Iterable[Section]) -> int:
        """Carry sections in from another store. Skips ids already present; refuses the whole
        transfer if any section would fork this chronicle. Returns how many were written. Each
        is stamped by this masker, whatever stamp it came with (`blocks.stamped`)."""
        written = 0
        with self._writing(None) as c:
            for section in sections:  # (a stream: each is stamped as it comes)
                if self.get(section.anchor.section_id, c) is not None:
                    continue
                self._check(c, section)
                self._insert(c, stamped(section, self._level))
                written += 1
        return written

    def purge(self, section_id: str, reason: str, conn: Conn | None = None) -> bool:
        """Blank the prose (and meta) of a superseded section: forgetting reached it. Its anchor
        stays, so the range and the supersession chain still read the same. Returns whether
        there was prose to blank. Only a superseded section can be purged (the current one is
        what the chronicle says; supersede it first)."""
        with self._writing(conn) as c:
            cur = c.execute(
                self._sql(
                    "UPDATE sections SET prose = '', meta = ? WHERE chronicle = ?"
                    " AND section_id = ? AND prose != ''"
                ),
                (json.dumps({"purged": reason}), self.name, section_id),
            )
            return cur.rowcount > 0

    def reset(self, conn: Conn | None = None) -> None:
        """Remove every section of this chronicle: only for an acknowledged rebuild."""
        with self._writing(conn) as c:
            c.execute(self._sql("DELETE FROM sections WHERE chronicle = ?"), (self.name,))

    @contextlib.contextmanager
    def _writing(self, conn: Conn | None) -> Iterator[Conn]:
        with self._errors(f"writing chronicle {self.name!r}"):
            if conn is not None:
                self._serialise(conn)
                yield conn
            else:
                with self._atomic() as c:
                    self._serialise(c)
                    yield c

    def _insert(self, c: Conn, section: Section) -> Section:
        a = section.anchor
        created = section.created_at or utc_now()
        c.execute(
            self._sql(
                "INSERT INTO sections(chronicle, section_id, from_seq, to_seq, unit, supersedes,"
                " prose, pins, created_at, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (
                self.name,
                a.section_id,
                a.from_seq,
                a.to_seq,
                a.unit,
                a.supersedes,
                section.prose,
                json.dumps(list(section.pins)),
                created,
                json.dumps(section.meta, sort_keys=True),
            ),
        )
        if created == section.created_at:
            return section
        return Section(a, section.prose, section.pins, created, section.meta)

    def _check(self, c: Conn, section: Section) -> None:
        a = section.anchor
        if a.from_seq > a.to_seq or a.from_seq < 1:
            raise UsageError(
                f"section {a.section_id!r} has an empty or negative range {a.from_seq}..{a.to_seq}"
            )
        if a.supersedes is not None:
            target = self.get(a.supersedes, c)
            if target is None:
                raise ChronicleFork(
                    f"section {a.section_id!r} supersedes {a.supersedes!r}, which this chronicle "
                    "does not hold; load or write that section first"
                )
            if self.successor(a.supersedes, c) is not None:
                raise ChronicleFork(
                    f"section {a.supersedes!r} is already superseded; the current one is "
                    f"{self.current_of(a.supersedes, c)!r}"
                )
            t = target.anchor
            if (t.from_seq, t.to_seq) != (a.from_seq, a.to_seq):
                raise ChronicleFork(
                    f"section {a.section_id!r} ({a.from_seq}..{a.to_seq}) must cover exactly the "
                    f"range of {t.section_id!r} ({t.from_seq}..{t.to_seq}) that it supersedes"
                )
        for other in self.current(c, from_seq=a.from_seq, to_seq=a.to_seq):
            if other.anchor.section_id == a.supersedes:
                continue
            o = other.anchor
            raise ChronicleFork(
                f"section {a.section_id!r} ({a.from_seq}..{a.to_seq}) overlaps the current section "
                f"{o.section_id!r} ({o.from_seq}..{o.to_seq}); supersede that section, over its "
                "exact range, instead"
            )


class SQLiteChronicleStore(ChronicleStoreBase[SQLiteEventStore, sqlite3.Connection], SQLiteTables):
    """One named chronicle in the event store's SQLite database (its one writer keeps a check
    and the write after it together)."""

    def __init__(
        self, store: SQLiteEventStore, name: str = "default", *, migrated: bool = False
    ) -> None:
        super().__init__(store, name)
        if not migrated:  # (`named`: this store's database has its tables already)
            store.migrate(CHRONICLE_MIGRATIONS)

    def named(self, name: str) -> Self:
        """Another chronicle in the same database, without checking its schema again (a
        consolidation tick asks for one per unit it plans)."""
        return type(self)(self.store, name, migrated=True)
