"""A capture on PostgreSQL plans outside the session tree's lock and has the server check and
fold its append in one call (`sessions/postgres.py`, `SessionTree.write_planned`): the tree it
leaves is the fold's, and a plan that no longer holds stores nothing and is planned again."""

from __future__ import annotations

import pytest
from postgres_support import Target, own_schema
from test_sessions import _tree_tables

from chronicle_engine.log.projector import Projector
from chronicle_engine.log.store import PendingEvent
from chronicle_engine.sessions.events import UsageRecorded
from chronicle_engine.sessions.fold import FOLD_NAME, SessionFold, entry_rows
from chronicle_engine.sessions.postgres import PostgresSessionTables


@pytest.fixture
def pg(postgres_cluster):
    with own_schema(postgres_cluster) as conninfo:
        yield Target("postgres", conninfo)


def u(text: str) -> dict:
    return {"role": "user", "content": text}


def a(text: str) -> dict:
    return {"role": "assistant", "content": text}


def _tree(parts) -> tuple[list, list, int]:
    return (*_tree_tables(parts), parts.store.position(FOLD_NAME))


class _Counted(PostgresSessionTables):
    """The store's own session tables, counting what `append_planned` answered."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.taken = self.refused = 0
        self.before_append = None

    def append_planned(self, session, leaf, events, entries):
        if self.before_append is not None:
            hook, self.before_append = self.before_append, None
            hook()
        stored = super().append_planned(session, leaf, events, entries)
        if stored is None:
            self.refused += 1
        else:
            self.taken += 1
        return stored


def _counted_tree(target: Target):
    from chronicle_engine.sessions.tree import SessionTree

    parts = target.tree()
    tables = _Counted(parts.store)
    parts.sessions = SessionTree(parts.reader, tables)
    from chronicle_engine.config import Config
    from chronicle_engine.sessions.capture import Capture

    parts.capture = Capture(parts.sessions, Config())
    return parts, tables


def _each_once(parts, live: list[dict]) -> None:
    """The log holds each message of `live` once, in its order, and the tree projects it."""
    said = [
        e.payload["message"]["content"]
        for e in parts.store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]
    assert said == [m["content"] for m in live]
    assert [m["content"] for m in parts.sessions.projection("s")] == said


def test_planned_captures_are_taken_and_leave_the_tree_a_rebuild_gives(pg):
    parts, tables = _counted_tree(pg)
    lives: dict[str, list[dict]] = {"s": [], "t": []}
    for i in range(6):
        for session, live in lives.items():
            live += [u(f"{session} asks {i}"), a(f"{session} answers {i}")]
            assert parts.capture.capture_turn(session, list(live)) == 2
    parts.sessions.record_usage("s", prompt_tokens=3, completion_tokens=1, source="host")
    lives["s"] += [u("after the usage"), a("still on the branch")]
    assert parts.capture.capture_turn("s", list(lives["s"])) == 2
    # Every capture was taken as planned (the usage entry went through the tree's lock).
    assert (tables.taken, tables.refused) == (13, 0)
    for session, live in lives.items():
        assert [m["content"] for m in parts.sessions.projection(session)] == [
            m["content"] for m in live
        ]
    before = _tree(parts)
    assert before[2] == parts.store.last_seq()
    Projector(parts.sessions.tables, parts.reader, [SessionFold()]).rebuild(FOLD_NAME)
    assert _tree(parts) == before
    parts.shutdown()


def test_a_plan_that_no_longer_holds_stores_nothing(pg):
    parts, tables = _counted_tree(pg)
    parts.capture.capture_turn("s", [u("first"), a("reply")])
    types = parts.sessions.types

    def usage() -> list:
        return [types.pending(UsageRecorded(prompt_tokens=1, completion_tokens=1), session="s")]

    def attempt(events, on_leaf):
        rows = entry_rows("s", on_leaf, events)
        assert rows is not None
        count = parts.store.count()
        stored = tables.append_planned("s", on_leaf, events, rows)
        if stored is None:
            assert parts.store.count() == count  # refused: nothing appended
        return stored

    # planned on a leaf the session has left
    assert attempt(usage(), parts.sessions.path("s")[0].entry_id) is None
    # an event the log holds already (stored through the tree: nothing waits to be folded)
    seq = parts.sessions.record_usage("s", prompt_tokens=1, completion_tokens=1, source="host")
    held = parts.store.get(seq).envelope.id
    on = parts.sessions.leaf("s")
    assert on == held
    again = [
        types.pending(UsageRecorded(prompt_tokens=1, completion_tokens=1), session="s", id=held)
    ]
    assert attempt(again, on) is None
    # an entry of the tree appended past the fold (an import, a host on older code)
    parts.store.append(usage())
    assert attempt(usage(), on) is None
    assert tables.refused == 3
    # the next capture is refused too, and planned again inside the lock, which folds first
    assert parts.capture.capture_turn("s", [u("first"), a("reply"), u("more"), a("ok")]) == 2
    assert tables.refused == 4
    path = parts.sessions.path("s")
    assert [e.kind for e in path] == ["message", "message", "usage", "usage", "message", "message"]
    # and on the leaf as it stands, the plan is taken and folded like the rest
    on = parts.sessions.leaf("s")
    events = usage()
    stored = attempt(events, on)
    assert [e.envelope.id for e in stored] == [events[0].id]
    assert parts.sessions.leaf("s") == events[0].id
    before = _tree(parts)
    assert before[2] == stored[0].seq
    Projector(parts.sessions.tables, parts.reader, [SessionFold()]).rebuild(FOLD_NAME)
    assert _tree(parts) == before
    parts.shutdown()


def test_a_host_that_stores_the_same_turn_first_leaves_the_other_nothing_to_store(pg):
    """Host A plans its capture; before its append reaches the server, host B stores the same
    turn (the same session on two hosts): A's plan is refused, A plans again under the lock,
    finds the turn stored, and stores nothing. Each message is in the log once."""
    a_parts, a_tables = _counted_tree(pg)
    b_parts = pg.tree()
    live = [u("hello"), a("hi")]
    assert a_parts.capture.capture_turn("s", list(live)) == 2
    live += [u("the same turn"), a("on two hosts")]
    a_tables.before_append = lambda: b_parts.capture.capture_turn("s", list(live))
    assert a_parts.capture.capture_turn("s", list(live)) == 0
    assert a_tables.refused == 1
    _each_once(a_parts, live)
    live += [u("next"), a("turn")]
    assert a_parts.capture.capture_turn("s", list(live)) == 2
    assert a_tables.taken == 2  # the first and the last
    b_parts.shutdown()
    a_parts.shutdown()


def test_a_turn_on_a_cached_branch_plans_on_its_end_without_reading_the_leaf(pg, monkeypatch):
    """A capture whose branch this process cached plans on the branch's end and lets the
    server's check stand for the read of the leaf: one round trip a turn. A write through the
    tree's lock (here a usage record) says the leaf moved, and the next capture reads it."""
    from chronicle_engine.sessions import tree as tree_module

    parts, tables = _counted_tree(pg)
    reads: list[str] = []
    real = tree_module.read_leaf

    def counted(conn, session):
        reads.append(session)
        return real(conn, session)

    monkeypatch.setattr(tree_module, "read_leaf", counted)
    live = [u("first"), a("reply")]
    assert parts.capture.capture_turn("s", list(live)) == 2
    assert reads == ["s"]  # nothing cached yet
    for i in range(5):
        live += [u(f"ask {i}"), a(f"answer {i}")]
        assert parts.capture.capture_turn("s", list(live)) == 2
    assert reads == ["s"]
    parts.sessions.record_usage("s", prompt_tokens=3, completion_tokens=1, source="host")
    live += [u("after the usage"), a("on top of it")]
    assert parts.capture.capture_turn("s", list(live)) == 2
    assert reads == ["s", "s"]
    assert (tables.taken, tables.refused) == (7, 0)
    path = parts.sessions.path("s")
    assert [e.kind for e in path][-3:] == ["usage", "message", "message"]
    assert [m["content"] for m in parts.sessions.projection("s")] == [m["content"] for m in live]
    parts.shutdown()


def test_a_cached_branch_another_host_moved_is_refused_and_planned_again(pg):
    """Host B captures a turn of a session host A has cached: A's next plan, on the end of its
    cached branch, is refused by the server's check and planned again under the lock, on the
    branch as B left it. Each message is in the log once."""
    a_parts, a_tables = _counted_tree(pg)
    b_parts = pg.tree()
    live = [u("hello"), a("hi")]
    assert a_parts.capture.capture_turn("s", list(live)) == 2
    live += [u("asked on host B"), a("answered there")]
    assert b_parts.capture.capture_turn("s", list(live)) == 2
    live += [u("back on A"), a("still one branch")]
    assert a_parts.capture.capture_turn("s", list(live)) == 2
    assert (a_tables.taken, a_tables.refused) == (1, 1)
    _each_once(a_parts, live)
    live += [u("and on"), a("planned again")]
    assert a_parts.capture.capture_turn("s", list(live)) == 2
    assert a_tables.taken == 2
    b_parts.shutdown()
    a_parts.shutdown()


def test_a_tree_made_before_the_append_at_the_end_gets_it(pg):
    """sessions.m004 replaces the planned append of a database made before it with the one
    that asks the log past the fold's position only when the log goes on past it; captures
    are taken as planned on it, and a tree entry past the fold still refuses a plan."""
    from chronicle_engine.sessions.postgres import PG_SESSION_MIGRATIONS

    parts, tables = _counted_tree(pg)
    conn = parts.store.connection

    def source() -> str:
        row = conn.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = 'chronicle_tree_append'"
            " AND pronamespace = current_schema()::regnamespace"
        ).fetchone()
        assert row is not None
        return str(row[0])

    assert "log_end > folded_to" in source()
    # the function as m003 made it before, and m004 not run
    old = source().replace(
        "SELECT c.last INTO log_end FROM log_counter c", "PERFORM 1 FROM log_counter"
    )
    old = old.replace(
        "(log_end > folded_to AND chronicle_any_after(folded_to, folded))",
        "chronicle_any_after(folded_to, folded)",
    )
    assert "log_end >" not in old
    signature = conn.execute(
        "SELECT pg_get_function_identity_arguments(oid) FROM pg_proc"
        " WHERE proname = 'chronicle_tree_append' AND pronamespace = current_schema()::regnamespace"
    ).fetchone()
    assert signature is not None
    conn.execute(
        f"CREATE OR REPLACE FUNCTION chronicle_tree_append({signature[0]})"
        " RETURNS TABLE(seq BIGINT, place BIGINT) LANGUAGE plpgsql VOLATILE AS $body$"
        + old
        + "$body$"
    )
    conn.execute("DELETE FROM migrations WHERE name = 'sessions.m004_append_at_the_end'")
    assert "log_end >" not in source()
    assert parts.store.migrate(PG_SESSION_MIGRATIONS) == ["sessions.m004_append_at_the_end"]
    assert "log_end > folded_to" in source()
    live = [u("first"), a("reply")]
    for i in range(3):
        live += [u(f"ask {i}"), a(f"answer {i}")]
        assert parts.capture.capture_turn("s", list(live)) == (4 if i == 0 else 2)
    assert tables.refused == 0
    # an event the tree does not fold, past the fold's position: the question is asked, and
    # the plan is taken
    parts.store.append([PendingEvent("chronicle.elsewhere", "Noted", 1, {"n": 1}, session="s")])
    live += [u("past an event of another room"), a("taken")]
    assert parts.capture.capture_turn("s", list(live)) == 2
    assert (tables.taken, tables.refused) == (4, 0)
    types = parts.sessions.types
    parts.store.append(  # a tree entry past the fold (an import, a host on older code)
        [types.pending(UsageRecorded(prompt_tokens=1, completion_tokens=1), session="s")]
    )
    live += [u("after the import"), a("planned again")]
    assert parts.capture.capture_turn("s", list(live)) == 2
    assert tables.refused == 1
    assert [e.kind for e in parts.sessions.path("s")][-3:] == ["usage", "message", "message"]
    parts.shutdown()


def test_a_turn_with_nothing_new_reads_the_leaf_another_host_moved(pg):
    """A capture that finds nothing new on its cached branch sends no append, so no server
    check stands for the leaf it did not read: it reads it. Host B branched the session from
    under host A; A's unchanged list moves the session back onto A's branch, as before the
    cached leaf went unread."""
    a_parts, a_tables = _counted_tree(pg)
    b_parts = pg.tree()
    mine = [u("q1"), a("r1"), u("q2 on A"), a("r2 on A")]
    assert a_parts.capture.capture_turn("s", list(mine)) == 4
    theirs = [u("q1"), a("r1"), u("q2 on B"), a("r2 on B")]
    assert b_parts.capture.capture_turn("s", list(theirs)) == 2
    assert [m["content"] for m in b_parts.sessions.projection("s")][-1] == "r2 on B"
    a_parts.capture.capture_turn("s", list(mine))
    assert a_tables.refused == 0  # (nothing was sent to refuse)
    assert [m["content"] for m in a_parts.sessions.projection("s")] == [m["content"] for m in mine]
    mine += [u("q3 on A"), a("r3 on A")]
    assert a_parts.capture.capture_turn("s", list(mine)) == 2
    assert [m["content"] for m in a_parts.sessions.projection("s")] == [m["content"] for m in mine]
    b_parts.shutdown()
    a_parts.shutdown()


def test_an_import_waits_for_a_tree_write_that_read_the_folds_position(pg):
    """A write through the tree's lock reads the fold's position and the log's end, appends,
    and moves the position to its own end. An import of a tree event committed in between
    (another process's `chronicle import`) would be passed over by the fold (without `hold`,
    this test's import finishes inside the write and the tree never holds its entry).
    Imported inside the tree's write (`hold`, as the CLI imports), it waits for that write."""
    import threading

    from chronicle_engine import transfer
    from chronicle_engine.log.store import restored

    a_parts = pg.tree()
    b_parts = pg.tree()
    live = [u("first"), a("reply")]
    assert a_parts.capture.capture_turn("s", list(live)) == 2
    types = a_parts.sessions.types
    usage = UsageRecorded(prompt_tokens=5, completion_tokens=2)
    imported = [restored(1, types.pending(usage, session="t"))]
    holding, go, imported_done = threading.Event(), threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def tree_write() -> None:
        try:
            with a_parts.sessions.writing() as w:
                holding.set()
                go.wait(10)
                w.append([types.pending(usage, session="s")])
        except BaseException as exc:  # (reported below)
            failures.append(exc)

    def import_() -> None:
        try:
            transfer.import_events(b_parts.store, imported, hold=b_parts.sessions.writing)
            imported_done.set()
        except BaseException as exc:
            failures.append(exc)

    writer = threading.Thread(target=tree_write)
    writer.start()
    assert holding.wait(10)
    importer = threading.Thread(target=import_)
    importer.start()
    assert not imported_done.wait(1.0)  # it waits for the tree's write
    go.set()
    writer.join(10)
    importer.join(10)
    assert not failures
    a_parts.sessions.refresh()
    assert imported_done.is_set()
    assert [e.kind for e in a_parts.sessions.path("t")] == ["usage"]
    before = _tree(a_parts)
    Projector(a_parts.sessions.tables, a_parts.reader, [SessionFold()]).rebuild(FOLD_NAME)
    assert _tree(a_parts) == before
    b_parts.shutdown()
    a_parts.shutdown()
