"""Shared pieces for the scheduler tests: an injected clock, captured messages, a summariser.

Messages are appended as `MessageCaptured` events at chosen times (the lower layer), so a test
controls roles and silences exactly; conversations and their chronicles come from the real
session tree (`core.sessions`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chronicle_engine.capture.events import (
    MessageCaptured,
    SessionEnded,
    register_capture_events,
)
from chronicle_engine.chronicle.sections import Consolidation
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.store import PendingEvent, StoredEvent
from chronicle_engine.scheduler.scheduler import Scheduler

START = datetime(2025, 1, 6, 0, 0, tzinfo=UTC).timestamp()  # a Monday, 00:00 UTC
QUIET = {  # every schedule off: a test switches on only what it exercises
    "maintenance": {
        "schedules": {
            name: ""
            for name in (
                "consolidate",
                "reap",
                "fts_optimize",
                "belief_sweep",
                "queue_retention",
                "wal_checkpoint",
                "integrity",
            )
        }
    }
}


class FakeClock:
    """Epoch seconds that move only when the test says so."""

    def __init__(self, start: float = START) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def chronicle_of(core: ChronicleCore, session: str) -> str:
    return core.sessions.chronicle_name(session)


def summarise(events: Sequence[StoredEvent]) -> Consolidation:
    return Consolidation(" | ".join(e.payload["text"] for e in events))


async def summarise_async(events: Sequence[StoredEvent]) -> Consolidation:
    return summarise(events)


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


class PostgresWhere(str):
    """A conninfo (a schema of its own on the test session's server) as a test's `where`."""


def reading(core: Any) -> contextlib.AbstractContextManager[Any]:
    """A connection to `core`'s database that reads `?` placeholders, on either store."""
    return _tables(core).reading("a test's read")


def writing(core: Any) -> contextlib.AbstractContextManager[Any]:
    """A write transaction on `core`'s database that reads `?` placeholders, on either store."""
    return _tables(core).writing("a test's write")


def _tables(core: Any) -> Any:
    if core.postgres:
        from chronicle_engine.log.postgres import PostgresTables

        return PostgresTables(core.store)
    from chronicle_engine.log.tables import SQLiteTables

    return SQLiteTables(core.store)


def on_postgres(core: Any) -> bool:
    return bool(core.postgres)


def open_core(where: str | Path, *overrides: dict[str, Any]) -> Any:
    """A core over `where` (a SQLite location, or a `PostgresWhere`) with every schedule off
    but those `overrides` switch on."""
    config = Config(merged(QUIET, *overrides))
    core = ChronicleCore(where, config)  # (a `PostgresWhere`: the store config.yaml would select)
    register_capture_events(core.types)
    return core


def scheduler(
    core: ChronicleCore, clock: FakeClock, *, summarize: Any = summarise, **kwargs: Any
) -> Scheduler:
    """A scheduler on the test's clock. Its time budgets run on that clock too (unless the test
    gives a `timer`), so what one hook call gets done does not depend on how busy the machine is."""
    kwargs.setdefault("timer", clock)
    return core.new_scheduler(clock=clock, summarize=summarize, **kwargs)


_fingerprints = itertools.count()


def message(
    core: ChronicleCore, session: str, role: str, text: str, at: float, *, id: str | None = None
) -> PendingEvent:
    return core.types.pending(
        MessageCaptured(
            role=role,
            message={"role": role, "content": text},
            fingerprint=f"fp{next(_fingerprints)}",
            speaker="person" if role == "user" else "assistant",
            text=text,
        ),
        session=session,
        created_at=datetime.fromtimestamp(at, UTC).isoformat(),
        id=id,
    )


def session_end(core: ChronicleCore, session: str, at: float) -> PendingEvent:
    """What capture records on the host's on_session_end."""
    return core.types.pending(
        SessionEnded(), session=session, created_at=datetime.fromtimestamp(at, UTC).isoformat()
    )


def location(kind: str, tmp_path: Path) -> str | Path:
    """Where a parametrised test's database lives: in memory, or a WAL file."""
    return ":memory:" if kind == "memory" else tmp_path / "chronicle.db"


@contextlib.contextmanager
def places(request: Any, tmp_path: Path) -> Iterator[str | Path]:
    """A `where` fixture's place for its param: "memory", "file", or "postgres" (a schema of its
    own on the session's server, dropped after the test; a server that cannot start fails the
    test)."""
    if request.param != "postgres":
        yield location(request.param, tmp_path)
        return
    from postgres_support import own_schema

    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        yield PostgresWhere(conninfo)


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock()
    assert clock() == START
    assert clock.advance(90) == START + 90
    assert clock() == START + 90


def test_messages_and_session_ends_are_capture_events(tmp_path: Path) -> None:
    core = open_core(tmp_path / "c.db")
    core.store.append(
        [
            message(core, "a", "user", "one", START),
            message(core, "b", "user", "other", START),
            message(core, "a", "assistant", "two", START + 1),
            session_end(core, "a", START + 2),
        ]
    )
    texts = [e.payload["text"] for e in core.sessions.message_events("a", 1, 4)]
    assert texts == ["one", "two"]
    assert [e.envelope.type for e in core.store.read()][-1] == "SessionEnded"
    assert chronicle_of(core, "a") != chronicle_of(core, "b")
    core.shutdown()
