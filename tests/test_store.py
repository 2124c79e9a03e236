"""The event store's contract, run against an in-memory store and a WAL file alike."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronicle_engine.errors import (
    AppendOnlyViolation,
    StoreBusy,
    StoreError,
    StoreReadOnly,
    UsageError,
)
from chronicle_engine.log.store import PendingEvent, SQLiteEventStore, sqlite_errors


def ev(i: int, *, session: str | None = "s", id: str | None = None) -> PendingEvent:
    extra = {"id": id} if id else {}
    return PendingEvent("test", "Thing", 1, {"i": i}, session=session, **extra)


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    s = SQLiteEventStore(":memory:" if request.param == "memory" else tmp_path / "log.db")
    yield s
    s.close()


def test_append_assigns_monotonic_seq_and_round_trips(store: SQLiteEventStore) -> None:
    first = store.append([ev(1), ev(2)])
    second = store.append([ev(3)])
    assert [e.seq for e in first + second] == [1, 2, 3]
    read = list(store.read())
    assert [(e.seq, e.payload) for e in read] == [(1, {"i": 1}), (2, {"i": 2}), (3, {"i": 3})]
    assert read[0].envelope == first[0].envelope
    assert store.last_seq() == 3 and store.count() == 3


def test_text_a_payload_repeats_is_stored_once_and_read_back_exactly(
    store: SQLiteEventStore,
) -> None:
    said = "the boiler service is due in October, said the engineer"
    payload = {
        "role": "user",
        "message": {"role": "user", "content": said},
        "text": said,
        "person_text": said,
        "note": "short",
        "other": "short",
        "list": [said],
    }
    (stored,) = store.append([PendingEvent("test", "Said", 1, payload, session="s")])
    with store.reading() as conn:
        (row,) = conn.execute("SELECT payload FROM events WHERE seq = ?", (stored.seq,)).fetchone()
    assert row.count(said) == 2  # the content, and the list (only fields are shared)
    got = store.get(stored.seq)
    assert got is not None
    assert got.payload == payload and list(got.payload) == list(payload)  # order kept too
    assert [e.payload for e in store.read()] == [payload]
    assert store.get_many([stored.seq])[stored.seq].payload == payload
    with pytest.raises(UsageError):
        store.append([PendingEvent("test", "Said", 1, {"@same": {}}, session="s")])


_LONG = ["a text long enough to be held once, the first", "a text long enough to be held once, two"]
_TEXTS = st.sampled_from(["short", "x" * 23, "y" * 24, *_LONG]) | st.text(max_size=30)
_VALUES = st.one_of(
    _TEXTS,
    st.integers(),
    st.none(),
    st.lists(_TEXTS, max_size=2),
    st.dictionaries(st.sampled_from(["role", "content", "name"]), _TEXTS, max_size=3),
)
_PAYLOADS = st.dictionaries(
    st.sampled_from(["role", "text", "message", "note", "person_text", "n", "list"]),
    _VALUES,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(_PAYLOADS)
def test_any_payload_reads_back_exactly_and_its_repeated_text_is_held_once(
    payload: dict[str, object],
) -> None:
    with SQLiteEventStore(":memory:") as store:
        (stored,) = store.append([PendingEvent("test", "Said", 1, payload, session="s")])
        with store.reading() as conn:
            (row,) = conn.execute(
                "SELECT payload FROM events WHERE seq = ?", (stored.seq,)
            ).fetchone()
        got = store.get(stored.seq)
    assert got is not None and got.payload == payload and list(got.payload) == list(payload)
    # The rule, written out: a top-level text of 24 characters or more is shared when it
    # repeats a text seen before it, at the top level or one level down (a message's content).
    seen: set[str] = set()
    shared = False
    for value in payload.values():
        if isinstance(value, str) and len(value) >= 24:
            shared = shared or value in seen
            seen.add(value)
        elif isinstance(value, dict):
            seen.update(t for t in value.values() if isinstance(t, str) and len(t) >= 24)
    assert ("@same" in json.loads(row)) == shared


_ODD = st.sampled_from(["caf\udce9 and more text after it", "\ud800", "é" * 30, "\u2028"])


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["role", "text", "message", "person_text", "n", "list", "caf\udce9"]),
        st.one_of(_VALUES, _ODD, st.floats(allow_nan=True)),
        max_size=6,
    ),
    st.sampled_from([("test", "Said", 1), ("chronicle.chat", "MessageCaptured", 1),
                     ("other", "MessageCaptured", 1)]),
    st.one_of(st.none(), st.just("s"), st.just("s\udce9")),
)  # fmt: skip
def test_the_rows_append_writes_are_the_general_rules_text(
    payload: dict[str, object], kind: tuple[str, str, int], session: str | None
) -> None:
    """`storable`'s shortcuts (no bookkeeping for a plain payload, the C encoder called
    directly) write exactly what the general rule writes: surrogates escaped, then
    `_stored_payload` with the type's template, then the JSON encoder's text."""
    import chronicle_engine.capture.events  # noqa: F401  (registers the message template)
    from chronicle_engine.log.store import _TEMPLATE_OF, _stored_payload, storable
    from chronicle_engine.storable import escape_surrogates, escape_text

    event = PendingEvent(*kind, payload, session=session)
    escaped = {escape_text(k): escape_surrogates(v) for k, v in payload.items()}
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    try:
        expected = encoder.encode(_stored_payload(escaped, _TEMPLATE_OF.get(kind)))
    except UsageError:
        with pytest.raises(UsageError):
            storable([event])
        return
    (stored,), (text,) = storable([event])
    assert text == expected
    assert stored.session == (None if session is None else escape_text(session))


def test_a_captured_message_leaves_its_defaults_out_of_the_row_and_reads_back_whole(
    store: SQLiteEventStore,
) -> None:
    from chronicle_engine.capture.events import MESSAGE_DEFAULTS, MESSAGE_FIELDS, MessageCaptured

    said = "the boiler service is due in October, said the engineer"
    event = MessageCaptured(
        role="user",
        message={"role": "user", "content": said},
        fingerprint="f" * 32,
        speaker="person",
        text=said,
        person_text=said,
        turn=3,
        parent="m1",
    )
    payload = event.model_dump(mode="json")
    (stored,) = store.append(
        [PendingEvent("chronicle.chat", "MessageCaptured", 1, payload, session="s")]
    )
    with store.reading() as conn:
        (row,) = conn.execute("SELECT payload FROM events WHERE seq = ?", (stored.seq,)).fetchone()
    kept = json.loads(row)
    assert kept["@t"] == 1 and row.count(said) == 1
    left_out = {
        "role",
        "text",
        "user_id",
        "profile",
        "agent_context",
        "tool_call_ids",
        "host_spans",
    }
    assert not left_out & set(kept)
    assert kept["turn"] == 3 and kept["parent"] == "m1"  # not their defaults: kept
    first, second = store.get(stored.seq), store.get(stored.seq)
    assert first is not None and second is not None
    assert first.payload == payload and list(first.payload) == list(payload)  # order kept
    first.payload["tool_call_ids"].append("c1")  # each read owns its lists
    assert second.payload["tool_call_ids"] == []
    # The template is part of the stored format: it must say what the model says.
    assert tuple(MessageCaptured.model_fields) == MESSAGE_FIELDS
    assert {
        name: info.default
        for name, info in MessageCaptured.model_fields.items()
        if not info.is_required()
    } == MESSAGE_DEFAULTS
    # A searchable text that is not the content (a credential masked) is stored.
    masked = event.model_copy(update={"text": "the boiler [masked]", "person_text": ""})
    (other,) = store.append(
        [
            PendingEvent(
                "chronicle.chat",
                "MessageCaptured",
                1,
                masked.model_dump(mode="json"),
                session="s",
            )
        ]
    )
    got = store.get(other.seq)
    assert got is not None and got.payload == masked.model_dump(mode="json")
    assert got.payload["text"] == "the boiler [masked]" and got.payload["person_text"] == ""
    # Another version of the type is stored whole.
    (other,) = store.append(
        [PendingEvent("chronicle.chat", "MessageCaptured", 2, payload, session="s")]
    )
    with store.reading() as conn:
        (row,) = conn.execute("SELECT payload FROM events WHERE seq = ?", (other.seq,)).fetchone()
    assert "@t" not in json.loads(row) and "agent_context" in json.loads(row)


def test_read_filters_and_pages(store: SQLiteEventStore) -> None:
    store.append([ev(i, session="a" if i % 2 else "b") for i in range(1, 5001)])
    assert len(list(store.read())) == 5000  # crosses several pages
    assert [e.seq for e in store.read(after=10, upto=14)] == [11, 12, 13, 14]
    assert all(e.envelope.session == "a" for e in store.read(session="a"))
    assert len(list(store.read(sessions=["a", "b"], limit=7))) == 7
    assert list(store.read(sessions=[])) == []
    assert store.get(5000) is not None and store.get(5001) is None


def test_events_can_never_be_updated_or_deleted(store: SQLiteEventStore) -> None:
    store.append([ev(1)])
    for sql in ("UPDATE events SET payload = '{}'", "DELETE FROM events"):
        with pytest.raises(AppendOnlyViolation), sqlite_errors("tampering"), store.atomic() as c:
            c.execute(sql)
    assert [e.payload for e in store.read()] == [{"i": 1}]


def test_append_new_is_idempotent_by_id(store: SQLiteEventStore) -> None:
    assert len(store.append_new([ev(1, id="x"), ev(2, id="y")])) == 2
    again = store.append_new([ev(1, id="x"), ev(3, id="z")])
    assert [e.envelope.id for e in again] == ["z"]
    assert store.count() == 3


def test_failed_transaction_leaves_nothing(store: SQLiteEventStore) -> None:
    with pytest.raises(RuntimeError), store.atomic() as conn:
        conn.execute(
            "INSERT INTO events(id, namespace, type, version, created_at, session, payload)"
            " VALUES ('a', 'n', 't', 1, 'now', NULL, '{}')"
        )
        raise RuntimeError("boom")
    assert store.count() == 0


def test_nested_atomic_is_a_savepoint(store: SQLiteEventStore) -> None:
    with store.atomic():
        store.append([ev(1)])
        with pytest.raises(RuntimeError), store.atomic():
            store.append([ev(2)])
            raise RuntimeError("inner only")
        store.append([ev(3)])
    assert [e.payload["i"] for e in store.read()] == [1, 3]


def test_many_threads_append_without_loss_or_lock_errors(store: SQLiteEventStore) -> None:
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(50):
                store.append([ev(n * 1000 + i), ev(n * 1000 + i)])
                list(store.read(after=max(0, store.last_seq() - 5)))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    seqs = [e.seq for e in store.read()]
    assert seqs == list(range(1, 8 * 50 * 2 + 1))


def _of(namespace: str, i: int) -> PendingEvent:
    return PendingEvent(namespace, "Thing", 1, {"i": i}, session="s")


def test_any_after_remembers_only_committed_stretches_without_the_namespace(tmp_path) -> None:
    path = tmp_path / "log.db"
    store, other = SQLiteEventStore(path), SQLiteEventStore(path)
    store.append([_of("a", i) for i in range(5)])
    assert not store.any_after(0, namespaces=["b"])  # (0, 5] holds no "b": remembered
    store.append([_of("a", 5)])
    assert not store.any_after(2, namespaces=["b"]) and not store.any_after(0, namespaces=["b"])
    other.append([_of("b", 6)])  # another writer (process)
    assert store.any_after(0, namespaces=["b"]) and not store.any_after(7, namespaces=["b"])
    assert store.any_after(3, namespaces=["b"]) and not store.any_after(7, namespaces=["a"])
    # Seen inside a transaction that then rolls back, a stretch is not a fact: its seqs are
    # taken again by the next commit.
    with pytest.raises(RuntimeError), store.atomic():
        store.append([_of("a", i) for i in range(3)])
        assert not store.any_after(7, namespaces=["c"])
        raise RuntimeError("roll back")
    (c,) = other.append([_of("c", 9)])
    assert c.seq == 8 and store.any_after(7, namespaces=["c"])
    store.close()
    other.close()


def test_two_stores_on_one_file_behave_like_two_processes(tmp_path) -> None:
    path = tmp_path / "shared.db"
    a, b = SQLiteEventStore(path), SQLiteEventStore(path)
    errors: list[BaseException] = []

    def writer(store: SQLiteEventStore, base: int) -> None:
        try:
            for i in range(100):
                store.append([ev(base + i)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s, k * 1000)) for k, s in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert a.count() == b.count() == 200
    a.close()
    b.close()


def _open_together(path, stores: int) -> list[BaseException]:
    """Open `stores` stores on `path` at the same moment, as that many processes would."""
    start = threading.Barrier(stores)
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            start.wait(timeout=30)
            SQLiteEventStore(path).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return errors


def test_stores_opening_a_new_file_at_the_same_moment_all_open(tmp_path) -> None:
    """Putting a fresh file in WAL mode needs it whole, and SQLite refuses at once (no busy
    wait) when another connection opens it then: two hosts starting on a new store must both
    start. Each round six stores open one new file together."""
    for round_ in range(60):
        path = tmp_path / f"new{round_}.db"
        errors = _open_together(path, 6)
        assert errors == [], f"round {round_}: {errors[0]!r}"
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_wal_mode_and_checkpoint_on_close(tmp_path) -> None:
    path = tmp_path / "wal.db"
    store = SQLiteEventStore(path)
    store.append([ev(1)])
    assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    wal = tmp_path / "wal.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1


def test_read_only_connection_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "ro.db"
    SQLiteEventStore(path).close()
    store = SQLiteEventStore(f"file:{path}?mode=ro")
    with pytest.raises(StoreReadOnly):
        store.append([ev(1)])
    store.close()


def test_the_payload_encoder_falls_back_to_the_public_one_if_the_private_one_differs() -> None:
    # Appends encode through CPython's private c_make_encoder (same text, fewer frames); a
    # Python whose private encoder takes other arguments, or writes another text, gets the
    # public encoder, never a different payload text.
    import json

    from chronicle_engine.log import store as log_store

    fast = log_store._json_encoder()
    assert fast is not log_store._ENCODER.encode  # (this Python has the private encoder)
    value = {"k": ["é", 1.5, None, {"n": float("inf")}]}
    assert fast(value) == log_store._ENCODER.encode(value)
    real = json.encoder.c_make_encoder

    def other_arguments(*args: object) -> object:
        return real(*args[:-1])  # one argument short: raises

    def other_text(*args: object) -> object:
        return lambda value, level: ["{}"]

    for changed in (other_arguments, other_text):
        assert log_store._json_encoder(changed) == log_store._ENCODER.encode


def test_sqlite_errors_are_told_apart_by_sqlite_code_not_by_words_in_the_message(
    tmp_path: Path,
) -> None:
    """A table or column whose name holds "locked" or "readonly" is not a lock or a read-only
    file: the error's SQLite code decides, so a caller does not wait out a mistake."""
    store = SQLiteEventStore(tmp_path / "codes.db")
    try:
        with pytest.raises(StoreError) as missing, sqlite_errors("reading"):
            store.connection.execute("SELECT * FROM locked_readonly_busy")
        assert type(missing.value) is StoreError
        assert "no such table" in str(missing.value)
        holder = SQLiteEventStore(tmp_path / "codes.db")
        try:
            holder.connection.execute("BEGIN IMMEDIATE")
            waiting = sqlite3.connect(tmp_path / "codes.db", timeout=0)
            with pytest.raises(StoreBusy), sqlite_errors("writing"):
                waiting.execute("BEGIN IMMEDIATE")
            waiting.close()
            holder.connection.execute("ROLLBACK")
        finally:
            holder.close()
    finally:
        store.close()
