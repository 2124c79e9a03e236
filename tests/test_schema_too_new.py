"""A database a newer Chronicle migrated is refused by an older build, on each store: the build
does not read what it may misread nor write what the newer one no longer reads, says why, and
keeps the turns on disk until it may open the database."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from chronicle_engine.config import load_hermes_config
from chronicle_engine.core import ChronicleCore, known_migrations
from chronicle_engine.errors import StoreTooNew
from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.log.store import SQLiteEventStore
from provider import ChronicleMemoryProvider

FUTURE = "recall.m999_from_a_newer_build"


@pytest.fixture
def home(tmp_path: Path, store_settings: dict[str, str]) -> Path:
    path = tmp_path / "hermes_home"
    path.mkdir()
    if store_settings:
        (path / "config.yaml").write_text(yaml.safe_dump({"chronicle": store_settings}))
    return path


def _chat(home: Path, session: str, text: str) -> None:
    provider = ChronicleMemoryProvider()
    provider.initialize(session, hermes_home=str(home), platform="cli")
    said = [{"role": "user", "content": text}]
    provider.sync_turn(text, "", session_id=session, messages=said)
    provider.shutdown()


def _log_of(home: Path) -> SQLiteEventStore | PostgresEventStore:
    """The database's log store alone (it opens a database whatever else it records)."""
    config = load_hermes_config(home)
    if config.postgres:
        return PostgresEventStore(config.location(), password=config.store_password())
    return SQLiteEventStore(config.location())


def _run(home: Path, sql: str) -> list[str]:
    """Run `sql` on the database, then list the texts of the messages it holds."""
    store = _log_of(home)
    try:
        with store.atomic() as conn:
            conn.execute(sql)
        return [
            str(e.payload["message"]["content"])
            for e in store.read(namespaces=["chronicle.chat"])
            if e.envelope.type == "MessageCaptured"
        ]
    finally:
        store.close()


def test_a_store_a_newer_build_migrated_is_refused_and_turns_wait_on_disk(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _chat(home, "s1", "the boiler is due in October")
    config = load_hermes_config(home)
    assert FUTURE not in known_migrations(postgres=config.postgres)
    # A newer build migrated the database (its record names a migration this build lacks).
    said = _run(home, f"INSERT INTO migrations(name, applied_at) VALUES ('{FUTURE}', 'later')")
    assert said == ["the boiler is due in October"]
    with pytest.raises(StoreTooNew, match=FUTURE) as refused:
        ChronicleCore(config.location(), config)
    assert "upgrade Chronicle" in str(refused.value)
    # The slots open nothing, break no turn, say why, and keep the turn on disk.
    with caplog.at_level(logging.WARNING):
        _chat(home, "s1", "the plumber comes on Tuesday")
    assert FUTURE in caplog.text
    assert _run(home, "SELECT 1") == said  # nothing was written into the database
    waiting = [p for p in home.rglob("*") if p.is_file() and "waiting" in p.name]
    assert any("plumber" in p.read_text(errors="replace") for p in waiting)
    # Once the build may open it (here: the record of the newer migration withdrawn, as an
    # upgrade makes it known), the turn kept on disk is written and nothing was lost.
    _run(home, f"DELETE FROM migrations WHERE name = '{FUTURE}'")
    _chat(home, "s1", "and the roof in spring")
    assert _run(home, "SELECT 1") == [
        "the boiler is due in October",
        "the plumber comes on Tuesday",
        "and the roof in spring",
    ]


def test_this_build_knows_every_migration_it_applies(store_core: ChronicleCore) -> None:
    # A core applies its rooms' migrations as each room is first used: every one it recorded
    # is among those it knows, so it never refuses a store it migrated itself.
    core = store_core
    core.recall.search("anything", limit=1)
    core.scheduler  # noqa: B018 - (built: its tables migrated)
    core.sessions.lineage("s")
    recorded = core.store.migrated()
    assert recorded and recorded <= known_migrations(postgres=core.postgres)
