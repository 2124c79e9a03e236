"""Salvage: copy what can still be read from a damaged database into a working one.

When a database file is damaged, the slots move it aside (`opening.py`) and start a fresh one;
this module reads the old file and appends every event it can still decode to the new log,
keeping ids, sessions and timestamps, so a salvage run twice stores nothing twice.

SQLite refuses any query whose way to a row crosses a damaged page, and a garbage header or a
truncation damages the way to every row. So the file is not queried: its pages are walked one by
one (`pages.py`: every table-leaf page of the file, then of its -wal), and every row that has
the shape of an event is taken, in seq order. A page that is gone or overwritten loses the
events on it and nothing else. Derived tables (the session tree, the search index, sections) are
not copied: the folds rebuild them from the salvaged events; section prose is not carried (a
consolidation writes it again). The damaged file is never written. The readable events are held
in memory until they are appended (about their size in the file).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .pages import Cells, Value, leaf_rows
from .store import PendingEvent, SQLiteEventStore, read_payload

__all__ = ["Salvaged", "salvage", "as_event"]

_BATCH = 500


@dataclass
class Salvaged:
    read: int = 0  # events decoded from the damaged file
    stored: int = 0  # of those, new to the target log
    unreadable: int = 0  # cells of table pages that did not decode
    refused: int = 0  # events the target could not read back (unknown type, newer version)
    pages: int = 0  # pages walked (the file's and its -wal's)


def salvage(
    damaged: Path,
    into: SQLiteEventStore,
    refusal: Callable[[PendingEvent], str | None] | None = None,
) -> Salvaged:
    """Copy the readable events of `damaged` (read, never written) into `into`."""
    result = Salvaged()
    cells = Cells()
    found: dict[int, PendingEvent] = {}
    for _, seq, values in leaf_rows(damaged, cells):
        event = as_event(values)
        if event is not None:
            found[seq] = event  # a later copy (the WAL's) wins; an event is never rewritten
    result.unreadable = cells.bad_cells
    result.pages = cells.pages
    ordered = [found[seq] for seq in sorted(found)]
    for start in range(0, len(ordered), _BATCH):
        events: list[PendingEvent] = []
        for event in ordered[start : start + _BATCH]:
            if refusal is not None and refusal(event) is not None:
                result.refused += 1
                continue
            events.append(event)
        result.read += len(events)
        result.stored += len(into.append_new(events))
    return result


def as_event(values: list[Value]) -> PendingEvent | None:
    """The event a row of the events table holds (seq, the row id, is stored as NULL), or None
    for a row of another table."""
    if len(values) != 8 or values[0] is not None:
        return None
    _, event_id, namespace, type_, version, created_at, session, payload = values
    if not (
        isinstance(event_id, str)
        and isinstance(namespace, str)
        and isinstance(type_, str)
        and isinstance(version, int)
        and isinstance(created_at, str)
        and (session is None or isinstance(session, str))
        and isinstance(payload, str)
    ):
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        decoded = read_payload(data)
    except (KeyError, IndexError, TypeError):  # its shared-text map names what is not there
        return None
    return PendingEvent(
        namespace=namespace,
        type=type_,
        version=version,
        payload=decoded,
        id=event_id,
        session=session,
        created_at=created_at,
    )
