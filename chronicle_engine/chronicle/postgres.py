"""The chronicle's sections on PostgreSQL, shared by every host that opens the same database.

The same invariants as `store.py` (tests/test_chronicle_laws.py runs its laws against both):
current sections of a chronicle never overlap, and a superseding section covers exactly the range
of the one it supersedes. On SQLite the one writer keeps each check and the write after it
together; here every write transaction first takes an advisory lock on the chronicle's name
(`pg_advisory_xact_lock`), so hosts writing one chronicle take turns and hosts writing different
chronicles do not wait for each other. Behind the lock, the database refuses a second successor
of a section (a unique index) and any update but purging a superseded section's prose (a
trigger), as SQLite's trigger does.
"""

from __future__ import annotations

from ..log.postgres import Connection, PostgresEventStore, PostgresMigration, PostgresTables
from .store import ChronicleStoreBase

__all__ = ["PostgresChronicleStore", "PG_CHRONICLE_MIGRATIONS"]

_LOCK_CLASS = 0x63686E  # the first key of the advisory locks on chronicle names

_SCHEMA = (
    """
    CREATE TABLE sections (
        written    BIGSERIAL PRIMARY KEY,
        chronicle  TEXT   NOT NULL,
        section_id TEXT   NOT NULL,
        from_seq   BIGINT NOT NULL,
        to_seq     BIGINT NOT NULL,
        unit       BIGINT NOT NULL,
        supersedes TEXT,
        prose      TEXT   NOT NULL,
        pins       TEXT   NOT NULL,
        created_at TEXT   NOT NULL,
        meta       TEXT   NOT NULL DEFAULT '{}',
        UNIQUE (chronicle, section_id)
    )
    """,
    "CREATE INDEX sections_by_range ON sections(chronicle, from_seq, to_seq)",
    "CREATE UNIQUE INDEX sections_one_successor ON sections(chronicle, supersedes)"
    " WHERE supersedes IS NOT NULL",
    # Forgetting is the one change a stored section may take: a superseded generation's prose
    # is blanked (its meta then says why), and nothing else of the row moves.
    """
    CREATE FUNCTION chronicle_sections_never_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.prose = '' AND NEW.written = OLD.written AND NEW.chronicle = OLD.chronicle
           AND NEW.section_id = OLD.section_id AND NEW.from_seq = OLD.from_seq
           AND NEW.to_seq = OLD.to_seq AND NEW.unit = OLD.unit
           AND NEW.supersedes IS NOT DISTINCT FROM OLD.supersedes
           AND NEW.pins = OLD.pins AND NEW.created_at = OLD.created_at
           AND EXISTS (SELECT 1 FROM sections nx WHERE nx.chronicle = OLD.chronicle
                       AND nx.supersedes = OLD.section_id) THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'chronicle: sections are never updated; supersede instead';
    END
    $$
    """,
    """
    CREATE TRIGGER sections_never_update BEFORE UPDATE ON sections
    FOR EACH ROW EXECUTE FUNCTION chronicle_sections_never_update()
    """,
)


def _m001_sections(conn: Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


PG_CHRONICLE_MIGRATIONS: tuple[PostgresMigration, ...] = (
    # SQLite's m001 and m002 in one step: the purge rule is there from the start.
    PostgresMigration("chronicle.m001_sections", _m001_sections),
)


class PostgresChronicleStore(ChronicleStoreBase[PostgresEventStore, Connection], PostgresTables):
    """One named chronicle in a PostgreSQL database; the same methods as
    `SQLiteChronicleStore`, whose rules it shares (`ChronicleStoreBase`)."""

    def __init__(self, store: PostgresEventStore, name: str = "default") -> None:
        super().__init__(store, name)
        store.migrate(PG_CHRONICLE_MIGRATIONS)

    def _serialise(self, conn: Connection) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS, self.name))
