"""The event log's contract (chronicle_engine/log/port.py), run against every store: SQLite (a WAL file)
and PostgreSQL (a throwaway server, tests/postgres_support.py). The same tests, parametrised, as
eventsourcing runs one recorder suite against each backend.

Each PostgreSQL test gets a schema of its own in the session's database, so tests share one
server and nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_support import Target, release_together

from chronicle_engine.errors import AppendOnlyViolation, StoreError, UsageError
from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.log.store import Envelope, PendingEvent, SQLiteEventStore, StoredEvent
from chronicle_engine.storable import escape_surrogates

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 120  # every concurrent run below ends well inside this


@pytest.fixture
def store(target: Target) -> Iterator[SQLiteEventStore | PostgresEventStore]:
    s = target.open()
    yield s
    s.close()


def ev(
    payload: dict[str, object], *, id: str | None = None, session: str | None = "s"
) -> PendingEvent:
    extra = {"id": id} if id else {}
    return PendingEvent("test", "Thing", 1, payload, session=session, **extra)


def _same_json(a: object, b: object) -> bool:
    """Equal, and equal as text: key order, number forms and every character kept."""
    return a == b and json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)


PAYLOADS: list[dict[str, object]] = [
    {"text": "plain ascii", "n": 1, "f": 1.5, "big": 2**62, "neg": -7, "none": None, "t": True},
    {
        "text": "naïve café — 東京 · مرحبا · שלום · 🦀🧪 · e\u0301 (combining)",
        "z": "zero\u200bwidth",
    },
    {"control": 'tab\tnewline\nnul\x00bell\x07 quote" backslash\\', "empty": ""},
    {"nested": {"a": [1, 2, {"b": "c"}], "d": {}}, "list": [[], [None], ["x"]]},
    {"z_last": 1, "a_first": 2, "m_mid": 3},  # key order is kept, not sorted
    {
        "content": "the same long sentence said twice in one payload",
        "text": "the same long sentence said twice in one payload",
    },
    {"float_forms": [0.1, 1e-7, 1e100, -0.0, 123456789.123456789]},
    {"large": "x" * 1_500_000 + "é" * 200_000, "tail": "end"},
]


@pytest.mark.parametrize("index", range(len(PAYLOADS)))
def test_a_payload_reads_back_exactly(store, index: int) -> None:
    payload = PAYLOADS[index]
    [stored] = store.append([ev(payload)])
    for got in (store.get(stored.seq), store.get_by_id(stored.envelope.id), next(store.read())):
        assert got is not None
        assert got.envelope == stored.envelope
        assert _same_json(got.payload, payload)


def test_a_lone_surrogate_is_stored_escaped_as_the_log_stores_it(store) -> None:
    payload = {"name": "caf\udce9.txt", "keys": {"k\ud800": ["\udfff"]}}
    [stored] = store.append([ev(payload, session="s\udce9")])
    got = store.get(stored.seq)
    assert got is not None
    assert _same_json(got.payload, escape_surrogates(payload))
    assert got.payload["name"] == "caf\\udce9.txt"
    assert got.envelope.session == "s\\udce9" == stored.envelope.session


def test_seqs_are_consecutive_and_reads_filter_and_page(store) -> None:
    first = store.append([ev({"i": i}, session=f"s{i % 3}") for i in range(5)])
    second = store.append([ev({"i": i}, session=f"s{i % 3}") for i in range(5, 4500)])
    assert [e.seq for e in first + second] == list(range(1, 4501))
    assert store.last_seq() == 4500 and store.count() == 4500
    assert [e.payload["i"] for e in store.read(after=4497)] == [4497, 4498, 4499]
    assert [e.seq for e in store.read(after=10, upto=13)] == [11, 12, 13]
    assert [e.seq for e in store.read(session="s1", limit=3)] == [2, 5, 8]
    assert [e.seq for e in store.read(sessions=["s0", "s2"], upto=6)] == [1, 3, 4, 6]
    assert list(store.read(sessions=[])) == [] and list(store.read(namespaces=[])) == []
    assert len(list(store.read(namespaces=["test"], by_seq=True))) == 4500
    assert list(store.read(namespaces=["other"])) == []
    assert store.get(4501) is None and store.get_by_id("nope") is None


def test_the_named_questions_answer_alike(store) -> None:
    rows = [
        ("a", "X", "s1", "hello world"),
        ("a", "Y", "s2", "needle here"),
        ("b", "X", "s1", "needle too"),
        ("a", "X", "s2", "hay"),
        ("a", "X", None, "a needle"),
    ]
    store.append(
        [
            PendingEvent(ns, t, 1, {"text": text}, id=f"id{n}", session=session)
            for n, (ns, t, session, text) in enumerate(rows, 1)
        ]
    )
    many = store.get_many([1, 3, 99])
    assert sorted(many) == [1, 3] and many[3].payload == {"text": "needle too"}
    assert store.seqs_of(["id1", "id3", "nope"]) == {"id1": 1, "id3": 3}
    assert store.holds([1, 2, 99, 2]) == {1, 2}
    assert store.any_after(4) and not store.any_after(5)
    assert store.any_after(2, namespaces=["b"]) and not store.any_after(3, namespaces=["b"])
    assert not store.any_after(0, namespaces=[])
    assert store.any_after(3, session="s2") and not store.any_after(4, session="s2")
    latest = store.latest("a", "X", sessions=["s1", "s2"])
    assert latest is not None and latest.seq == 4
    only_s1 = store.latest("a", "X", sessions=["s1"])
    assert only_s1 is not None and only_s1.seq == 1
    assert store.latest("a", "X", sessions=[]) is None
    assert store.seqs_containing(1, 5, "a", "needle") == [2, 5]
    assert store.seqs_containing(1, 4, "a", "needle") == [2]
    assert store.type_counts() == [("a", "X", 3, 1, 5), ("a", "Y", 1, 2, 2), ("b", "X", 1, 3, 3)]
    sessions = [tuple(row[:4]) for row in store.session_counts()]
    assert sessions == [("s2", 2, 2, 4), ("s1", 2, 1, 3)]
    assert [row[0] for row in store.session_counts(limit=1)] == ["s2"]


def test_append_new_stores_an_id_once(store) -> None:
    assert [e.seq for e in store.append_new([ev({"i": 1}, id="x"), ev({"i": 2}, id="y")])] == [1, 2]
    again = store.append_new([ev({"i": 1}, id="x"), ev({"i": 3}, id="z"), ev({"i": 4}, id="z")])
    assert [(e.envelope.id, e.payload) for e in again] == [("z", {"i": 3})]
    assert again[0].seq > 2  # SQLite may skip a seq an ignored duplicate drew; never reuse one
    assert store.append_new([ev({"i": 1}, id="x")]) == []
    assert [e.envelope.id for e in store.read()] == ["x", "y", "z"]


def test_a_duplicate_id_in_append_is_refused_and_takes_no_seq(store) -> None:
    store.append([ev({"i": 1}, id="x")])
    with pytest.raises(StoreError):
        store.append([ev({"i": 2}, id="y"), ev({"i": 3}, id="x")])
    assert store.count() == 1
    assert [e.seq for e in store.append([ev({"i": 4})])] == [2]


def test_a_refused_append_inside_a_transaction_leaves_the_rest_of_it(store) -> None:
    with store.atomic():
        store.append([ev({"i": 1}, id="a")])
        with pytest.raises(StoreError):
            store.append([ev({"i": 2}, id="b"), ev({"i": 3}, id="a")])
        store.append([ev({"i": 4}, id="c")])
    assert [e.envelope.id for e in store.read()] == ["a", "c"]


def test_a_failed_transaction_leaves_nothing_and_a_savepoint_only_its_own(store) -> None:
    with pytest.raises(RuntimeError), store.atomic():
        store.append([ev({"i": 1})])
        store.append_new([ev({"i": 2}, id="kept-out")])
        raise RuntimeError("boom")
    assert store.count() == 0 and store.last_seq() == 0
    with store.atomic():
        store.append([ev({"i": 1})])
        with pytest.raises(RuntimeError), store.atomic():
            store.append([ev({"i": 2})])
            raise RuntimeError("inner only")
        store.append([ev({"i": 3})])
    assert [(e.seq, e.payload["i"]) for e in store.read()] == [(1, 1), (2, 3)]
    # what the rolled-back append took is given back: an id kept out can come in later
    assert [e.seq for e in store.append_new([ev({"i": 5}, id="kept-out")])] == [3]


def test_events_can_never_be_updated_or_deleted(store, target: Target) -> None:
    store.append([ev({"i": 1})])
    tampering = ["UPDATE events SET payload = '{}'", "DELETE FROM events"]
    if target.kind == "postgres":  # SQLite has no TRUNCATE; its DELETE meets the trigger
        tampering.append("TRUNCATE events")
    for sql in tampering:
        with pytest.raises(AppendOnlyViolation), target.errors("tampering"), store.atomic() as c:
            c.execute(sql)
    assert [e.payload for e in store.read()] == [{"i": 1}]


def _open_connections(store, target: Target) -> int:
    """Connections open to the store: files this process holds open on the SQLite database
    (each connection holds the database and its WAL), or this database's client backends."""
    if target.kind == "sqlite":
        base = Path(target.where).resolve()
        wanted = {str(base), f"{base}-wal"}
        held = (Path("/proc/self/fd") / fd for fd in os.listdir("/proc/self/fd"))
        return sum(1 for link in held if _link(link) in wanted)
    row = store.connection.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend'"
    ).fetchone()
    return int(row[0])


def _link(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # closed meanwhile
        return ""


def test_a_thread_that_ended_does_not_keep_its_connection(store, target: Target) -> None:
    """Hermes runs a memory provider's prefetch on a new thread every turn; each thread's first
    read opens a connection. Kept until shutdown, a long chat held a file (on PostgreSQL, a
    server backend) open for every turn it had, until the process ran out of them."""
    store.append([ev({"n": 1})])
    before = _open_connections(store, target)
    for _ in range(30):
        reader = threading.Thread(target=store.last_seq)
        reader.start()
        reader.join(timeout=DEADLINE_S)
    after = _open_connections(store, target)
    # the last thread's connection waits for the next open; the ones before it are closed
    assert after - before <= 2 * (1 if target.kind == "postgres" else 2), (before, after)
    assert store.last_seq() == 1


def test_fold_positions_move_in_the_writers_transaction(store) -> None:
    assert store.position("fold") == 0
    with store.atomic() as conn:
        store.set_position(conn, "fold", 7)
    assert store.position("fold") == 7
    with pytest.raises(RuntimeError), store.atomic() as conn:
        store.set_position(conn, "fold", 9)
        raise RuntimeError("rolled back")
    assert store.position("fold") == 7


def test_reopening_applies_no_migration_twice(target: Target) -> None:
    first = target.open()
    first.append([ev({"i": 1})])
    first.close()
    again = target.open()
    assert again.migrate([]) == [] and again.count() == 1
    again.close()


# -- concurrency -------------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {root!r})
    from chronicle_engine.log.store import PendingEvent, SQLiteEventStore
    kind, where, name, batches, shared = {args!r}
    if kind == "sqlite":
        store = SQLiteEventStore(where)
    else:
        from chronicle_engine.log.postgres import PostgresEventStore
        store = PostgresEventStore(where)
    print("ready", flush=True)
    sys.stdin.readline()  # every writer starts at once
    stored = []
    for b in range(batches):
        own = [PendingEvent("test", "Thing", 1, {{"w": name, "b": b, "k": k}}, id=f"{{name}}-{{b}}-{{k}}")
               for k in range(b % 4 + 1)]
        stored += [e.envelope.id for e in store.append(own)]
        ids = [f"shared-{{(b * 3 + j) % shared}}" for j in range(3)]
        stored += [e.envelope.id for e in store.append_new(
            [PendingEvent("test", "Shared", 1, {{"id": i}}, id=i) for i in ids])]
        time.sleep(0.002)  # let the others in, however the machine schedules us
    store.close()
    print(json.dumps(stored))
    """
)


def _own_ids(name: str, batches: int) -> set[str]:
    return {f"{name}-{b}-{k}" for b in range(batches) for k in range(b % 4 + 1)}


def test_concurrent_appenders_in_threads_and_processes_lose_and_repeat_nothing(
    target: Target,
) -> None:
    """4 threads and 2 processes append (each its own events, and all of them the same shared
    ids through append_new) while a reader follows the log: every event is stored once, and no
    event ever appears behind what the reader has seen (on PostgreSQL, seqs also run 1..N)."""
    batches, shared = 60, 30
    store = target.open()
    stored_by: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    done = threading.Event()
    go = threading.Event()
    followed: list[int] = []

    def writer(name: str) -> None:
        own = target.open()
        try:
            go.wait(DEADLINE_S)
            ids: list[str] = []
            for b in range(batches):
                batch = [
                    PendingEvent(
                        "test", "Thing", 1, {"w": name, "b": b, "k": k}, id=f"{name}-{b}-{k}"
                    )
                    for k in range(b % 4 + 1)
                ]
                ids += [e.envelope.id for e in own.append(batch)]
                wanted = [f"shared-{(b * 3 + j) % shared}" for j in range(3)]
                ids += [
                    e.envelope.id
                    for e in own.append_new(
                        [PendingEvent("test", "Shared", 1, {"id": i}, id=i) for i in wanted]
                    )
                ]
                time.sleep(0.002)  # let the others in, however the machine schedules us
            stored_by[name] = ids
        except BaseException as exc:  # asserted below
            errors.append(exc)
        finally:
            own.close()

    def reader() -> None:
        follower = target.open()
        try:
            position = 0
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                finished = done.is_set()
                for event in follower.read(after=position):
                    assert event.seq > position, (position, event.seq)
                    position = event.seq
                    followed.append(event.seq)
                if finished:
                    return
                time.sleep(0.005)
        except BaseException as exc:
            errors.append(exc)
        finally:
            follower.close()

    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER.format(
                    root=str(ROOT), args=(target.kind, target.where, f"p{n}", batches, shared)
                ),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    threads = [threading.Thread(target=writer, args=(f"t{n}",)) for n in range(4)]
    follow = threading.Thread(target=reader)
    follow.start()
    for t in threads:
        t.start()
    release_together(processes)
    go.set()
    for n, process in enumerate(processes):
        out, err = process.communicate(timeout=DEADLINE_S)
        assert process.returncode == 0, err[-3000:]
        stored_by[f"p{n}"] = json.loads(out.strip().splitlines()[-1])
    for t in threads:
        t.join(timeout=DEADLINE_S)
    done.set()
    follow.join(timeout=DEADLINE_S)
    assert not errors, errors[:3]

    names = [f"t{n}" for n in range(4)] + ["p0", "p1"]
    expected = set().union(*(_own_ids(name, batches) for name in names))
    expected |= {f"shared-{i}" for i in range(shared)}
    claimed = [i for name in names for i in stored_by[name]]
    assert len(claimed) == len(set(claimed)) == len(expected)  # each id stored by one writer
    assert set(claimed) == expected
    log = list(store.read())
    seqs = [e.seq for e in log]
    assert len(seqs) == len(expected) and seqs == sorted(set(seqs))
    assert {e.envelope.id for e in log} == expected
    # Nothing appeared behind the follower: every seq it will ever find, it found in order.
    assert followed == seqs
    # The writers really ran at once: run one after another, they would leave one block each.
    # (Not every writer need be interleaved: under SQLite's process lock one thread may hold
    # its turn through all its batches.)
    order = [str(e.payload["w"]) for e in log if "w" in e.payload]
    runs = [w for i, w in enumerate(order) if i == 0 or order[i - 1] != w]
    assert len(runs) > len(names), " ".join(runs)
    if target.kind == "postgres":  # the counter gives back what a rollback or a duplicate took
        assert seqs == list(range(1, len(expected) + 1))
    store.close()


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from chronicle_engine.log.store import PendingEvent, SQLiteEventStore
    kind, where, run = {args!r}
    if kind == "sqlite":
        store = SQLiteEventStore(where)
    else:
        from chronicle_engine.log.postgres import PostgresEventStore
        store = PostgresEventStore(where)
    n = 0
    while True:
        n += 1
        batch = [PendingEvent("test", "Thing", 1, {{"run": run, "n": n, "k": k}},
                              id=f"{{run}}-{{n}}-{{k}}") for k in range(3)]
        for e in store.append_new(batch):
            print(e.envelope.id, flush=True)  # acknowledged: the append returned
    """
)


def test_writers_killed_mid_append_lose_nothing_acknowledged(target: Target) -> None:
    """A writer process is SIGKILLed at a random moment, again and again: every event an append
    returned is in the log, nothing is stored twice, seqs still rise (on PostgreSQL with no gap:
    a killed transaction gives its numbers back), and the next writer is not blocked."""
    import random

    rng = random.Random(17)
    kills = 8
    acknowledged: list[str] = []
    store = target.open()  # the schema exists before the first writer starts
    for run in range(kills):
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _KILLED_WRITER.format(root=str(ROOT), args=(target.kind, target.where, f"r{run}")),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        assert process.stdout is not None

        def collect(out=process.stdout, into=lines) -> None:
            into.extend(line.strip() for line in out)

        reader = threading.Thread(target=collect)
        reader.start()
        deadline = time.monotonic() + 60
        while not lines and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.01)  # wait until it writes, then kill it somewhere in its stride
        time.sleep(rng.uniform(0.0, 0.3))
        process.kill()
        process.wait(timeout=30)
        reader.join(timeout=30)
        assert process.stderr is not None
        stderr = process.stderr.read()
        process.stdout.close()
        process.stderr.close()
        assert lines, f"writer {run} stored nothing before it was killed: {stderr[-2000:]}"
        acknowledged += [line for line in lines if line]
    log = list(store.read())
    ids = [e.envelope.id for e in log]
    seqs = [e.seq for e in log]
    assert set(acknowledged) <= set(ids)
    assert len(ids) == len(set(ids)) and seqs == sorted(set(seqs))
    if target.kind == "postgres":
        assert seqs == list(range(1, len(seqs) + 1))
    [after] = store.append([ev({"after": "kills"})])  # nothing left holding the log
    assert after.seq > seqs[-1]
    store.close()


def test_restore_keeps_seqs_gaps_included_skips_held_ids_and_refuses_going_back(store) -> None:
    events = [
        StoredEvent(
            Envelope(seq, f"e{seq}", "test", "Thing", 1, "2026-01-01T00:00:00Z", "s"), {"n": seq}
        )
        for seq in (1, 3, 4, 9)
    ]
    stored = store.restore(events[:2])
    assert [e.seq for e in stored] == [1, 3]
    assert [e.seq for e in store.restore(events)] == [4, 9]  # e1 and e3 are held: skipped
    assert [(e.seq, e.envelope.id, e.payload) for e in store.read()] == [
        (e.seq, e.envelope.id, e.payload) for e in events
    ]
    assert store.restore(events) == []  # a second import stores nothing
    late = StoredEvent(Envelope(7, "late", "test", "Thing", 1, "2026-01-01T00:00:00Z", "s"), {})
    with pytest.raises(UsageError, match="not above seq 9"):
        store.restore([late])
    [appended] = store.append([ev({"after": "restore"})])
    assert appended.seq == 10 and store.last_seq() == 10
