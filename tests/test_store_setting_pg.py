"""`chronicle.store` selects PostgreSQL: the setting, the core's wiring of every twin, and a chat
driven through both slots (provider.py, context.py) on a PostgreSQL store named by config.yaml.

The server is the session's throwaway cluster (tests/postgres_support.py); each test has a
schema of its own, named in the connection string's `options`, as a host would name a database.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from postgres_support import own_schema
from test_compaction_engine import turn
from test_compaction_support import load_plugin

from chronicle_engine.config import Config, is_postgres, load_hermes_config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.errors import UsageError
from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.messages import is_own_handoff
from provider import ChronicleMemoryProvider

SECRET = "s3cr3t-never-logged"


# -- the setting ---------------------------------------------------------------------------


def test_the_default_store_is_sqlite_at_db_path(tmp_path: Path) -> None:
    config = Config({}, hermes_home=tmp_path)
    assert not config.postgres
    assert config.location() == str(tmp_path / "chronicle" / "chronicle.db")
    assert Config({"store": "sqlite"}, hermes_home=tmp_path).location() == config.location()


def test_a_sqlite_path_holding_an_equals_sign_stays_a_sqlite_file(tmp_path: Path) -> None:
    # A libpq string starts with one of libpq's keywords; a path may hold "=" anywhere.
    home = tmp_path / "home=work"
    core = ChronicleCore.for_hermes_home(home)
    try:
        assert not core.postgres
        core.capture.capture_messages("s1", [{"role": "user", "content": "kept in SQLite"}])
        assert (home / "chronicle" / "chronicle.db").exists()
    finally:
        core.shutdown()
    assert is_postgres("dbname=chronicle") and is_postgres(" host=/var/run/postgresql")
    assert not is_postgres("home=work/chronicle.db") and not is_postgres(str(home))


@pytest.mark.parametrize(
    "store",
    [
        "postgresql://chronicle@db.internal:5432/chronicle",
        "postgres://db.internal/chronicle?sslmode=require",
        "host=db.internal port=5432 dbname=chronicle user=chronicle",
    ],
)
def test_a_connection_string_selects_postgresql(tmp_path: Path, store: str) -> None:
    config = Config({"store": store}, hermes_home=tmp_path)
    assert config.postgres and config.location() == store
    # this host's own files stay beside db_path
    assert config.db_path() == tmp_path / "chronicle" / "chronicle.db"


@pytest.mark.parametrize(
    "store",
    [
        f"postgresql://chronicle:{SECRET}@db.internal/chronicle",
        f"postgresql://db.internal/chronicle?password={SECRET}",
        f"host=db.internal dbname=chronicle password={SECRET}",
        f"host=db.internal dbname=chronicle PASSWORD = '{SECRET}'",
    ],
)
def test_a_password_in_config_is_refused_and_never_logged(
    tmp_path: Path, store: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"chronicle": {"store": store}}))
    with caplog.at_level(logging.DEBUG), pytest.raises(UsageError) as refused:
        load_hermes_config(tmp_path).location()  # refused when a core would open it
    assert "holds a password" in str(refused.value) and "store_password_env" in str(refused.value)
    assert SECRET not in str(refused.value)
    assert SECRET not in caplog.text


@pytest.mark.parametrize("store", ["mysql://db/chronicle", "/var/lib/chronicle.db", 5432])
def test_a_store_that_names_nothing_usable_is_refused(tmp_path: Path, store: object) -> None:
    # Falling back to SQLite would split one memory between two places.
    config = Config({"store": store}, hermes_home=tmp_path)
    assert config.postgres  # never SQLite in its place
    with pytest.raises(UsageError, match="postgresql:// URI or a libpq connection string"):
        config.location()


def test_turns_wait_on_disk_while_chronicle_store_is_refused(tmp_path: Path) -> None:
    # A password written into the DSN is a likely first try: the slots refuse to open the
    # store, say why once, and keep every turn on disk until config.yaml is put right.
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        yaml.safe_dump({"chronicle": {"store": f"postgresql://u:{SECRET}@127.0.0.1:9/db"}})
    )
    provider = ChronicleMemoryProvider()
    provider.initialize("s1", hermes_home=str(home), platform="cli")
    said = [{"role": "user", "content": "remember the boiler is due in October"}]
    provider.sync_turn(said[0]["content"], "", session_id="s1", messages=said)
    provider.shutdown()
    waiting = [p for p in home.rglob("*") if p.is_file() and p.name != "config.yaml"]
    assert waiting, "the turn must wait on disk"
    assert any("boiler" in p.read_text(errors="replace") for p in waiting)
    assert all(SECRET not in p.read_text(errors="replace") for p in waiting)


def test_the_password_comes_from_the_variable_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Config(
        {"store": "host=h dbname=d", "store_password_env": "CHRONICLE_PG_PASSWORD"},
        hermes_home=tmp_path,
    )
    monkeypatch.delenv("CHRONICLE_PG_PASSWORD", raising=False)
    with pytest.raises(UsageError, match="CHRONICLE_PG_PASSWORD, which is not set"):
        config.store_password()
    monkeypatch.setenv("CHRONICLE_PG_PASSWORD", SECRET)
    assert config.store_password() == SECRET
    assert Config({"store": "host=h dbname=d"}, hermes_home=tmp_path).store_password() is None


# -- a PostgreSQL server with a password ------------------------------------------------------


@pytest.fixture
def password_dsn(postgres_cluster: Any) -> Iterator[str]:
    """A conninfo (no password in it) for a role that must give its password SECRET (scram,
    over TCP), with a schema of its own."""
    role = "chronicle_pw"
    with psycopg.connect(postgres_cluster.conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{SECRET}'")
        conn.execute(f"GRANT ALL ON DATABASE chronicle_test TO {role}")
    hba = postgres_cluster.data / "pg_hba.conf"
    original = hba.read_text()
    try:
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + original)
        with psycopg.connect(postgres_cluster.conninfo(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        with own_schema(postgres_cluster) as conninfo:
            with psycopg.connect(postgres_cluster.conninfo(), autocommit=True) as conn:
                schema = conninfo.split("search_path=")[1].rstrip("'")
                conn.execute(f"GRANT ALL ON SCHEMA {schema} TO {role}")
            yield conninfo.replace("user=chronicle", f"user={role}")
    finally:
        hba.write_text(original)
        with psycopg.connect(postgres_cluster.conninfo(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_the_password_reaches_the_server_and_nothing_shows_it(
    password_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store connects with the password the environment holds, and neither the store, the
    core nor the registry key shows it."""
    dsn = password_dsn
    settings = {"store": dsn, "store_password_env": "CHRONICLE_PG_PASSWORD"}
    monkeypatch.setenv("CHRONICLE_PG_PASSWORD", "wrong")
    with pytest.raises(Exception, match="password authentication failed"):
        ChronicleCore(dsn, Config(settings, hermes_home=tmp_path))
    monkeypatch.setenv("CHRONICLE_PG_PASSWORD", SECRET)
    core = ChronicleCore.get(dsn, config=Config(settings, hermes_home=tmp_path))
    try:
        assert core.postgres and core.store.count() == 0
        shown = " ".join([repr(core), repr(core.store), core.location, *ChronicleCore._registry])
        assert SECRET not in shown
    finally:
        core.shutdown()


def test_memory_setup_answers_open_the_postgresql_store(
    password_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hermes memory setup`'s questions as Hermes 0.19.0 reads a provider's schema: the store,
    the variable that holds the password, then (only when that is the one setup keeps) the
    password itself, masked, which Hermes writes to $HERMES_HOME/.env with its own writer and
    loads into the environment at start. The answers open the store; config.yaml never holds
    the password."""
    from hermes_cli.env_loader import load_hermes_dotenv
    from hermes_cli.memory_setup import _write_env_vars

    from provider import SETUP_PASSWORD_ENV

    monkeypatch.setenv(SETUP_PASSWORD_ENV, "")  # (unset again at the end: the loader sets it)
    home = tmp_path / "hermes_home"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump({"memory": {"provider": "chronicle"}}))
    provider = ChronicleMemoryProvider()
    schema = {field["key"]: field for field in provider.get_config_schema()}
    assert list(schema) == ["store", "store_password_env", "store_password", "db_path"]
    secret = schema["store_password"]
    assert secret["secret"] and secret["env_var"] == SETUP_PASSWORD_ENV
    assert secret["when"] == {"store_password_env": SETUP_PASSWORD_ENV}  # asked after that answer
    answers = {"store": password_dsn, "store_password_env": SETUP_PASSWORD_ENV}

    provider.save_config({**answers, "store": password_dsn + " password=" + SECRET}, str(home))
    assert "chronicle" not in yaml.safe_load((home / "config.yaml").read_text())  # refused

    provider.save_config(answers, str(home))
    _write_env_vars(home / ".env", {secret["env_var"]: SECRET})
    saved = (home / "config.yaml").read_text()
    assert SECRET not in saved
    assert yaml.safe_load(saved)["chronicle"] == answers
    monkeypatch.setenv("HERMES_HOME", str(home))
    load_hermes_dotenv(hermes_home=home)
    provider.initialize("s", hermes_home=str(home), platform="cli")
    try:
        provider.sync_turn("hello", "hi", session_id="s")
        core = provider.core
        assert core.postgres and core.location == password_dsn
        assert [e.envelope.type for e in core.store.read()].count("MessageCaptured") == 2
    finally:
        provider.shutdown()


# -- the core on PostgreSQL ----------------------------------------------------------------


@pytest.fixture
def dsn(postgres_cluster: Any) -> Iterator[str]:
    with own_schema(postgres_cluster) as conninfo:
        yield conninfo


@pytest.fixture
def home(tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hermes home whose config.yaml selects the PostgreSQL store."""
    hermes_home = tmp_path / "hermes_home"
    hermes_home.mkdir()
    compression = {"threshold": 0.6, "target_ratio": 0.25, "protect_first_n": 1}
    chronicle = {"store": dsn, "context": {"low_watermark_percent": 0.2}}
    config = {"compression": {**compression, "protect_last_n": 4}, "chronicle": chronicle}
    (hermes_home / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("HERMES_HOME", str(hermes_home))
    return hermes_home


def test_the_core_builds_every_twin_over_the_store(home: Path, dsn: str) -> None:
    from chronicle_engine.chronicle.postgres import PostgresChronicleStore
    from chronicle_engine.recall.postgres import PostgresRecallIndex
    from chronicle_engine.sessions.postgres import PostgresSessionTables

    core = ChronicleCore.for_hermes_home(home)
    try:
        assert core.postgres and isinstance(core.store, PostgresEventStore)
        assert ChronicleCore.get(dsn) is core  # one core per database, keyed by its DSN
        assert ChronicleCore._key(dsn) == dsn.strip()
        assert core.db_path == str((home / "chronicle" / "chronicle.db").resolve())
        assert isinstance(core.sessions.tables, PostgresSessionTables)
        assert core.sessions.tables.spill_path == core.db_path
        assert isinstance(core.chronicle("default"), PostgresChronicleStore)
        assert isinstance(core.compaction.chronicle("c"), PostgresChronicleStore)
        assert isinstance(core.recall.index, PostgresRecallIndex)
        # nothing was written on this host's disk: the log is on the server
        assert not (home / "chronicle" / "chronicle.db").exists()
    finally:
        core.shutdown()
    assert ChronicleCore._registry.get(dsn) is None


def chat(turns: int) -> list[dict[str, Any]]:
    return [m for n in range(turns) for m in turn(n)]


def engine_for(home: Path) -> Any:
    module = import_module(load_plugin().__name__ + ".context")
    engine = module.ChronicleContextEngine()
    engine.update_model(model="m", context_length=64_000)
    engine.on_session_start("a1", hermes_home=str(home), platform="cli")
    return engine


def test_a_chat_end_to_end_on_postgresql(home: Path, dsn: str) -> None:
    """Both slots as Hermes drives them, on the store config.yaml names: capture through
    sync_turn, a compaction into sections and a tail, expand byte for byte, search, and all
    of it again from a fresh process's cores (a restart)."""
    provider = ChronicleMemoryProvider()
    provider.initialize("a1", hermes_home=str(home), platform="cli", user_id="u1")
    engine = engine_for(home)
    assert provider.core is engine.core and provider.core.postgres
    messages = chat(40)
    live: list[dict[str, Any]] = []
    for n in range(40):
        live.extend(turn(n))
        provider.sync_turn("q", "a", session_id="a1", messages=live)
    core = provider.core
    captured = [
        e.payload["message"]
        for e in core.store.read(sessions=["a1"], namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]
    assert captured == messages  # each once, in order
    out = engine.compress(messages, current_tokens=None, focus_topic=None, force=False)
    assert engine.compression_count == 1
    handoff = next(m for m in out if is_own_handoff(m))
    assert out[-4:] == messages[-4:]  # the verbatim tail
    status = json.loads(engine.handle_tool_call("chronicle_context_status", {}, messages=out))
    labels = [s["section_id"] for s in status["handoff"]["sections"]]
    assert labels and all(label in handoff["content"] for label in labels)
    expanded: list[dict[str, Any]] = []
    for label in labels:
        page = json.loads(
            engine.handle_tool_call(
                "chronicle_expand", {"section_id": label, "page_size": 200}, messages=out
            )
        )
        assert page["total"] == len(page["messages"]), page
        expanded.extend(m["message"] for m in page["messages"])
    # byte for byte: the sections hold the captured messages after the protected first one,
    # in order, up to the kept ones
    assert out[0] == messages[0]
    assert json.dumps(expanded) == json.dumps(messages[1 : 1 + len(expanded)])
    assert 1 + len(expanded) + len(out) - 2 >= len(messages)  # (out: head, handoff, kept)
    found = json.loads(provider.handle_tool_call("chronicle_search", {"query": "value 7003"}))
    assert "7003" in json.dumps(found)
    core.scheduler.wait_background(30.0)  # (a consolidation due meanwhile writes sections)
    sections = core.chronicle(core.sessions.chronicle_name("a1")).current()
    engine.on_session_end("a1", messages)
    provider.shutdown()
    assert ChronicleCore._registry.get(dsn) is None  # the last user shut it

    # A restart: new cores over the same server read everything back.
    again = ChronicleMemoryProvider()
    again.initialize("a2", hermes_home=str(home), platform="cli", user_id="u1")
    reopened = again.core
    assert reopened is not core and reopened.postgres
    assert [
        e.payload["message"]
        for e in reopened.store.read(sessions=["a1"], namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ] == messages
    assert reopened.chronicle(reopened.sessions.chronicle_name("a1")).current() == sections
    assert "7003" in json.dumps(
        json.loads(again.handle_tool_call("chronicle_search", {"query": "value 7003"}))
    )
    again.shutdown()


def test_a_server_that_is_down_at_start_breaks_no_turn(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    dsn: str,
) -> None:
    """Nothing listens where config.yaml points: both slots' hooks return their neutral values,
    the refusal is logged once, and the turns wait on this host's disk until a server takes
    them (here the next start, with config.yaml pointing at one that is up)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    home = tmp_path / "hermes_home"
    home.mkdir()
    down = f"host=127.0.0.1 port={port} user=chronicle dbname=chronicle connect_timeout=2"
    (home / "config.yaml").write_text(
        yaml.safe_dump({"chronicle": {"store": down, "busy_timeout_ms": 200}})
    )
    monkeypatch.setenv("HERMES_HOME", str(home))
    provider = ChronicleMemoryProvider()
    engine = import_module(load_plugin().__name__ + ".context").ChronicleContextEngine()
    live = chat(3)
    with caplog.at_level(logging.WARNING):
        provider.initialize("s1", hermes_home=str(home), platform="cli")
        provider.sync_turn("q", "a", session_id="s1", messages=live)
        assert provider.prefetch("value 7003") == ""
        engine.update_model(model="m", context_length=64_000)
        engine.on_session_start("s1", hermes_home=str(home), platform="cli")
        assert engine.compress(live) is live
    refusals = [r for r in caplog.records if "could not be opened" in r.getMessage()]
    assert 1 <= len(refusals) <= 2  # once per slot at most
    waiting = list((home / "chronicle").glob("*waiting*"))
    assert waiting, "the turn waits on this host's disk"
    provider.shutdown()
    (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": {"store": dsn}}))
    again = ChronicleMemoryProvider()
    again.initialize("s2", hermes_home=str(home), platform="cli")
    kept = [
        e.payload["message"]
        for e in again.core.store.read(session="s1")
        if e.envelope.type == "MessageCaptured"
    ]
    assert kept == live  # each once, in order
    assert not list((home / "chronicle").glob("*waiting*"))
    again.shutdown()


def test_the_cli_reads_the_postgresql_store_config_yaml_names(
    home: Path, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from chronicle_engine.cli import Exit, main

    provider = ChronicleMemoryProvider()
    provider.initialize("a1", hermes_home=str(home), platform="cli")
    messages = chat(40)
    provider.sync_turn("q", "a", session_id="a1", messages=messages)
    engine = engine_for(home)
    engine.compress(messages)
    provider.shutdown()
    engine.on_session_end("a1", [])

    def run(*argv: str, exit: Exit = Exit.OK) -> Any:
        code = main([*argv, "--hermes-home", str(home), "--json"])
        out = capsys.readouterr().out
        assert code == exit, out
        return json.loads(out)

    status = run("status")
    assert status["db_path"] == dsn and status["events"] > len(messages)
    assert status["sessions"] >= 1 and status["chronicles"][0]["current"] >= 1
    (sections,) = run("sections", "--session", "a1").values()
    assert sections and all(s["from_seq"] <= s["to_seq"] for s in sections)
    (lineage,) = run("tree", "--session", "a1")["lineages"]
    # A session the store does not hold is refused, naming the ones it does.
    assert main(["sections", "--session", "nope", "--hermes-home", str(home)]) == Exit.NOT_FOUND
    refused = capsys.readouterr().err
    assert "no session 'nope' in the PostgreSQL store" in refused and "a1" in refused
    assert lineage["sessions"][-1]["session"] == "a1"
    # A backup copies a SQLite file's pages: on a server's store it is refused, saying what to use.
    assert main(["backup", "--hermes-home", str(home)]) == Exit.USAGE
    assert "pg_dump" in capsys.readouterr().err
    # (unhealthy: this Hermes home selects neither slot; the database's checks are what count)
    checks = run("doctor", exit=Exit.UNHEALTHY)["checks"]
    doctor = {(c["area"], c["name"]): c["status"] for c in checks}
    assert {c["area"] for c in checks if c["status"] == "fail"} == {"hermes"}
    assert doctor[("database", "reachable")] == "ok"
    assert doctor[("database", "append-only guards")] == "ok"
    assert not (home / "chronicle" / "chronicle.db").exists()
    # A trigger that exists but does not fire guards nothing.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_never_update")
    guards = [
        c for c in run("doctor", exit=Exit.UNHEALTHY)["checks"] if c["name"] == "append-only guards"
    ]
    assert [g["status"] for g in guards] == ["fail"]
    assert "disabled triggers: events_never_update" in guards[0]["detail"]


def test_one_users_memory_never_reaches_another_host_of_the_fleet(home: Path) -> None:
    """Two hosts on one PostgreSQL store, serving two people: what one said is searched and
    prefetched for them, never for the other (recall's scoping is a key in every query)."""
    ann, bob = ChronicleMemoryProvider(), ChronicleMemoryProvider()
    ann.initialize("ann-1", hermes_home=str(home), platform="telegram", user_id="ann")
    bob.initialize("bob-1", hermes_home=str(home), platform="telegram", user_id="bob")
    said = [
        {"role": "user", "content": "My locker code at the gym is 4471."},
        {"role": "assistant", "content": "Noted: locker code 4471."},
    ]
    ann.sync_turn("x", "y", session_id="ann-1", messages=said)
    bob.sync_turn("x", "y", session_id="bob-1", messages=[{"role": "user", "content": "hi"}])
    for provider, name in ((ann, "ann"), (bob, "bob")):  # a later session: memory, not context
        provider.on_session_switch(
            f"{name}-2", parent_session_id=f"{name}-1", reset=True, reason="new_session"
        )
    assert "4471" in ann.prefetch("What is my gym locker code?", session_id="")
    assert "4471" in json.dumps(
        json.loads(ann.handle_tool_call("chronicle_search", {"query": "locker code"}))
    )
    assert "4471" not in bob.prefetch("What is my gym locker code?", session_id="")
    assert "4471" not in json.dumps(
        json.loads(bob.handle_tool_call("chronicle_search", {"query": "locker code"}))
    )
    ann.shutdown()
    bob.shutdown()
