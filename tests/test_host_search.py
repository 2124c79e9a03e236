"""Chronicle serves the discovery shape of Hermes' session_search through Hermes' own
tool-execution middleware chain; every other shape, and any failure, goes on to Hermes."""

from __future__ import annotations

import json

import pytest
import yaml
from hermes_cli import middleware
from hermes_cli.plugins import get_plugin_manager
from test_compaction_support import load_plugin
from test_recall_support import say

from chronicle_engine.config import load_hermes_config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.recall.host_search import session_search_middleware


class _Context:
    """What the general plugin loader's context offers for this: register_middleware."""

    def __init__(self) -> None:
        self.middleware: list[tuple[str, object]] = []

    def register_middleware(self, kind: str, callback: object) -> None:
        self.middleware.append((kind, callback))


@pytest.fixture
def core(tmp_path, monkeypatch, store_settings):
    """The core of the Hermes home's store (SQLite, then PostgreSQL named by config.yaml), opened
    as the memory provider opens it: the one session_search is served from."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    if store_settings:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump({"chronicle": store_settings}))
    config = load_hermes_config(tmp_path)
    opened = ChronicleCore.get(config.location(), config=config)
    yield opened
    opened.shutdown()


@pytest.fixture
def chain():
    context = _Context()
    load_plugin().register(context)
    ((kind, serve),) = context.middleware
    assert kind == "tool_execution"
    callbacks = get_plugin_manager()._middleware.setdefault("tool_execution", [])
    callbacks.append(serve)
    calls: list[dict] = []

    def run(args: dict, session_id: str = "") -> dict:
        def host(next_args: dict) -> str:
            calls.append(next_args)
            return json.dumps({"success": True, "mode": "host"})

        return json.loads(
            middleware.run_tool_execution_middleware(
                "session_search", args, host, original_args=args, session_id=session_id
            )
        )

    yield run, calls
    callbacks.remove(serve)


def test_a_query_is_answered_from_chronicle_grouped_by_session(core, chain):
    run, calls = chain
    first = say(core, "monday", "We picked the Lisbon flat on Rua Augusta for the October trip.")
    say(core, "tuesday", "The Lisbon flights leave at 7:40 on October 3rd.")
    say(core, "other", "Unrelated: the plumber comes Thursday.")
    answer = run({"query": "Lisbon October trip", "limit": 2}, session_id="today")
    assert answer["source"] == "chronicle" and answer["mode"] == "discover"
    assert answer["count"] == 2 and not calls
    sessions = [r["session_id"] for r in answer["results"]]
    assert set(sessions) == {"monday", "tuesday"}
    message = next(r for r in answer["results"] if r["session_id"] == "monday")["messages"][0]
    assert message["id"] == f"m{first}" and "Rua Augusta" in message["content"]
    assert message["time"]


def test_other_shapes_and_misses_go_on_to_hermes(core, chain):
    run, calls = chain
    say(core, "monday", "We picked the Lisbon flat for the trip.")
    assert run({"session_id": "monday"})["mode"] == "host"
    assert (
        run({"query": "Lisbon", "session_id": "monday", "around_message_id": 3})["mode"] == "host"
    )
    assert run({})["mode"] == "host"
    assert run({"query": "zeppelin"})["mode"] == "host"
    assert len(calls) == 4


def test_without_an_open_store_or_with_a_failing_one_hermes_answers(tmp_path, monkeypatch, chain):
    run, calls = chain
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    assert run({"query": "Lisbon"})["mode"] == "host"
    opened = ChronicleCore.get(tmp_path / "chronicle" / "chronicle.db")
    opened.shutdown()  # closed: not an open store any more
    assert run({"query": "Lisbon"})["mode"] == "host"
    assert len(calls) == 2


def test_other_tools_pass_through_untouched():
    def broken() -> None:
        raise AssertionError("no store is looked for on another tool's call")

    seen: list[dict] = []
    result = session_search_middleware(broken)(
        tool_name="read_file", args={"path": "x"}, next_call=lambda a: seen.append(a) or "ok"
    )
    assert result == "ok" and seen == [{"path": "x"}]


def test_a_failing_store_is_logged_once_and_hermes_answers(caplog):
    def failing() -> None:
        raise RuntimeError("disk gone")

    serve = session_search_middleware(failing)
    for _ in range(2):
        out = serve(tool_name="session_search", args={"query": "x"}, next_call=lambda a: "host")
        assert out == "host"
    assert sum("falls back" in r.getMessage() for r in caplog.records) <= 1
