"""The chronicle fold draws outside the write lock and writes all or nothing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from chronicle_engine.chronicle.fold import FOLD_NAME, ChronicleFold
from chronicle_engine.chronicle.sections import Consolidation, EventTypes
from chronicle_engine.chronicle.store import SQLiteChronicleStore
from chronicle_engine.log.events import DomainEvent, EventReader, EventTypeRegistry, UpcastRegistry
from chronicle_engine.log.projector import Projector
from chronicle_engine.log.store import SQLiteEventStore, StoredEvent


class Note(DomainEvent, frozen=True):
    text: str


class Close(DomainEvent, frozen=True):
    pass


@pytest.fixture(params=["memory", "file"])
def world(request, tmp_path):
    store = SQLiteEventStore(":memory:" if request.param == "memory" else tmp_path / "c.db")
    types = EventTypeRegistry()
    types.register("t", "Note", Note)
    types.register("t", "Close", Close)
    reader = EventReader(store, UpcastRegistry(), types)
    yield store, types, reader, SQLiteChronicleStore(store)
    store.close()


def notes(events: Sequence[StoredEvent]) -> str:
    return " / ".join(e.payload["text"] for e in events if e.envelope.type == "Note")


def test_the_draw_does_not_hold_the_write_lock(world) -> None:
    store, types, reader, chronicle = world
    store.append([types.pending(Note(text="a")), types.pending(Close())])
    appended: list[int] = []

    def summarize(events: Sequence[StoredEvent]) -> Consolidation:
        # Another thread appends while the summariser "waits on the model". If the projector
        # held the write lock here, this would block until the timeout.
        t = threading.Thread(
            target=lambda: appended.extend(
                e.seq for e in store.append([types.pending(Note(text="x"))])
            )
        )
        t.start()
        t.join(timeout=10)
        assert not t.is_alive(), "an append blocked while the summariser was drawing"
        return Consolidation(prose=notes(events))

    fold = ChronicleFold(
        chronicle, reader, boundary=EventTypes(("t", "Close")), summarize=summarize
    )
    Projector(store, reader, [fold]).catch_up()
    assert appended == [3]
    assert [(s.anchor.section_id, s.prose) for s in chronicle.current()] == [("1-2", "a")]


def test_a_failed_draw_writes_nothing_and_keeps_the_position(world) -> None:
    store, types, reader, chronicle = world
    store.append(
        [
            types.pending(Note(text="a")),
            types.pending(Close()),
            types.pending(Note(text="b")),
            types.pending(Close()),
        ]
    )
    calls: list[str] = []

    def flaky(events: Sequence[StoredEvent]) -> Consolidation:
        calls.append(notes(events))
        if len(calls) == 2:
            raise ConnectionError("model endpoint down")
        return Consolidation(prose=notes(events))

    fold = ChronicleFold(chronicle, reader, boundary=EventTypes(("t", "Close")), summarize=flaky)
    projector = Projector(store, reader, [fold])
    with pytest.raises(ConnectionError):
        projector.catch_up()
    assert len(chronicle) == 0 and store.position(FOLD_NAME) == 0
    projector.catch_up()  # redoes the whole batch: the draws are paid again, anchors are the same
    assert calls == ["a", "b", "a", "b"]
    assert [s.anchor.section_id for s in chronicle.current()] == ["1-2", "3-4"]


def test_async_path_and_a_tail_that_starts_where_depth_ends(world) -> None:
    store, types, reader, chronicle = world
    store.append([types.pending(Note(text=t)) for t in "abc"] + [types.pending(Close())])
    store.append([types.pending(Note(text="d"))])

    async def summarize(events: Sequence[StoredEvent]) -> Consolidation:
        await asyncio.sleep(0)
        return Consolidation(prose=notes(events), pins=("k",))

    fold = ChronicleFold(
        chronicle, reader, boundary=EventTypes(("t", "Close")), summarize=summarize
    )
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(Projector(store, reader, [fold]).catch_up_async())
    finally:
        loop.close()
    through = chronicle.consolidated_through()
    assert through == 4
    assert [s.prose for s in chronicle.current()] == ["a / b / c"]
    assert [e.payload for e in reader.read(after=through)] == [{"text": "d"}]
