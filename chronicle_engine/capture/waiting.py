"""Turns acknowledged while no store could be opened, kept on disk until one opens.

When the database cannot be opened at all (its directory refuses writes, a read-only file
system before the schema exists, `db_path` under a regular file, a full disk, a cold start that
outlasted its retries) there is no log to plan events against: the memory slot keeps the live
lists it was handed here, and whoever opens the database next (this process on a retry, or any
other process) captures them, in order, through the ordinary idempotent capture.

Guarantees:
- `keep()` returns only when the record is on disk (written and fsynced) in the first place that
  takes it: beside the database (`<db>.waiting.jsonl`), the spill's private directory under the
  system's temp directory, or `/dev/shm` (memory-backed: it takes records when every disk is
  full, and loses them at a reboot). It raises OSError when none takes it, or when the file would
  grow past `limit_bytes` (the bound of a long outage).
- A list that continues the one kept before for the session (the same dicts in the same order,
  then new ones) is kept as its new messages only, so an outage costs space linear in the turns.
- `replay()` hands the kept lists back in order and removes the files only after every one was
  captured; a failed replay leaves them for the next open. Threads and processes share the files
  under an exclusive `flock` (spill.py's locking).

Does not guarantee: hooks other than captures and session switches (turn starts, memory writes,
delegations seen during the outage are not kept), or anything if a file is edited by hand.
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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .align import wire_message
from .spill import LIMIT_BYTES, append_synced, database_file, open_locked

__all__ = ["WaitingTurns", "LIMIT_BYTES"]

log = logging.getLogger("chronicle_engine.capture.waiting")

SUFFIX = ".waiting.jsonl"
_FORMAT = 1


def _places(database: Path) -> tuple[Path, ...]:
    resolved = database.expanduser().absolute()
    digest = hashlib.blake2b(str(resolved).encode("utf-8"), digest_size=12).hexdigest()
    uid = os.getuid() if hasattr(os, "getuid") else 0
    places = [
        resolved.with_name(resolved.name + SUFFIX),
        Path(tempfile.gettempdir()) / f"chronicle-spill-{uid}" / f"{digest}{SUFFIX}",
    ]
    if Path("/dev/shm").is_dir():
        places.append(Path("/dev/shm") / f"chronicle-spill-{uid}" / f"{digest}{SUFFIX}")
    return tuple(places)


class WaitingTurns:
    """One database's waiting turns; see the module docstring."""

    def __init__(self, database: Path, limit_bytes: int = LIMIT_BYTES) -> None:
        # One file holds at most `limit_bytes` (the spill's bound), then the next place is tried.
        self.paths = _places(database)
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        # session -> the live dicts kept so far (by identity), to keep only what a list adds
        self._kept: dict[str, list[object]] = {}

    @classmethod
    def beside(cls, db_path: str, limit_bytes: int = LIMIT_BYTES) -> WaitingTurns | None:
        database = database_file(db_path)
        return cls(database, limit_bytes) if database is not None else None

    def places(self) -> str:
        """Where kept turns go, in order of preference (for the line that says so)."""
        return ", else ".join(str(p) for p in self.paths)

    def waiting(self) -> bool:
        return any(p.exists() for p in self.paths)

    # -- keeping ---------------------------------------------------------------------------

    def keep_capture(
        self, session: str, messages: Sequence[object], identity: dict[str, object]
    ) -> Path:
        """Keep a live list the slot could not capture; returns where it is."""
        items = list(messages)
        with self._lock:
            before = self._kept.get(session, [])
            start = 0
            if len(before) <= len(items) and all(
                a is b for a, b in zip(before, items, strict=False)
            ):
                start = len(before)
            record = {
                "waiting": _FORMAT,
                "at": time.time_ns(),
                "kind": "capture",
                "session": session,
                "identity": identity,
                "from": start,
                "messages": [wire_message(m) for m in items[start:]],
            }
            where = self._append(record)
            self._kept[session] = items
            return where

    def keep_switch(self, session: str, parent: str, reason: str) -> Path:
        """Keep a session switch (a compression continues a conversation under a new id)."""
        record = {
            "waiting": _FORMAT,
            "at": time.time_ns(),
            "kind": "switch",
            "session": session,
            "parent": parent,
            "reason": reason,
        }
        with self._lock:
            return self._append(record)

    def _append(self, record: dict[str, object]) -> Path:
        data = (json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
        failures: list[str] = []
        for path in self.paths:
            try:
                append_synced(path, data, self.limit_bytes)
            except OSError as exc:
                failures.append(f"{path}: {exc}")
                continue
            return path
        raise OSError("no place took the turn: " + "; ".join(failures))

    # -- replaying ----------------------------------------------------------------------------

    def replay(
        self,
        capture: Callable[[str, list[object], dict[str, str | None]], object],
        switch: Callable[[str, str, str], object],
    ) -> int:
        """Capture every kept list, in order (`capture(session, messages, identity)`), and
        record every kept switch; remove the files once all went through. Returns the records
        replayed (0 when another process holds or already replayed them)."""
        with self._lock, self._claimed() as records:
            lists: dict[str, list[object]] = {}
            for record in records:
                session = str(record.get("session") or "")
                if record.get("kind") == "switch":
                    switch(session, str(record.get("parent") or ""), str(record.get("reason")))
                    continue
                start = _number(record.get("from"))
                kept = record.get("messages")
                messages = lists.get(session, [])[:start] + (kept if isinstance(kept, list) else [])
                lists[session] = messages
                identity = record.get("identity")
                capture(
                    session,
                    messages,
                    {
                        str(k): None if v is None else str(v)
                        for k, v in (identity.items() if isinstance(identity, dict) else ())
                    },
                )
            self._kept.clear()
            return len(records)

    @contextlib.contextmanager
    def _claimed(self) -> Iterator[list[dict[str, object]]]:
        held: list[tuple[Path, int]] = []
        try:
            records: list[dict[str, object]] = []
            for path in self.paths:
                try:
                    fd = open_locked(path, os.O_RDWR)
                except OSError:
                    continue
                if fd is None:
                    continue
                held.append((path, fd))
                records += _read(fd, path)
            records.sort(key=lambda r: _number(r.get("at")))  # stable: a file's own order
            yield records
            for path, _ in held:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        finally:
            for _, fd in held:
                os.close(fd)


def _number(value: object) -> int:
    return value if isinstance(value, int) else 0


def _read(fd: int, path: Path) -> list[dict[str, object]]:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    records: list[dict[str, object]] = []
    for number, line in enumerate(b"".join(chunks).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            aside = path.with_name(f"{path.name}.unreadable-{time.time_ns()}")
            with contextlib.suppress(OSError):
                aside.write_bytes(line)
            log.error("chronicle: line %d of %s could not be read; kept as %s", number, path, aside)
            continue
        if isinstance(record, dict) and record.get("waiting") == _FORMAT:
            records.append(record)
    return records
