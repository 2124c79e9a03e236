"""The SQLite event store: an append-only log with a monotonic `seq`.

Invariants:
- Events are only ever inserted. Triggers in the schema refuse UPDATE and DELETE on `events`, so
  not even a bug elsewhere in the process can rewrite history.
- Exactly one writer at a time per process: every write goes through `atomic()`, which holds a
  process-wide lock for the store and opens `BEGIN IMMEDIATE` (so another process waits on
  SQLite's own lock, bounded by `busy_timeout`). `database is locked` never escapes: it becomes
  `StoreBusy`, one of our own errors, and the caller decides to retry or degrade.
- A connection is only used by the thread that opened it. A file database gets one connection
  per thread; an in-memory database has a single connection and every access takes the lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeAlias, TypeVar

from ..errors import (
    AppendOnlyViolation,
    StoreBusy,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreReadOnly,
    UsageError,
)
from ..storable import escape_surrogates, escape_text, has_surrogate

__all__ = [
    "Row",
    "MAIN_THREAD_PATIENCE_MS",
    "Envelope",
    "StoredEvent",
    "PendingEvent",
    "Migration",
    "SQLiteEventStore",
    "sqlite_errors",
    "utc_now",
    "new_event_id",
    "run_script",
    "row_to_event",
    "read_payload",
    "stored_text_sql",
    "created_at_sql",
    "stored_texts",
    "register_payload_template",
    "EVENT_COLUMNS",
    "RARE_NAMESPACES",
    "storable",
    "read_pages",
    "pending_of",
    "restorable",
    "restored",
    "Payload",
]

SYNCHRONOUS = "NORMAL"
"""WAL + synchronous=NORMAL: a commit survives a crash of the process; a power loss or OS crash
may lose the last transactions committed since the previous checkpoint, never corrupt the file."""

MAIN_THREAD_PATIENCE_MS = 400
"""How long a call on Hermes' main thread (compress, a tool) waits for a lock before it degrades:
compress returns its input, a tool says the store is busy. The busy timeout is for background
hooks, which may wait."""

_PAGE = 2000
_CHUNK = 500  # ids or seqs per `IN (...)` list: under SQLite's default variable limit
# Pages of WAL before SQLite checkpoints on its own (default 1000). A checkpoint fsyncs the database
# file, so a larger interval keeps appends fast; maintenance and shutdown checkpoint explicitly.
WAL_AUTOCHECKPOINT_PAGES = 10_000
# Page cache of each connection, in KiB (SQLite's default is 2 MB). A search at a million messages
# reads a page of bm25's document sizes for every match it scores (a 12 MB table, read at random)
# beside the index, the rows and their neighbours: with 2 MB nearly every one is a pread again
# (about 700 a search, a third of its CPU time in the kernel), with 32 MB most stay cached. The
# cache fills only as pages are read: a small store never uses it all.
PAGE_CACHE_KIB = 32_768
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# raw_decode skips decode()'s two whitespace regexes; payloads are written without any.
_raw_decode = json.JSONDecoder().raw_decode


class _MakeEncoder(Protocol):
    """`json.encoder.c_make_encoder`'s signature, as CPython 3.11 to 3.13 have it."""

    def __call__(
        self,
        markers: dict[int, object] | None,
        default: Callable[[object], object],
        encoder: Callable[[str], str],
        indent: None,
        key_separator: str,
        item_separator: str,
        sort_keys: bool,
        skipkeys: bool,
        allow_nan: bool,
        /,
    ) -> Callable[[object, int], Iterable[str]]: ...


def _json_encoder(make: _MakeEncoder | None = None) -> Callable[[object], str]:
    """`_ENCODER.encode`, calling the C encoder it builds (`make`: json's own) directly: the
    same text, without `encode` and `iterencode`'s Python frames (every append encodes each
    payload here)."""
    make = make or getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    default = _ENCODER.default
    text = json.encoder.encode_basestring
    join = "".join

    def encode(value: object) -> str:
        # A fresh markers dict per call, as `iterencode` makes: it catches circular containers.
        return join(make({}, default, text, None, ":", ",", False, False, True)(value, 0))

    # `c_make_encoder` is CPython's private API: if its arguments ever change, the public
    # encoder is used instead of a different text (checked once, on a sample of every kind).
    sample = {"a": [1, -2.5, float("nan"), True, None, 'é\n"\ud800'], "": {"b": []}}
    try:
        same = encode(sample) == _ENCODER.encode(sample)
    except Exception:  # noqa: BLE001 - any failure means: not the same encoder
        same = False
    return encode if same else _ENCODER.encode


_encode = _json_encoder()


_SAME = "@same"
"""Key of a stored payload naming the fields stored once: each field's value was a copy of an
earlier string of the same payload (a captured message's searchable text is usually its content
verbatim), so the row holds null in its place and this key maps it to the path of the original.
No event model has a field of this name (their extra fields are forbidden)."""
_SHORTEST_SHARED = 24


_TEMPLATE = "@t"
"""Key of a stored payload naming the template it was written with (`register_payload_template`):
the fields left out of the row hold the template's defaults."""


@dataclass(frozen=True, slots=True)
class _Template:
    """How a stored row's left-out fields are filled back in as it is read."""

    tag: int
    filled: dict[str, object]  # every field in the event's order, a left-out field's default
    defaults: dict[str, object]  # the fields a row may leave out, and their values
    mutable: tuple[str, ...]  # defaults that are lists or dicts: each read gets its own
    copies: dict[str, tuple[str, ...]]  # field -> the path of the text it defaults to


_TEMPLATES: dict[int, _Template] = {}
_TEMPLATE_OF: dict[tuple[str, str, int], _Template] = {}
_TEMPLATED_TYPES: set[str] = set()  # the type names of _TEMPLATE_OF: a cheaper first question


def register_payload_template(
    namespace: str,
    type_: str,
    version: int,
    *,
    tag: int,
    fields: Sequence[str],
    defaults: Mapping[str, object],
    copies: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """Store payloads of this event type without the fields that hold their default: a row
    keeps `{"@t": tag}` instead (a captured message leaves out ten fields of nulls, empty lists
    and "primary", about a third of its row). A field of `copies` defaults to the text at its
    path instead (a message's searchable text is usually its content): it is left out when it
    equals that text, and stored otherwise. A tag is part of the stored format: rows written
    with it are read with it forever, so a changed field list or default takes a new tag, and
    the old one stays registered for the rows that have it. `fields`: every field, in the
    order the payload is read back in."""
    copies = dict(copies or {})
    plain = {k: v for k, v in defaults.items() if k not in copies}
    template = _Template(
        tag,
        {key: defaults.get(key) for key in fields},
        plain,
        tuple(k for k, v in plain.items() if isinstance(v, (list, dict))),
        copies,
    )
    known = _TEMPLATES.get(tag)
    if known is not None and known != template:
        raise UsageError(f"payload template {tag} is already registered with other fields")
    _TEMPLATES[tag] = template
    _TEMPLATE_OF[(namespace, type_, version)] = template
    _TEMPLATED_TYPES.add(type_)


def _text_at(payload: Mapping[str, object], path: Sequence[str]) -> str | None:
    value: object = payload
    for step in path:
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value if isinstance(value, str) else None


def _stored_payload(
    payload: dict[str, object], template: _Template | None = None
) -> dict[str, object]:
    """The payload as the row holds it: each top-level string that repeats an earlier string of
    the payload (top-level, or one level down, as a message's content) is stored once, and
    with a template, a field holding its default is left out."""
    if _SAME in payload or _TEMPLATE in payload:
        raise UsageError(
            f"a payload may not have a field named {_SAME!r} or {_TEMPLATE!r}; they mark"
            " shared text and left-out defaults"
        )
    if template is None:
        # Without a template only shared text changes the row, and with no dict among the
        # values a top-level text can only repeat another top-level one: the usual payload
        # (no dict, no long text twice) is stored as it is, without the bookkeeping below.
        longs: list[str] = []
        for value in payload.values():
            if isinstance(value, str):
                if len(value) >= _SHORTEST_SHARED:
                    longs.append(value)
            elif isinstance(value, dict):
                break
        else:
            if len(longs) < 2 or len(set(longs)) == len(longs):
                return payload
    if template is not None:
        return _templated(payload, template)
    seen: dict[str, list[str]] = {}
    same: dict[str, list[str]] = {}
    for key, value in payload.items():
        if isinstance(value, str):
            if len(value) >= _SHORTEST_SHARED:
                if value in seen:
                    same[key] = seen[value]
                else:
                    seen[value] = [key]
        elif isinstance(value, dict):
            for inner, text in value.items():
                if isinstance(text, str) and len(text) >= _SHORTEST_SHARED:
                    seen.setdefault(text, [key, inner])
    if not same:
        return payload
    stored = {key: None if key in same else value for key, value in payload.items()}
    stored[_SAME] = same
    return stored


def _templated(payload: dict[str, object], template: _Template) -> dict[str, object]:
    """`_stored_payload` with a template, in one pass over the payload (every captured message
    is stored through here): a field is left out when it is a copy of its template path, a
    repeat of an earlier long text (`@same`), or its default."""
    copies = template.copies
    defaults = template.defaults
    shortest = _SHORTEST_SHARED
    copied = {
        key
        for key, path in copies.items()
        if key in payload and payload[key] == _text_at(payload, path)
    }
    stored: dict[str, object] = {}
    seen: dict[str, list[str]] = {}
    same: dict[str, list[str]] = {}
    for key, value in payload.items():
        if key in copied:
            continue
        if isinstance(value, str):
            if len(value) >= shortest:
                if value in seen:
                    same[key] = seen[value]
                    continue
                seen[value] = [key]
        elif isinstance(value, dict):
            for inner, text in value.items():
                if isinstance(text, str) and len(text) >= shortest:
                    seen.setdefault(text, [key, inner])
        if key in defaults:
            default = defaults[key]
            if type(value) is type(default) and value == default:
                continue
        stored[key] = value
    stored[_TEMPLATE] = template.tag
    if same:
        stored[_SAME] = same
    return stored


def stored_text_sql(seq: str, field: str, fallback: Sequence[str]) -> str:
    """A question to the log, as SQL for another room's view or statement (SQLite): the text of
    payload field `field` of the event whose seq is the SQL expression `seq`, as its row holds
    it: the field, or where the row leaves it out (a template's copy, or an older row's shared
    text, stored as null) the text at path `fallback`. NULL when there is neither. A field left
    out as a copy of another path, or a non-text value there, reads differently: a caller that
    relies on it compares with the text it expects first (recall does, at fold time)."""
    return (
        f"(SELECT COALESCE(json_extract(e.payload, '$.{field}'),"
        f" json_extract(e.payload, '$.{'.'.join(fallback)}'))"
        f" FROM events e WHERE e.seq = {seq})"
    )


def created_at_sql(seq: str) -> str:
    """The time an event was appended (`created_at`), by the SQL expression `seq` (SQLite)."""
    return f"(SELECT e.created_at FROM events e WHERE e.seq = {seq})"


class _Reads(Protocol):
    """A connection of either kind, as far as `stored_texts` uses it (log.tables.SQLConnection)."""

    def execute(self, sql: str, params: Sequence[object] = ..., /) -> Iterable[Row]: ...


def stored_texts(
    conn: _Reads, seqs: Iterable[int], field: str, fallback: Sequence[str]
) -> dict[int, tuple[str, str]]:
    """seq -> (text, created_at) of each of `seqs` the log holds (`stored_text_sql`; a text that
    is not there reads ''), by seq, one query per 500."""
    wanted = list(seqs)
    out: dict[int, tuple[str, str]] = {}
    for i in range(0, len(wanted), _CHUNK):
        chunk = wanted[i : i + _CHUNK]
        path = "$." + ".".join(fallback)
        for seq, text, at in conn.execute(
            f"SELECT seq, COALESCE(json_extract(payload, '$.{field}'),"
            f" json_extract(payload, '{path}')), created_at"
            f" FROM events WHERE seq IN ({','.join('?' * len(chunk))})",
            chunk,
        ):
            out[int(seq)] = (text if isinstance(text, str) else "", str(at))
    return out


def read_payload(stored: dict[str, object]) -> dict[str, object]:
    """The payload a row holds, as it was appended (left-out defaults and shared text put back
    in their fields). A row of a template this process has not registered raises KeyError."""
    tag = stored.pop(_TEMPLATE, None)
    if tag is not None:
        if not isinstance(tag, int) or tag not in _TEMPLATES:
            raise KeyError(f"payload template {tag!r} is not registered in this process")
        template = _TEMPLATES[tag]
        filled = template.filled.copy()
        filled.update(stored)
        for key in template.mutable:
            if key not in stored:
                default = template.defaults[key]  # a list or a dict: each read gets its own
                if isinstance(default, list):
                    filled[key] = list(default)
                elif isinstance(default, dict):
                    filled[key] = dict(default)
        for key, path in template.copies.items():
            if key not in stored:
                filled[key] = _text_at(filled, path)
        stored = filled
    same = stored.pop(_SAME, None)
    if not isinstance(same, dict):
        return stored
    for key, path in same.items():
        value: object = stored
        for step in path:
            if not isinstance(value, dict):
                raise TypeError(f"the shared text of {key!r} points into a {type(value).__name__}")
            value = value[step]
        stored[key] = value
    return stored


def new_event_id() -> str:
    """A 32-hex event id that sorts by creation time (microseconds, then 72 random bits), so the
    UNIQUE index on `events.id` grows at its right edge instead of at random pages: appends in
    batches run about 1.8x faster than with uuid4 ids (bench/log_throughput.py)."""
    return f"{time.time_ns() // 1000:014x}{os.urandom(9).hex()}"  # secrets.token_hex's bytes


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Envelope(NamedTuple):
    """Where an event sits in the log and what it is, readable without decoding its payload."""

    seq: int
    id: str
    namespace: str
    type: str
    version: int
    created_at: str
    session: str | None


Payload: TypeAlias = dict[str, object]
"""An event's payload as plain JSON data; a reader narrows each field it takes (isinstance)."""

EventRow: TypeAlias = tuple[int, str, str, str, int, str, str | None, str]
"""A row of `events` selected as EVENT_COLUMNS: the envelope's fields, then the payload's JSON."""


class StoredEvent(NamedTuple):
    """One row of the log: the envelope and the payload as plain JSON data.

    (Envelope and StoredEvent are NamedTuples because a fold reads hundreds of thousands of them a
    second; a frozen dataclass costs several times more to build.)"""

    envelope: Envelope
    payload: Payload

    @property
    def seq(self) -> int:
        return self.envelope.seq


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """An event on its way into the log (no seq yet)."""

    namespace: str
    type: str
    version: int
    payload: dict[str, object]
    id: str = field(default_factory=new_event_id)
    session: str | None = None
    created_at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True)
class Migration:
    """A named schema step. Names are unique across the whole database ("log.m001_events")."""

    name: str
    apply: Callable[[sqlite3.Connection], None]


RARE_NAMESPACES = ("chronicle.context", "chronicle.host", "chronicle.session")
"""Namespaces read a conversation at a time among its messages: compaction's context events, what
the host told the memory slot, the session tree's own events (their rooms name them; a test holds
these to theirs). Few rows each; the partial index below holds only them, so an append of a
message, or of any other event, pays for no entry in it (PostgreSQL's store has its twin,
`log.m004_rare_by_session`)."""

_RARE = "(" + " OR ".join(f"namespace = '{n}'" for n in RARE_NAMESPACES) + ")"
"""The partial index's own term: SQLite uses such an index only for a query whose WHERE holds
it, so a read of these namespaces names it too (true of every row it reads). Equalities joined
by OR, not `namespace IN (...)`: every append evaluates it, and SQLite builds a constant IN
list's lookup table again at each row (`bench/append_index.py`: +30k instructions an event
against +1.4k for the ORs; a full index +6.7k)."""

_LATER_INDEXES: tuple[tuple[str, str], ...] = (
    # A conversation's rare events (compaction's context events, the session tree's switches)
    # found among its chat rows by the index alone: the rows read grow with what the read
    # returns, not with the session's length. Partial: a full index on (session, namespace,
    # seq) cost every append an entry (bench/append_index.py).
    ("events_rare_by_session", f"ON events(session, namespace, seq) WHERE {_RARE}"),
)
"""Indexes of the events table added after stores already existed. A new store gets them with
its schema; an older one, or one holding an earlier definition of one of them, when a build of
this age first opens it writable (once, holding the write lock). They are not migrations:
nothing is recorded, so an older build still opens the store (it keeps them up to date
unknowingly) and a read-only open skips them (every read answers the same without them, only
slower)."""

_LATER_INDEX_SQL = "\n".join(
    f"CREATE INDEX IF NOT EXISTS {name} {on};" for name, on in _LATER_INDEXES
)

_EVENT_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE,
    namespace  TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    created_at TEXT    NOT NULL,
    session    TEXT,
    payload    TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON events(session, seq);
CREATE INDEX IF NOT EXISTS events_by_type ON events(namespace, type, seq);
{_LATER_INDEX_SQL}
CREATE TRIGGER IF NOT EXISTS events_never_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'chronicle: events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_never_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'chronicle: events are append-only'); END;
CREATE TABLE IF NOT EXISTS fold_positions (
    fold     TEXT PRIMARY KEY,
    position INTEGER NOT NULL
);
"""


def _m001_events(conn: sqlite3.Connection) -> None:
    run_script(conn, _EVENT_SCHEMA)


def run_script(conn: sqlite3.Connection, script: str) -> None:
    # executescript() would COMMIT the open transaction; run statement by statement instead.
    for statement in _split_sql(script):
        conn.execute(statement)


def _split_sql(script: str) -> list[str]:
    statements: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                statements.append(buf.strip())
            buf = ""
    if buf.strip():
        statements.append(buf.strip())
    return statements


LOG_MIGRATIONS: tuple[Migration, ...] = (Migration("log.m001_events", _m001_events),)

LOG_RETIRED_MIGRATIONS: tuple[str, ...] = ("log.m002_events_by_session_namespace",)
"""Names a build recorded for a step this build does without (the index below, briefly a
migration): a store that holds them opens as any other."""

_DROPPED_INDEXES: tuple[str, ...] = ("events_by_session_namespace",)
"""Indexes a build of this age drops where it finds them at a writable open: the full
(session, namespace, seq) index 37d6c0f and 82c8ad1 built, replaced by the partial one above."""


_LOCKED = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


_BY_MESSAGE = (
    (("locked", "busy"), sqlite3.SQLITE_BUSY),
    (("disk is full", "disk I/O error"), sqlite3.SQLITE_FULL),
    (("readonly", "read-only"), sqlite3.SQLITE_READONLY),
    (("unable to open",), sqlite3.SQLITE_CANTOPEN),
    (("malformed",), sqlite3.SQLITE_CORRUPT),
    (("not a database",), sqlite3.SQLITE_NOTADB),
)


def _primary_code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code of `exc` (the extended code's low byte). An error that
    carries none (raised by Python code standing in for SQLite) is read by its message."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF
    message = str(exc)
    for words, by_words in _BY_MESSAGE:
        if any(word in message for word in words):
            return by_words
    return None


@contextlib.contextmanager
def sqlite_errors(what: str) -> Iterator[None]:
    """The one place that turns `sqlite3` errors into Chronicle's own."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        message = str(exc)
        code = _primary_code(exc)
        if code in _LOCKED:
            raise StoreBusy(
                f"{what}: the database stayed locked by another writer; retry later"
            ) from exc
        if code in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
            raise StoreFull(
                f"{what}: the disk refused the write ({message}); free space where "
                "chronicle.db_path points"
            ) from exc
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN):
            raise StoreReadOnly(
                f"{what}: the database is not writable ({message}); make the file and its "
                "directory writable, or point chronicle.db_path at a writable copy"
            ) from exc
        raise StoreError(f"{what}: {message}") from exc
    except sqlite3.IntegrityError as exc:
        if "append-only" in str(exc):
            raise AppendOnlyViolation(f"{what}: {exc}") from exc
        raise StoreError(f"{what}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        if _primary_code(exc) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            raise StoreCorrupt(f"{what}: the database file is damaged ({exc})") from exc
        raise StoreError(f"{what}: {exc}") from exc


class _Closable(Protocol):
    def close(self) -> None: ...


_Conn = TypeVar("_Conn", bound=_Closable)


def kept_alive(
    connections: list[tuple[threading.Thread | None, _Conn]], errors: type[Exception]
) -> list[tuple[threading.Thread | None, _Conn]]:
    """`connections` without those whose thread has ended, which are closed. Hermes runs a
    memory provider's prefetch on a new thread every turn, and each thread's first use opens a
    connection: kept until shutdown, a long chat held one open file (or, on PostgreSQL, one
    server backend) and one page cache for every turn it had. Sweeping at each open keeps them
    to the threads alive, plus the ones ended since the last open."""
    kept = []
    for owner, conn in connections:
        if owner is None or owner.is_alive():
            kept.append((owner, conn))
        else:
            with contextlib.suppress(errors):
                conn.close()
    return kept


class _ThreadState(threading.local):
    """One thread's connection and lock patience. Unset, each reads None from the class: a
    getattr with a default would raise and format an AttributeError first, twice an append."""

    conn: sqlite3.Connection | None = None
    budget_ms: int | None = None


class SQLiteEventStore:
    """The append-only log in one SQLite database (a file in WAL mode, or `":memory:"`)."""

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        busy_timeout_ms: int = 5000,
        migrations: Sequence[Migration] = (),
    ) -> None:
        self.path = str(path)
        self.in_memory = self.path == ":memory:" or self.path.startswith("file::memory:")
        self.busy_timeout_ms = busy_timeout_ms
        self._write_lock = threading.RLock()
        self._local = _ThreadState()
        # every connection opened, with the thread it serves (None: the in-memory shared one)
        self._connections: list[tuple[threading.Thread | None, sqlite3.Connection]] = []
        self._connections_lock = threading.Lock()
        self._depth = 0  # savepoint nesting of the thread holding the write lock
        self._shared: sqlite3.Connection | None = None
        self._closed = False
        # namespaces -> (lo, hi): the log holds none of their events in (lo, hi] (`any_after`)
        self._none_between: dict[tuple[str, ...], tuple[int, int]] = {}
        self.uri = self.path.startswith("file:")
        if not self.in_memory and not self.uri:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.migrate(LOG_MIGRATIONS)
        self._build_later_indexes()
        if migrations:
            self.migrate(migrations)

    # -- connections -----------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        with sqlite_errors(f"opening {self.path}"):
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,  # closed from shutdown(); otherwise used by its owner only
                uri=self.uri,
                timeout=self.busy_timeout_ms / 1000,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            if not self.in_memory:
                mode = self._patiently(conn, "PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(f"could not put {self.path} in WAL mode (got {mode})")
                conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
                conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        owner = None if self.in_memory else threading.current_thread()
        with self._connections_lock:
            self._connections = kept_alive(self._connections, sqlite3.Error)
            self._connections.append((owner, conn))
        return conn

    @property
    def connection(self) -> sqlite3.Connection:
        """This thread's connection (the single shared one for an in-memory store)."""
        if self._closed:
            raise StoreError(f"the store at {self.path} is closed; open a new one")
        if self.in_memory:
            if self._shared is None:
                with self._write_lock:
                    if self._shared is None:
                        self._shared = self._open()
            return self._shared
        conn = self._local.conn
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A connection to read from. In memory, reads take the lock too (one shared connection)."""
        if self.in_memory:
            with self._write_lock:
                yield self.connection
        else:
            yield self.connection

    @contextlib.contextmanager
    def patience(self, budget_ms: int) -> Iterator[None]:
        """Within the block, this thread waits at most `budget_ms` for a lock, SQLite's or this
        process's write lock, then gets StoreBusy: for calls on Hermes' main thread (compress,
        tools), which must degrade quickly rather than hold the turn for the busy timeout."""
        previous = self._local.budget_ms
        budget = int(budget_ms if previous is None else min(previous, budget_ms))
        self._local.budget_ms = budget
        conn = None if self.in_memory else self.connection
        if conn is not None:
            conn.execute(f"PRAGMA busy_timeout = {budget}")
        try:
            yield
        finally:
            self._local.budget_ms = previous
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute(f"PRAGMA busy_timeout = {previous or self.busy_timeout_ms}")

    def _wait_ms(self) -> int:
        budget = self._local.budget_ms
        return self.busy_timeout_ms if budget is None else budget

    @contextlib.contextmanager
    def atomic(self) -> Iterator[sqlite3.Connection]:
        """One transaction; nested calls become savepoints. The only way anything writes."""
        # The process's write lock, waited for as long as this thread's patience allows (taken
        # here rather than through a nested context manager: every append passes this way).
        # Positional arguments: a C function called with keywords builds a dict and a string
        # per keyword on each call.
        budget = self._local.budget_ms
        if not self._write_lock.acquire(True, -1 if budget is None else budget / 1000):
            raise StoreBusy(
                f"another thread of this process held {self.path}'s write lock for more than "
                f"{budget} ms; retry later"
            )
        try:
            conn = self.connection
            if self._depth == 0:
                self._begin(conn)
                self._depth = 1
                try:
                    yield conn
                except BaseException:
                    self._depth = 0
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
                else:
                    self._depth = 0
                    try:
                        with sqlite_errors("committing"):
                            conn.execute("COMMIT")
                    except BaseException:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                        raise
            else:
                name = f"sp{self._depth}"
                conn.execute(f"SAVEPOINT {name}")
                self._depth += 1
                try:
                    yield conn
                except BaseException as exc:
                    self._depth -= 1
                    if conn.in_transaction:
                        conn.execute(f"ROLLBACK TO {name}")
                        conn.execute(f"RELEASE {name}")
                        raise
                    # A full disk or an I/O error makes SQLite roll the whole transaction back
                    # itself: no savepoint is left, and the transaction this one nests in is
                    # gone too. The error goes up as the store's own (StoreFull, ...), which a
                    # caller that catches a failed savepoint to go on does not catch, so the
                    # outermost level reports it and capture spills the write.
                    if isinstance(exc, sqlite3.Error):
                        with sqlite_errors("writing"):
                            raise
                    raise
                else:
                    self._depth -= 1
                    conn.execute(f"RELEASE {name}")
        finally:
            self._write_lock.release()

    @property
    def depth(self) -> int:
        """How deeply the thread holding the write lock is nested in `atomic()` (1: the outermost
        transaction, whose end is the commit). Meaningful only to that thread."""
        return self._depth

    def _begin(self, conn: sqlite3.Connection) -> None:
        try:
            self._patiently(conn, "BEGIN IMMEDIATE")
        except sqlite3.Error:
            with sqlite_errors("starting a write"):
                raise

    def _patiently(self, conn: sqlite3.Connection, statement: str) -> sqlite3.Cursor:
        """Run `statement`, waiting out a lock SQLite refuses at once instead of waiting in its
        busy handler, for as long as this thread's patience allows: the deadlock-avoidance
        SQLITE_BUSY on BEGIN IMMEDIATE, and the switch of a new file to WAL mode, which needs
        the whole database, while another connection opens it (two hosts starting on a new
        store). Any other error, or a lock that outlasts the patience, is raised."""
        deadline = time.monotonic() + self._wait_ms() / 1000
        delay = 0.002
        while True:
            try:
                return conn.execute(statement)
            except sqlite3.OperationalError as exc:
                if _primary_code(exc) not in _LOCKED:
                    raise
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    # -- schema ----------------------------------------------------------------------------

    def migrate(self, migrations: Iterable[Migration]) -> list[str]:
        """Apply the migrations not yet recorded, each atomically with its record. Returns names.

        A store whose migrations are all recorded is not written to at all, so a database opens
        while another process holds its write lock, or when it is read-only."""
        migrations = list(migrations)
        if not self._pending(migrations):
            return []
        applied: list[str] = []
        with sqlite_errors("migrating the schema"), self.atomic() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
            for migration in migrations:
                if migration.name in done:
                    continue
                with self.atomic() as inner:
                    migration.apply(inner)
                    inner.execute(
                        "INSERT INTO migrations(name, applied_at) VALUES (?, ?)",
                        (migration.name, utc_now()),
                    )
                applied.append(migration.name)
        return applied

    def _build_later_indexes(self) -> None:
        """Build the `_LATER_INDEXES` an older store lacks, if it can be written now."""
        with sqlite_errors("reading the schema"), self.reading() as conn:
            have = {
                str(row[0]): str(row[1] or "")
                for row in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'")
            }
        # (SQLite keeps an index's CREATE text as written: one written otherwise is older)
        missing = [(name, on) for name, on in _LATER_INDEXES if not have.get(name, "").endswith(on)]
        dropped = [name for name in _DROPPED_INDEXES if name in have]
        dropped += [name for name, _ in missing if name in have]
        if not missing and not dropped:
            return
        try:
            with sqlite_errors("indexing the log"), self.atomic() as conn:
                for name in dropped:
                    conn.execute(f"DROP INDEX IF EXISTS {name}")
                for name, on in missing:
                    conn.execute(f"CREATE INDEX IF NOT EXISTS {name} {on}")
        except (StoreReadOnly, StoreBusy):
            return  # read-only, or another writer holds the log: a later open builds them

    def migrated(self) -> set[str]:
        """The names of the migrations recorded in this database (by this build or another)."""
        with sqlite_errors("reading the schema"), self.reading() as conn:
            return {str(row[0]) for row in conn.execute("SELECT name FROM migrations")}

    def _pending(self, migrations: Sequence[Migration]) -> bool:
        """Whether any of `migrations` is not recorded yet (read without taking the write lock)."""
        if not migrations:
            return False
        with sqlite_errors("reading the schema"), self.reading() as conn:
            known = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'"
            ).fetchone()
            if known is None:
                return True
            done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
        return any(m.name not in done for m in migrations)

    # -- the log ---------------------------------------------------------------------------

    def append(self, events: Sequence[PendingEvent], *, guarded: bool = True) -> list[StoredEvent]:
        """Append events in one transaction and return them as stored, in order. Inside a
        caller's transaction the append is a savepoint, so a refused batch leaves the caller's
        work; `guarded=False` leaves it out (two statements fewer) for a caller whose
        transaction ends with the refusal anyway (the session tree's write, as on PostgreSQL)."""
        if not events:
            return []
        events, texts = storable(events)
        # By index, not zip(strict=True): a keyword argument costs a C call a dict and a string.
        rows = [
            (e.id, e.namespace, e.type, e.version, e.created_at, e.session, texts[i])
            for i, e in enumerate(events)
        ]
        conn = self.connection
        if not guarded and not self.in_memory and conn.in_transaction:
            # This thread's own connection is in a transaction: its own, under the write lock.
            with sqlite_errors("appending events"):
                last = _insert_events(conn, rows)
        else:
            with sqlite_errors("appending events"), self.atomic() as conn:
                last = _insert_events(conn, rows)
        # Under the write lock the rows of one executemany get consecutive rowids.
        first = last - len(events) + 1
        return [
            StoredEvent(
                Envelope(first + i, e.id, e.namespace, e.type, e.version, e.created_at, e.session),
                e.payload,
            )
            for i, e in enumerate(events)
        ]

    def append_new(self, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        """Append the events whose id is not in the log yet (idempotent capture). One transaction."""
        if not events:
            return []
        stored: list[StoredEvent] = []
        events, texts = storable(events)
        with sqlite_errors("appending events"), self.atomic() as conn:
            for i, e in enumerate(events):
                cur = conn.execute(
                    "INSERT OR IGNORE INTO events(id, namespace, type, version, created_at, session, payload)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (e.id, e.namespace, e.type, e.version, e.created_at, e.session, texts[i]),
                )
                if cur.rowcount == 1:
                    seq = cur.lastrowid
                    assert seq is not None
                    stored.append(
                        StoredEvent(
                            Envelope(
                                seq, e.id, e.namespace, e.type, e.version, e.created_at, e.session
                            ),
                            e.payload,
                        )
                    )
        return stored

    def restore(self, events: Sequence[StoredEvent]) -> list[StoredEvent]:
        """Store exported events at the seqs they had in the log they came from, in one
        transaction, so sections citing seq ranges stay true after a whole-log import (plain
        appends would close the gaps `append_new` leaves). An id the log holds is skipped; the
        rest must rise above the log's last seq, else UsageError and nothing is stored."""
        with sqlite_errors("restoring events"), self.atomic() as conn:
            last = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])
            fresh = restorable(events, self.seqs_of(e.envelope.id for e in events), last)
            pending, texts = storable([pending_of(e) for e in fresh])
            conn.executemany(
                "INSERT INTO events(seq, id, namespace, type, version, created_at, session,"
                " payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (src.seq, e.id, e.namespace, e.type, e.version, e.created_at, e.session, t)
                    for src, e, t in zip(fresh, pending, texts, strict=True)
                ],
            )
        return [restored(src.seq, e) for src, e in zip(fresh, pending, strict=True)]

    def read(
        self,
        *,
        after: int = 0,
        upto: int | None = None,
        session: str | None = None,
        sessions: Sequence[str] | None = None,
        namespaces: Sequence[str] | None = None,
        limit: int | None = None,
        by_seq: bool = False,
    ) -> Iterator[StoredEvent]:
        """Events with `after < seq <= upto`, in seq order, read a page at a time.

        With `by_seq`, `namespaces` is tested on each row of the seq range instead of looked up
        in the (namespace, type) index: the right plan when those namespaces fill most of the
        range (a fold catching up), the wrong one for a rare namespace read from the start."""
        where = ["seq > ?"]
        params: list[str | int] = []
        if upto is not None:
            where.append("seq <= ?")
            params.append(upto)
        if session is not None:
            where.append("session = ?")
            params.append(session)
        if sessions is not None:
            if not sessions:
                return
            where.append(f"session IN ({','.join('?' * len(sessions))})")
            params.extend(sessions)
        if namespaces is not None:
            if not namespaces:
                return
            column = "+namespace" if by_seq else "namespace"  # `+`: no index on it
            where.append(f"{column} IN ({','.join('?' * len(namespaces))})")
            params.extend(namespaces)
            if not by_seq and all(n in RARE_NAMESPACES for n in namespaces):
                where.append(_RARE)  # (true of every row read: lets the partial index serve)
        sql = (
            "SELECT seq, id, namespace, type, version, created_at, session, payload FROM events"
            f" WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?"
        )

        def fetch(cursor: int, page: int) -> list[EventRow]:
            with sqlite_errors("reading events"), self.reading() as conn:
                return conn.execute(sql, (cursor, *params, page)).fetchall()

        yield from read_pages(fetch, after, limit)

    def get(self, seq: int) -> StoredEvent | None:
        with sqlite_errors("reading an event"), self.reading() as conn:
            row = conn.execute(
                "SELECT seq, id, namespace, type, version, created_at, session, payload"
                " FROM events WHERE seq = ?",
                (seq,),
            ).fetchone()
        return row_to_event(row) if row else None

    def get_by_id(self, event_id: str) -> StoredEvent | None:
        with sqlite_errors("reading an event"), self.reading() as conn:
            row = conn.execute(
                "SELECT seq, id, namespace, type, version, created_at, session, payload"
                " FROM events WHERE id = ?",
                (event_id,),
            ).fetchone()
        return row_to_event(row) if row else None

    def last_seq(self) -> int:
        with sqlite_errors("reading the log's end"), self.reading() as conn:
            row = conn.execute("SELECT MAX(seq) FROM events").fetchone()
        return int(row[0] or 0)

    def count(self) -> int:
        with sqlite_errors("counting events"), self.reading() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    # -- named questions the rooms above ask (the only SQL on `events` outside this class's
    # -- append/read is here; tests/test_log_queries.py checks each plan) ----------------------

    def get_many(self, seqs: Iterable[int]) -> dict[int, StoredEvent]:
        """The events at `seqs` (the ones the log holds), by seq."""
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE seq IN ({{}})"
        with sqlite_errors("reading events"), self.reading() as conn:
            return {
                int(row[0]): row_to_event(row)
                for rows in _chunked(conn, sql, list(seqs))
                for row in rows
            }

    def seqs_of(self, ids: Iterable[str]) -> dict[str, int]:
        """The seq of each event id the log holds (ids it does not hold are left out)."""
        sql = "SELECT id, seq FROM events WHERE id IN ({})"
        with sqlite_errors("looking events up by id"), self.reading() as conn:
            return {str(i): int(seq) for rows in _chunked(conn, sql, list(ids)) for i, seq in rows}

    def holds(self, seqs: Iterable[int]) -> set[int]:
        """Which of `seqs` the log holds."""
        sql = "SELECT seq FROM events WHERE seq IN ({})"
        with sqlite_errors("looking events up by seq"), self.reading() as conn:
            return {
                int(seq)
                for rows in _chunked(conn, sql, list(dict.fromkeys(seqs)))
                for (seq,) in rows
            }

    def any_after(
        self,
        after: int,
        *,
        namespaces: Sequence[str] | None = None,
        session: str | None = None,
    ) -> bool:
        """Whether the log holds an event past `after` (of those namespaces; of that session).

        Asked of namespaces alone, the answer is remembered: a stretch of seqs found without
        their events, up to the log's last seq as committed then, never gains one (the log is
        append-only and a later commit takes a higher seq), so the next question reads only
        the events appended since, however far behind `after` stays (a fold nobody catches up
        is asked every turn)."""
        where = ["seq > ?"]
        params: list[str | int] = [after]
        if session is not None:
            where.append("session = ?")  # the session's index, from `after` on
            params.append(session)
        if namespaces is not None:
            if not namespaces:
                return False
            # `+namespace`: walk the short seq range past `after`, not the namespace index.
            where.append(f"+namespace IN ({','.join('?' * len(namespaces))})")
            params.extend(namespaces)
        if session is not None or namespaces is None:
            with sqlite_errors("reading the log's end"), self.reading() as conn:
                row = conn.execute(
                    f"SELECT 1 FROM events WHERE {' AND '.join(where)} LIMIT 1", params
                ).fetchone()
            return row is not None
        key = tuple(namespaces)
        lo, hi = self._none_between.get(key, (after, after))
        if not lo <= after <= hi:
            lo = hi = after
        params[0] = hi
        if hi <= 0:
            # From the log's start (seqs begin at 1) any event of the namespaces answers:
            # their index finds the first at once, where the whole log would be read when
            # there is none.
            where, params = [where[-1].removeprefix("+")], params[1:]
        with sqlite_errors("reading the log's end"), self.reading() as conn:
            # One statement, one snapshot: the last seq is the one the search saw.
            found, last = conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM events WHERE {' AND '.join(where)}),"
                " (SELECT COALESCE(MAX(seq), 0) FROM events)",
                params,
            ).fetchone()
            # Inside a write transaction the last seq may be an uncommitted one: not a fact.
            if not found and not conn.in_transaction:
                self._none_between[key] = (lo, max(hi, int(last)))
        return bool(found)

    def latest(self, namespace: str, type_: str, *, sessions: Sequence[str]) -> StoredEvent | None:
        """The last event of (namespace, type) written in any of `sessions`."""
        if not sessions:
            return None
        with sqlite_errors("reading the latest event"), self.reading() as conn:
            row = conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE namespace = ? AND type = ?"
                f" AND session IN ({','.join('?' * len(sessions))})"
                f"{' AND ' + _RARE if namespace in RARE_NAMESPACES else ''}"
                " ORDER BY seq DESC LIMIT 1",
                (namespace, type_, *sessions),
            ).fetchone()
        return row_to_event(row) if row else None

    def seqs_containing(self, lo: int, hi: int, namespace: str, text: str) -> list[int]:
        """Seqs in [lo, hi] of `namespace` whose stored payload (its JSON text) contains `text`.
        Reads the rows of that seq range only, by rowid, however long the log is (`+namespace`
        keeps SQLite off the (namespace, type) index, which would walk every event of the
        namespace ever stored)."""
        # SQLite looks for the end of `text` with GLOB (it skips to the pattern's first letter
        # with strcspn: ~1.9 ms over 2 MB of payloads, where instr on a whole mark takes ~3.3
        # ms); the few rows it returns are checked for the whole text here.
        tail = text[-4:]
        pattern = "*" + "".join(f"[{c}]" if c in "*?[" else c for c in tail) + "*"
        with sqlite_errors("searching stored payloads"), self.reading() as conn:
            rows = conn.execute(
                "SELECT seq, payload FROM events WHERE seq BETWEEN ? AND ? AND +namespace = ?"
                " AND payload GLOB ? ORDER BY seq",
                (lo, hi, namespace, pattern),
            ).fetchall()
        return [int(seq) for seq, payload in rows if text in payload]

    def type_counts(self) -> list[tuple[str, str, int, int, int]]:
        """(namespace, type, count, first seq, last seq) of every event type the log holds."""
        with sqlite_errors("counting events"), self.reading() as conn:
            rows = conn.execute(
                "SELECT namespace, type, COUNT(*), MIN(seq), MAX(seq) FROM events"
                " GROUP BY namespace, type ORDER BY namespace, type"
            ).fetchall()
        return [(str(ns), str(t), int(n), int(lo), int(hi)) for ns, t, n, lo, hi in rows]

    def session_counts(self, limit: int | None = None) -> list[tuple[str, int, int, int, str, str]]:
        """(session, events, first seq, last seq, first created_at, last created_at) of every
        session the log holds events of, most recent first."""
        sql = (
            "SELECT session, COUNT(*), MIN(seq), MAX(seq), MIN(created_at), MAX(created_at)"
            " FROM events WHERE session IS NOT NULL GROUP BY session ORDER BY MAX(seq) DESC"
        )
        params: tuple[int, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit,)
        with sqlite_errors("listing sessions"), self.reading() as conn:
            return [tuple(row) for row in conn.execute(sql, params).fetchall()]

    # -- fold positions ---------------------------------------------------------------------

    def position(self, fold: str, conn: sqlite3.Connection | None = None) -> int:
        if conn is not None:
            row = conn.execute(
                "SELECT position FROM fold_positions WHERE fold = ?", (fold,)
            ).fetchone()
            return int(row[0]) if row else 0
        with sqlite_errors("reading a fold position"), self.reading() as c:
            row = c.execute(
                "SELECT position FROM fold_positions WHERE fold = ?", (fold,)
            ).fetchone()
        return int(row[0]) if row else 0

    def held_position(self, conn: sqlite3.Connection, fold: str) -> int:
        """`fold`'s position inside the write transaction `conn`: the database's one writer
        (`BEGIN IMMEDIATE`), so no other writer moves it before that transaction ends."""
        return self.position(fold, conn)

    @staticmethod
    def errors(what: str) -> contextlib.AbstractContextManager[None]:
        """This store's driver errors turned into Chronicle's own (`sqlite_errors`)."""
        return sqlite_errors(what)

    @staticmethod
    def set_position(conn: sqlite3.Connection, fold: str, position: int) -> None:
        conn.execute(
            "INSERT INTO fold_positions(fold, position) VALUES (?, ?)"
            " ON CONFLICT(fold) DO UPDATE SET position = excluded.position",
            (fold, position),
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file and truncate it."""
        if self.in_memory:
            return
        with sqlite_errors("checkpointing the WAL"), self._write_lock:
            self.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        """Checkpoint and close every connection this store opened (from any thread)."""
        if self._closed:
            return
        with contextlib.suppress(StoreError):
            self.checkpoint()
        with self._write_lock, self._connections_lock:
            for _, conn in self._connections:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._connections.clear()
            self._closed = True

    def __enter__(self) -> SQLiteEventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteEventStore({self.path!r})"


def storable(events: Sequence[PendingEvent]) -> tuple[Sequence[PendingEvent], list[str]]:
    """The events as they are stored, and their payloads' JSON. A lone surrogate (no UTF-8
    form, see `storable.py`) in a payload or a session id is escaped, so one bad string never
    stops a write; capture has already escaped a message's and kept its original."""
    texts: list[str] = []
    clean = True
    templated = _TEMPLATED_TYPES
    shortest = _SHORTEST_SHARED
    for e in events:  # one loop, no call per check: every append passes here
        payload = e.payload
        if e.type in templated:
            payload = _stored_payload(payload, _TEMPLATE_OF.get((e.namespace, e.type, e.version)))
        else:
            # `_stored_payload` without a template keeps a payload as it is unless two of its
            # texts may be one (two long top-level texts, or a dict's) or it uses a reserved key.
            longs = 0
            for value in payload.values():
                if isinstance(value, str):
                    if len(value) >= shortest:
                        longs += 1
                elif isinstance(value, dict):
                    longs = 2
                    break
            if longs > 1 or _SAME in payload or _TEMPLATE in payload:
                payload = _stored_payload(payload)
        text = _encode(payload)
        texts.append(text)
        if clean and not (text.isascii() and (e.session is None or e.session.isascii())):
            clean = not has_surrogate(text) and not has_surrogate(e.session or "")
    if clean:
        return events, texts
    events = [
        dataclasses.replace(
            e,
            payload={escape_text(k): escape_surrogates(v) for k, v in e.payload.items()},
            session=None if e.session is None else escape_text(e.session),
        )
        for e in events
    ]
    return events, [_encode(_stored_payload(e.payload, _template_of(e))) for e in events]


def _insert_events(conn: sqlite3.Connection, rows: Sequence[Sequence[object]]) -> int:
    """Insert `rows` into `events` (in the caller's transaction); the last one's seq."""
    conn.executemany(
        "INSERT INTO events(id, namespace, type, version, created_at, session, payload)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    return int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])


def _template_of(event: PendingEvent) -> _Template | None:
    return _TEMPLATE_OF.get((event.namespace, event.type, event.version))


def read_pages(
    fetch: Callable[[int, int], Sequence[EventRow]], after: int, limit: int | None
) -> Iterator[StoredEvent]:
    """The events `fetch(cursor, page)` returns (at most `page` rows past seq `cursor`, as
    EVENT_COLUMNS, in seq order), a page at a time from `after`, `limit` of them at most: a
    long read holds no lock or snapshot between pages."""
    cursor = after
    remaining = limit
    while remaining is None or remaining > 0:
        page = _PAGE if remaining is None else min(_PAGE, remaining)
        rows = fetch(cursor, page)
        if not rows:
            return
        for row in rows:  # row_to_event's work, inline: a fold's catch-up reads every row here
            payload = _raw_decode(row[7])[0]
            if _TEMPLATE in payload or _SAME in payload:
                payload = read_payload(payload)
            yield StoredEvent(Envelope._make(row[:7]), payload)
        cursor = int(rows[-1][0])
        if remaining is not None:
            remaining -= len(rows)
        if len(rows) < page:
            return


EVENT_COLUMNS = "seq, id, namespace, type, version, created_at, session, payload"
"""The columns of `events`, in the order `row_to_event` reads them."""


def _chunked(
    conn: sqlite3.Connection, sql: str, values: Sequence[str | int]
) -> Iterator[sqlite3.Cursor]:
    """The rows of `sql` (its `{}` an `IN` list) over `values`: a cursor per chunk of them."""
    for start in range(0, len(values), _CHUNK):
        part = values[start : start + _CHUNK]
        yield conn.execute(sql.format(",".join("?" * len(part))), part)


def row_to_event(row: EventRow) -> StoredEvent:
    """A row selected as EVENT_COLUMNS, as a StoredEvent (for folds that select their own rows)."""
    payload = _raw_decode(row[7])[0]
    if _TEMPLATE in payload or _SAME in payload:
        payload = read_payload(payload)
    return StoredEvent(Envelope._make(row[:7]), payload)


# The drivers type a row's values as Any (sqlite3's fetchone, psycopg's TupleRow): a boundary.
Row: TypeAlias = tuple[Any, ...]  # type: ignore[explicit-any]
"""A row as either driver (sqlite3, psycopg) hands it back."""


def pending_of(event: StoredEvent) -> PendingEvent:
    """A stored event on its way into another log: the same id, session and time."""
    env = event.envelope
    return PendingEvent(
        env.namespace, env.type, env.version, event.payload, env.id, env.session, env.created_at
    )


def restored(seq: int, event: PendingEvent) -> StoredEvent:
    return StoredEvent(
        Envelope(
            seq, event.id, event.namespace, event.type, event.version, event.created_at,
            event.session,
        ),
        event.payload,
    )  # fmt: skip


def restorable(
    events: Sequence[StoredEvent], held: Mapping[str, int], last: int
) -> list[StoredEvent]:
    """The events a restore stores (those whose id the log does not hold, first of an id),
    after checking that their seqs rise above `last`, the log's last seq."""
    fresh: list[StoredEvent] = []
    seen = set(held)
    for event in events:
        if event.envelope.id in seen:
            continue
        seen.add(event.envelope.id)
        floor = fresh[-1].seq if fresh else last
        if event.seq <= floor:
            raise UsageError(
                f"event {event.envelope.id!r} would be restored at seq {event.seq}, not above "
                f"seq {floor} the log already holds: restore a whole-log export into an empty "
                "log (or one holding only an earlier part of the same log), or import it with "
                "new seqs"
            )
        fresh.append(event)
    return fresh
