"""Text with NUL bytes on PostgreSQL: stored, not refused.

PostgreSQL's `text` cannot hold the byte 0 (psycopg refuses such a string before sending it,
and the whole statement with it), while Hermes may hand over a role, a name, a session id or a
message holding one, and SQLite stores them as they are. So every string a PostgreSQL store
sends has each NUL replaced by U+FFFD, the replacement character (`nul_safe`, a psycopg dumper
on each of the store's connections):

- The same in every statement: a value looked up (a session id, a role) finds what was stored,
  and a value read back and sent again stays the same (what the map returns holds no NUL, so
  the map leaves it as it is).
- The log keeps the exact text all the same: a payload is JSON, which writes NUL as `\\u0000`,
  so a captured message reads back from the log as Hermes sent it. What reads back from a text
  column (an event's session id, a search hit's text, a tree entry's role) holds U+FFFD where
  Hermes sent NUL; a string that held U+FFFD there already is not told apart from it.
- Nothing is read differently: the map costs a test of each string sent, and nothing on the
  many values a search or a fold reads.
"""

from __future__ import annotations

from psycopg import Connection
from psycopg.abc import Buffer
from psycopg.rows import TupleRow
from psycopg.types.string import StrDumperUnknown

__all__ = ["NUL_AS", "nul_safe", "storable"]

NUL_AS = "\ufffd"
"""What a NUL in a string becomes on PostgreSQL."""


def storable(text: str) -> str:
    """`text` as a PostgreSQL store keeps it: itself, each NUL replaced by U+FFFD."""
    return text.replace("\x00", NUL_AS) if "\x00" in text else text


class _NulSafeDumper(StrDumperUnknown):
    """psycopg's string dumper (text format, type left to the server), NUL replaced first."""

    def dump(self, obj: str) -> Buffer | None:
        # (psycopg's own dump, which encodes in the connection's encoding and refuses a NUL,
        # given the text with each NUL replaced: every string of every statement passes here)
        return super().dump(obj.replace("\x00", NUL_AS) if "\x00" in obj else obj)


def nul_safe(conn: Connection[TupleRow]) -> None:
    """Replace NUL in every string `conn` sends (see the module)."""
    conn.adapters.register_dumper(str, _NulSafeDumper)
