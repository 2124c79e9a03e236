"""Recall's tables. Everything here is a projection of the log, rebuilt by the recall fold, except
`recall_vectors` (a cache of embeddings, refilled on demand) and the sections index (kept in step
with the `sections` table by triggers).

Invariants:
- `recall_messages` and `recall_beliefs` are append-only: triggers refuse UPDATE, and rows are
  only deleted all at once by a rebuild's reset. A superseded belief stays; the newer row names
  it in `supersedes`. A forgotten item is listed in `recall_hidden` and dropped from its index;
  a forgotten message's text is blanked (the one update the trigger allows) and its vector
  deleted, so its words are in no table recall derives.
- Full-text indexes use external content: the text lives once, in the table the index points at;
  for messages that is the view `recall_message_text`, which reads a message's text from its log
  row where recall's row leaves it out (m009: nearly every message; the text is then held once,
  by the log, and a forgotten message's view reads '').
  Messages are indexed per scope (one FTS5 table per user and profile, `recall_fts_<n>`), so a
  query physically cannot match another user's messages, and its cost depends on that user's
  memory only. Beliefs and sections are few and share one index each, filtered by scope.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from ..capture.events import MESSAGE_COPIES
from ..chronicle.store import CHRONICLE_MIGRATIONS
from ..log.store import (
    Migration,
    created_at_sql,
    run_script,
    stored_text_sql,
    stored_texts,
)
from ..log.tables import SQLConnection
from .text import CONTEXT_CHARS, TOKENIZER, asks, index_row, tokens

__all__ = [
    "RECALL_MIGRATIONS",
    "MIGRATIONS",
    "TEXT_FIELD",
    "PERSON_TEXT",
    "log_texts",
    "message_index",
    "create_message_index",
]

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS recall_scopes (
    n       INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    profile TEXT NOT NULL,
    UNIQUE (user_id, profile)
);
CREATE TABLE IF NOT EXISTS recall_messages (
    seq           INTEGER PRIMARY KEY,
    scope         INTEGER NOT NULL,
    session       TEXT,
    role          TEXT NOT NULL,
    speaker       TEXT NOT NULL,
    name          TEXT NOT NULL DEFAULT '',
    agent_context TEXT NOT NULL DEFAULT 'primary',
    at            TEXT NOT NULL,
    ts            REAL NOT NULL,
    prev          INTEGER,
    body          TEXT NOT NULL,
    person        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS recall_messages_by_session ON recall_messages(session, seq);
CREATE INDEX IF NOT EXISTS recall_messages_by_prev ON recall_messages(prev);
CREATE INDEX IF NOT EXISTS recall_messages_by_scope ON recall_messages(scope, seq);
CREATE TRIGGER IF NOT EXISTS recall_messages_never_update BEFORE UPDATE ON recall_messages
BEGIN SELECT RAISE(ABORT, 'chronicle: recall_messages is append-only'); END;

CREATE TABLE IF NOT EXISTS recall_hidden (
    target TEXT PRIMARY KEY,
    by_seq INTEGER NOT NULL
);

-- What a message index reads: the message, its speaker's name, and the previous turn of the same
-- session (unless that turn was forgotten), so an answer is found by the question before it.
-- (m009 makes it again to read a body the row leaves to the log.)
CREATE VIEW IF NOT EXISTS recall_message_text AS
SELECT m.seq AS seq, m.name AS name, m.body AS body,
       COALESCE((SELECT p.body FROM recall_messages p
                 WHERE p.seq = m.prev
                   AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || p.seq)),
                '') AS ctx
FROM recall_messages m;

CREATE TABLE IF NOT EXISTS recall_beliefs (
    rowid      INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    scope      INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    polarity   INTEGER NOT NULL DEFAULT 1,
    text       TEXT NOT NULL,
    origin     TEXT NOT NULL,
    source_seq INTEGER NOT NULL,
    session    TEXT,
    at         TEXT NOT NULL,
    supersedes TEXT
);
CREATE INDEX IF NOT EXISTS recall_beliefs_by_key ON recall_beliefs(scope, kind, key);
CREATE INDEX IF NOT EXISTS recall_beliefs_by_supersedes ON recall_beliefs(supersedes);
CREATE TRIGGER IF NOT EXISTS recall_beliefs_never_update BEFORE UPDATE ON recall_beliefs
BEGIN SELECT RAISE(ABORT, 'chronicle: beliefs are never updated; supersede instead'); END;

CREATE TABLE IF NOT EXISTS recall_belief_sources (
    belief TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    PRIMARY KEY (belief, seq)
);
CREATE INDEX IF NOT EXISTS recall_belief_sources_by_seq ON recall_belief_sources(seq);

CREATE TABLE IF NOT EXISTS recall_corrections (
    target TEXT NOT NULL,
    belief TEXT NOT NULL,
    PRIMARY KEY (target, belief)
);

CREATE VIRTUAL TABLE IF NOT EXISTS recall_beliefs_fts USING fts5(
    text, content='recall_beliefs', content_rowid='rowid', tokenize='{TOKENIZER}'
);
CREATE TRIGGER IF NOT EXISTS recall_beliefs_ai AFTER INSERT ON recall_beliefs BEGIN
    INSERT INTO recall_beliefs_fts(rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER IF NOT EXISTS recall_beliefs_ad AFTER DELETE ON recall_beliefs BEGIN
    INSERT INTO recall_beliefs_fts(recall_beliefs_fts, rowid, text)
    VALUES ('delete', old.rowid, old.text);
END;

CREATE TABLE IF NOT EXISTS recall_vectors (
    target TEXT PRIMARY KEY,
    scope  INTEGER NOT NULL,
    model  TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    dim    INTEGER NOT NULL,
    vec    BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS recall_vectors_by_scope ON recall_vectors(scope, model, seq);
CREATE INDEX IF NOT EXISTS recall_vectors_by_model ON recall_vectors(model, seq);
"""

_SECTIONS = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS recall_sections_fts USING fts5(
    prose, content='sections', content_rowid='written', tokenize='{TOKENIZER}'
);
CREATE TRIGGER IF NOT EXISTS recall_sections_ai AFTER INSERT ON sections BEGIN
    INSERT INTO recall_sections_fts(rowid, prose) VALUES (new.written, new.prose);
END;
CREATE TRIGGER IF NOT EXISTS recall_sections_ad AFTER DELETE ON sections BEGIN
    INSERT INTO recall_sections_fts(recall_sections_fts, rowid, prose)
    VALUES ('delete', old.written, old.prose);
END;
INSERT INTO recall_sections_fts(recall_sections_fts) VALUES ('rebuild');
"""


_LINKS = """
CREATE INDEX IF NOT EXISTS recall_messages_links ON recall_messages(seq, prev);
"""


# Forgetting takes the words out, not only the index entries: a forgotten message's stored text is
# blanked (the only update recall_messages takes, and only for a hidden message), a purged
# section's index entry follows its blanked prose, and a forgotten message's vector goes.
_NEVER_UPDATE = """
DROP TRIGGER IF EXISTS recall_messages_never_update;
CREATE TRIGGER recall_messages_never_update BEFORE UPDATE ON recall_messages
WHEN NOT (
    new.body = '' AND new.person = '' AND new.seq = old.seq AND new.scope = old.scope
    AND new.session IS old.session AND new.role = old.role AND new.speaker = old.speaker
    AND new.name = old.name AND new.agent_context = old.agent_context AND new.at = old.at
    AND new.ts = old.ts AND new.prev IS old.prev
    AND EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || old.seq)
)
BEGIN SELECT RAISE(ABORT, 'chronicle: recall_messages is append-only'); END;
"""

_FORGET = (
    _NEVER_UPDATE
    + """
CREATE TRIGGER IF NOT EXISTS recall_sections_au AFTER UPDATE OF prose ON sections BEGIN
    INSERT INTO recall_sections_fts(recall_sections_fts, rowid, prose)
    VALUES ('delete', old.written, old.prose);
    INSERT INTO recall_sections_fts(rowid, prose) VALUES (new.written, new.prose);
END;
UPDATE recall_messages SET body = '', person = ''
WHERE 'm' || seq IN (SELECT target FROM recall_hidden) AND (body != '' OR person != '');
DELETE FROM recall_vectors WHERE target IN (SELECT target FROM recall_hidden);
"""
)

TEXT_FIELD = ("text", MESSAGE_COPIES["text"])
"""Where a captured message's searchable text is in its log row: the payload's `text`, or where
the row leaves it out (payload template 1's copy, or an older row's shared text), its content.
Recall keeps a message's `body` only where the log's (`log.store.stored_text_sql`) differs from
it (`RecallFold`, with `body_from_log`), and its `at` only where it differs from the event's
time: '' in a visible row means "read it from the log" (`log_texts`)."""


def _body(m: str) -> str:
    """The body of recall row `m` in SQL: its own, else (not forgotten) its log row's text."""
    return (
        f"CASE WHEN {m}.body != '' THEN {m}.body"
        f" WHEN EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || {m}.seq) THEN ''"
        f" ELSE COALESCE({stored_text_sql(f'{m}.seq', *TEXT_FIELD)}, '') END"
    )


_BODY_FROM_LOG = f"""
DROP VIEW IF EXISTS recall_message_text;
CREATE VIEW recall_message_text AS
SELECT m.seq AS seq, m.name AS name, {_body("m")} AS body,
       COALESCE((SELECT {_body("p")} FROM recall_messages p
                 WHERE p.seq = m.prev
                   AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || p.seq)),
                '') AS ctx
FROM recall_messages m;
DROP TRIGGER IF EXISTS recall_messages_never_update;
UPDATE recall_messages SET
    body = iif(body != '' AND body IS {stored_text_sql("recall_messages.seq", *TEXT_FIELD)},
               '', body),
    at = iif(at IS {created_at_sql("recall_messages.seq")}, '', at);
"""


def log_texts(conn: SQLConnection, seqs: Iterable[int]) -> dict[int, tuple[str, str]]:
    """seq -> (text, time) the log holds for each of `seqs` (SQLite): what a visible recall row
    leaves to the log."""
    return stored_texts(conn, seqs, *TEXT_FIELD)


PERSON_TEXT = "iif(m.person = '' AND m.speaker = 'person', m.body, m.person)"
"""The person's own words of a message row `m`. A person's message whose words are all theirs (no
host frames: nearly every one) keeps them once, in `body`, and `person` is '' (a message the
person spoke always has words of theirs, so '' cannot mean none)."""

# Rows folded before the person's words were kept once: the copy is dropped (the one-off update
# goes around the append-only trigger, which is put back as it was).
_PERSON_ONCE = (
    """
DROP TRIGGER IF EXISTS recall_messages_never_update;
UPDATE recall_messages SET person = ''
WHERE speaker = 'person' AND person != '' AND person = body;
"""
    + _NEVER_UPDATE
)


def _m001_recall(conn: sqlite3.Connection) -> None:
    run_script(conn, _SCHEMA)


def _m002_sections_index(conn: sqlite3.Connection) -> None:
    run_script(conn, _SECTIONS)


def _m003_links(conn: sqlite3.Connection) -> None:
    # Ranking reads each hit's neighbours; a narrow index answers that without touching the
    # wide rows (their text), which at a million messages are mostly not in the page cache.
    # (m008 drops it again: ranking reads the strongest hits' rows anyway, `prev` among them.)
    run_script(conn, _LINKS)


def _m008_drop_links(conn: sqlite3.Connection) -> None:
    # The turn before a hit is read from the hit's own row, which ranking reads anyway; the
    # narrow (seq, prev) index was a second copy of both (17 bytes a message) that a cold
    # search paid a page read per hit to walk.
    conn.execute("DROP INDEX IF EXISTS recall_messages_links")


def _reindex_messages(conn: sqlite3.Connection) -> None:
    """Make each message index again from its visible messages, through `text.index_row`."""
    for (scope,) in conn.execute("SELECT n FROM recall_scopes").fetchall():
        table = message_index(scope)
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        create_message_index(conn, scope)
        rows = conn.execute(
            "SELECT t.seq, t.name, t.body, t.ctx FROM recall_message_text t"
            " JOIN recall_messages m ON m.seq = t.seq WHERE m.scope = ?"
            " AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || t.seq)",
            (scope,),
        )
        conn.executemany(
            f"INSERT INTO {table}(rowid, name, body, ctx) VALUES (?, ?, ?, ?)",
            ((seq, *index_row(name, body, ctx)) for seq, name, body, ctx in rows),
        )


def _m004_index_rows(conn: sqlite3.Connection) -> None:
    # It made the indexes again so CJK characters stand apart (an older index holds a CJK
    # sentence as one word); m006 makes them again anyway, so a store that has neither gets
    # one rebuild, not two.
    return None


def _m005_forget(conn: sqlite3.Connection) -> None:
    run_script(conn, _FORGET)


def _m007_person_once(conn: sqlite3.Connection) -> None:
    run_script(conn, _PERSON_ONCE)


def _m009_body_from_log(conn: sqlite3.Connection) -> None:
    # A message's body is nearly always its log row's text, verbatim (146 bytes a message on
    # average in the scale bench), and its time is always the event's: the row keeps '' then
    # and every reader takes them from the log. The index is unchanged (the view gives the same
    # text); the one-off update goes around the append-only trigger, put back as it was.
    run_script(conn, _BODY_FROM_LOG + _NEVER_UPDATE)


def _m010_names(conn: sqlite3.Connection) -> None:
    # The words of every speaker name a message row holds, once: ranking asks whether a query
    # holds one before it allows the speaker boost in its bound (search.MessageSearch.rank).
    conn.execute(
        "CREATE TABLE IF NOT EXISTS recall_name_words (word TEXT PRIMARY KEY) WITHOUT ROWID"
    )
    names = conn.execute("SELECT DISTINCT name FROM recall_messages WHERE name != ''").fetchall()
    conn.executemany(
        "INSERT OR IGNORE INTO recall_name_words(word) VALUES (?)",
        [(word,) for (name,) in names for word in set(tokens(name))],
    )


def _m011_messages_by_time(conn: sqlite3.Connection) -> None:
    # A query that names a time counts the messages told within it (search._add_time) and reads
    # a memory's oldest and newest time: index range reads, not a walk of every row.
    conn.execute("CREATE INDEX IF NOT EXISTS recall_messages_by_time ON recall_messages(scope, ts)")


def _m012_questions(conn: sqlite3.Connection) -> None:
    # The short questions among the messages (`text.asks`): ranking weighs them lower
    # (`question_weight`) and reads the mark with a row's metadata, not its text. The fold adds
    # each new one; the messages already folded are read once here.
    conn.execute("CREATE TABLE IF NOT EXISTS recall_questions (seq INTEGER PRIMARY KEY)")
    rows = conn.execute(
        "SELECT t.seq, t.body FROM recall_message_text t"
        " WHERE length(t.body) <= ? AND instr(t.body, '?') > 0"
        " AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || t.seq)",
        (CONTEXT_CHARS,),
    )
    conn.executemany(
        "INSERT OR IGNORE INTO recall_questions(seq) VALUES (?)",
        ((seq,) for seq, head in rows if asks(str(head or ""))),
    )


def _m006_context_tail(conn: sqlite3.Connection) -> None:
    # The context column holds the end of the turn before, about two sentences (it held the
    # last sentence only, too little for a short chat's question spread over two).
    _reindex_messages(conn)


RECALL_MIGRATIONS = (
    Migration("recall.m001_tables", _m001_recall),
    Migration("recall.m002_sections_index", _m002_sections_index),
    Migration("recall.m003_links", _m003_links),
    Migration("recall.m004_index_rows", _m004_index_rows),
    Migration("recall.m005_forget", _m005_forget),
    Migration("recall.m006_context_tail", _m006_context_tail),
    Migration("recall.m007_person_once", _m007_person_once),
    Migration("recall.m008_drop_links", _m008_drop_links),
    Migration("recall.m009_body_from_log", _m009_body_from_log),
    Migration("recall.m010_names", _m010_names),
    Migration("recall.m011_messages_by_time", _m011_messages_by_time),
    Migration("recall.m012_questions", _m012_questions),
)

MIGRATIONS = (*CHRONICLE_MIGRATIONS, *RECALL_MIGRATIONS)
"""In order: the sections table must exist before its index and triggers."""


def message_index(scope: int) -> str:
    return f"recall_fts_{int(scope)}"


def create_message_index(conn: SQLConnection, scope: int) -> str:
    name = message_index(scope)
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5(name, body, ctx,"
        f" content='recall_message_text', content_rowid='seq', tokenize='{TOKENIZER}')"
    )
    return name
