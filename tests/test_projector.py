"""Folds and the projector: positions commit with state; batches are all-or-nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import Target, own_schema

from chronicle_engine.errors import GenerativeRebuild, UsageError
from chronicle_engine.log.events import DomainEvent, EventReader, EventTypeRegistry, UpcastRegistry
from chronicle_engine.log.postgres import PostgresEventStore, PostgresTables
from chronicle_engine.log.projector import FoldMoved, Projector
from chronicle_engine.log.store import SQLiteEventStore, StoredEvent
from chronicle_engine.log.tables import SQLiteTables

KINDS = ["memory", "postgres"]  # SQLite in memory; a schema of its own on PostgreSQL


class Said(DomainEvent, frozen=True):
    who: str
    words: int


class WordCount:
    """A deterministic fold: words said per speaker, and the running order of speakers."""

    def __init__(self, name: str = "words", explode_at: int | None = None) -> None:
        self.name = name
        self.explode_at = explode_at

    def apply(self, conn: sqlite3.Connection, events: Sequence[StoredEvent], prepared: Any) -> None:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS words (who TEXT PRIMARY KEY, n INTEGER, last INTEGER)"
        )
        for e in events:
            if self.explode_at is not None and e.seq == self.explode_at:
                raise RuntimeError(f"fold crashed at {e.seq}")
            conn.execute(
                "INSERT INTO words VALUES (?, ?, ?) ON CONFLICT(who) DO UPDATE"
                " SET n = words.n + excluded.n, last = excluded.last",
                (e.payload["who"], e.payload["words"], e.seq),
            )

    def reset(self, conn: sqlite3.Connection) -> None:
        conn.execute("DROP TABLE IF EXISTS words")


def state(store: SQLiteEventStore | PostgresEventStore) -> list[tuple[Any, ...]]:
    with store.reading() as c:
        if isinstance(store, SQLiteEventStore):
            held = c.execute("SELECT 1 FROM sqlite_master WHERE name = 'words'").fetchone()
        else:
            held = c.execute("SELECT to_regclass('words')").fetchone()[0]
        if not held:
            return []
        return [tuple(row) for row in c.execute("SELECT who, n, last FROM words ORDER BY who")]


def setup(
    path: Any, target: Target | None = None
) -> tuple[SQLiteEventStore | PostgresEventStore, EventTypeRegistry, EventReader]:
    """A store at `path` (SQLite), or where `target` says, and a reader of `Said` events."""
    store = SQLiteEventStore(path) if target is None else target.open()
    types = EventTypeRegistry()
    types.register("t", "Said", Said)
    return store, types, EventReader(store, UpcastRegistry(), types)


class FoldedTables(PostgresTables):
    """A room's tables on PostgreSQL as its projector's store: with the log's end, which each
    room's tables give (`projector.FoldedStore`; a filtered fold reads it)."""

    def last_seq(self) -> int:
        return self.store.last_seq()


def tables_of(store: SQLiteEventStore | PostgresEventStore) -> Any:
    """What a projector folds through: the SQLite store itself; on PostgreSQL its tables
    (`PostgresTables`: the one SQL dialect a room's folds write)."""
    return store if isinstance(store, SQLiteEventStore) else FoldedTables(store)


def tables_of_either(store: SQLiteEventStore | PostgresEventStore) -> Any:
    """The store's tables (`?` placeholders on either database), for reading its rows raw."""
    return SQLiteTables(store) if isinstance(store, SQLiteEventStore) else PostgresTables(store)


@contextlib.contextmanager
def fresh_stores(kind: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Yields `fresh(mixed=False)`, which opens a new store of `kind` each call (SQLite in
    memory, or a schema of its own on the test session's PostgreSQL server) with its types and
    reader (`setup`; `mixed_setup` when `mixed`): for property tests, a store an example. Every
    store is closed, and every schema dropped, at the end."""
    with contextlib.ExitStack() as stack:

        def fresh(mixed: bool = False) -> Any:
            target = None
            if kind == "postgres":
                cluster = request.getfixturevalue("postgres_cluster")
                target = Target("postgres", stack.enter_context(own_schema(cluster)))
            made = setup(":memory:", target)
            if mixed:
                made[1].register("other", "Noted", Noted)
            stack.callback(made[0].close)
            return made

        yield fresh


speeches = st.lists(
    st.tuples(st.sampled_from(["ann", "bob", "cy"]), st.integers(0, 50)), min_size=0, max_size=60
)


@pytest.mark.parametrize("kind", KINDS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(speeches, st.lists(st.integers(1, 7), min_size=1, max_size=10), st.integers(1, 9))
def test_folding_in_pieces_equals_folding_at_once(kind, request, said, cuts, batch_size) -> None:
    with fresh_stores(kind, request) as fresh:
        _in_pieces(fresh, said, cuts, batch_size)


def _in_pieces(fresh: Any, said: Any, cuts: Any, batch_size: int) -> None:
    whole, types, reader = fresh()
    whole.append([types.pending(Said(who=w, words=n)) for w, n in said])
    Projector(tables_of(whole), reader, [WordCount()]).catch_up()

    pieces, types2, reader2 = fresh()
    projector = Projector(tables_of(pieces), reader2, [WordCount()], batch_size=batch_size)
    i = 0
    for cut in cuts * (len(said) // max(1, sum(cuts)) + 1):
        chunk = said[i : i + cut]
        if not chunk:
            break
        pieces.append([types2.pending(Said(who=w, words=n)) for w, n in chunk])
        projector.catch_up()
        i += cut
    pieces.append([types2.pending(Said(who=w, words=n)) for w, n in said[i:]])
    projector.catch_up()
    assert state(whole) == state(pieces)


@pytest.mark.parametrize("kind", KINDS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(speeches)
def test_rebuild_equals_incremental(kind, request, said) -> None:
    with fresh_stores(kind, request) as fresh:
        _rebuilt(fresh, said)


def _rebuilt(fresh: Any, said: Any) -> None:
    store, types, reader = fresh()
    projector = Projector(tables_of(store), reader, [WordCount()], batch_size=4)
    for w, n in said:
        store.append([types.pending(Said(who=w, words=n))])
        projector.catch_up()
    incremental = state(store)
    projector.rebuild("words")
    assert state(store) == incremental
    assert store.position("words") == store.last_seq()


@pytest.mark.parametrize("where", ["memory", "file", "postgres"])
def test_a_crash_inside_apply_leaves_no_partial_state(where, tmp_path, request) -> None:
    if where == "postgres":
        with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
            _crash_inside_apply(*setup(None, Target("postgres", conninfo)))
        return
    _crash_inside_apply(*setup(":memory:" if where == "memory" else tmp_path / "p.db"))


def _crash_inside_apply(
    store: SQLiteEventStore | PostgresEventStore, types: EventTypeRegistry, reader: EventReader
) -> None:
    folded = tables_of(store)
    store.append([types.pending(Said(who="ann", words=i)) for i in range(1, 11)])
    crashing = Projector(folded, reader, [WordCount(explode_at=7)])
    with pytest.raises(RuntimeError, match="crashed at 7"):
        crashing.catch_up()
    assert state(store) == []  # events 1..6 were applied in the failed batch: none of it stayed
    assert store.position("words") == 0
    # batch of 5: the first batch commits, the second crashes and leaves the first intact
    crashing_small = Projector(folded, reader, [WordCount(explode_at=7)], batch_size=5)
    with pytest.raises(RuntimeError):
        crashing_small.catch_up()
    assert state(store) == [("ann", 15, 5)] and store.position("words") == 5
    Projector(folded, reader, [WordCount()], batch_size=5).catch_up()
    assert state(store) == [("ann", 55, 10)] and store.position("words") == 10
    store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_each_fold_keeps_its_own_position(kind, request) -> None:
    with fresh_stores(kind, request) as fresh:
        store, types, reader = fresh()
        _own_positions(store, types, reader)


def _own_positions(store: Any, types: EventTypeRegistry, reader: EventReader) -> None:
    store.append([types.pending(Said(who="ann", words=1)) for _ in range(5)])
    Projector(tables_of(store), reader, [WordCount("a")]).catch_up()
    store.append([types.pending(Said(who="ann", words=1)) for _ in range(5)])
    both = Projector(tables_of(store), reader, [WordCount("a"), WordCount("b")])
    both.catch_up()
    assert store.position("a") == store.position("b") == 10


class Generative(WordCount):
    generative = True

    def prepare(self, events: Sequence[StoredEvent]) -> Any:
        return None


@pytest.mark.parametrize("kind", KINDS)
def test_generative_rebuild_needs_acknowledgement(kind, request) -> None:
    with fresh_stores(kind, request) as fresh:
        store, types, reader = fresh()
        store.append([types.pending(Said(who="ann", words=2))])
        projector = Projector(tables_of(store), reader, [Generative("gen")])
        projector.catch_up()
        with pytest.raises(GenerativeRebuild, match="discard_generated=True"):
            projector.rebuild("gen")
        assert state(store) == [("ann", 2, 1)]
        projector.rebuild("gen", discard_generated=True)
        assert state(store) == [("ann", 2, 1)]


@pytest.mark.parametrize("kind", KINDS)
def test_upcasting_on_read_never_rewrites_the_row(kind, request) -> None:
    with fresh_stores(kind, request) as fresh:
        _upcast_on_read(*fresh()[:2])


def _upcast_on_read(store: SQLiteEventStore | PostgresEventStore, types: EventTypeRegistry) -> None:
    class SaidV2(DomainEvent, frozen=True):
        who: str
        words: int
        lang: str

    old = store.append([types.pending(Said(who="ann", words=3))])[0]
    types2 = EventTypeRegistry()
    types2.register("t", "Said", SaidV2, version=2)
    upcasts = UpcastRegistry()
    upcasts.register("t", "Said", 1, lambda p: {**p, "lang": "en"})
    reader2 = EventReader(store, upcasts, types2)
    (current,) = list(reader2.read())
    assert current.payload == {"who": "ann", "words": 3, "lang": "en"}
    assert reader2.decode(current) == SaidV2(who="ann", words=3, lang="en")
    with store.reading() as c:
        raw = (
            tables_of_either(store)
            .statements(c)
            .execute("SELECT version, payload FROM events WHERE seq = ?", (old.seq,))
            .fetchone()
        )
    assert raw[0] == 1 and json.loads(raw[1]) == {"who": "ann", "words": 3}


# -- folds that read some namespaces only ---------------------------------------------------------


class Noted(DomainEvent, frozen=True):
    text: str


class SaidOnly(WordCount):
    """WordCount over the "t" namespace alone; it also keeps every seq it was given."""

    namespaces = ("t",)

    def apply(self, conn: sqlite3.Connection, events: Sequence[StoredEvent], prepared: Any) -> None:
        conn.execute(f"CREATE TABLE IF NOT EXISTS given_{self.name} (seq INTEGER PRIMARY KEY)")
        # a seq given twice would violate the primary key: each event is folded exactly once
        conn.executemany(f"INSERT INTO given_{self.name} VALUES (?)", [(e.seq,) for e in events])
        super().apply(conn, events, prepared)

    def reset(self, conn: sqlite3.Connection) -> None:
        super().reset(conn)
        conn.execute(f"DROP TABLE IF EXISTS given_{self.name}")


def given_seqs(store: SQLiteEventStore | PostgresEventStore, name: str = "words") -> list[int]:
    with store.reading() as c:
        if isinstance(store, SQLiteEventStore):
            held = c.execute(
                "SELECT 1 FROM sqlite_master WHERE name = ?", (f"given_{name}",)
            ).fetchone()
        else:
            held = c.execute("SELECT to_regclass(%s)", (f"given_{name}",)).fetchone()[0]
        if not held:
            return []
        return [s for (s,) in c.execute(f"SELECT seq FROM given_{name} ORDER BY seq")]


def mixed_setup(path) -> tuple[SQLiteEventStore, EventTypeRegistry, EventReader]:
    store, types, reader = setup(path)
    types.register("other", "Noted", Noted)
    return store, types, reader


def pending_of(types: EventTypeRegistry, items: list[tuple[str, int] | str]) -> list[Any]:
    return [
        types.pending(Noted(text=i) if isinstance(i, str) else Said(who=i[0], words=i[1]))
        for i in items
    ]


mixed = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["ann", "bob", "cy"]), st.integers(0, 50)),
        st.text(max_size=5),
    ),
    max_size=60,
)


def said_seqs(store: SQLiteEventStore) -> list[int]:
    return [e.seq for e in store.read(namespaces=["t"])]


@pytest.mark.parametrize("kind", KINDS)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    mixed,
    st.lists(st.integers(1, 9), min_size=1, max_size=10),
    st.integers(1, 7),
    st.lists(st.integers(-3, 12), max_size=10),
)
def test_a_filtered_fold_in_pieces_equals_at_once(
    kind, request, items, cuts, batch_size, uptos
) -> None:
    with fresh_stores(kind, request) as fresh:
        _filtered_in_pieces(fresh, items, cuts, batch_size, uptos)


def _filtered_in_pieces(fresh: Any, items: Any, cuts: Any, batch_size: int, uptos: Any) -> None:
    whole, types, reader = fresh(mixed=True)
    whole.append(pending_of(types, items))
    Projector(tables_of(whole), reader, [SaidOnly()]).catch_up()
    assert whole.position("words") == whole.last_seq()
    assert given_seqs(whole) == said_seqs(whole)

    pieces, types2, reader2 = fresh(mixed=True)
    projector = Projector(tables_of(pieces), reader2, [SaidOnly()], batch_size=batch_size)
    i = 0
    steps = iter(uptos)
    for cut in cuts * (len(items) // max(1, sum(cuts)) + 1):
        if i >= len(items):
            break
        pieces.append(pending_of(types2, items[i : i + cut]))
        i += cut
        # sometimes only part of the way, sometimes past the log's end
        step = next(steps, None)
        projector.catch_up(upto=None if step is None else max(0, pieces.last_seq() + step))
        assert pieces.position("words") <= pieces.last_seq()
    pieces.append(pending_of(types2, items[i:]))
    projector.catch_up()
    assert state(pieces) == state(whole)
    assert given_seqs(pieces) == said_seqs(pieces)  # every "t" event once, nothing else
    assert pieces.position("words") == pieces.last_seq()
    projector.rebuild("words")
    assert state(pieces) == state(whole) and given_seqs(pieces) == said_seqs(pieces)


def test_a_filtered_fold_moves_over_what_it_skipped_and_never_reads_it_again() -> None:
    store, types, reader = mixed_setup(":memory:")
    store.append(pending_of(types, [("ann", 1), "x", "y"]))
    projector = Projector(store, reader, [SaidOnly()], batch_size=2)
    assert projector.catch_up() == 1
    assert store.position("words") == 3  # the log's end, though its last events were not "t"
    reads: list[str] = []
    with store.reading() as conn:
        conn.set_trace_callback(reads.append)
        try:
            assert projector.catch_up() == 0
        finally:
            conn.set_trace_callback(None)
    assert not [r for r in reads if "FROM events WHERE seq >" in r]  # nothing left to read
    # past the log's end, a catch-up stops at the end: what is appended later is still folded
    assert projector.catch_up(upto=50) == 0 and store.position("words") == 3
    store.append(pending_of(types, ["z", ("bob", 4)]))
    assert projector.catch_up(upto=50) == 1
    assert state(store) == [("ann", 1, 1), ("bob", 4, 5)] and store.position("words") == 5


@pytest.mark.parametrize("kind", KINDS)
def test_filtered_and_whole_log_folds_share_a_projector(kind, request) -> None:
    with fresh_stores(kind, request) as fresh:
        _shared_projector(*fresh(mixed=True))


def _shared_projector(store: Any, types: EventTypeRegistry, reader: EventReader) -> None:
    store.append(pending_of(types, ["a", ("ann", 2), "b", ("bob", 3), "c"]))
    every: list[int] = []

    class Everything:
        name = "everything"

        def apply(self, conn: sqlite3.Connection, events: Sequence[StoredEvent], p: Any) -> None:
            every.extend(e.seq for e in events)

        def reset(self, conn: sqlite3.Connection) -> None:
            every.clear()

    Projector(tables_of(store), reader, [SaidOnly(), Everything()], batch_size=2).catch_up()
    assert every == [1, 2, 3, 4, 5]
    assert given_seqs(store) == [2, 4]
    assert store.position("words") == store.position("everything") == 5


def test_a_filtered_fold_never_decodes_another_namespaces_payload() -> None:
    store, types, reader = mixed_setup(":memory:")
    store.append(pending_of(types, [("ann", 2)]))
    with store.atomic() as conn:  # a row nobody could decode, in a namespace the fold does not read
        conn.execute(
            "INSERT INTO events(id, namespace, type, version, created_at, session, payload)"
            " VALUES ('broken', 'other', 'Noted', 1, '2024-01-01T00:00:00+00:00', NULL, '{not json')"
        )
    store.append(pending_of(types, [("ann", 3)]))
    Projector(store, reader, [SaidOnly()]).catch_up()
    assert state(store) == [("ann", 5, 3)] and store.position("words") == 3


def test_namespaces_must_be_a_collection_of_names() -> None:
    store, _, reader = mixed_setup(":memory:")
    fold = SaidOnly()
    fold.namespaces = "t"  # type: ignore[assignment]
    with pytest.raises(UsageError, match="not one string"):
        Projector(store, reader, [fold])


class Batches(WordCount):
    """WordCount that also records how many events each apply was given."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def apply(self, conn: sqlite3.Connection, events: Sequence[StoredEvent], prepared: Any) -> None:
        self.sizes.append(len(events))
        super().apply(conn, events, prepared)


@pytest.mark.parametrize("kind", KINDS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(speeches, st.integers(1, 9), st.integers(0, 20))
def test_folding_within_a_transaction_equals_catching_up(
    kind, request, said, batch_size, start
) -> None:
    with fresh_stores(kind, request) as fresh:
        _folded_within(fresh, said, batch_size, start)


def _folded_within(fresh: Any, said: Any, batch_size: int, start: int) -> None:
    whole, types, reader = fresh()
    whole.append([types.pending(Said(who=w, words=n)) for w, n in said])
    Projector(tables_of(whole), reader, [WordCount()]).catch_up()

    inside, types2, reader2 = fresh()
    inside.append([types2.pending(Said(who=w, words=n)) for w, n in said])
    fold = Batches()
    projector = Projector(tables_of(inside), reader2, [fold], batch_size=batch_size)
    end = inside.last_seq()
    cut = min(start, end)
    with inside.atomic() as raw:  # in two steps, as two writers would
        conn = (
            raw if isinstance(inside, SQLiteEventStore) else PostgresTables(inside).statements(raw)
        )
        assert projector.fold_within(conn, after=0, upto=cut) == cut
        assert projector.fold_within(conn, after=cut, upto=end) == end - cut
    assert state(inside) == state(whole)
    assert all(size <= batch_size for size in fold.sizes)  # never the whole backlog at once
    assert inside.position("words") == 0  # the caller writes the position, not fold_within


def test_fold_within_refuses_a_generative_fold() -> None:
    store, types, reader = setup(":memory:")

    class Drawn(WordCount):
        generative = True

        def prepare(self, events: Sequence[StoredEvent]) -> Any:
            return None

    with store.atomic() as conn, pytest.raises(UsageError, match="catch_up"):
        Projector(store, reader, [Drawn()]).fold_within(conn, after=0, upto=1)


# -- when a catch-up stops reading ----------------------------------------------------------------


class CountingReader(EventReader):
    """The store's reader, counting the reads a catch-up makes."""

    def __init__(self, reader: EventReader) -> None:
        super().__init__(reader.store, reader.upcasts, reader.types)
        self.reads = 0

    def read(self, **kwargs: Any) -> Any:
        self.reads += 1
        return super().read(**kwargs)


class DrawnAsync(WordCount):
    generative = True

    async def prepare_async(self, events: Sequence[StoredEvent]) -> Any:
        return None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("driven", ["sync", "async"])
@pytest.mark.parametrize("events", [3, 4, 9])
def test_a_short_batch_ends_the_catch_up_unless_a_fold_draws(kind, request, driven, events) -> None:
    with fresh_stores(kind, request) as fresh:
        _short_batches(*fresh(), driven, events)


def _short_batches(
    store: Any, types: EventTypeRegistry, plain: EventReader, driven: str, events: int
) -> None:
    store.append([types.pending(Said(who="ann", words=1)) for _ in range(events)])
    deterministic, drawn = CountingReader(plain), CountingReader(plain)
    folds = {"sync": (WordCount("a"), Generative("b")), "async": (WordCount("a"), DrawnAsync("b"))}
    first, second = folds[driven]
    for reader, fold in ((deterministic, first), (drawn, second)):
        projector = Projector(tables_of(store), reader, [fold], batch_size=4)
        if driven == "sync":
            assert projector.catch_up() == events
        else:
            assert asyncio.run(projector.catch_up_async()) == events
        assert store.position(fold.name) == events
    full, rest = divmod(events, 4)
    # Deterministic: the read after a short batch is skipped (a full last batch still needs one
    # more, empty read to know). A generative fold may append while it applies: it reads until
    # a read comes back empty.
    assert deterministic.reads == full + 1
    assert drawn.reads == full + 1 + (rest > 0)
    # both folds add to the one words table: each folded every event exactly once
    assert state(store) == [("ann", 2 * events, events)]


# -- two writers folding one log ------------------------------------------------------------------


class Interleaved(EventReader):
    """A reader whose next read, once done, lets `meanwhile` run before its caller goes on:
    another writer (a thread, a process, a host) folding between this projector's read of a
    batch and its write of it."""

    def __init__(self, reader: EventReader) -> None:
        super().__init__(reader.store, reader.upcasts, reader.types)
        self.meanwhile: Any = None

    def read(self, **kwargs: Any) -> Any:
        yield from super().read(**kwargs)
        hook, self.meanwhile = self.meanwhile, None
        if hook is not None:
            hook()


@contextlib.contextmanager
def two_writers(where: str, tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Two stores on one database (a SQLite file, or a schema on the test session's PostgreSQL
    server), each with its types and reader (`setup`): two hosts sharing a log."""
    with contextlib.ExitStack() as stack:
        if where == "postgres":
            conninfo = stack.enter_context(own_schema(request.getfixturevalue("postgres_cluster")))
            made = [setup(None, Target("postgres", conninfo)) for _ in range(2)]
        else:
            made = [setup(tmp_path / "shared.db") for _ in range(2)]
        for store, _, _ in made:
            stack.callback(store.close)
        yield made


def said(store: Any, types: EventTypeRegistry, words: range) -> None:
    """One `Said` event a number of words; every event says a different number, so the fold's
    total tells which events it added (and whether one was added twice)."""
    store.append([types.pending(Said(who="ann", words=n)) for n in words])


@pytest.mark.parametrize("where", ["file", "postgres"])
@pytest.mark.parametrize("other_folds_to", [8, 15])
def test_a_batch_another_writer_folded_meanwhile_is_not_folded_again(
    where, tmp_path, request, other_folds_to
) -> None:
    """Writer A reads its batch (6..10); before A writes it, writer B appends more and folds up
    to `other_folds_to`. A then folds only what B did not, and never moves the position back."""
    with two_writers(where, tmp_path, request) as ((a, types, plain), (b, types_b, reader_b)):
        reader = Interleaved(plain)
        mine = Projector(tables_of(a), reader, [WordCount()])
        theirs = Projector(tables_of(b), reader_b, [WordCount()])
        said(a, types, range(1, 6))
        mine.catch_up()
        said(a, types, range(6, 11))
        seen = [a.position("words")]

        def other_writer() -> None:
            said(b, types_b, range(11, 16))
            theirs.catch_up(upto=other_folds_to)
            seen.append(b.position("words"))

        reader.meanwhile = other_writer
        mine.catch_up()
        seen.append(a.position("words"))
        assert seen == [5, other_folds_to, max(10, other_folds_to)]  # never back
        folded = max(10, other_folds_to)
        assert state(a) == [("ann", sum(range(1, folded + 1)), folded)]  # each event once
        theirs.catch_up()
        assert state(b) == [("ann", sum(range(1, 16)), 15)] and b.position("words") == 15


@pytest.mark.parametrize("where", ["file", "postgres"])
def test_a_draw_of_a_batch_another_writer_folded_writes_nothing(where, tmp_path, request) -> None:
    """A generative fold drew its batch; another writer folded part of it first: the draw is
    of events no longer this writer's, so its transaction writes nothing (FoldMoved)."""
    with two_writers(where, tmp_path, request) as ((a, types, plain), (b, _, reader_b)):
        reader = Interleaved(plain)
        mine = Projector(tables_of(a), reader, [Generative("gen")])
        said(a, types, range(1, 11))
        reader.meanwhile = lambda: Projector(tables_of(b), reader_b, [Generative("gen")]).catch_up(
            upto=4
        )
        with pytest.raises(FoldMoved, match="'gen' moved from 0 to 4"):
            mine.catch_up()
        assert state(a) == [("ann", sum(range(1, 5)), 4)] and a.position("gen") == 4
        mine.catch_up()  # drawn again from where the other writer left it
        assert state(a) == [("ann", sum(range(1, 11)), 10)] and a.position("gen") == 10


@pytest.mark.parametrize("where", ["file", "postgres"])
def test_a_fold_another_writer_reset_meanwhile_is_folded_from_its_new_position(
    where, tmp_path, request
) -> None:
    """Writer B rebuilds the fold while A holds a batch read from position 5; B's rebuild stops
    at 3 (a fold error). A's batch is then not written over the reset state: A folds from 3."""
    with two_writers(where, tmp_path, request) as ((a, types, plain), (b, _, reader_b)):
        reader = Interleaved(plain)
        mine = Projector(tables_of(a), reader, [WordCount()])
        said(a, types, range(1, 6))
        mine.catch_up()
        said(a, types, range(6, 11))
        failing = Projector(tables_of(b), reader_b, [WordCount(explode_at=4)], batch_size=3)

        def other_writer() -> None:
            with pytest.raises(RuntimeError, match="crashed at 4"):
                failing.rebuild("words")
            assert b.position("words") == 3

        reader.meanwhile = other_writer
        mine.catch_up()
        assert state(a) == [("ann", sum(range(1, 11)), 10)] and a.position("words") == 10
