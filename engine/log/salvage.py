"""Salvage: copy what can still be read from a damaged database into a working one.

When a database file is damaged, the slots move it aside (`opening.py`) and start a fresh one;
this module reads the old file read-only and appends every event it can still decode to the new
log, keeping ids, sessions and timestamps, so a salvage run twice stores nothing twice. Derived
tables (the session tree, the search index, sections) are not copied: the folds rebuild them
from the salvaged events. Minimal by design: events only, no section prose (a consolidation
rewrites it), and a damaged page loses the events on it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .store import PendingEvent, SQLiteEventStore, read_payload

__all__ = ["Salvaged", "salvage"]

_CHUNK = 500
_GIVE_UP_AFTER = 100_000
"""Consecutive seqs that could not be read before the scan stops when the log's end is unknown."""


@dataclass
class Salvaged:
    read: int = 0  # events decoded from the damaged file
    stored: int = 0  # of those, new to the target log
    unreadable: int = 0  # seqs whose row could not be read or decoded
    refused: int = 0  # events the target could not read back (unknown type, newer version)


def salvage(
    damaged: Path,
    into: SQLiteEventStore,
    refusal: Callable[[PendingEvent], str | None] | None = None,
) -> Salvaged:
    """Copy the readable events of `damaged` (opened read-only, never written) into `into`."""
    result = Salvaged()
    conn = sqlite3.connect(f"file:{damaged}?mode=ro&immutable=1", uri=True)
    try:
        last = _last_seq(conn)
        cursor = 0
        misses = 0
        while (last is None and misses < _GIVE_UP_AFTER) or (last is not None and cursor < last):
            rows = _chunk(conn, cursor)
            if rows is None:  # the chunk's pages are damaged: row by row
                rows = []
                for seq in range(cursor + 1, cursor + _CHUNK + 1):
                    row = _row(conn, seq, result)
                    if row is not None:
                        rows.append(row)
                cursor += _CHUNK
            elif rows:
                last_read = rows[-1][0]
                cursor = last_read if isinstance(last_read, int) else cursor + _CHUNK
            else:
                break
            misses = 0 if rows else misses + _CHUNK
            events: list[PendingEvent] = []
            for row in rows:
                event = _event(row, result)
                if event is None:
                    continue
                if refusal is not None and refusal(event) is not None:
                    result.refused += 1
                    continue
                events.append(event)
            result.read += len(events)
            result.stored += len(into.append_new(events))
    finally:
        conn.close()
    return result


_SELECT = "SELECT seq, id, namespace, type, version, created_at, session, payload FROM events"


def _last_seq(conn: sqlite3.Connection) -> int | None:
    try:
        row = conn.execute("SELECT MAX(seq) FROM events").fetchone()
    except sqlite3.DatabaseError:
        return None
    return int(row[0] or 0)


def _chunk(conn: sqlite3.Connection, after: int) -> list[tuple[object, ...]] | None:
    try:
        return conn.execute(
            f"{_SELECT} WHERE seq > ? ORDER BY seq LIMIT ?", (after, _CHUNK)
        ).fetchall()
    except sqlite3.DatabaseError:
        return None


def _row(conn: sqlite3.Connection, seq: int, result: Salvaged) -> tuple[object, ...] | None:
    try:
        return conn.execute(f"{_SELECT} WHERE seq = ?", (seq,)).fetchone()
    except sqlite3.DatabaseError:
        result.unreadable += 1
        return None


def _event(row: tuple[object, ...], result: Salvaged) -> PendingEvent | None:
    try:
        _, event_id, namespace, type_, version, created_at, session, payload = row
        if not isinstance(payload, str) or not isinstance(version, int):
            raise ValueError("not an event row")
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise ValueError("payload is not an object")
        data = read_payload(data)
        return PendingEvent(
            namespace=str(namespace),
            type=str(type_),
            version=int(version),
            payload=data,
            id=str(event_id),
            session=None if session is None else str(session),
            created_at=str(created_at),
        )
    except (ValueError, TypeError):
        result.unreadable += 1
        return None
