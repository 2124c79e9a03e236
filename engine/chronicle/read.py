"""Reading the chronicle at two grades, and the recency/depth split.

`Anchors` is the deterministic surface (ranges, coverage, where the consolidated past ends): safe to
decide on, because a rebuild reproduces it. `Prose` is the generated surface: advisory only. Neither
object can reach the other. `Brief` reads the split: the tail verbatim from the log (never from the
chronicle, so near-term continuity never depends on generated prose) and the depth as sections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..log.events import EventReader
from ..log.store import Envelope, StoredEvent
from .sections import Anchor, Section
from .store import SQLiteChronicleStore

__all__ = ["Anchors", "Prose", "Brief", "Recent"]

Admit = Callable[[Envelope], bool]


class Anchors:
    """Ranges and supersession, no prose."""

    def __init__(self, chronicle: SQLiteChronicleStore) -> None:
        self.__chronicle = chronicle

    def all(self) -> list[Anchor]:
        return [s.anchor for s in self.__chronicle.current()]

    def covers(self, seq: int) -> Anchor | None:
        hit = self.__chronicle.current(from_seq=seq, to_seq=seq)
        return hit[0].anchor if hit else None

    def consolidated_through(self) -> int:
        return self.__chronicle.consolidated_through()


class Prose:
    """The words a summariser wrote. Show them to a model; never let them settle anything."""

    def __init__(self, chronicle: SQLiteChronicleStore) -> None:
        self.__chronicle = chronicle

    def section(self, section_id: str) -> Section | None:
        """Any generation, superseded ones included."""
        return self.__chronicle.get(section_id)

    def covering(self, seq: int) -> Section | None:
        hit = self.__chronicle.current(from_seq=seq, to_seq=seq)
        return hit[0] if hit else None

    def current(self) -> list[Section]:
        return self.__chronicle.current()


@dataclass(frozen=True, slots=True)
class Recent:
    """Events read verbatim from the log."""

    events: list[StoredEvent]


class Brief:
    """The consolidated past as sections, and everything after it verbatim from the log."""

    def __init__(
        self,
        chronicle: SQLiteChronicleStore,
        reader: EventReader,
        *,
        admit: Admit | Callable[[StoredEvent], bool] | None = None,
    ) -> None:
        self.anchors = Anchors(chronicle)
        self.prose = Prose(chronicle)
        self._reader = reader
        self._admit = admit

    def depth(self) -> list[Section]:
        return self.prose.current()

    def tail(self, *, since_seq: int = 0, upto_seq: int | None = None) -> Recent:
        admit = self._admit
        events = [
            e
            for e in self._reader.store.read(after=since_seq, upto=upto_seq)
            if admit is None or admit(e.envelope)  # type: ignore[arg-type]
        ]
        return Recent([self._reader.current(e) for e in events])
