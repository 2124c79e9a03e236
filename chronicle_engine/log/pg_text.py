"""Text with NUL bytes on PostgreSQL: stored exactly, not refused and not merged with other text.

PostgreSQL's `text` cannot hold the byte 0 (psycopg refuses such a string before sending it,
and the whole statement with it), while Hermes may hand over a role, a name, a session id, a
user id or a message holding one, and SQLite stores them as they are. So every string a
PostgreSQL store sends is escaped (`storable`) and every text it reads is unescaped
(`readable`): a psycopg dumper and row factory on each of the store's connections
(`nul_safe`).

- Injective: ESCAPE (U+0001) followed by `0` stands for a NUL and followed by `1` for ESCAPE
  itself; every other character stands for itself. Two different strings are never stored as
  the same text, so `bob\\x00` and `bob\\ufffd` stay two users (the map before
  `log.m003_escaped_text` replaced NUL by U+FFFD and made them one recall scope).
- Plain text (no NUL, no U+0001) is stored as it is, so rows and indexes of such text are the
  same as before, and so is a payload: its JSON writes every control character as `\\u00XX`.
- The same in every statement: a value looked up (a session id, a user id) finds what was
  stored, and what reads back from a text column is what was sent. Text the server cuts or
  builds (a substring, a concatenation) reads back as the server made it: a lone ESCAPE not
  followed by `0` or `1` is left as it is.
- The cost: a test of each string sent and of each text read (a `find` in C; the row
  factory's own call once a row); only text holding ESCAPE is rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from psycopg import Connection, sql
from psycopg.abc import Buffer
from psycopg.rows import RowMaker, TupleRow
from psycopg.types.string import StrDumperUnknown

__all__ = ["ESCAPE", "escape_stored_text", "nul_safe", "readable", "storable"]

ESCAPE = "\x01"
"""What starts an escape in a PostgreSQL store's text: `ESCAPE + "0"` is NUL,
`ESCAPE + "1"` is ESCAPE."""

_ESCAPED = re.compile("\x01[01]")
_UNESCAPED = {"\x010": "\x00", "\x011": "\x01"}


def storable(text: str) -> str:
    """`text` as a PostgreSQL store keeps it: holds no NUL, and `readable` gives `text` back."""
    if "\x00" not in text and ESCAPE not in text:
        return text
    return text.replace(ESCAPE, "\x011").replace("\x00", "\x010")


def readable(text: str) -> str:
    """The text `storable` was given, from what it returned."""
    return _ESCAPED.sub(_unescaped, text) if ESCAPE in text else text


def _unescaped(pair: re.Match[str]) -> str:
    return _UNESCAPED[pair.group()]


class _EscapingDumper(StrDumperUnknown):
    """psycopg's string dumper (text format, type left to the server), `storable` first."""

    def dump(self, obj: str) -> Buffer | None:
        # (psycopg's own dump, which encodes in the connection's encoding and refuses a NUL,
        # given the escaped text: every string of every statement passes here)
        return super().dump(storable(obj))


def _read(value: object) -> object:
    """A value of a row as sent: text unescaped, and the text in an array."""
    if type(value) is str:
        return readable(value)
    if type(value) is list:
        return [_read(v) for v in value]
    return value


def _unescaping_rows(cursor: object) -> RowMaker[TupleRow]:
    """Rows as tuples (psycopg's `tuple_row`), each text value unescaped.

    A row factory, not a text loader: psycopg's own C loaders decode the values, and this looks
    at each row once. 100,000 rows of six texts, best of five, on a loaded 2-core machine: 0.2 us
    a text more than psycopg's own rows, where a Python text loader cost 1.7 to 2 us more."""

    def row(values: Sequence[object]) -> TupleRow:
        for value in values:
            if (type(value) is str and ESCAPE in value) or type(value) is list:
                return tuple(_read(v) for v in values)
        return tuple(values)

    return row


def nul_safe(conn: Connection[TupleRow]) -> None:
    """Escape every string `conn` sends, unescape every text it reads (see the module)."""
    conn.adapters.register_dumper(str, _EscapingDumper)
    conn.row_factory = _unescaping_rows


_TABLES_BEFORE_ESCAPING = (
    "consolidation_units",
    "events",
    "fold_positions",
    "recall_belief_sources",
    "recall_beliefs",
    "recall_corrections",
    "recall_hidden",
    "recall_lexeme_docs",
    "recall_messages",
    "recall_name_words",
    "recall_scopes",
    "recall_vectors",
    "scheduler_jobs",
    "scheduler_sweeps",
    "scheduler_watermarks",
    "sections",
    "session_entries",
    "session_heads",
)
"""Every room's tables with text columns when `log.m003_escaped_text` was written (the tables of
other programs may share the schema: those are not ours to rewrite)."""


_NEVER_ESCAPED = {("events", "payload")}
"""Text columns that cannot hold U+0001 as itself: a payload is JSON, which writes every control
character as an escape (`log.store`'s encoder), so the migration does not read the whole log."""


def escape_stored_text(conn: Connection[TupleRow]) -> None:
    """Migration `log.m003_escaped_text`: every text column of every room's table (a generated
    column is the server's own) put in the escaped form, whichever room owns it. Before it,
    text was stored as sent, each NUL replaced by U+FFFD:

    - Text holding ESCAPE is escaped (ESCAPE becomes ESCAPE `1`), so it reads back as it was
      sent. The update changes how a value is written, not the value, so each table's own
      triggers (the log's append-only ones, recall's) are off for it, in this transaction.
    - U+FFFD is left as it is, and reads back as U+FFFD: it may have been a NUL or U+FFFD when
      sent, and a text column does not say which. Where a room's rows are folded from the
      payloads (whose JSON kept the exact text), the room's own migration rebuilds what must
      not merge (`recall.m010_scopes_from_the_log`); the log's own columns (a session id, an
      event id) cannot be rebuilt and keep U+FFFD.
    """
    by_table: dict[str, list[str]] = {}
    for table_name, column_name in conn.execute(
        "SELECT c.table_name, c.column_name FROM information_schema.columns c"
        " JOIN information_schema.tables t"
        " ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
        " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
        " AND c.table_name = ANY(%s)"
        " AND c.data_type IN ('text', 'character varying') AND c.is_generated = 'NEVER'"
        " ORDER BY c.table_name, c.ordinal_position",
        (list(_TABLES_BEFORE_ESCAPING),),
    ):
        if (table_name, column_name) not in _NEVER_ESCAPED:
            by_table.setdefault(str(table_name), []).append(str(column_name))
    for name, names in by_table.items():
        table = sql.Identifier(name)
        columns = [sql.Identifier(n) for n in names]
        held = sql.SQL(" OR ").join(sql.SQL("strpos({}, chr(1)) > 0").format(c) for c in columns)
        row = conn.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {})").format(table, held)
        ).fetchone()
        if row is None or not row[0]:
            continue  # (one scan a table: most stores hold no ESCAPE anywhere)
        conn.execute(sql.SQL("ALTER TABLE {} DISABLE TRIGGER USER").format(table))
        for column in columns:
            # Row by row, longest first: PostgreSQL checks a unique key at each row, and an old
            # row may hold another's escaped form already (`x` U+0001 `1` beside `x` U+0001).
            # The escaped form is longer than its source, so the row holding it has moved on.
            conn.execute(
                sql.SQL(
                    "DO $$ DECLARE r record; BEGIN"
                    " FOR r IN SELECT ctid AS at FROM {table} WHERE strpos({column}, chr(1)) > 0"
                    " ORDER BY length({column}) DESC LOOP"
                    " UPDATE {table} SET {column} = replace({column}, chr(1), chr(1) || '1')"
                    " WHERE ctid = r.at; END LOOP; END $$"
                ).format(table=table, column=column)
            )
        conn.execute(sql.SQL("ALTER TABLE {} ENABLE TRIGGER USER").format(table))
