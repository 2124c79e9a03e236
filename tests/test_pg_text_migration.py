"""A PostgreSQL store written before text was escaped (log/pg_text.py), migrated when this code
opens it: before, a NUL in text was stored as U+FFFD and U+0001 as itself, so the user ids
`bob\\x00` and `bob\\ufffd` shared one recall scope. The old form is written here by the old
map itself (a dumper replacing NUL by U+FFFD, no loader), through the slots as Hermes drives
them; the migrations' records are then dropped, as in a store from before them."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
import yaml
from psycopg.abc import Buffer
from psycopg.rows import TupleRow
from psycopg.types.string import StrDumperUnknown
from test_provider import core_of

from chronicle_engine.log import postgres as log_postgres
from chronicle_engine.log.pg_text import ESCAPE
from provider import ChronicleMemoryProvider

RECALL_AT = "SELECT position FROM fold_positions WHERE fold = 'recall'"
NEW = ("log.m003_escaped_text", "recall.m010_scopes_from_the_log")
SAID = {
    # user: (session, what they said)
    "bob\x00": ("tg\x00", "My safe combination is hidden under the red teapot."),
    "bob\ufffd": ("tg\ufffd", "My bike lock code sits behind the green clock."),
    f"bob{ESCAPE}0": (f"tg{ESCAPE}0", "My passport lies inside the yellow drawer."),
}
ASKED = {
    "bob\x00": "safe combination red teapot",
    "bob\ufffd": "bike lock code green clock",
    f"bob{ESCAPE}0": "passport yellow drawer",
}


class _OldDumper(StrDumperUnknown):
    """How text was sent before log.m003_escaped_text."""

    def dump(self, obj: str) -> Buffer | None:
        return super().dump(obj.replace("\x00", "\ufffd"))


def _old_nul_safe(conn: psycopg.Connection[TupleRow]) -> None:
    conn.adapters.register_dumper(str, _OldDumper)


def _memories(home: Path, user: str, session: str) -> list[str]:
    """Whose words a new session of `user` finds, by prefetch and by search."""
    reader = ChronicleMemoryProvider()
    reader.initialize(session, hermes_home=str(home), platform="telegram", user_id=user)
    try:
        found = []
        for owner, query in ASKED.items():
            block = reader.prefetch(f"where is my {query}?")
            hits = json.loads(reader.handle_tool_call("chronicle_search", {"query": query}))
            if query.split()[-2] in block or hits["count"]:
                found.append(owner)
        return found
    finally:
        reader.shutdown()


@pytest.fixture
def old_home(tmp_path: Path, postgres_cluster, monkeypatch: pytest.MonkeyPatch):
    """A Hermes home on a PostgreSQL store that the old map wrote, its new migrations unrecorded."""
    from postgres_support import own_schema

    with own_schema(postgres_cluster) as conninfo:
        home = tmp_path / "hermes_home"
        home.mkdir()
        (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": {"store": conninfo}}))
        with monkeypatch.context() as old:
            old.setattr(log_postgres, "nul_safe", _old_nul_safe)
            for user, (session, words) in SAID.items():
                writer = ChronicleMemoryProvider()
                writer.initialize(session, hermes_home=str(home), platform="telegram", user_id=user)
                messages = [
                    {"role": "user", "content": words},
                    {"role": "assistant", "content": "Noted."},
                ]
                writer.sync_turn(words, "Noted.", session_id=session, messages=messages)
                writer.shutdown()
            # the leak as the old code had it
            assert _memories(home, "bob\x00", "tg-old") == ["bob\x00", "bob\ufffd"]
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("DELETE FROM migrations WHERE name = ANY(%s)", (list(NEW),))
            # A store that old had no recall_questions either (recall.m013, after m010, which
            # empties recall's tables on this store: it must make that one first).
            conn.execute("DROP TABLE recall_questions")
            conn.execute("DELETE FROM migrations WHERE name = 'recall.m013_questions'")
            (scopes,) = conn.execute("SELECT count(*) FROM recall_scopes").fetchone() or (0,)
            assert scopes == 2  # bob\x00 and bob\ufffd in one
        yield home


def test_an_old_store_is_migrated_and_the_two_users_no_longer_share_a_scope(
    old_home: Path,
) -> None:
    for n, user in enumerate(SAID):
        assert _memories(old_home, user, f"tg-new-{n}") == [user]
    core = core_of(old_home)
    try:
        assert set(NEW) <= core.store.migrated()
        # U+0001 was stored as itself: escaped now, so the session reads back as it was sent
        assert {e.envelope.session for e in core.store.read(session=f"tg{ESCAPE}0")} == {
            f"tg{ESCAPE}0"
        }
        said = SAID[f"bob{ESCAPE}0"][1]
        assert [m["content"] for m in core.sessions.projection(f"tg{ESCAPE}0")] == [said, "Noted."]
        # a NUL in the log's own columns was stored as U+FFFD, and a column cannot say which
        # it was: that session reads back with U+FFFD, beside the one that held U+FFFD
        sessions = {e.envelope.session for e in core.store.read(session="tg\ufffd")}
        assert sessions == {"tg\ufffd"} and not list(core.store.read(session="tg\x00"))
        # while the payload kept the exact text
        said = [
            e.payload["message"]["content"]
            for e in core.store.read(session="tg\ufffd")
            if e.envelope.type == "MessageCaptured"
        ]
        assert SAID["bob\x00"][1] in said and SAID["bob\ufffd"][1] in said
    finally:
        core.shutdown()


def test_a_store_holding_no_merged_scope_keeps_its_recall_rows(
    tmp_path: Path, postgres_cluster
) -> None:
    from postgres_support import own_schema

    with own_schema(postgres_cluster) as conninfo:
        home = tmp_path / "hermes_home"
        home.mkdir()
        (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": {"store": conninfo}}))
        writer = ChronicleMemoryProvider()
        writer.initialize("tg-1", hermes_home=str(home), platform="telegram", user_id="ann")
        words = "My umbrella hangs on the blue hook."
        messages = [{"role": "user", "content": words}, {"role": "assistant", "content": "Ok."}]
        writer.sync_turn(words, "Ok.", session_id="tg-1", messages=messages)
        writer.handle_tool_call("chronicle_search", {"query": "umbrella"})  # recall folds it
        writer.shutdown()
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("DELETE FROM migrations WHERE name = ANY(%s)", (list(NEW),))
            before = conn.execute(RECALL_AT).fetchall()
            # another program's table in the same schema is not the migration's to rewrite
            conn.execute("CREATE TABLE other_program (t TEXT)")
            conn.execute("INSERT INTO other_program VALUES ('a' || chr(1) || '0')")
        core = core_of(home)
        try:
            core.recall.catch_up()  # (builds recall, and runs its migrations)
            assert set(NEW) <= core.store.migrated()
        finally:
            core.shutdown()
        with psycopg.connect(conninfo, autocommit=True) as conn:
            after = conn.execute(RECALL_AT).fetchall()
            assert conn.execute("SELECT t FROM other_program").fetchall() == [(f"a{ESCAPE}0",)]
        assert after == before == [(2,)]  # not folded again


def test_an_old_row_holding_another_rows_escaped_form_does_not_stop_the_migration(
    postgres_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old map stored U+0001 as itself, so one unique id may already read as another's
    escaped form (`a` U+0001 `1` beside `a` U+0001); PostgreSQL checks a unique key at each row
    an UPDATE writes, so the rows are escaped longest first (a whole-column UPDATE in the
    table's order failed here, and then at every later open)."""
    from postgres_support import own_schema

    from chronicle_engine.log.store import PendingEvent

    ids = [f"a{ESCAPE}", f"a{ESCAPE}1", f"a{ESCAPE}11"]
    with own_schema(postgres_cluster) as conninfo:
        with monkeypatch.context() as old:
            old.setattr(log_postgres, "nul_safe", _old_nul_safe)
            store = log_postgres.PostgresEventStore(conninfo)
            store.migrate(log_postgres.LOG_MIGRATIONS)
            store.append([PendingEvent("test", "T", 1, {}, id=i, session="s") for i in ids])
            store.close()
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("DELETE FROM migrations WHERE name = 'log.m003_escaped_text'")
            raw = [r[0] for r in conn.execute("SELECT id FROM events ORDER BY seq")]
            assert raw == ids  # (as the old map wrote them)
        store = log_postgres.PostgresEventStore(conninfo)
        try:
            assert "log.m003_escaped_text" in store.migrated()
            assert [e.envelope.id for e in store.read(session="s")] == ids
        finally:
            store.close()
        with psycopg.connect(conninfo, autocommit=True) as conn:
            escaped = [r[0] for r in conn.execute("SELECT id FROM events ORDER BY seq")]
            assert escaped == [i.replace(ESCAPE, f"{ESCAPE}1") for i in ids]
