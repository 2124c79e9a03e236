"""A credential inside JSON inside a tool call's arguments (`curl -d '{"password": "…"}'`, once
or twice escaped) is masked on every derived surface: the message's searchable text, the search
index, chronicle_search, the CLI's search, prefetch, and the section prose and handoff a
compaction writes. The raw log keeps it (expand returns the message byte for byte)."""

from __future__ import annotations

import json
import sqlite3
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml
from faults_support import report
from test_compaction_support import load_plugin

from chronicle_engine.cli import main
from chronicle_engine.core import ChronicleCore
from provider import ChronicleMemoryProvider

SECRET = "Tr0ub4dor&3xyzQ"


def curl(body: dict[str, Any]) -> str:
    return f"curl -X POST -H 'Content-Type: application/json' -d '{json.dumps(body)}' https://api.example.com/login"


ARGUMENTS = {
    "password in curl -d": json.dumps({"command": curl({"user": "ops", "password": SECRET})}),
    "api_key in curl -d": json.dumps({"command": curl({"api_key": SECRET})}),
    "escaped twice": json.dumps({"payload": json.dumps({"command": curl({"password": SECRET})})}),
    "client_secret nested": json.dumps(
        {"request": {"body": json.dumps({"client_secret": SECRET})}}
    ),
}


@pytest.mark.parametrize("shape", sorted(ARGUMENTS))
def test_a_credential_in_json_inside_tool_arguments_reaches_no_derived_surface(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        yaml.safe_dump({"compression": {"protect_first_n": 1, "protect_last_n": 2}})
    )
    monkeypatch.setenv("HERMES_HOME", str(home))
    provider = ChronicleMemoryProvider()
    provider.initialize("s1", hermes_home=str(home), platform="cli")
    engine = import_module(load_plugin().__name__ + ".context").ChronicleContextEngine(
        hermes_home=str(home)
    )
    engine.update_model(model="m", context_length=64_000)
    engine.on_session_start("s1", hermes_home=str(home), platform="cli")
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "terminal", "arguments": ARGUMENTS[shape]},
    }
    live: list[dict[str, Any]] = [
        {"role": "user", "content": "log in to the example api for me"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "logged in"}'},
        {"role": "assistant", "content": "Logged in to the example api."},
    ]
    for n in range(12):
        live += [
            {"role": "user", "content": f"next step {n} for the example api " + "x" * 1500},
            {"role": "assistant", "content": f"done step {n} " + "y" * 1500},
        ]
    provider.sync_turn("", "", session_id="s1", messages=live)
    out = engine.compress(list(live), current_tokens=60_000, force=True)
    assert out != live
    surfaces: dict[str, str] = {
        "handoff": json.dumps(out),
        "search tool": provider.handle_tool_call(
            "chronicle_search", {"query": "example api login"}
        ),
        "prefetch": provider.prefetch("how did you log in to the example api?"),
    }
    db = home / "chronicle" / "chronicle.db"
    core = ChronicleCore.get(db)
    events = [
        e
        for e in core.store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]
    surfaces["message text"] = json.dumps([e.payload["text"] for e in events])
    surfaces["person text"] = json.dumps([e.payload["person_text"] for e in events])
    with sqlite3.connect(db) as conn:
        for table in ("recall_messages", "sections"):
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            surfaces[f"table {table}"] = json.dumps(rows, default=str)
    capsys.readouterr()
    main(["search", "example api", "--db", str(db), "--json"])
    surfaces["cli search"] = capsys.readouterr().out
    leaked = [name for name, text in surfaces.items() if SECRET in text]
    report("nested credential", shape=shape, surfaces=len(surfaces), leaks=len(leaked))
    assert not leaked, leaked
    # The raw log keeps it: expand returns the wire message as it was sent.
    raw = [e for e in events if e.payload["role"] == "assistant" and e.payload["tool_call_ids"]]
    assert raw[0].payload["message"]["tool_calls"][0]["function"]["arguments"] == ARGUMENTS[shape]
    provider.shutdown()
