"""Capture on PostgreSQL when the server will not take a write: a tree lock held past the busy
timeout, or the server dropping this host's connection. The turn's events wait in this host's
spill (or, when the failure comes before they are built, stay in the host's list), and the next
capture writes them once: nothing lost, nothing stored twice."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from postgres_support import own_schema

from chronicle_engine.config import Config
from chronicle_engine.core import vocabulary
from chronicle_engine.errors import StoreBusy, StoreUnreachable
from chronicle_engine.log.events import EventReader, UpcastRegistry
from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.sessions.capture import Capture
from chronicle_engine.sessions.postgres import PostgresSessionTables
from chronicle_engine.sessions.tree import SessionTree

TREE_LOCK = 0x73657373  # sessions/postgres.py's advisory lock


@pytest.fixture
def pg(postgres_cluster):
    with own_schema(postgres_cluster) as conninfo:
        yield conninfo


def _host(conninfo: str, spill_dir: Path):
    store = PostgresEventStore(conninfo, busy_timeout_ms=300)
    tables = PostgresSessionTables(store, spill_path=str(spill_dir / "chronicle-pg.db"))
    tree = SessionTree(EventReader(store, UpcastRegistry(), vocabulary()), tables)
    return store, tree, Capture(tree, Config())


def _said(store) -> list[str]:
    return [
        str(e.payload["message"]["content"])
        for e in store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


def _turn(live: list[dict], n: int) -> list[dict]:
    live += [{"role": "user", "content": f"ask {n}"}, {"role": "assistant", "content": f"say {n}"}]
    return live


def test_a_turn_refused_while_the_tree_is_locked_waits_in_the_spill(pg, tmp_path) -> None:
    store, tree, capture = _host(pg, tmp_path)
    live = _turn([], 1)
    assert capture.capture_turn("s", live) == 2
    with psycopg.connect(pg, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (TREE_LOCK,))
        with pytest.raises(StoreBusy, match="Nothing is lost") as refused:
            capture.capture_turn("s", _turn(live, 2))
        assert not isinstance(refused.value, StoreUnreachable)
        spill = Path(tree.tables.spill_path + ".spill.jsonl")
        assert len(spill.read_text().splitlines()) == 2
        assert _said(store) == ["ask 1", "say 1"]
        other.execute("SELECT pg_advisory_unlock(%s)", (TREE_LOCK,))
    assert capture.capture_turn("s", _turn(live, 3)) == 2
    assert _said(store) == ["ask 1", "say 1", "ask 2", "say 2", "ask 3", "say 3"]
    assert [m["content"] for m in tree.projection("s")] == [m["content"] for m in live]
    assert not spill.exists()
    store.close()


def test_a_dropped_connection_loses_nothing_and_the_next_turn_reconnects(pg, tmp_path) -> None:
    store, tree, capture = _host(pg, tmp_path)
    live = _turn([], 1)
    capture.capture_turn("s", live)
    backend = store.connection.info.backend_pid
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    with pytest.raises(StoreUnreachable, match="could not be reached"):
        capture.capture_turn("s", _turn(live, 2))
    assert capture.capture_turn("s", _turn(live, 3)) in (2, 4)  # 4: the spill held none
    assert store.connection.info.backend_pid != backend
    said = _said(store)
    assert sorted(said) == sorted(json.loads(json.dumps([m["content"] for m in live])))
    assert len(said) == len(set(said)) == 6
    assert [m["content"] for m in tree.projection("s")] == [m["content"] for m in live]
    store.close()
