"""A credential inside JSON inside a tool call's arguments (`curl -d '{"password": "…"}'`, once
or twice escaped) is masked on every derived surface: the message's searchable text, the search
index, chronicle_search, the CLI's search, prefetch, and the section prose and handoff a
compaction writes. The raw log keeps it (expand returns the message byte for byte)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from faults_support import both_slots, report
from test_compaction_support import tool_step

from chronicle_engine.cli import main
from chronicle_engine.config import load_hermes_config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.messages import is_own_handoff

SECRET = "Tr0ub4dor&3xyzQ"
SMALL_TAIL = {"compression": {"protect_first_n": 1, "protect_last_n": 2}}


def hermes_config(store_settings: dict[str, str]) -> dict[str, Any]:
    """config.yaml: the small tail, and the store (`store_settings`: SQLite, then PostgreSQL)."""
    return {**SMALL_TAIL, "chronicle": dict(store_settings)} if store_settings else SMALL_TAIL


def store_of(home: Path) -> tuple[ChronicleCore, list[str]]:
    """The core the slots opened, and what the CLI needs to find its store (`--db` names a
    SQLite file; without it the CLI reads config.yaml's store, as for PostgreSQL)."""
    config = load_hermes_config(home)
    core = ChronicleCore.get(config.location(), config=config)
    return core, [] if config.postgres else ["--db", str(config.db_path())]


def table_rows(core: ChronicleCore, table: str) -> str:
    """Every row of a table, as JSON: read with sqlite3 from the file, or from the server."""
    if not isinstance(core.store, PostgresEventStore):
        with sqlite3.connect(core.db_path) as conn:
            return json.dumps(conn.execute(f"SELECT * FROM {table}").fetchall(), default=str)
    with core.store.reading() as conn:
        return json.dumps([tuple(r) for r in conn.execute(f"SELECT * FROM {table}")], default=str)


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
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    shape: str,
    store_settings: dict[str, str],
) -> None:
    home = tmp_path / "home"
    provider, engine = both_slots(home, hermes_config(store_settings), monkeypatch)
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
    core, where = store_of(home)
    events = [
        e
        for e in core.store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]
    surfaces["message text"] = json.dumps([e.payload["text"] for e in events])
    surfaces["person text"] = json.dumps([e.payload["person_text"] for e in events])
    for table in ("recall_messages", "sections"):
        surfaces[f"table {table}"] = table_rows(core, table)
    capsys.readouterr()
    assert main(["search", "example api", *where, "--json"]) == 0  # found the store
    surfaces["cli search"] = capsys.readouterr().out
    leaked = [name for name, text in surfaces.items() if SECRET in text]
    report("nested credential", shape=shape, surfaces=len(surfaces), leaks=len(leaked))
    assert not leaked, leaked
    # The raw log keeps it: expand returns the wire message as it was sent.
    raw = [e for e in events if e.payload["role"] == "assistant" and e.payload["tool_call_ids"]]
    assert raw[0].payload["message"]["tool_calls"][0]["function"]["arguments"] == ARGUMENTS[shape]
    provider.shutdown()


# -- the 24 shapes across every derived surface ----------------------------------------------------

# Each shape: where it is said (a sentence with {v}) and the value that must not get past the
# raw log. Twenty plain shapes, then the four nested in tool-call JSON above.
PLAIN = {
    "openai project key": (
        "use the key {v} for the batch",
        "sk-proj-Hq4Zt8Lm2Xc6Vb9Nw3Rs7Pk1Jd5Fg0",
    ),
    "openai key": ("OPENAI: {v}", "sk-Wm73bq19Xe58rt42Yu06io31PL"),
    "anthropic key": ("claude key {v}", "sk-ant-api03-Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz9Xc"),
    "github classic token": ("push with {v}", "ghp_Zx9Cv8Bn7Mq6Wd5Ef4Rg3Th2Yj1Uk0Il9Op"),
    "github fine-grained token": (
        "pat {v}",
        "github_pat_11QWERTY0987654321_zyxwvutsrqponmlkjihgfedcba",
    ),
    "gitlab token": ("ci uses {v}", "glpat-Zy98Xw76Vu54Ts32Rq10pO"),
    "aws access key": ("aws id {v} here", "AKIAZ4R7T2Q9M1L8P3X6"),
    "slack bot token": ("slack {v}", "xoxb-210987654321-zyxwvutsrqpo"),
    "google api key": ("maps {v}", "AIzaSyQ-0987654321zyxwvutsrqponmlkjihgf"),
    "stripe live key": ("stripe {v}", "sk_live_9Zq81Yp72Xo63Wn54Vm45Ul"),
    "hugging face token": ("HF_TOKEN is {v}", "hf_Zq9Yp8Xo7Wn6Vm5Ul4Tk3Sj2Ri1Qh0Pg9Of"),
    "bearer header": ("Authorization: Bearer {v}", "zz91yy82xx73ww64vv55uu46"),
    "jwt": (
        "token {v}",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJmYXVsdC1zdWl0ZSJ9.Zm9yLXRoZS1mYXVsdC1zdWl0ZS1vbmx5LTk5",
    ),
    "pem private key": (
        "-----BEGIN RSA PRIVATE KEY-----\n{v}\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAz9Yx8Wv7Ut6Sr5Qp4On3Ml2Kj1Ih0Gf",
    ),
    "password assignment": ("password={v}", "corr3ct-h0rse-b4ttery"),
    "url with password": ("postgres://admin:{v}@db.example.com:5432/app", "Ur1P4ssw0rdZq"),
    "exported token": ("export GITHUB_TOKEN={v}", "zq81yp72xo63wn54"),
    "api_key in json": ('{{"api_key": "{v}"}}', "qz19py28ox37nw46"),
    "password said in words": ("my wifi password is {v}", "tr4mpoline77"),
    "card number": ("card {v} exp 12/29", "4242 4242 4242 4242"),
}
SHAPES = 24
assert len(PLAIN) + len(ARGUMENTS) == SHAPES


def _step(k: int, call: str, arguments: str, output: str) -> list[dict[str, Any]]:
    """A person's request, a terminal call with `arguments` as sent, its output, the reply."""
    step = tool_step(call, "", output)
    step[0]["tool_calls"][0]["function"]["arguments"] = arguments
    return [
        {"role": "user", "content": f"credential step {k}: run it"},
        *step,
        {"role": "assistant", "content": f"credential step {k} done."},
    ]


def test_the_24_credential_shapes_reach_no_derived_surface(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    store_settings: dict[str, str],
) -> None:
    home = tmp_path / "home"
    provider, engine = both_slots(home, hermes_config(store_settings), monkeypatch)
    values = {name: value for name, (_, value) in PLAIN.items()}
    values.update({name: SECRET for name in ARGUMENTS})
    live: list[dict[str, Any]] = []
    # Each plain shape is said somewhere a conversation says it, in turn: by the person, in a
    # tool call's arguments, in a tool's output, by the assistant.
    for k, (_shape, (sentence, value)) in enumerate(sorted(PLAIN.items())):
        said = f"credential step {k}: " + sentence.format(v=value)
        where = k % 4
        if where == 0:
            live += [{"role": "user", "content": said}, {"role": "assistant", "content": "ok."}]
        elif where == 1:
            live += _step(k, f"p{k}", json.dumps({"command": said}), '{"ok": true}')
        elif where == 2:
            live += _step(k, f"p{k}", json.dumps({"command": "env"}), said)
        else:
            live += [{"role": "user", "content": "what did you use?"}]
            live += [{"role": "assistant", "content": said}]
    for k, name in enumerate(sorted(ARGUMENTS), start=len(PLAIN)):
        live += _step(k, f"n{k}", ARGUMENTS[name], '{"status": "logged in"}')
    for n in range(12):
        live += [
            {"role": "user", "content": f"next step {n} of the credential work " + "x" * 1500},
            {"role": "assistant", "content": f"done step {n} " + "y" * 1500},
        ]
    provider.sync_turn("", "", session_id="s1", messages=live)
    out = engine.compress(list(live), current_tokens=60_000, force=True)
    assert out != live and any(is_own_handoff(m) for m in out)
    core, where = store_of(home)
    name = core.sessions.chronicle_name("s1")
    sections = core.chronicle(name).current()
    assert sections, "the compaction wrote a section over the credentials"
    surfaces: dict[str, str] = {
        # The handoff the compaction wrote (the head and tail around it are the host's own
        # messages, kept verbatim).
        "handoff": json.dumps([m for m in out if is_own_handoff(m)]),
        "search tool": provider.handle_tool_call(
            "chronicle_search", {"query": "credential step run"}
        ),
        "prefetch": provider.prefetch("which credential did the step use?"),
        "section prose (expand)": json.dumps(
            [
                json.loads(
                    engine.handle_tool_call(
                        "chronicle_expand", {"section_id": s.anchor.section_id}, messages=out
                    )
                ).get("prose")
                for s in sections
            ]
        ),
    }
    events = [
        e
        for e in core.store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]
    surfaces["message text"] = json.dumps([e.payload["text"] for e in events])
    surfaces["person text"] = json.dumps([e.payload["person_text"] for e in events])
    for table in ("recall_messages", "sections", "recall_beliefs"):
        surfaces[f"table {table}"] = table_rows(core, table)
    capsys.readouterr()
    assert main(["search", "credential step", *where, "--json"]) == 0  # found the store
    surfaces["cli search"] = capsys.readouterr().out
    assert main(["sections", "--all", "--full", *where, "--json"]) == 0
    surfaces["cli sections"] = capsys.readouterr().out
    leaks = sorted(
        (shape, surface)
        for shape, value in values.items()
        for surface, text in surfaces.items()
        if value in text
    )
    report("credential shapes", shapes=SHAPES, surfaces=len(surfaces), leaks=len(leaks))
    assert not leaks, leaks
    # The raw log keeps each one: expand gives the wire message back as it was sent.
    raw = json.dumps([e.payload["message"] for e in events])
    assert all(value in raw for value in values.values())
    provider.shutdown()
