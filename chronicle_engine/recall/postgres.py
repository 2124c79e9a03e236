"""Recall on PostgreSQL: the same fold and the same ranking as on SQLite, over tsvector indexes.

What differs from SQLite, and only that, lives here:
- The full-text index. FTS5's tables become `recall_message_terms` (one row a message: its
  scope, its length in words and a tsvector, GIN-indexed) and `recall_belief_terms`. Their
  lexemes are the words `text.tokens` splits, porter-stemmed by `porter.stem`, exactly the
  words FTS5's tokenizer indexes; each column (speaker name, body, the end of the turn before)
  has its own weight label (A, B, C) and its own run of positions, so a phrase never spans two
  columns. The tsvector is written as a literal (`?::tsvector`), never through PostgreSQL's text
  search configurations, so both stores match the same words.
- Queries. A query's words (`text.query_words`, already folded) become a tsquery literal built
  here from quoted lexemes and passed as a parameter (`?::tsquery`): no user text is ever
  formatted into SQL, and no user text is parsed as tsquery syntax (every lexeme is quoted).
- bm25. FTS5's `bm25()` (k1 = 1.2, b = 0.75, column weights) is computed in Python from what
  the index holds: the matching rows' lexeme positions and weight labels (read from the
  tsvector's text, `tsv_text`, which the server stores beside it), each word's document
  frequency (`recall_lexeme_docs`, kept by triggers), and the scope's row and word counts
  (`recall_scope_terms`, kept by the fold in its transaction). The candidates
  it scores are the ones FTS5 scores (every match of the words the match budget affords), and
  the re-ranking after it (neighbours, roles, recency, speaker, time, session spread) is
  `MessageSearch.rank`, unchanged.
- Isolation: one index table for every scope; every query on it names the scope
  (`t.scope = ?`), and the re-ranking's reads are of rows those queries returned.
- Several hosts fold one database: the projector's transaction locks the fold's position row
  first (after the advisory lock older hosts took, `PostgresRecallTables`) and folds only what
  lies beyond it, so a batch is folded once and the position never moves back.

- Beliefs and sections are ranked by bm25 as messages are: beliefs over the whole belief index
  (FTS5 keeps every scope's beliefs in one table too), each word's document frequency counted
  exactly at each search (never from the planner's cache, which a forget can leave stale), the
  index's rows and words read from `recall_index_totals` (kept by the server's triggers).
- `recall.Recall` (the memory tools, per-turn memory, answers) runs over this index: the core
  builds `Recall.over(PostgresRecallIndex(...), capture, redraw)` when `chronicle.store` names
  PostgreSQL (tests/test_recall.py and test_recall_pool.py run on both stores).

PARTIAL (issue 17):
- Sections are indexed at the next catch-up after they are written, not in the writer's
  transaction.
- tsvector keeps at most 256 positions of a lexeme and none past 16,383: a word repeated more
  than 256 times in one message (a tool's output) counts 256 times in its bm25.
- A section's words are split as a message's are (`text.tokens`: each CJK character a word);
  FTS5 indexes a section's prose without that split, so a CJK run in a section matches
  differently on the two stores.
- One GIN index holds every scope's messages: a word's postings are read for all users and
  filtered by scope after (SQLite has one FTS5 table a scope). A (scope, tsvector) index
  (btree_gin) would bound it by the user's memory; not measured at scale yet.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import lru_cache

from ..capture.events import NAMESPACE as CHAT
from ..chronicle.postgres import PG_CHRONICLE_MIGRATIONS
from ..config import Config
from ..errors import StoreBusy, StoreReadOnly
from ..log.events import EventReader
from ..log.postgres import (
    BEHIND,
    Connection,
    PostgresEventStore,
    PostgresMigration,
    PostgresTables,
    QmarkConnection,
    postgres_errors,
)
from ..log.projector import Projector
from ..log.store import Envelope, StoredEvent
from ..log.tables import Statements
from ..sessions.capture import Capture
from ..sessions.tree import SessionTree
from .events import NAMESPACE as RECALL
from .fold import (
    FOLD_NAME,
    MESSAGE_COLUMNS,
    CapturedMessage,
    RecallFold,
    captured,
    scope_number,
)
from .index import RecallIndex
from .porter import stem
from .reach import Reach
from .search import BeliefIndex, MessageSearch
from .text import CONTEXT_CHARS, asks, index_row, name_words, tokens
from .vectors import Embedder

__all__ = [
    "PG_RECALL_MIGRATIONS",
    "PostgresRecallFold",
    "PostgresMessageSearch",
    "PostgresRecallIndex",
    "PostgresRecallTables",
    "PG_BELIEFS",
    "terms",
    "tsquery_any",
]

log = logging.getLogger("chronicle_engine.recall")

_K1 = 1.2
_B = 0.75
_MAX_LEXEME_BYTES = 2000  # PostgreSQL refuses a lexeme of 2 KB or more
_MAX_POSITION = 16383

_SCHEMA = (
    # SQLite's iif(), so the SQL search.py shares with SQLite (schema.PERSON_TEXT) reads alike.
    """
    CREATE FUNCTION iif(boolean, anyelement, anyelement) RETURNS anyelement
    LANGUAGE sql IMMUTABLE AS 'SELECT CASE WHEN $1 THEN $2 ELSE $3 END'
    """,
    """
    CREATE TABLE recall_scopes (
        n       SERIAL PRIMARY KEY,
        user_id TEXT NOT NULL,
        profile TEXT NOT NULL,
        UNIQUE (user_id, profile)
    )
    """,
    """
    CREATE TABLE recall_messages (
        seq           BIGINT PRIMARY KEY,
        scope         INTEGER NOT NULL,
        session       TEXT,
        role          TEXT NOT NULL,
        speaker       TEXT NOT NULL,
        name          TEXT NOT NULL DEFAULT '',
        agent_context TEXT NOT NULL DEFAULT 'primary',
        at            TEXT NOT NULL,
        ts            DOUBLE PRECISION NOT NULL,
        prev          BIGINT,
        body          TEXT NOT NULL,
        person        TEXT NOT NULL DEFAULT ''
    )
    """,
    "CREATE INDEX recall_messages_by_session ON recall_messages(session, seq)",
    "CREATE INDEX recall_messages_by_prev ON recall_messages(prev)",
    "CREATE INDEX recall_messages_by_scope ON recall_messages(scope, seq)",
    "CREATE TABLE recall_hidden (target TEXT PRIMARY KEY, by_seq BIGINT NOT NULL)",
    # Append-only, as on SQLite: the one update allowed blanks a forgotten message's words.
    """
    CREATE FUNCTION recall_messages_never_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.body = '' AND NEW.person = '' AND NEW.seq = OLD.seq AND NEW.scope = OLD.scope
           AND NEW.session IS NOT DISTINCT FROM OLD.session AND NEW.role = OLD.role
           AND NEW.speaker = OLD.speaker AND NEW.name = OLD.name
           AND NEW.agent_context = OLD.agent_context AND NEW.at = OLD.at AND NEW.ts = OLD.ts
           AND NEW.prev IS NOT DISTINCT FROM OLD.prev
           AND EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || OLD.seq) THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'chronicle: recall_messages is append-only';
    END
    $$
    """,
    """
    CREATE TRIGGER recall_messages_never_update BEFORE UPDATE ON recall_messages
    FOR EACH ROW EXECUTE FUNCTION recall_messages_never_update()
    """,
    """
    CREATE VIEW recall_message_text AS
    SELECT m.seq AS seq, m.name AS name, m.body AS body,
           COALESCE((SELECT p.body FROM recall_messages p
                     WHERE p.seq = m.prev
                       AND NOT EXISTS (SELECT 1 FROM recall_hidden h
                                       WHERE h.target = 'm' || p.seq)),
                    '') AS ctx
    FROM recall_messages m
    """,
    """
    CREATE TABLE recall_beliefs (
        rowid      BIGSERIAL PRIMARY KEY,
        id         TEXT NOT NULL UNIQUE,
        scope      INTEGER NOT NULL,
        kind       TEXT NOT NULL,
        key        TEXT NOT NULL,
        value      TEXT NOT NULL,
        polarity   INTEGER NOT NULL DEFAULT 1,
        text       TEXT NOT NULL,
        origin     TEXT NOT NULL,
        source_seq BIGINT NOT NULL,
        session    TEXT,
        at         TEXT NOT NULL,
        supersedes TEXT
    )
    """,
    "CREATE INDEX recall_beliefs_by_key ON recall_beliefs(scope, kind, key)",
    "CREATE INDEX recall_beliefs_by_supersedes ON recall_beliefs(supersedes)",
    """
    CREATE FUNCTION recall_beliefs_never_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'chronicle: beliefs are never updated; supersede instead';
    END
    $$
    """,
    """
    CREATE TRIGGER recall_beliefs_never_update BEFORE UPDATE ON recall_beliefs
    FOR EACH ROW EXECUTE FUNCTION recall_beliefs_never_update()
    """,
    """
    CREATE TABLE recall_belief_sources (
        belief TEXT NOT NULL,
        seq    BIGINT NOT NULL,
        PRIMARY KEY (belief, seq)
    )
    """,
    "CREATE INDEX recall_belief_sources_by_seq ON recall_belief_sources(seq)",
    """
    CREATE TABLE recall_corrections (
        target TEXT NOT NULL,
        belief TEXT NOT NULL,
        PRIMARY KEY (target, belief)
    )
    """,
    """
    CREATE TABLE recall_vectors (
        target TEXT PRIMARY KEY,
        scope  INTEGER NOT NULL,
        model  TEXT NOT NULL,
        seq    BIGINT NOT NULL,
        dim    INTEGER NOT NULL,
        vec    BYTEA NOT NULL
    )
    """,
    "CREATE INDEX recall_vectors_by_scope ON recall_vectors(scope, model, seq)",
    # The full-text indexes (FTS5's tables on SQLite).
    """
    CREATE TABLE recall_message_terms (
        seq   BIGINT PRIMARY KEY,
        scope INTEGER NOT NULL,
        dl    INTEGER NOT NULL,
        tsv   TSVECTOR NOT NULL
    )
    """,
    "CREATE INDEX recall_message_terms_tsv ON recall_message_terms USING gin (tsv)",
    "CREATE INDEX recall_message_terms_by_scope ON recall_message_terms(scope, seq)",
    """
    CREATE TABLE recall_scope_terms (
        scope INTEGER PRIMARY KEY,
        docs  BIGINT NOT NULL,
        words BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE recall_belief_terms (
        rowid BIGINT PRIMARY KEY,
        tsv   TSVECTOR NOT NULL
    )
    """,
    "CREATE INDEX recall_belief_terms_tsv ON recall_belief_terms USING gin (tsv)",
)


def _m001_recall(conn: Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


# The sections' index. Sections are written by the chronicle, not through recall's fold, so a
# trigger queues every section written, purged or deleted (in the writer's transaction: a host
# that commits a section has queued it), and the next catch-up indexes the queue
# (`PostgresRecallIndex.index_sections`). SQLite's FTS5 triggers index in the same transaction;
# PostgreSQL's lexemes come from Python (`terms`), so they wait for the next read.
_SECTIONS = (
    """
    CREATE TABLE recall_section_terms (
        written BIGINT PRIMARY KEY,
        dl      INTEGER NOT NULL,
        tsv     TSVECTOR NOT NULL
    )
    """,
    "CREATE INDEX recall_section_terms_tsv ON recall_section_terms USING gin (tsv)",
    "CREATE TABLE recall_section_queue (written BIGINT PRIMARY KEY)",
    """
    CREATE FUNCTION recall_sections_queue() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO recall_section_queue(written)
        VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.written ELSE NEW.written END)
        ON CONFLICT DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER recall_sections_queue AFTER INSERT OR DELETE OR UPDATE OF prose ON sections
    FOR EACH ROW EXECUTE FUNCTION recall_sections_queue()
    """,
    "INSERT INTO recall_section_queue(written) SELECT written FROM sections",
)


def _m002_sections(conn: Connection) -> None:
    for statement in _SECTIONS:
        conn.execute(statement)


_BELIEF_LENGTH = "(SELECT count(*) FROM unnest({tsv}) u, unnest(u.positions) p)"
"""A belief's length in words, from its tsvector `{tsv}` (each position a word)."""


def _m003_belief_lengths(conn: Connection) -> None:
    """Each indexed belief's length in words, for bm25 (as `recall_message_terms.dl`): the
    positions its tsvector holds (a belief repeats no word 256 times)."""
    conn.execute("ALTER TABLE recall_belief_terms ADD COLUMN dl INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE recall_belief_terms t SET dl = " + _BELIEF_LENGTH.format(tsv="t.tsv"))


def _m004_names(conn: Connection) -> None:
    """The words of every speaker name a message row holds, once (SQLite's recall.m010_names)."""
    conn.execute("CREATE TABLE IF NOT EXISTS recall_name_words (word TEXT PRIMARY KEY)")
    names = conn.execute("SELECT DISTINCT name FROM recall_messages WHERE name != ''").fetchall()
    for word in sorted({word for (name,) in names for word in tokens(name)}):
        conn.execute(
            "INSERT INTO recall_name_words(word) VALUES (%s) ON CONFLICT DO NOTHING", (word,)
        )


def _m005_belief_lengths_on_insert(conn: Connection) -> None:
    """A host still on code from before m003 inserts belief rows without a length (dl 0, the
    column's default), which bm25 would read as the shortest belief there is: the server fills
    it in from the row's tsvector, and fills the rows such hosts have written since m003."""
    length = _BELIEF_LENGTH.format(tsv="NEW.tsv")
    conn.execute(
        f"""
        CREATE FUNCTION recall_belief_terms_length() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.dl = 0 THEN
                NEW.dl := {length};
            END IF;
            RETURN NEW;
        END
        $$
        """
    )
    conn.execute(
        "CREATE TRIGGER recall_belief_terms_length BEFORE INSERT ON recall_belief_terms"
        " FOR EACH ROW EXECUTE FUNCTION recall_belief_terms_length()"
    )
    conn.execute(
        "UPDATE recall_belief_terms t SET dl = "
        + _BELIEF_LENGTH.format(tsv="t.tsv")
        + " WHERE t.dl = 0"
    )


def _m006_lexeme_docs(conn: Connection) -> None:
    """How many of a scope's indexed messages hold each lexeme, kept by the fold in its
    transaction (FTS5 keeps the same count in its index): a word's document frequency is then a
    look-up, where counting its matches reads one table row a match."""
    conn.execute(
        "CREATE TABLE recall_lexeme_docs (scope INTEGER NOT NULL, lexeme TEXT NOT NULL,"
        " docs BIGINT NOT NULL, PRIMARY KEY (scope, lexeme))"
    )
    conn.execute(
        "INSERT INTO recall_lexeme_docs(scope, lexeme, docs) SELECT t.scope, l.lexeme, count(*)"
        " FROM recall_message_terms t, unnest(tsvector_to_array(t.tsv)) l(lexeme)"
        " GROUP BY t.scope, l.lexeme"
    )


def _m007_lexeme_docs_by_trigger(conn: Connection) -> None:
    """`recall_lexeme_docs` kept by the server, not by the fold: a host still on code from before
    m006 (a rolling upgrade) inserts and deletes indexed messages without counting them, and
    each word's document frequency would drift from the rows that hold it. Statement triggers
    count what each insert adds and each delete takes away, whichever code ran it; the counts
    are taken again from the rows, as such hosts may have left them since m006."""
    conn.execute(
        """
        CREATE FUNCTION recall_lexeme_docs_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO recall_lexeme_docs(scope, lexeme, docs)
            SELECT a.scope, l.lexeme, count(*)
            FROM recall_terms_added a, unnest(tsvector_to_array(a.tsv)) l(lexeme)
            GROUP BY a.scope, l.lexeme
            ON CONFLICT (scope, lexeme) DO UPDATE SET docs = recall_lexeme_docs.docs + excluded.docs;
            RETURN NULL;
        END
        $$
        """
    )
    conn.execute(
        """
        CREATE FUNCTION recall_lexeme_docs_gone() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE recall_lexeme_docs d SET docs = d.docs - g.n
            FROM (
                SELECT r.scope, l.lexeme, count(*) AS n
                FROM recall_terms_gone r, unnest(tsvector_to_array(r.tsv)) l(lexeme)
                GROUP BY r.scope, l.lexeme
            ) g
            WHERE d.scope = g.scope AND d.lexeme = g.lexeme;
            RETURN NULL;
        END
        $$
        """
    )
    conn.execute(
        "CREATE TRIGGER recall_lexeme_docs_added AFTER INSERT ON recall_message_terms"
        " REFERENCING NEW TABLE AS recall_terms_added"
        " FOR EACH STATEMENT EXECUTE FUNCTION recall_lexeme_docs_added()"
    )
    conn.execute(
        "CREATE TRIGGER recall_lexeme_docs_gone AFTER DELETE ON recall_message_terms"
        " REFERENCING OLD TABLE AS recall_terms_gone"
        " FOR EACH STATEMENT EXECUTE FUNCTION recall_lexeme_docs_gone()"
    )
    conn.execute("DELETE FROM recall_lexeme_docs")
    conn.execute(
        "INSERT INTO recall_lexeme_docs(scope, lexeme, docs) SELECT t.scope, l.lexeme, count(*)"
        " FROM recall_message_terms t, unnest(tsvector_to_array(t.tsv)) l(lexeme)"
        " GROUP BY t.scope, l.lexeme"
    )


_TOTALED = ("recall_belief_terms", "recall_section_terms")
"""The indexes whose rows and words bm25 reads at every search (`recall_index_totals`)."""


def _m008_index_totals(conn: Connection) -> None:
    """The rows and words of the belief and section indexes, kept by the server beside them:
    bm25 reads both at every search, and counting them read each index whole (a cost that grew
    with the store). Statement triggers (as recall.m007's) add what each insert adds and take
    away what each delete or update takes, whichever code ran it (a host from before this
    migration too), in its transaction; the totals start from the rows there are now."""
    conn.execute(
        "CREATE TABLE recall_index_totals (name TEXT PRIMARY KEY,"
        " docs BIGINT NOT NULL, words BIGINT NOT NULL)"
    )
    conn.execute(
        """
        CREATE FUNCTION recall_index_totals_kept() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            added BIGINT := 0;
            added_words BIGINT := 0;
            gone BIGINT := 0;
            gone_words BIGINT := 0;
        BEGIN
            IF TG_OP = 'TRUNCATE' THEN
                UPDATE recall_index_totals SET docs = 0, words = 0 WHERE name = TG_TABLE_NAME;
                RETURN NULL;
            END IF;
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                SELECT count(*), coalesce(sum(dl), 0) INTO added, added_words
                FROM recall_index_rows_new;
            END IF;
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                SELECT count(*), coalesce(sum(dl), 0) INTO gone, gone_words
                FROM recall_index_rows_old;
            END IF;
            IF added <> gone OR added_words <> gone_words THEN
                UPDATE recall_index_totals
                SET docs = docs + added - gone, words = words + added_words - gone_words
                WHERE name = TG_TABLE_NAME;
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    for table in _TOTALED:
        for when, rows in (
            ("INSERT", "NEW TABLE AS recall_index_rows_new"),
            ("DELETE", "OLD TABLE AS recall_index_rows_old"),
            ("UPDATE", "OLD TABLE AS recall_index_rows_old NEW TABLE AS recall_index_rows_new"),
        ):
            conn.execute(
                f"CREATE TRIGGER {table}_totals_{when.lower()} AFTER {when} ON {table}"
                f" REFERENCING {rows} FOR EACH STATEMENT EXECUTE FUNCTION recall_index_totals_kept()"
            )
        conn.execute(
            f"CREATE TRIGGER {table}_totals_truncate AFTER TRUNCATE ON {table}"
            " FOR EACH STATEMENT EXECUTE FUNCTION recall_index_totals_kept()"
        )
        conn.execute(
            "INSERT INTO recall_index_totals(name, docs, words)"
            f" SELECT %s, count(*), coalesce(sum(dl), 0) FROM {table}",
            (table,),
        )


_TERM_TABLES = ("recall_message_terms", "recall_belief_terms", "recall_section_terms")


def _m009_tsv_text(conn: Connection) -> None:
    """Each indexed row's tsvector also kept as its text (`tsv_text`), which bm25 reads: cutting
    the tsvector to the query's lexemes at each search (`ts_delete` twice, then the text output)
    cost the server ~9 microseconds a candidate row, five times the row's reading. A stored
    generated column, so the server writes it with the row whichever code inserted it (a host
    on older code in a rolling upgrade too). Rewrites the tables: ~50 s at 1M messages."""
    for table in _TERM_TABLES:
        conn.execute(
            f"ALTER TABLE {table} ADD COLUMN tsv_text TEXT GENERATED ALWAYS AS (tsv::text) STORED"
        )


def _emptied(conn: Statements) -> None:
    """Recall's folded rows dropped, for a rebuild (`PostgresRecallFold.reset`)."""
    conn.execute(_QUESTIONS)  # m010 empties the tables before m013 makes this one
    for table in (
        "recall_corrections",
        "recall_belief_sources",
        "recall_belief_terms",
        "recall_beliefs",
        "recall_hidden",
        "recall_message_terms",
        "recall_scope_terms",
        "recall_lexeme_docs",
        "recall_messages",
        "recall_name_words",
        "recall_questions",
        "recall_scopes",
        "recall_vectors",
    ):
        conn.execute(f"DELETE FROM {table}")
    # A rebuild gives the same scope numbers and belief rowids, as SQLite's does.
    conn.execute("SELECT setval(pg_get_serial_sequence('recall_scopes', 'n'), 1, false)")
    conn.execute("SELECT setval(pg_get_serial_sequence('recall_beliefs', 'rowid'), 1, false)")


def _m010_scopes_from_the_log(conn: Connection) -> None:
    """Recall folded again from the log when a scope's user id or profile holds U+FFFD: until
    `log.m003_escaped_text` a NUL was stored as U+FFFD, so `bob\\x00` and `bob\\ufffd` were one
    scope, each seeing the other's memory, and the scope's row cannot say whose it was. The
    payloads kept the exact ids (JSON writes a NUL as `\\u0000`): the rows are dropped and the
    fold's position set back to 0, and the next catch-up (every search makes one) folds the
    whole log into scopes of their own. A store with no such scope (the most) keeps its rows:
    U+FFFD elsewhere in them (a message's text that held a NUL) stays until a rebuild.

    Recall's fold is held first, as a rebuild holds it (its advisory lock, then its position
    row), so no host's fold commits rows these deletes did not see."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_FOLD_LOCK,))
    conn.execute("SELECT position FROM fold_positions WHERE fold = %s FOR UPDATE", (FOLD_NAME,))
    merged = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM recall_scopes"
        " WHERE strpos(user_id, chr(65533)) > 0 OR strpos(profile, chr(65533)) > 0)"
    ).fetchone()
    if merged is None or not merged[0]:
        return
    _emptied(QmarkConnection(conn))
    conn.execute("UPDATE fold_positions SET position = 0 WHERE fold = %s", (FOLD_NAME,))


def _m011_vectors_by_model(conn: Connection) -> None:
    """The index SQLite's recall_vectors has (schema.py) and m001 left out: `embed_pending` asks
    for the newest and oldest vector of a model, which without it reads the whole table."""
    conn.execute("CREATE INDEX IF NOT EXISTS recall_vectors_by_model ON recall_vectors(model, seq)")


def _m012_messages_by_time(conn: Connection) -> None:
    """SQLite's recall.m011: the (scope, ts) index a query naming a time counts from."""
    conn.execute("CREATE INDEX IF NOT EXISTS recall_messages_by_time ON recall_messages(scope, ts)")


_QUESTIONS = "CREATE TABLE IF NOT EXISTS recall_questions (seq BIGINT PRIMARY KEY)"


def _m013_questions(conn: Connection) -> None:
    """SQLite's recall.m012: the short questions among the messages already folded."""
    conn.execute(_QUESTIONS)
    rows = conn.execute(  # the text's length and question mark tested by the server
        "SELECT t.seq, t.body FROM recall_message_text t"
        " WHERE length(t.body) <= %s AND strpos(t.body, '?') > 0"
        " AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || t.seq)",
        (CONTEXT_CHARS,),
    ).fetchall()
    asking = [int(seq) for seq, head in rows if asks(str(head or ""))]
    if asking:
        conn.execute(
            "INSERT INTO recall_questions(seq) SELECT * FROM unnest(%s::bigint[])"
            " ON CONFLICT DO NOTHING",
            (asking,),
        )


PG_RECALL_MIGRATIONS: tuple[PostgresMigration, ...] = (
    # SQLite's recall.m001-m008 in one step, the forget rule and the person's words once included.
    PostgresMigration("recall.m001_tables", _m001_recall),
    PostgresMigration("recall.m002_sections_index", _m002_sections),
    PostgresMigration("recall.m003_belief_lengths", _m003_belief_lengths),
    PostgresMigration("recall.m004_names", _m004_names),
    PostgresMigration("recall.m005_belief_lengths_on_insert", _m005_belief_lengths_on_insert),
    PostgresMigration("recall.m006_lexeme_docs", _m006_lexeme_docs),
    PostgresMigration("recall.m007_lexeme_docs_by_trigger", _m007_lexeme_docs_by_trigger),
    PostgresMigration("recall.m008_index_totals", _m008_index_totals),
    PostgresMigration("recall.m009_tsv_text", _m009_tsv_text),
    PostgresMigration("recall.m010_scopes_from_the_log", _m010_scopes_from_the_log),
    PostgresMigration("recall.m011_vectors_by_model", _m011_vectors_by_model),
    PostgresMigration("recall.m012_messages_by_time", _m012_messages_by_time),
    PostgresMigration("recall.m013_questions", _m013_questions),
)


# -- words --------------------------------------------------------------------------------------


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


@lru_cache(maxsize=65536)
def _quoted_stem(word: str) -> str | None:
    """A word's lexeme as a tsvector literal writes it (None when PostgreSQL would refuse it)."""
    lexeme = stem(word)
    return _lexeme(lexeme) if len(lexeme.encode()) < _MAX_LEXEME_BYTES else None


def terms(columns: Sequence[tuple[str, str]]) -> tuple[str, int]:
    """A tsvector literal for (weight label, text) columns, and the number of words in them (as
    FTS5 counts a row's length): each word porter-stemmed, each column its own run of positions
    (a gap between runs, so no phrase spans two columns)."""
    positions: dict[str, list[str]] = {}
    at = 1
    total = 0
    for label, text in columns:
        words = tokens(text)
        total += len(words)
        for position, word in enumerate(words, start=at):
            lexeme = _quoted_stem(word)
            if lexeme is None:
                continue
            mark = f"{position if position < _MAX_POSITION else _MAX_POSITION}{label}"
            held = positions.get(lexeme)
            if held is None:
                positions[lexeme] = [mark]
            else:
                held.append(mark)
        at += len(words) + 1
    return " ".join(f"{lexeme}:{','.join(marks)}" for lexeme, marks in positions.items()), total


def _stems(word: str) -> list[str]:
    """A query word (or phrase: "vault 3", a CJK pair) as the index's lexemes, in order."""
    return [stem(w) for w in tokens(word) if len(stem(w).encode()) < _MAX_LEXEME_BYTES]


def _phrase(word: str) -> str:
    return " <-> ".join(_lexeme(s) for s in _stems(word))


def tsquery_any(words: Sequence[str]) -> str:
    """A tsquery literal matching rows with any of `words` (each a word or a phrase, every lexeme
    quoted: whatever the user typed is searched for as text). "" when no word has a lexeme."""
    return " | ".join(f"({p})" for p in (_phrase(w) for w in words) if p)


def tsquery_all(words: Sequence[str]) -> str:
    return " & ".join(f"({p})" for p in (_phrase(w) for w in words) if p)


# -- the fold -----------------------------------------------------------------------------------


class PostgresRecallFold(RecallFold):
    """`RecallFold` writing PostgreSQL's indexes instead of FTS5's. A run of captured messages
    is written a few statements at a time, not several a message: each statement is a round
    trip to the server, and a batch of the projector's holds up to a thousand messages."""

    def apply(self, conn: Statements, events: Sequence[StoredEvent], prepared: object) -> None:
        # Hosts take turns on the fold's position row, which the projector holds (locked) and
        # trims `events` by before calling this.
        run: list[tuple[Envelope, CapturedMessage]] = []
        for event in events:
            env = event.envelope
            if env.namespace == CHAT and env.type == "MessageCaptured":
                if (message := captured(event)) is not None:
                    run.append((env, message))
            elif env.namespace == RECALL:
                # A memory tool's event reads what came before it: the run is written first.
                self._messages(conn, run)
                run = []
                super().apply(conn, [event], prepared)
        self._messages(conn, run)

    def _messages(self, conn: Statements, run: Sequence[tuple[Envelope, CapturedMessage]]) -> None:
        """`RecallFold._message` for each of a run of messages, in log order, in five or six
        statements: the same rows, scope numbers and beliefs as one at a time."""
        if not run:
            return
        scopes = self._scopes(conn, [(m.user_id or "", m.profile or "") for _, m in run])
        last = _last_in_sessions(conn, run)
        rows: list[tuple[object, ...]] = []
        indexed: list[tuple[int, int, int, str]] = []
        names: set[str] = set()
        asking: list[int] = []
        for env, m in run:
            scope = scopes[(m.user_id or "", m.profile or "")]
            prev, before = last.get(env.session, (None, ""))
            rows.append(m.row(env, scope, prev, m.body, env.created_at))
            if asks(m.body):
                asking.append(env.seq)
            last[env.session] = (env.seq, m.body)
            name, body, ctx = index_row(m.name, m.body, before)
            literal, length = terms((("A", name), ("B", body), ("C", ctx)))
            indexed.append((env.seq, scope, length, literal))
            names.update(name_words(m.name))
        conn.execute(
            f"INSERT INTO recall_messages({MESSAGE_COLUMNS}) SELECT * FROM unnest(?::bigint[],"
            " ?::integer[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[],"
            " ?::double precision[], ?::bigint[], ?::text[], ?::text[]) ON CONFLICT DO NOTHING",
            [list(column) for column in zip(*rows, strict=True)],
        )
        if names:
            conn.execute(
                "INSERT INTO recall_name_words(word) SELECT * FROM unnest(?::text[])"
                " ON CONFLICT DO NOTHING",
                (sorted(names),),
            )
        if asking:
            conn.execute(
                "INSERT INTO recall_questions(seq) SELECT * FROM unnest(?::bigint[])"
                " ON CONFLICT DO NOTHING",
                (asking,),
            )
        _add_terms(conn, indexed)
        for env, m in run:
            self._person_claims(conn, scopes[(m.user_id or "", m.profile or "")], m, env)

    @staticmethod
    def _scopes(conn: Statements, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The scope number of each (user, profile) key; new ones numbered in order of first
        appearance, as one message at a time numbers them."""
        wanted = list(dict.fromkeys(keys))
        found = {
            (str(user), str(profile)): int(n)
            for user, profile, n in conn.execute(
                "SELECT s.user_id, s.profile, s.n FROM recall_scopes s"
                " JOIN unnest(?::text[], ?::text[]) AS k(user_id, profile)"
                " ON s.user_id = k.user_id AND s.profile = k.profile",
                ([u for u, _ in wanted], [p for _, p in wanted]),
            )
        }
        for key in wanted:
            if key not in found:
                n = scope_number(conn, *key, create=True, index=False)
                assert n is not None
                found[key] = n
        return found

    def _scope(self, conn: Statements, user_id: str | None, profile: str | None) -> int:
        n = scope_number(conn, user_id, profile, create=True, index=False)
        assert n is not None
        return n

    def _index(self, conn: Statements, scope: int, seq: int) -> None:
        values = self._indexed(conn, seq)
        if values is None:
            return
        name, body, ctx = values
        literal, length = terms((("A", name), ("B", body), ("C", ctx)))
        _add_terms(conn, [(seq, scope, length, literal)])

    def _unindex(self, conn: Statements, scope: int, seq: int) -> None:
        conn.execute(
            "WITH gone AS (DELETE FROM recall_message_terms WHERE seq = ? RETURNING scope, dl)"
            " UPDATE recall_scope_terms s SET docs = s.docs - 1, words = s.words - g.dl"
            " FROM gone g WHERE s.scope = g.scope",
            (seq,),
        )  # (recall_lexeme_docs: the delete's trigger, recall.m007)

    def _index_belief(self, conn: Statements, belief_id: str) -> None:
        row = conn.execute(
            "SELECT rowid, text FROM recall_beliefs WHERE id = ?", (belief_id,)
        ).fetchone()
        if row is not None:
            literal, length = terms((("B", str(row[1])),))
            conn.execute(
                "INSERT INTO recall_belief_terms(rowid, tsv, dl) VALUES (?, ?::tsvector, ?)"
                " ON CONFLICT DO NOTHING",
                (int(row[0]), literal, length),
            )

    def reset(self, conn: Statements) -> None:
        _emptied(conn)


def _add_terms(conn: Statements, rows: Sequence[tuple[int, int, int, str]]) -> None:
    """Index messages, (seq, scope, length, tsvector literal) each, and count each scope's rows
    and words, in one statement (how many rows hold each lexeme, `recall_lexeme_docs`, is the
    insert's trigger's: recall.m007). A message indexed already is left as it is, and not
    counted again."""
    conn.execute(
        "WITH added AS (INSERT INTO recall_message_terms(seq, scope, dl, tsv)"
        " SELECT g.seq, g.scope, g.dl, g.tsv::tsvector"
        " FROM unnest(?::bigint[], ?::integer[], ?::integer[], ?::text[]) AS g(seq, scope, dl, tsv)"
        " ON CONFLICT DO NOTHING RETURNING scope, dl)"
        " INSERT INTO recall_scope_terms(scope, docs, words)"
        " SELECT scope, count(*), sum(dl) FROM added GROUP BY scope"
        " ON CONFLICT (scope) DO UPDATE SET docs = recall_scope_terms.docs + excluded.docs,"
        " words = recall_scope_terms.words + excluded.words",
        [list(column) for column in zip(*rows, strict=True)],
    )


def _last_in_sessions(
    conn: Statements, run: Sequence[tuple[Envelope, CapturedMessage]]
) -> dict[str | None, tuple[int | None, str]]:
    """For each session of `run`, the message recall holds last before the run's first one in
    it: (its seq, its words as the next turn's context: '' if it was forgotten)."""
    first: dict[str | None, int] = {}
    for env, _ in run:
        first.setdefault(env.session, env.seq)
    last: dict[str | None, tuple[int | None, str]] = {}
    before = (
        "SELECT m.seq, m.body, EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || m.seq)"
        " FROM recall_messages m WHERE {where} AND m.seq < {first} ORDER BY m.seq DESC LIMIT 1"
    )
    named = [(session, seq) for session, seq in first.items() if session is not None]
    if named:
        for session, seq, body, hidden in conn.execute(
            "SELECT g.session, p.* FROM unnest(?::text[], ?::bigint[]) AS g(session, first)"
            " CROSS JOIN LATERAL ("
            + before.format(where="m.session = g.session", first="g.first")
            + ") p",
            ([s for s, _ in named], [seq for _, seq in named]),
        ):
            last[str(session)] = (int(seq), "" if hidden else str(body))
    if None in first:
        row = conn.execute(
            before.format(where="m.session IS NULL", first="?"), (first[None],)
        ).fetchone()
        if row is not None:
            last[None] = (int(row[0]), "" if row[2] else str(row[1]))
    return last


# -- search -------------------------------------------------------------------------------------

_TERMS = "recall_message_terms"
_BELIEF_TERMS = "recall_belief_terms"
_SECTION_TERMS = "recall_section_terms"


def _terms_key(scope: int) -> str:
    """What `MessageSearch.plan` calls a scope's index here (its frequencies are cached by it)."""
    return f"{_TERMS}:{int(scope)}"


def _scope_of(key: str) -> int:
    """The scope number a message index's key (`_terms_key`) names."""
    return int(key.rsplit(":", 1)[1])


class PostgresMessageSearch(MessageSearch):
    """`MessageSearch` whose full-text candidates and bm25 come from the tsvector index.

    Each statement is a round trip to the server, so a search asks for what it needs together:
    the scope's totals with its words' counts, every uncached count `plan` needs in one
    statement (`_counts`, which the base class's `plan` calls), and an index's totals and
    exact counts only when some row matched."""

    def index_key(self, scope: int) -> str:
        return _terms_key(scope)

    def documents(self, conn: Statements, scope: int) -> int:
        row = conn.execute(
            "SELECT docs FROM recall_scope_terms WHERE scope = ?", (scope,)
        ).fetchone()
        return int(row[0]) if row else 0

    def _counts(
        self, conn: Statements, table: str, words: Sequence[str], cap: int
    ) -> dict[str, int]:
        """How many rows of `table` (`plan`'s names: the sections' index, or a scope's message
        index) hold each of `words`, up to `cap`, in one statement: a message word of one
        lexeme from the fold's counts, the others counted."""
        counts = _CountQuery()
        for word in words:
            query = tsquery_any([word])
            if query:
                counts.add(word, table, query, cap)
        return counts.run(conn)

    def _scope_counts(self, conn: Statements, key: str, words: Sequence[str]) -> tuple[int, int]:
        """The scope's (rows, words), bm25's averages, and, exact from the fold's counts, how
        many of its messages hold each of `words` of one lexeme (into the cache `plan` reads):
        one statement a search, not one a word."""
        scope = _scope_of(key)
        stems = {w: _stems(w)[0] for w in words if len(_stems(w)) == 1}
        cap = max(self.tuning.match_budget, 1) + 1  # (as `plan` counts them: up to its cap)
        found: dict[str, int] = {}
        totals = (0, 0)
        for lexeme, docs, words_in in conn.execute(
            "SELECT NULL, docs, words FROM recall_scope_terms WHERE scope = ? UNION ALL"
            " SELECT lexeme, docs, 0 FROM recall_lexeme_docs WHERE scope = ? AND lexeme = ANY(?)",
            (scope, scope, sorted(set(stems.values()))),
        ):
            if lexeme is None:
                totals = (int(docs), int(words_in))
            else:
                found[str(lexeme)] = int(docs)
        now = time.monotonic()
        for word, lexeme in stems.items():
            self._df[(key, word)] = (now, min(found.get(lexeme, 0), cap))
        return totals

    def bm25(
        self,
        conn: Statements,
        scope: int,
        words: Sequence[str],
        reach: Reach | None = None,
    ) -> dict[int, float]:
        """As `MessageSearch.bm25`: the best `candidates` messages within `reach`, scored as FTS5's
        bm25 scores them, from the words the match budget affords; a query of common words only
        is answered from their newest matches, those with all of the words first."""
        if not words:
            return {}
        t = self.tuning
        key = _terms_key(scope)
        totals = self._scope_counts(conn, key, words)
        rare, common = self.plan(conn, key, words)
        source, narrow = f"{_TERMS} t", ""
        params: list[str | int | float] = []
        if reach is not None and reach.narrowed:
            condition, params = reach.messages("m.seq", "m.session")
            source += " JOIN recall_messages m ON m.seq = t.seq"
            narrow = f" AND {condition}"
            if reach.span is not None:
                narrow += " AND t.seq BETWEEN ? AND ?"
                params = [*params, *reach.span]
        if rare:
            best = self._bm25(
                conn,
                key,
                rare,
                f"SELECT t.seq, t.dl, t.tsv_text FROM {source}"
                f" WHERE t.scope = ? AND t.tsv @@ ?::tsquery{narrow}",
                ([scope], params),
                {"A": t.name_weight, "B": 1.0, "C": t.context_weight},
                totals=totals,
                whole=not narrow,
            )
            return dict(best[: t.candidates])
        scored: dict[int, float] = {}
        newest = (
            f"SELECT t.seq FROM {source} WHERE t.scope = ? AND t.tsv @@ ?::tsquery{narrow}"
            " ORDER BY t.seq DESC LIMIT ?"
        )
        for score, query in ((2.0, tsquery_all(common)), (1.0, tsquery_any(common))):
            if len(scored) >= t.candidates or not query:
                continue
            for (seq,) in conn.execute(newest, (scope, query, *params, t.candidates)):
                scored.setdefault(int(seq), score)
        return scored

    def _bm25(
        self,
        conn: Statements,
        key: str,
        rare: Sequence[str],
        sql: str,
        params: tuple[Sequence[object], Sequence[object]],
        weight: dict[str, float],
        *,
        totals: tuple[int, int] | None = None,
        whole: bool = False,
    ) -> list[tuple[int, float]]:
        """bm25 as FTS5 computes it (k1 1.2, b 0.75, `weight` per column label) of every row
        `sql` returns: (id, length, its tsvector's text, `tsv_text`). `sql` takes `params[0]`,
        the tsquery, then `params[1]`; `totals` is
        (rows, words) of the whole index (None: read from `recall_index_totals` by `key`);
        `whole`: `sql` returns every row of the index (`key`) that holds any of `rare`. Best
        first."""
        query = tsquery_any(rare)
        if not query:
            return []
        phrases = {w: _stems(w) for w in rare}
        marks = {s: f"{_lexeme(s)}:" for stems in phrases.values() for s in stems}
        # The positions are read from the tsvector's text the server stored with the row
        # (recall.m009), not worked out of the tsvector at each search: unnest() builds every
        # lexeme's arrays of a row (~40 in a message) to keep one or two, and cutting the
        # tsvector to the query's lexemes (ts_delete) cost five times the row's reading.
        # Each row's frequency of each word: its instances' column weights added up in order,
        # as FTS5 adds them (a word at one position, most rows, is its column's weight).
        held: list[tuple[int, int, dict[str, float]]] = []
        present: dict[str, int] = dict.fromkeys(phrases, 0)
        rows = conn.execute(sql, (*params[0], query, *params[1])).fetchall()
        for row_id, length, text in rows:
            runs = _runs(str(text), marks)
            frequencies: dict[str, float] = {}
            for word, stems in phrases.items():
                run = runs.get(stems[0]) if len(stems) == 1 else None
                if run is not None and "," not in run:
                    frequencies[word] = weight.get(run[-1] if run[-1].isalpha() else "D", 1.0)
                elif found := _instances(stems, runs):
                    frequencies[word] = sum(weight.get(label, 1.0) for label in found)
                else:
                    continue
                present[word] += 1
            held.append((int(row_id), int(length), frequencies))
        if not held:
            return []
        # FTS5 scores with each word's exact document frequency, never a cached one (a cached
        # count can be stale after a forget, and larger than the rows there are now). When the
        # rows read are all the index holds of the words, they are that count.
        counts = _CountQuery()
        if totals is None:
            counts.totals(key)
        if not whole:
            for word in rare:
                if word_query := tsquery_any([word]):
                    counts.add(word, key, word_query)
        hits = present if whole else {w: 0 for w in rare}
        hits.update(counts.run(conn))
        docs, words = counts.found_totals if totals is None else totals
        average = (words / docs if docs else 0.0) or 1.0
        idf: dict[str, float] = {}
        for word in rare:
            ratio = (docs - hits[word] + 0.5) / (hits[word] + 0.5)
            value = math.log(ratio) if ratio > 0.0 else 0.0  # (another host's fold in between)
            idf[word] = value if value > 0.0 else 1e-6  # as FTS5's bm25 clamps it
        scores: dict[int, float] = {}
        for row_id, length, frequencies in held:
            total = 0.0
            for word, frequency in frequencies.items():
                if frequency:
                    norm = _K1 * (1.0 - _B + _B * length / average)
                    total += idf[word] * frequency * (_K1 + 1.0) / (frequency + norm)
            scores[row_id] = total
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))

    # -- beliefs --------------------------------------------------------------------------------

    def belief_scores(
        self, conn: Statements, words: Sequence[str], where: str, params: Sequence[object]
    ) -> dict[int, float]:
        """`search.BeliefScores`: FTS5's bm25 of every belief that matches any of `words` and
        `where` (over `recall_beliefs b`), from the whole index's counts as FTS5 takes them
        (every scope's beliefs: SQLite keeps them in one table too)."""
        best = self._bm25(
            conn,
            _BELIEF_TERMS,
            list(dict.fromkeys(words)),
            f"SELECT b.rowid, t.dl, t.tsv_text FROM {_BELIEF_TERMS} t"
            " JOIN recall_beliefs b ON b.rowid = t.rowid"
            f" WHERE t.tsv @@ ?::tsquery AND {where}",
            ([], params),
            {"B": 1.0},
        )
        return dict(best)

    # -- sections -------------------------------------------------------------------------------

    sections_index = _SECTION_TERMS

    def section_candidates(
        self,
        conn: Statements,
        rare: Sequence[str],
        common: Sequence[str],
        span: tuple[int, int] | None,
        budget: int,
        limit: int,
    ) -> list[tuple[int, float]]:
        """`search.SectionCandidates` from the tsvector index of the sections' prose."""
        narrow, params = ("", []) if span is None else (" AND t.written BETWEEN ? AND ?", span)
        if rare:
            return self._bm25(
                conn,
                _SECTION_TERMS,
                rare,
                f"SELECT t.written, t.dl, t.tsv_text FROM {_SECTION_TERMS} t"
                f" WHERE t.tsv @@ ?::tsquery{narrow}",
                ((), params),
                {"A": 1.0},
                whole=span is None,
            )[: max(budget, limit)]
        ranked: list[tuple[int, float]] = []
        seen: set[int] = set()
        newest = (
            f"SELECT t.written FROM {_SECTION_TERMS} t WHERE t.tsv @@ ?::tsquery{narrow}"
            " ORDER BY t.written DESC LIMIT ?"
        )
        for score, query in ((2.0, tsquery_all(common)), (1.0, tsquery_any(common))):
            if len(ranked) >= budget or not query:
                continue
            for (written,) in conn.execute(newest, (query, *params, budget)):
                if written not in seen:
                    seen.add(written)
                    ranked.append((int(written), score))
        return ranked


class _CountQuery:
    """Counts of several words in the indexes (and an index's totals), asked in one statement
    of scalar subqueries: each is a round trip otherwise."""

    def __init__(self) -> None:
        self._columns: list[str] = []
        self._params: list[object] = []
        self._words: list[tuple[str, int | None]] = []  # (word, its cap)
        self._totals = False
        self.found_totals = (0, 0)
        """(rows, words) of the index `totals` named, once `run`."""

    def totals(self, table: str) -> None:
        """Also read (rows, words) of the belief or section index `table` (recall.m008)."""
        self._columns[:0] = [
            "(SELECT docs FROM recall_index_totals WHERE name = ?)",
            "(SELECT words FROM recall_index_totals WHERE name = ?)",
        ]
        self._params[:0] = [table, table]
        self._totals = True

    def add(self, word: str, table: str, query: str, cap: int | None = None) -> None:
        """Count the rows of `table` that match `query` (`word`'s), up to `cap` if given: the
        sections' or the beliefs' index, or a scope's message index (`_terms_key`), whose
        words of one lexeme the fold counts (`recall_lexeme_docs`)."""
        limit = "" if cap is None else " LIMIT ?"
        if table in (_SECTION_TERMS, _BELIEF_TERMS):
            column = (
                f"(SELECT count(*) FROM (SELECT 1 FROM {table} t"
                f" WHERE t.tsv @@ ?::tsquery{limit}) x)"
            )
            params: list[object] = [query]
        elif len(stems := _stems(word)) == 1:
            column = "(SELECT docs FROM recall_lexeme_docs WHERE scope = ? AND lexeme = ?)"
            params, limit = [_scope_of(table), stems[0]], ""
        else:
            column = (
                f"(SELECT count(*) FROM (SELECT 1 FROM {_TERMS} t"
                f" WHERE t.scope = ? AND t.tsv @@ ?::tsquery{limit}) x)"
            )
            params = [_scope_of(table), query]
        self._columns.append(column)
        self._params += [*params, *([cap] if limit else [])]
        self._words.append((word, cap))

    def run(self, conn: Statements) -> dict[str, int]:
        """Each word added -> its count (capped, when a cap was given); no statement when
        nothing was asked."""
        if not self._columns:
            return {}
        row = conn.execute("SELECT " + ", ".join(self._columns), self._params).fetchone()
        assert row is not None  # a select of scalar subqueries is always one row
        values = [int(v or 0) for v in row]
        if self._totals:
            self.found_totals = (values[0], values[1])
            values = values[2:]
        return {
            word: n if cap is None else min(n, cap)
            for (word, cap), n in zip(self._words, values, strict=True)
        }


def _runs(text: str, marks: dict[str, str]) -> dict[str, str]:
    """Each lexeme of `marks` (lexeme -> its quoted form and a colon, as `tsvector` text writes
    it) a tsvector's text holds, with its run of positions: `'a':1B,4C 'b':2B` gives a "1B,4C".
    A lexeme's entry starts the text or follows a space (lexemes are letters and digits, so no
    quote, colon or space inside one)."""
    found: dict[str, str] = {}
    for lexeme, mark in marks.items():
        at = text.find(mark)
        while at > 0 and text[at - 1] != " ":
            at = text.find(mark, at + 1)
        if at < 0:
            continue
        start = at + len(mark)
        end = text.find(" ", start)
        found[lexeme] = text[start : end if end >= 0 else len(text)]
    return found


def _pairs(run: str) -> set[tuple[int, str]]:
    """A run of positions as (position, weight label) pairs; one without a letter is D's."""
    return {(int(p[:-1]), p[-1]) if p[-1].isalpha() else (int(p), "D") for p in run.split(",")}


def _positions(text: str, marks: dict[str, str]) -> dict[str, set[tuple[int, str]]]:
    """The (position, weight label) pairs of each lexeme of `marks` in a tsvector's text."""
    return {lexeme: _pairs(run) for lexeme, run in _runs(text, marks).items()}


def _instances(stems: Sequence[str], runs: dict[str, str]) -> list[str]:
    """The column (weight label) of each instance of a phrase in one row, as FTS5's bm25 counts
    them: an instance is the first lexeme at a position, the next one after it in the same
    column, and so on. A one-word phrase's instances are its positions."""
    first = runs.get(stems[0]) if stems else None
    if first is None:
        return []
    if len(stems) == 1:
        return [p[-1] if p[-1].isalpha() else "D" for p in first.split(",")]
    rest = [_pairs(runs[s]) if s in runs else set() for s in stems[1:]]
    if not all(rest):
        return []
    return [
        label
        for position, label in _pairs(first)
        if all((position + i, label) in held for i, held in enumerate(rest, start=1))
    ]


PG_BELIEFS = BeliefIndex(
    source="recall_belief_terms t JOIN recall_beliefs b ON b.rowid = t.rowid",
    match="t.tsv @@ ?::tsquery",
    score="ts_rank(t.tsv, ?::tsquery)",  # (an index's own `scores`, bm25, replaces it)
    query=tsquery_any,
)
"""Beliefs on the tsvector index, for `search.rank_beliefs` (`PostgresRecallIndex` gives it
its bm25 as `scores`)."""


# -- the index ----------------------------------------------------------------------------------


# The advisory lock hosts before 696f0a0 took first to fold recall (writing the position row at
# commit). Taken here before the row, it keeps one lock order for a fleet mid-upgrade: old and
# new hosts take turns rather than deadlock. Once no older host runs, the row alone suffices.
_FOLD_LOCK = 0x7265636C


class PostgresRecallTables(PostgresTables):
    """Recall's tables in a PostgreSQL store, as the projector folds into them."""

    def held_position(self, conn: Statements, fold: str, /) -> int:
        conn.execute("SELECT pg_advisory_xact_lock(?)", (_FOLD_LOCK,))
        return super().held_position(conn, fold)

    def last_seq(self) -> int:
        return self.store.last_seq()


class PostgresRecallIndex(RecallIndex):
    """Recall's index in a PostgreSQL store, the same reads as `RecallIndex` on the tsvector
    tables. What the app wiring builds for `chronicle.store: postgresql://...`:

        index = PostgresRecallIndex(reader, config, sessions, capture)
        recall = Recall.over(index, capture, redraw)

    with `reader` an `EventReader` over the `PostgresEventStore`, and the session tree and
    capture built over the same store."""

    belief_index = PG_BELIEFS

    def __init__(
        self,
        reader: EventReader[PostgresEventStore],
        config: Config,
        sessions: SessionTree,
        capture: Capture,
    ) -> None:
        self.pg = reader.store
        self.reader = reader
        self.log = reader.store
        self.types = reader.types
        # The sections table first, as on SQLite (schema.MIGRATIONS): forgetting a section
        # reads it.
        self.pg.migrate((*PG_CHRONICLE_MIGRATIONS, *PG_RECALL_MIGRATIONS))
        self.fold = PostgresRecallFold()
        self._tables = PostgresRecallTables(self.pg)
        self.projector = Projector(self._tables, reader, [self.fold])
        self._messages = PostgresMessageSearch(config.settings.recall)
        self.belief_index = replace(PG_BELIEFS, scores=self._messages.belief_scores)
        self._keep(config, sessions, capture)
        # Vectors as on SQLite (`Recall.embed_pending` writes them, `RecallIndex._nearest`
        # compares them in this process): the same SQL over `recall_vectors`, a BYTEA column.
        self.embedder = Embedder.from_settings(config.settings)

    def hold_fold(self, conn: Statements) -> None:
        """Lock recall's fold position (and the older hosts' advisory lock), as a fold does."""
        self._tables.held_position(conn, FOLD_NAME)

    def catch_up(self) -> int:
        """Fold what the log gained, then index the sections written since (see `_SECTIONS`).
        Every search catches up, and mostly finds nothing to do: whether the fold is behind and
        whether sections wait is one question to the server (not the projector's two and a
        look at the queue)."""
        try:
            with self.reading("looking for what to index") as conn:
                row = conn.execute(
                    f"SELECT {BEHIND}, EXISTS (SELECT 1 FROM recall_section_queue)",
                    (self.fold.name,),
                ).fetchone()
            behind, queued = (bool(row[0]), bool(row[1])) if row else (True, True)
        except (StoreBusy, StoreReadOnly) as exc:
            log.debug("chronicle recall: searching what is already indexed (%s)", exc)
            behind, queued = False, True
        read = super().catch_up() if behind else 0
        if queued:
            try:
                self._index_queued()
            except (StoreBusy, StoreReadOnly) as exc:
                log.debug("chronicle recall: sections not indexed yet (%s)", exc)
        return read

    def index_sections(self) -> int:
        """Index the queued sections (those written, purged or deleted since the last call);
        returns how many. Hosts draining at once each take rows the others have not."""
        with self.reading("looking for sections to index") as conn:
            # (a read first: most calls find none, and a write costs three round trips)
            if conn.execute("SELECT 1 FROM recall_section_queue LIMIT 1").fetchone() is None:
                return 0
        return self._index_queued()

    def _index_queued(self) -> int:
        with self.writing("indexing sections") as conn:
            queued = [
                int(w)
                for (w,) in conn.execute(
                    "DELETE FROM recall_section_queue WHERE written IN (SELECT written FROM"
                    " recall_section_queue ORDER BY written LIMIT 1000 FOR UPDATE SKIP LOCKED)"
                    " RETURNING written"
                )
            ]
            if not queued:
                return 0
            marks = ",".join("?" * len(queued))
            prose: dict[int, str] = {
                int(w): str(text)
                for w, text in conn.execute(
                    f"SELECT written, prose FROM sections WHERE written IN ({marks})", queued
                )
            }
            conn.execute(f"DELETE FROM {_SECTION_TERMS} WHERE written IN ({marks})", queued)
            rows = []
            for written in queued:
                if written in prose:
                    literal, length = terms((("A", str(prose[written])),))
                    rows.append((written, length, literal))
            if rows:
                conn.executemany(
                    f"INSERT INTO {_SECTION_TERMS}(written, dl, tsv) VALUES (?, ?, ?::tsvector)",
                    rows,
                )
        return len(queued)

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[Statements]:
        with postgres_errors(what), self.pg.reading() as conn:
            yield QmarkConnection(conn)

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[Statements]:
        with postgres_errors(what), self.pg.atomic() as conn:
            yield QmarkConnection(conn)
