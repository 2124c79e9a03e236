"""What a chronicle is made of: anchors (derived from the log) and prose (written by a model).

An anchor is a pure function of the log: the section id comes from the range it covers ("12-31";
a re-consolidation adds the generation, "12-31#2"), never from a counter or a clock, so replaying
the same log produces the same anchors. The prose is advisory; nothing may decide on it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..log.store import StoredEvent

__all__ = [
    "Anchor",
    "Section",
    "Consolidation",
    "UnitBoundary",
    "EventTypes",
    "Summarizer",
    "AsyncSummarizer",
    "section_id_for",
    "split_section_id",
    "level_name",
    "level_of",
    "is_async_summarizer",
]


def section_id_for(from_seq: int, to_seq: int, generation: int = 1) -> str:
    base = f"{from_seq}-{to_seq}"
    return base if generation == 1 else f"{base}#{generation}"


def level_name(name: str, level: int) -> str:
    """The chronicle holding a conversation's sections of `level` (1 is the conversation's own;
    a condensed level, whose sections each cover a run of the level below, is its own chronicle)."""
    return name if level <= 1 else f"{name}/L{level}"


def level_of(chronicle: str) -> tuple[str, int]:
    """'conversation:s/L2' -> ('conversation:s', 2): the inverse of `level_name`."""
    base, sep, level = chronicle.rpartition("/L")
    if sep and level.isdigit() and base:
        return base, int(level)
    return chronicle, 1


def split_section_id(section_id: str) -> tuple[int, int, int]:
    """'12-31#2' -> (12, 31, 2)."""
    base, _, generation = section_id.partition("#")
    lo, _, hi = base.partition("-")
    return int(lo), int(hi), int(generation or 1)


@dataclass(frozen=True, slots=True)
class Anchor:
    """The deterministic half of a section: which inclusive seq range it covers, and lineage."""

    section_id: str
    from_seq: int
    to_seq: int
    unit: int
    supersedes: str | None = None

    @property
    def generation(self) -> int:
        return split_section_id(self.section_id)[2]

    def covers(self, seq: int) -> bool:
        return self.from_seq <= seq <= self.to_seq


@dataclass(frozen=True, slots=True)
class Section:
    """An anchor and the prose a summariser wrote for it, with the pins it was built from."""

    anchor: Anchor
    prose: str
    pins: tuple[str, ...] = ()
    created_at: str = ""
    meta: dict[str, object] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class Consolidation:
    """What a summariser returns: the prose, and the pin keys its model calls used."""

    prose: str
    pins: tuple[str, ...] = ()
    meta: dict[str, object] = field(default_factory=dict, compare=False, hash=False)


@runtime_checkable
class UnitBoundary(Protocol):
    """Says whether an event closes a unit of work."""

    def closes(self, event: StoredEvent) -> bool: ...


@dataclass(frozen=True)
class EventTypes:
    """The simple boundary: events of the named (namespace, type) pairs close a unit."""

    types: tuple[tuple[str, str], ...]

    def __init__(self, *types: tuple[str, str] | Sequence[tuple[str, str]]) -> None:
        flat: list[tuple[str, str]] = []
        for t in types:
            if isinstance(t, tuple) and len(t) == 2 and all(isinstance(x, str) for x in t):
                flat.append(t)  # type: ignore[arg-type]
            else:
                flat.extend(t)  # type: ignore[arg-type]
        object.__setattr__(self, "types", tuple(flat))

    def closes(self, event: StoredEvent) -> bool:
        return (event.envelope.namespace, event.envelope.type) in self.types


class Summarizer(Protocol):
    def __call__(self, events: Sequence[StoredEvent]) -> Consolidation: ...


class AsyncSummarizer(Protocol):
    def __call__(self, events: Sequence[StoredEvent]) -> Awaitable[Consolidation]: ...


def is_async_summarizer(summarize: object) -> bool:
    """An `async def` function, or an object whose `__call__` is `async def`."""
    if inspect.iscoroutinefunction(summarize):
        return True
    call = type(summarize).__call__ if callable(summarize) else None
    return call is not None and inspect.iscoroutinefunction(call)
