"""Moving Chronicle data between databases: sessions as JSONL, chronicle carry, online backups.

Invariants:
- An export is one JSON object per line. The first line is a header naming the format, its
  version and its kind ("events" or "sections"); every later line is one record. An import reads
  the header first and refuses anything else with a `FormatError` that names the line.
- Importing events is idempotent: each keeps its id, session and timestamp, and an event whose id
  is already in the log is skipped. It is all or nothing: one transaction, so a malformed line
  (not UTF-8, a NUL byte, not JSON, an event this build could not read back) stops the import
  with a `FormatError` naming the line, and nothing of the file is committed. Into an empty log
  (of either store) every event keeps its seq, gaps included (`restore`), so a whole-log export
  imported there reproduces the log exactly and sections carried after it cite the same
  messages; into a log that holds events already, new ones get new seqs in the file's order.
- Carrying a chronicle loads its sections as they were written, superseded ones included; the
  chronicle store's own checks refuse a carry that would fork it. Sections cite seq ranges of the
  log they were written from: carry them to a database holding that same log (a backup, a
  replica, another backend), not into an unrelated one.
- An export or a backup never writes through a symlink (a dangling one would create its target).
- A backup uses SQLite's online backup API from a reading connection: safe against a running
  writer, and it folds in the WAL. Copying a live WAL database file with `cp` is not.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from .chronicle.sections import Anchor, Section
from .errors import FormatError, UsageError
from .log.store import (
    PendingEvent,
    SQLiteEventStore,
    StoredEvent,
    pending_of,
    restored,
    sqlite_errors,
)
from .sessions.jsonl import FORMAT as SESSION_FORMAT

if TYPE_CHECKING:
    from .log.postgres import PostgresEventStore

__all__ = [
    "copy_log",
    "copy_sections",
    "FORMAT",
    "FORMAT_VERSION",
    "write_events",
    "read_events",
    "import_events",
    "write_sections",
    "read_sections",
    "backup",
    "header_of",
    "header_of_lines",
]

FORMAT = "chronicle-export"
_OTHER = (SESSION_FORMAT,)  # a session tree exported by the session tree itself
FORMAT_VERSION = 1
_BATCH = 500

Progress = Callable[[int], None]


def _header(kind: str, **extra: object) -> str:
    return json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "kind": kind, **extra})


def _int(value: object) -> int:
    """A whole number of a record (int() of what JSON holds; TypeError for a list or null)."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


def _mapping(value: object) -> dict[str, object]:
    """An object of a record (dict() of what JSON holds; TypeError for a number or null)."""
    if isinstance(value, dict | list | tuple):
        return dict(value)
    raise TypeError(f"expected an object, got {type(value).__name__}")


def _dump(record: Mapping[str, object]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


# -- events ----------------------------------------------------------------------------------


def write_events(
    events: Iterable[StoredEvent], out: IO[str], *, progress: Progress | None = None
) -> int:
    """Write events (envelope and payload) as JSONL. Returns how many were written."""
    out.write(_header("events") + "\n")
    written = 0
    for event in events:
        env = event.envelope
        out.write(
            _dump(
                {
                    "seq": env.seq,
                    "id": env.id,
                    "namespace": env.namespace,
                    "type": env.type,
                    "version": env.version,
                    "created_at": env.created_at,
                    "session": env.session,
                    "payload": event.payload,
                }
            )
            + "\n"
        )
        written += 1
        if progress is not None:
            progress(1)
    return written


def _text(line: str | bytes, number: int, source: str) -> str:
    """A line as text: UTF-8 without NUL bytes, or a FormatError that names it."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(
                f"{source}, line {number}: not UTF-8 (byte {exc.start + 1} of the line is "
                f"{line[exc.start : exc.start + 1]!r})"
            ) from None
    if "\x00" in line:
        raise FormatError(
            f"{source}, line {number}: holds a NUL byte (at character {line.index(chr(0)) + 1})"
        )
    return line


def _records(
    lines: Iterable[str | bytes], kind: str, source: str
) -> Iterator[tuple[int, dict[str, object]]]:
    number = 0
    header_seen = False
    for number, raw in enumerate(lines, start=1):  # noqa: B007 - reported after the loop
        line = _text(raw, number, source)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise FormatError(f"{source}, line {number}: not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise FormatError(f"{source}, line {number}: expected a JSON object")
        if not header_seen:
            if record.get("format") != FORMAT:
                raise FormatError(
                    f"{source}, line {number}: not a Chronicle export (the first line must be "
                    f'a header with "format": "{FORMAT}"); was it written by `chronicle export`?'
                )
            if record.get("version") != FORMAT_VERSION:
                raise FormatError(
                    f"{source}, line {number}: export format version {record.get('version')!r}"
                    f" is not supported (this Chronicle reads version {FORMAT_VERSION})"
                )
            if record.get("kind") != kind:
                raise FormatError(
                    f"{source}, line {number}: this file holds {record.get('kind')!r}, not {kind!r}"
                )
            header_seen = True
            continue
        yield number, record
    if not header_seen:
        raise FormatError(f"{source}: empty file, no Chronicle export header")


def read_events(
    lines: Iterable[str | bytes],
    *,
    source: str = "input",
    refusal: Callable[[PendingEvent], str | None] | None = None,
) -> Iterator[StoredEvent]:
    """Parse an events export back into the events it holds: their seqs in the log they were
    exported from, ids, sessions and times. `refusal` (`EventReader.refusal`) says why the log
    could not read an event back; such an event is a FormatError naming its line."""
    for number, r in _records(lines, "events", source):
        try:
            seq = _int(r["seq"])
            event = PendingEvent(
                namespace=str(r["namespace"]),
                type=str(r["type"]),
                version=_int(r["version"]),
                payload=_mapping(r["payload"]),
                id=str(r["id"]),
                session=None if r.get("session") is None else str(r["session"]),
                created_at=str(r["created_at"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{source}, line {number}: malformed event ({exc!r})") from None
        why = refusal(event) if refusal is not None else None
        if why is not None:
            raise FormatError(f"{source}, line {number}: {why}; nothing was imported")
        yield restored(seq, event)


def import_events(
    store: SQLiteEventStore | PostgresEventStore,
    events: Iterable[StoredEvent],
    *,
    progress: Progress | None = None,
    hold: Callable[[], AbstractContextManager[object]] | None = None,
) -> tuple[int, int]:
    """Store the events the log does not hold yet, all in one transaction (a FormatError
    from `events` midway commits nothing): at their own seqs into an empty log, else appended.
    `hold`: a write that other writers of the log's folds wait for, the import inside it (the
    session tree's `writing`: on PostgreSQL a tree write reads the fold's position before it
    appends, and a chat event imported in between would be passed over). Returns (read, newly
    stored)."""
    seen = stored = 0
    batch: list[StoredEvent] = []
    keep_seqs = store.last_seq() == 0

    def flush() -> None:
        nonlocal stored
        if keep_seqs:
            stored += len(store.restore(batch))
        else:
            stored += len(store.append_new([pending_of(e) for e in batch]))
        if progress is not None:
            progress(len(batch))
        batch.clear()

    with hold() if hold is not None else contextlib.nullcontext(), store.atomic():
        for event in events:
            seen += 1
            batch.append(event)
            if len(batch) >= _BATCH:
                flush()
        if batch:
            flush()
    return seen, stored


# -- chronicle carry ---------------------------------------------------------------------------


def _section_record(section: Section) -> dict[str, object]:
    return {
        "anchor": asdict(section.anchor),
        "prose": section.prose,
        "pins": list(section.pins),
        "created_at": section.created_at,
        "meta": section.meta,
    }


class _Exported(Protocol):
    """A chronicle on any store, as carrying it out reads it."""

    @property
    def name(self) -> str: ...
    def export(self) -> list[Section]: ...


def write_sections(chronicle: _Exported, out: IO[str]) -> int:
    """Carry out: every section of the chronicle, in the order written."""
    sections = chronicle.export()
    out.write(_header("sections", chronicle=chronicle.name) + "\n")
    for section in sections:
        out.write(_dump(_section_record(section)) + "\n")
    return len(sections)


def read_sections(lines: Iterable[str | bytes], *, source: str = "input") -> list[Section]:
    sections: list[Section] = []
    for number, r in _records(lines, "sections", source):
        try:
            a = r["anchor"]
            if not isinstance(a, dict):
                raise TypeError(f"the anchor is {type(a).__name__}, not an object")
            pins = r.get("pins") or ()
            if not isinstance(pins, Iterable):
                raise TypeError(f"the pins are {type(pins).__name__}, not a list")
            anchor = Anchor(
                section_id=str(a["section_id"]),
                from_seq=_int(a["from_seq"]),
                to_seq=_int(a["to_seq"]),
                unit=_int(a["unit"]),
                supersedes=None if a.get("supersedes") is None else str(a["supersedes"]),
            )
            sections.append(
                Section(
                    anchor=anchor,
                    prose=str(r["prose"]),
                    pins=tuple(str(p) for p in pins),
                    created_at=str(r.get("created_at") or ""),
                    meta=_mapping(r.get("meta") or {}),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{source}, line {number}: malformed section ({exc!r})") from None
    return sections


# -- moving a whole database to another store ---------------------------------------------------


def copy_log(
    source: SQLiteEventStore | PostgresEventStore,
    dest: SQLiteEventStore | PostgresEventStore,
    *,
    progress: Progress | None = None,
) -> tuple[int, int]:
    """Copy every event of `source` into `dest` at its own seq (gaps kept, payloads exactly),
    a batch per transaction, so a copy that was interrupted resumes where it stopped. `dest`
    must be empty or hold a beginning of this very log (the same ids at the same seqs): a log
    of its own would leave carried sections citing the wrong messages, so it is refused before
    anything is written. Returns (events `dest` already held, events copied)."""
    held = dest.last_seq()
    if held:
        theirs = dest.read()
        for ours in source.read(upto=held):
            other = next(theirs, None)
            if other is None or (other.seq, other.envelope.id) != (ours.seq, ours.envelope.id):
                raise UsageError(
                    "the destination already holds a log that is not the beginning of this one "
                    f"(at seq {ours.seq}); migrate into an empty database"
                )
        if next(theirs, None) is not None:
            raise UsageError(
                "the destination holds events past this log's end; migrate into an empty database"
            )
    already = dest.count() if held else 0
    copied = 0
    batch: list[StoredEvent] = []
    for event in source.read(after=held):
        batch.append(event)
        if len(batch) >= _BATCH:
            copied += len(dest.restore(batch))
            if progress is not None:
                progress(len(batch))
            batch.clear()
    if batch:
        copied += len(dest.restore(batch))
        if progress is not None:
            progress(len(batch))
    return already, copied


class _Loaded(_Exported, Protocol):
    """A chronicle on any store, as carrying it in and listing a database's chronicles see it."""

    def named(self, name: str) -> _Loaded: ...
    def chronicles(self) -> list[str]: ...
    def load(self, sections: Iterable[Section]) -> int: ...


def copy_sections(source: _Loaded, dest: _Loaded) -> dict[str, int]:
    """Carry every chronicle of `source`'s database into `dest`'s (which must hold the same log:
    `copy_log` first), superseded sections included; sections already there are skipped.
    Returns the sections newly written, by chronicle."""
    return {
        name: dest.named(name).load(source.named(name).export()) for name in source.chronicles()
    }


def header_of(path: Path) -> dict[str, object]:
    """The header line of an export file (to tell events from sections before importing)."""
    with path.open("rb") as fh:
        return header_of_lines(fh, str(path))


def header_of_lines(lines: Iterable[str | bytes], source: str = "input") -> dict[str, object]:
    for number, raw in enumerate(lines, start=1):
        line = _text(raw, number, source)
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise FormatError(f"{source}, line {number}: not JSON ({exc})") from None
            if not isinstance(record, dict) or record.get("format") not in (FORMAT, *_OTHER):
                raise FormatError(
                    f"{source}, line {number}: not a Chronicle export (no header with "
                    f'"format": "{FORMAT}"); was it written by `chronicle export`?'
                )
            return record
    raise FormatError(f"{source}: empty file, no Chronicle export header")


# -- backup ------------------------------------------------------------------------------------


def backup(
    store: SQLiteEventStore,
    dest: Path,
    *,
    pages_per_step: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """An online, consistent copy of the database at `dest` (which must not exist yet)."""
    if store.in_memory:
        raise UsageError("an in-memory store has no file to back up")
    dest = Path(dest)
    if dest.exists() or dest.is_symlink():
        raise UsageError(f"{dest} already exists; choose a new file name (backups never overwrite)")
    dest.parent.mkdir(parents=True, exist_ok=True)

    def step(status: int, remaining: int, total: int) -> None:
        if progress is not None:
            progress(total - remaining, total)

    target = sqlite3.connect(str(dest))
    try:
        with sqlite_errors(f"backing up to {dest}"), store.reading() as conn:
            conn.backup(target, pages=pages_per_step, progress=step)
        # The copy inherits WAL mode; fold it into one self-contained file.
        target.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        target.execute("PRAGMA journal_mode = DELETE")
    finally:
        target.close()
    return dest
