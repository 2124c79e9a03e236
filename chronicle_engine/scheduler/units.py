"""Units of a conversation: where one stretch of talk ends and the next begins.

Every boundary is a pure function of the log, so replaying the same log closes the same units:
- a recorded session end closes the open unit;
- a recorded `SessionReaped` closes it, unless the conversation moved on after the reaper decided
  (the decision names the unit's last event; a stale one is ignored);
- a silence longer than the idle gap between two messages closes the unit before the later one
  (the gap is measured on the events' own `created_at`, never on the wall clock);
- the user message that would start turn N+1 closes the unit before it.

Only captured messages open or extend a unit; other session events can only close one. A unit
runs from its first message to its last, so a section cites exactly the messages it summarises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from ..capture.events import HOST_NAMESPACE
from ..capture.events import NAMESPACE as CHAT_NAMESPACE
from ..log.bookkeeping import is_bookkeeping
from ..log.store import StoredEvent
from .events import NAMESPACE as SCHEDULER_NAMESPACE

__all__ = [
    "OpenUnit",
    "ClosedUnit",
    "UnitRules",
    "advance",
    "event_time",
    "MESSAGE",
    "SESSION_END",
    "REAPED",
]

MESSAGE = (CHAT_NAMESPACE, "MessageCaptured")
SESSION_END = (HOST_NAMESPACE, "SessionEnded")  # capture records the host's on_session_end
REAPED = (SCHEDULER_NAMESPACE, "SessionReaped")


@dataclass(slots=True)
class OpenUnit:
    """A conversation's position in its units. `open_from` is None between units."""

    chronicle: str
    session: str
    open_from: int | None
    last_seq: int
    last_at: float
    turns: int = 0
    closed_through: int = 0


@dataclass(frozen=True, slots=True)
class ClosedUnit:
    chronicle: str
    session: str  # the session of the unit's latest message; its lineage reads the range
    from_seq: int
    to_seq: int
    boundary: str  # "session_end" | "reaped" | "idle_gap" | "turns"


@dataclass(frozen=True, slots=True)
class UnitRules:
    unit_turns: int = 20
    idle_gap_seconds: float = 1800.0
    close_on_session_end: bool = True
    session_end_types: frozenset[tuple[str, str]] = frozenset({SESSION_END})


def event_time(event: StoredEvent) -> float:
    """The event's own `created_at` as epoch seconds (a naive timestamp is read as UTC)."""
    try:
        moment = datetime.fromisoformat(event.envelope.created_at)
    except ValueError:
        return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _is_user_turn(event: StoredEvent) -> bool:
    return event.payload.get("role") == "user"


def advance(
    units: dict[str, OpenUnit],
    events: Iterable[StoredEvent],
    rules: UnitRules,
    chronicle_of: Callable[[str], str],
) -> list[ClosedUnit]:
    """Fold `events` (in seq order) into `units`, in place; return the units they closed."""
    closed: list[ClosedUnit] = []

    def close(unit: OpenUnit, to_seq: int, boundary: str) -> None:
        assert unit.open_from is not None
        closed.append(ClosedUnit(unit.chronicle, unit.session, unit.open_from, to_seq, boundary))
        unit.open_from = None
        unit.turns = 0
        unit.closed_through = to_seq

    for event in events:
        env = event.envelope
        if env.session is None or is_bookkeeping(event):
            continue
        kind = (env.namespace, env.type)
        name = chronicle_of(env.session)
        unit = units.get(name)
        if kind == REAPED:
            if (
                unit is not None
                and unit.open_from is not None
                and event.payload.get("through_seq") == unit.last_seq
            ):
                close(unit, unit.last_seq, "reaped")
            continue
        if kind in rules.session_end_types:
            if rules.close_on_session_end and unit is not None and unit.open_from is not None:
                close(unit, unit.last_seq, "session_end")
            continue
        if kind != MESSAGE:
            continue
        at = event_time(event)
        user_turn = _is_user_turn(event)
        if unit is not None and unit.open_from is not None:
            if rules.idle_gap_seconds > 0 and at - unit.last_at > rules.idle_gap_seconds:
                close(unit, unit.last_seq, "idle_gap")
            elif user_turn and rules.unit_turns > 0 and unit.turns >= rules.unit_turns:
                close(unit, unit.last_seq, "turns")
        if unit is None:
            unit = OpenUnit(name, env.session, None, event.seq, at)
            units[name] = unit
        if unit.open_from is None:
            unit.open_from = event.seq
            unit.turns = 0
        unit.session = env.session
        unit.last_seq = event.seq
        unit.last_at = at
        if user_turn:
            unit.turns += 1
    return closed
