"""Shared pieces for the scheduler tests: an injected clock, captured messages, a summariser.

`LogConversations` stands in for `core.sessions` until the session tree lands on main: one session
is one conversation, and a range's messages are read straight from the log. It is built on the
lower layer (the event store), not on a copy of the session tree.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chronicle_engine.capture.events import (
    NAMESPACE as CHAT,
)
from chronicle_engine.capture.events import (
    MessageCaptured,
    register_capture_events,
)
from chronicle_engine.chronicle.sections import Consolidation
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.events import DomainEvent
from chronicle_engine.log.store import PendingEvent, StoredEvent
from chronicle_engine.scheduler import Scheduler

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


class SessionEnded(DomainEvent):
    """A session-end marker for tests (capture's own lands with the session tree)."""

    reason: str = "end"


SESSION_END = ("test.sessions", "SessionEnded")


class LogConversations:
    def __init__(self, core: ChronicleCore) -> None:
        self.core = core

    def chronicle_name(self, session_id: str) -> str:
        return f"conversation/{session_id}"

    def message_events(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredEvent]:
        return list(
            self.core.store.read(
                after=from_seq - 1, upto=to_seq, session=session_id, namespaces=[CHAT]
            )
        )


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


def open_core(where: str | Path, *overrides: dict[str, Any]) -> ChronicleCore:
    core = ChronicleCore(where, Config(merged(QUIET, *overrides)))
    register_capture_events(core.types)
    core.types.register(*SESSION_END, SessionEnded)
    return core


def scheduler(
    core: ChronicleCore, clock: FakeClock, *, summarize: Any = summarise, **kwargs: Any
) -> Scheduler:
    return Scheduler(
        core, clock=clock, summarize=summarize, conversations=LogConversations(core), **kwargs
    )


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
    return core.types.pending(
        SessionEnded(), session=session, created_at=datetime.fromtimestamp(at, UTC).isoformat()
    )


def location(kind: str, tmp_path: Path) -> str | Path:
    """Where a parametrised test's database lives: in memory, or a WAL file."""
    return ":memory:" if kind == "memory" else tmp_path / "chronicle.db"


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock()
    assert clock() == START
    assert clock.advance(90) == START + 90
    assert clock() == START + 90


def test_log_conversations_reads_one_sessions_messages_in_range(tmp_path: Path) -> None:
    core = open_core(tmp_path / "c.db")
    core.store.append(
        [
            message(core, "a", "user", "one", START),
            message(core, "b", "user", "other", START),
            message(core, "a", "assistant", "two", START + 1),
            session_end(core, "a", START + 2),
        ]
    )
    conversations = LogConversations(core)
    assert [e.payload["text"] for e in conversations.message_events("a", 1, 4)] == ["one", "two"]
    assert [e.seq for e in conversations.message_events("a", 2, 3)] == [3]
    core.shutdown()
