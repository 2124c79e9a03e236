"""The spill: captured events the database would not take, kept on disk until it does.

When the store is busy past its timeout or read-only, capture (and the session tree, and the
host events beside it) hands the events it had fully built, deterministic ids included, to
`Spill.keep`. The next write transaction of the session tree, in this process or another one,
or the next time a core opens the database, claims them and writes them through
the session tree's writer (`TreeWriter.append`), which skips every id the log already holds.

Guarantees:
- `keep()` returns only when every event is on disk (written and fsynced), one JSON line each,
  beside the database (`<db>.spill.jsonl`), or, if that directory refuses writes (read-only, a
  full disk), in a private directory under the system's temp directory. It raises OSError when
  neither place takes them. Each file holds at most `LIMIT_BYTES`.
- A claim hands the events back in the order they were kept, and the file is removed only when
  the claim was settled, which the caller does after the transaction that wrote them committed.
  A failed or interrupted replay leaves the file as it was. Writing is idempotent by event id,
  so an event kept twice (by two threads, two processes, a retry) reaches the log once.
- Threads and processes share one spill per database: keeping and claiming hold an exclusive
  `flock` on the file, and reopen it if it was replaced meanwhile.
- A line that cannot be read back (a torn write from a crash) is never dropped silently: the
  file is set aside as `*.unreadable-<time>.jsonl` and an error names it.

Does not guarantee:
- Order against what other processes wrote in between: a replayed event gets a later seq than
  they did (a message's place in the session tree is the parent entry it names, not its seq).
  If a session went on elsewhere from the same point before the replay, the replayed messages
  form a branch there.
- Exclusion between processes where `fcntl` does not exist (Windows): threads only there.
- Anything if the file is edited or deleted by hand, or the disk itself fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import StoreError
from ..log.store import PendingEvent

try:  # POSIX: exclusion between processes
    import fcntl
except ImportError:  # pragma: no cover - Windows keeps the in-process lock only
    fcntl = None  # type: ignore[assignment]

__all__ = ["Spill", "Claim", "database_file", "kept_aside", "open_locked", "append_synced"]

log = logging.getLogger("chronicle_engine.capture.spill")

SUFFIX = ".spill.jsonl"
_FORMAT = 1
LIMIT_BYTES = 256 * 1024 * 1024
"""How large one spill file may grow; past it, the next place is tried (and a write that no
place takes is logged as lost). Bounds a long read-only or full-disk spell."""


def database_file(db_path: str) -> Path | None:
    """The file behind a store path (a plain path or a `file:` URI); None for memory."""
    text = str(db_path)
    if text == ":memory:" or text.startswith("file::memory:") or "mode=memory" in text:
        return None
    if text.startswith("file:"):
        path = unquote(urlsplit(text).path)
        return Path(path) if path else None
    return Path(text)


def _line(event: PendingEvent) -> bytes:
    record = {
        "spill": _FORMAT,
        "id": event.id,
        "namespace": event.namespace,
        "type": event.type,
        "version": event.version,
        "session": event.session,
        "created_at": event.created_at,
        "payload": event.payload,
    }
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _event(line: bytes) -> PendingEvent:
    record = json.loads(line)
    return PendingEvent(
        namespace=str(record["namespace"]),
        type=str(record["type"]),
        version=int(record["version"]),
        payload=dict(record["payload"]),
        id=str(record["id"]),
        session=record.get("session"),
        created_at=str(record["created_at"]),
    )


def _lock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def open_locked(path: Path, flags: int) -> int | None:
    """`path` opened and exclusively locked, the file the path names right now (a claim may
    have removed the one we waited on). None when it does not exist and `flags` cannot create."""
    for _ in range(16):
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            if flags & os.O_CREAT:
                raise
            return None
        try:
            _lock(fd)
            if _same_file(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(f"{path} kept being replaced while Chronicle tried to lock it")


class Claim:
    """The events a spill held when claimed; `settle()` once they are committed to the log."""

    def __init__(self, events: list[PendingEvent], unreadable: int) -> None:
        self.events = events
        self.unreadable = unreadable
        self.settled = False
        self.set_aside = unreadable > 0

    @property
    def sessions(self) -> set[str]:
        return {e.session or "" for e in self.events}

    def settle(self) -> None:
        self.settled = True

    def refuse(self) -> None:
        """The events could not be written (not a database error): keep the file, set aside."""
        self.settled = True
        self.set_aside = True


class Spill:
    """One database's spill; see the module docstring."""

    def __init__(self, database: Path) -> None:
        resolved = database.expanduser().resolve()
        digest = hashlib.blake2b(str(resolved).encode("utf-8"), digest_size=12).hexdigest()
        uid = os.getuid() if hasattr(os, "getuid") else 0
        private = Path(tempfile.gettempdir()) / f"chronicle-spill-{uid}"
        self.paths = (resolved.with_name(resolved.name + SUFFIX), private / f"{digest}.jsonl")
        self._names = tuple(str(p) for p in self.paths)  # asked of every write transaction
        self._lock = threading.Lock()
        self._kept: set[str] = set()

    @classmethod
    def beside(cls, db_path: str) -> Spill | None:
        database = database_file(db_path)
        return cls(database) if database is not None else None

    def waiting(self) -> bool:
        return any(os.path.exists(p) for p in self._names)

    def keep(self, events: Sequence[PendingEvent]) -> tuple[int, Path]:
        """Put `events` on disk; returns how many were new to this spill and where they are."""
        with self._lock:
            fresh: dict[str, PendingEvent] = {}
            for e in events:
                if e.id not in self._kept:
                    fresh.setdefault(e.id, e)
            data = b"".join(_line(e) for e in fresh.values())
            failures: list[str] = []
            for path in self.paths:
                if not fresh:
                    return 0, path
                try:
                    self._append(path, data)
                except OSError as exc:
                    failures.append(f"{path}: {exc}")
                    continue
                self._kept.update(fresh)
                return len(fresh), path
            raise OSError("no place to keep them: " + "; ".join(failures))

    @staticmethod
    def _append(path: Path, data: bytes) -> None:
        append_synced(path, data)

    @contextlib.contextmanager
    def claim(self) -> Iterator[Claim]:
        """Lock the spill files and read their events. If the claim is settled when the block
        ends, the files are removed (or set aside, when something in them could not be
        written); otherwise they stay as they were."""
        with self._lock:
            held: list[tuple[Path, int]] = []
            try:
                events: list[PendingEvent] = []
                unreadable = 0
                for path in self.paths:
                    fd = open_locked(path, os.O_RDWR)
                    if fd is None:
                        continue
                    held.append((path, fd))
                    unreadable += _read(fd, events)
                claim = Claim(events, unreadable)
                yield claim
                if claim.settled:
                    for path, _ in held:
                        _finish(path, claim.set_aside)
                    self._kept.difference_update(e.id for e in events)
            finally:
                for _, fd in held:
                    os.close(fd)


def append_synced(path: Path, data: bytes, limit_bytes: int = LIMIT_BYTES) -> None:
    """Append `data` (whole lines) to `path` under its lock and fsync it, and its directory when
    the file is new. A write cut short (a full disk) is cut back, so the file still ends on a
    whole line. OSError when the file would grow past `limit_bytes`."""
    created = not path.exists()
    if not created and path.stat().st_size + len(data) > limit_bytes:
        raise OSError(f"{path} holds {limit_bytes:,} bytes already (the bound)")
    if created:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = open_locked(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    assert fd is not None
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            raise
    finally:
        os.close(fd)
    if created:
        with contextlib.suppress(OSError):
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def _read(fd: int, into: list[PendingEvent]) -> int:
    chunks: list[bytes] = []
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    unreadable = 0
    for line in b"".join(chunks).splitlines():
        if not line.strip():
            continue
        try:
            into.append(_event(line))
        except (ValueError, KeyError, TypeError):
            unreadable += 1
    return unreadable


def _finish(path: Path, set_aside: bool) -> None:
    if not set_aside:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    aside = path.with_name(f"{path.name[: -len('.jsonl')]}.unreadable-{time.time_ns()}.jsonl")
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, aside)
        log.error(
            "chronicle: part of the spill file could not be written to the log; it is kept as "
            "%s (the rest was written). Inspect it, then delete it",
            aside,
        )


def kept_aside(
    exc: StoreError, spill: Spill | None, events: Sequence[PendingEvent]
) -> tuple[StoreError, bool]:
    """`exc`, saying what became of `events`, and whether they are kept in the spill."""
    if spill is None or not events:
        return exc, False
    try:
        _, path = spill.keep(events)
    except OSError as err:
        log.error("chronicle: %d captured events are lost: %s", len(events), err)
        error = type(exc)(f"{exc}. {len(events)} captured events could not be kept aside: {err}")
        kept = False
    else:
        error = type(exc)(
            f"{exc}. Nothing is lost: captured events wait in the spill file {path} and are "
            "written, once, when the database takes writes again"
        )
        kept = True
    error.__cause__ = exc
    return error, kept
