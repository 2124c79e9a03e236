"""Re-consolidation: a better account of a range, written as the next generation.

It reads the range again from the log, draws a new consolidation and appends it through the
strict path (`append_new`), superseding the current section. Only the current section of a range
can be superseded; a superseded one is refused before the summariser is called, naming the
current one. Nothing in the log records a re-consolidation, so a rebuild discards it; every call
says so on the `chronicle.reconsolidation` logger.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping

from ..errors import ChronicleFork, UsageError
from ..log.events import EventReader
from ..log.store import StoredEvent
from .sections import (
    Anchor,
    AsyncSummarizer,
    Section,
    Summarizer,
    is_async_summarizer,
)
from .store import SQLiteChronicleStore
from .write import masked, section_from

__all__ = ["reconsolidate", "reconsolidate_async", "next_generation", "announce"]

log = logging.getLogger("chronicle_engine.chronicle.reconsolidation")


def _target(chronicle: SQLiteChronicleStore, section_id: str) -> Section:
    section = chronicle.get(section_id)
    if section is None:
        raise UsageError(f"no section {section_id!r} in chronicle {chronicle.name!r}")
    if chronicle.successor(section_id) is not None:
        raise ChronicleFork(
            f"section {section_id!r} is already superseded; the current one is "
            f"{chronicle.current_of(section_id)!r}"
        )
    return section


def _events(
    reader: EventReader, a: Anchor, admit: Callable[[StoredEvent], bool] | None
) -> list[StoredEvent]:
    events = list(reader.read(after=a.from_seq - 1, upto=a.to_seq))
    return [e for e in events if admit(e)] if admit else events


def next_generation(
    chronicle: SQLiteChronicleStore,
    reader: EventReader,
    section_id: str,
    summarize: Summarizer,
    *,
    admit: Callable[[StoredEvent], bool] | None = None,
    meta: Mapping[str, object] | None = None,
) -> Section:
    """The next generation of the current section `section_id`, drawn but not written: for a
    caller that writes several in one transaction (forgetting does). Refuses a superseded
    section before the summariser is called."""
    if is_async_summarizer(summarize):
        raise TypeError("reconsolidate() got an async summarizer; await reconsolidate_async()")
    old = _target(chronicle, section_id)
    result: object = summarize(_events(reader, old.anchor, admit))
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()
        raise TypeError("reconsolidate() got an async summarizer; await reconsolidate_async()")
    return _generation(old, result, meta)


def _generation(old: Section, result: object, meta: Mapping[str, object] | None = None) -> Section:
    a = old.anchor
    return section_from(a.from_seq, a.to_seq, masked(result), meta=meta, supersedes=old)


def announce(section: Section) -> None:
    """Say, on every re-consolidation, that it sits outside the replay guarantee."""
    a = section.anchor
    log.warning(
        "re-consolidated %s as %s (seq %d..%d): runs that read the old prose will diverge on "
        "replay, and a rebuild of the chronicle discards the new section",
        a.supersedes,
        a.section_id,
        a.from_seq,
        a.to_seq,
    )


def _write(chronicle: SQLiteChronicleStore, section: Section) -> Section:
    written = chronicle.append_new(section)
    announce(written)
    return written


def reconsolidate(
    chronicle: SQLiteChronicleStore,
    reader: EventReader,
    section_id: str,
    summarize: Summarizer,
    *,
    admit: Callable[[StoredEvent], bool] | None = None,
) -> Section:
    return _write(chronicle, next_generation(chronicle, reader, section_id, summarize, admit=admit))


async def reconsolidate_async(
    chronicle: SQLiteChronicleStore,
    reader: EventReader,
    section_id: str,
    summarize: Summarizer | AsyncSummarizer,
    *,
    admit: Callable[[StoredEvent], bool] | None = None,
) -> Section:
    old = _target(chronicle, section_id)
    result: object = summarize(_events(reader, old.anchor, admit))
    if inspect.isawaitable(result):
        result = await result
    return _write(chronicle, _generation(old, result))
