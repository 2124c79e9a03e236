"""Faults at the slot adapters, driven the way Hermes drives them.

The standard: bad input gets a clear error and loses nothing. A locked or read-only database, a
huge tool output, malformed messages or a broken summary endpoint never make a hook raise into
Hermes' loop, never hold a turn much longer than the store's busy timeout or the summariser's
timeout, and never lose a captured message: what could not be written waits in the spill file
beside the database and reaches the log, once, at the next write that succeeds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_compaction_engine import turn as compaction_turn
from test_compaction_support import load_plugin

from chronicle_engine.capture.events import HANDOFF_MARKER
from chronicle_engine.compaction.contract import violations
from chronicle_engine.config import load_hermes_config
from chronicle_engine.core import ChronicleCore
from provider import ChronicleMemoryProvider

BUSY_MS = 100
# A hook on a locked store waits a few busy timeouts at most (a write, a fold's catch-up, a
# recall fold); the second is slack for a loaded 2-core CI machine.
PROMPT_S = 5 * BUSY_MS / 1000 + 1.0


# -- set-up -------------------------------------------------------------------------------------


def write_config(home: Path, **chronicle: Any) -> None:
    config = {
        "compression": {
            "threshold": 0.6,
            "target_ratio": 0.25,
            "protect_first_n": 1,
            "protect_last_n": 4,
        },
        "chronicle": {"busy_timeout_ms": BUSY_MS, **chronicle},
    }
    (home / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "hermes_home"
    path.mkdir()
    write_config(path)
    monkeypatch.setenv("HERMES_HOME", str(path))
    yield path
    for core in ChronicleCore.open_cores():
        if str(tmp_path) in core.db_path:
            core.shutdown()


def db_file(home: Path) -> Path:
    return home / "chronicle" / "chronicle.db"


def open_provider(home: Path, session: str) -> ChronicleMemoryProvider:
    provider = ChronicleMemoryProvider()
    provider.initialize(session, hermes_home=str(home), platform="cli")
    return provider


def open_engine(home: Path, session: str) -> Any:
    module = import_module(load_plugin().__name__ + ".context")
    engine = module.ChronicleContextEngine(hermes_home=str(home))
    engine.update_model(model="m", context_length=64_000)
    engine.on_session_start(session, hermes_home=str(home), platform="cli")
    return engine


def turn(n: int, pad: int = 5000) -> list[dict[str, Any]]:
    """A request, a tool call, its output and an answer, `pad` characters of filler each."""
    return compaction_turn(n, size=pad)


def core_of(home: Path) -> ChronicleCore:
    config = load_hermes_config(home)
    return ChronicleCore.get(config.db_path(), config=config)


def logged(core: ChronicleCore, session: str) -> list[str]:
    """Every captured message of a session, as JSON, in log order."""
    return [
        json.dumps(e.payload["message"], sort_keys=True)
        for e in core.store.read(session=session, namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


def as_json(messages: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(m, sort_keys=True) for m in messages]


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Another connection holds the database's write lock (BEGIN IMMEDIATE) until the block ends."""
    conn = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@contextlib.contextmanager
def timed(limit: float) -> Iterator[None]:
    started = time.monotonic()
    yield
    elapsed = time.monotonic() - started
    assert elapsed < limit, f"took {elapsed:.2f}s (limit {limit}s)"


class Clock:
    """Times every hook call made through it; `slowest` is the longest, for the bound."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def __call__(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return method(*args, **kwargs)
        finally:
            name = getattr(method, "__name__", str(method))
            self.times[name] = max(self.times.get(name, 0.0), time.monotonic() - started)

    @property
    def slowest(self) -> tuple[str, float]:
        return max(self.times.items(), key=lambda kv: kv[1])


# -- 1. a locked database --------------------------------------------------------------------------


def test_a_locked_store_never_raises_and_every_message_lands_once(home: Path) -> None:
    provider = open_provider(home, "s1")
    engine = open_engine(home, "s1")
    live: list[dict[str, Any]] = []
    for n in range(3):
        live += turn(n)
        provider.sync_turn(live[-4]["content"], live[-1]["content"], session_id="s1", messages=live)
    core = core_of(home)
    assert logged(core, "s1") == as_json(live)

    with write_lock(db_file(home)):
        call = Clock()
        for n in range(3, 7):
            call(provider.on_turn_start, n + 1, f"request {n}")
            assert isinstance(call(provider.prefetch, f"ticket OPS-{n - 2}"), str)
            live += turn(n)
            call(provider.sync_turn, "", "", session_id="s1", messages=live)
            call(provider.queue_prefetch, f"ticket OPS-{n}", session_id="s1")
            assert call(engine.should_compress, 50_000) in (True, False)
            call(engine.update_from_response, {"prompt_tokens": 50_000, "completion_tokens": 9})
        found = call(provider.handle_tool_call, "chronicle_search", {"query": "OPS-1"})
        assert isinstance(json.loads(found), dict)
        remembered = call(provider.handle_tool_call, "chronicle_remember", {"text": "a note"})
        assert "error" in json.loads(remembered)  # the tool says the store is busy
        assert isinstance(call(provider.on_pre_compress, live), str)
        out = call(engine.compress, list(live), current_tokens=60_000)
        assert out == live  # nothing folds that is not durably in the log
        status = call(engine.handle_tool_call, "chronicle_context_status", {})
        assert isinstance(json.loads(status), dict)
        expanded = call(engine.handle_tool_call, "chronicle_expand", {"from_seq": 1, "to_seq": 4})
        assert [m["message"] for m in json.loads(expanded)["messages"]] == live[:4]
        call(provider.on_session_end, live)  # the LAST call of the session fails to write
        call(engine.on_session_end, "s1", live)
        name, slowest = call.slowest
        assert slowest < PROMPT_S, f"{name} took {slowest:.2f}s on a locked store"
        assert len(logged(core, "s1")) == 12  # still locked: only the first turns are in

    # Lock released; the session is over, so nothing captures s1 again. The next write of any
    # session brings the spilled messages in.
    other = open_provider(home, "s2")
    other.sync_turn("hi", "hello", session_id="s2", messages=turn(99))
    assert logged(core, "s1") == as_json(live)
    out = engine.compress(list(live), current_tokens=60_000)
    assert out != live and not violations(live, out)
    assert logged(core, "s1") == as_json(live)  # compress captured nothing twice
    provider.shutdown()
    other.shutdown()


def test_a_core_opens_while_another_process_holds_the_write_lock(home: Path) -> None:
    first = open_provider(home, "s1")
    first.sync_turn("a", "b", session_id="s1", messages=turn(0))
    first.shutdown()  # the last user: the core closes
    live = turn(0) + turn(1)
    script = (
        "import sqlite3, sys\n"
        f"c = sqlite3.connect({str(db_file(home))!r}, isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"  # holds the lock until the test closes stdin (or kills it)
        "c.execute('ROLLBACK')\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with timed(PROMPT_S):
            provider = open_provider(home, "s1")
        assert provider._core is not None  # the core opened: migrations needed no write
        with timed(PROMPT_S):
            provider.sync_turn("x", "y", session_id="s1", messages=live)
        with timed(PROMPT_S):
            provider.on_session_end(live)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        assert holder.stdout is not None
        holder.stdout.close()
    provider.shutdown()  # closes the core; the spilled turn waits beside the database
    reopened = open_provider(home, "s9")  # opening the core writes what was kept aside
    assert logged(core_of(home), "s1") == as_json(live)
    reopened.shutdown()


@pytest.mark.parametrize("locked", [False, True], ids=["free", "locked"])
def test_a_compression_rotation_on_a_locked_store_records_what_a_free_one_does(
    home: Path, locked: bool
) -> None:
    """Hermes' built-in compressor rotates the session (pre_compress, session end, switch) while
    another process holds the lock: once it is released the log holds what it would have held."""
    provider = open_provider(home, "r0")
    live = [m for n in range(3) for m in turn(n, pad=100)]
    provider.sync_turn("", "", session_id="r0", messages=live)
    with write_lock(db_file(home)) if locked else contextlib.nullcontext():
        live += turn(3, pad=100)
        provider.sync_turn("", "", session_id="r0", messages=live)
        provider.on_pre_compress(live)
        provider.on_session_end(list(live))
        provider.on_session_switch("r1", parent_session_id="r0", reset=False, reason="compression")
        handoff = {
            "role": "user",
            "content": HANDOFF_MARKER + " summary",
            "_compressed_summary": True,
        }
        live = [live[0], handoff, *[dict(m) for m in live[-3:]], *turn(4, pad=100)]
        provider.sync_turn("", "", session_id="r1", messages=live)
    live += turn(5, pad=100)
    provider.sync_turn("", "", session_id="r1", messages=live)
    core = core_of(home)
    assert core.sessions.lineage("r1") == ["r0", "r1"]
    assert logged(core, "r0") == as_json([m for n in range(4) for m in turn(n, pad=100)])
    assert logged(core, "r1") == as_json([m for n in (4, 5) for m in turn(n, pad=100)])
    provider.shutdown()


# -- 2. a read-only database -------------------------------------------------------------------------


def test_a_read_only_database_still_answers_and_degrades_writes_with_one_line(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = open_provider(home, "s1")
    engine = open_engine(home, "s1")
    live = [m for n in range(12) for m in turn(n)]
    writer.sync_turn("", "", session_id="s1", messages=live)
    # recall's tables exist in the database before it turns read-only
    assert json.loads(writer.handle_tool_call("chronicle_search", {"query": "OPS-3"}))["count"]
    folded = engine.compress(list(live), current_tokens=60_000)
    assert folded != live
    writer.shutdown()
    for core in ChronicleCore.open_cores():
        core.shutdown()
    path = db_file(home)
    write_config(home, db_path=f"file:{path}?mode=ro")

    caplog.set_level(logging.WARNING)
    reader = open_provider(home, "s1")
    ro_engine = open_engine(home, "s1")
    elsewhere = open_provider(home, "s2")  # a new session recalls what s1 said
    assert "OPS-3" in elsewhere.prefetch("what happened with ticket OPS-3?")
    found = json.loads(reader.handle_tool_call("chronicle_search", {"query": "ticket OPS-7"}))
    assert found["count"] >= 1
    expanded = json.loads(
        ro_engine.handle_tool_call("chronicle_expand", {"from_seq": 1, "to_seq": 4})
    )
    assert [m["message"] for m in expanded["messages"]] == live[:4]
    more = folded + turn(12)
    for _ in range(3):
        reader.on_turn_start(13, "request 12")
        reader.sync_turn("", "", session_id="s1", messages=more)
        assert ro_engine.compress(list(more), current_tokens=60_000) == more
        reader.on_session_end(more)
        ro_engine.on_session_end("s1", more)
    remembered = json.loads(reader.handle_tool_call("chronicle_remember", {"text": "a note"}))
    assert "error" in remembered
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    line = warnings[0].getMessage()
    assert "not writable" in line and "db_path" in line
    reader.shutdown()
    elsewhere.shutdown()
    for core in ChronicleCore.open_cores():
        core.shutdown()

    write_config(home)  # writable again: the turn captured meanwhile reaches the log, once
    again = open_provider(home, "s2")
    assert logged(core_of(home), "s1")[-4:] == as_json(turn(12))
    assert len(logged(core_of(home), "s1")) == len(live) + 4
    again.shutdown()


# -- 3. a huge tool output -----------------------------------------------------------------------------


def huge_output(size: int) -> str:
    line = "".join(f"row {i} value {i * 7919 % 10007} " for i in range(40)) + "\n"
    body = line * (size // len(line))
    return "HEADMARK zebracorn\n" + body + "TAILMARK quokkafin"


def test_a_twenty_megabyte_tool_output_is_stored_whole_and_indexed_bounded(home: Path) -> None:
    provider = open_provider(home, "s1")
    engine = open_engine(home, "s1")
    big = huge_output(20_000_000)
    live = turn(0)
    live += [
        {"role": "user", "content": "dump the table"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "dump", "type": "function", "function": {"name": "sql", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "dump", "content": big},
        {"role": "assistant", "content": "The table is dumped."},
    ]
    for n in range(1, 6):
        live += turn(n)
    tracemalloc.start()
    # A guard against a hang, not a speed check (bench/compress.py and bench/sync_turn.py time
    # these): on an idle 2-core machine this block takes about 3 s.
    with timed(120):
        provider.sync_turn("", "", session_id="s1", messages=live)
        core = core_of(home)
        (event,) = [
            e
            for e in core.store.read(session="s1", namespaces=["chronicle.chat"])
            if e.payload.get("tool_call_ids") == ["dump"] and e.payload["role"] == "tool"
        ]
        assert event.payload["message"]["content"] == big
        assert len(event.payload["text"]) < 100_000 and "not indexed" in event.payload["text"]
        hits = json.loads(provider.handle_tool_call("chronicle_search", {"query": "zebracorn"}))
        assert hits["count"] >= 1
        out = engine.compress(list(live), current_tokens=63_000, force=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 12 * len(big)  # a few copies of the message at most, never one per word
    assert not violations(live, out)
    assert not any(m.get("content") == big for m in out)  # folded out of the context
    expanded = json.loads(
        engine.handle_tool_call("chronicle_expand", {"from_seq": event.seq, "to_seq": event.seq})
    )
    assert expanded["messages"][0]["message"]["content"] == big
    assert "oversized" in expanded
    provider.shutdown()


# -- 4. malformed messages -----------------------------------------------------------------------------


def malformed() -> list[Any]:
    return [
        {"role": "user", "content": "start"},
        None,
        42,
        "a bare string",
        ["a", "list"],
        {"content": "no role at all"},
        {"role": "user", "content": 12345},
        {"role": "user", "content": [["nested", ["deeper"]], {"type": "text", "text": "part"}]},
        {"role": "assistant", "content": None},
        {"role": "tool", "tool_call_id": "nobody_called_me", "content": "orphan result"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "dup",
                    "type": "function",
                    "function": {"name": "x", "arguments": "{not json"},
                },
                {"id": "dup", "type": "function", "function": {"name": "y", "arguments": 7}},
                {"id": None, "function": None},
                "not a call",
            ],
        },
        {"role": "tool", "tool_call_id": "dup", "content": "first"},
        {"role": "tool", "tool_call_id": "dup", "content": {"a": 1}},
        {"role": "assistant", "content": "answer", "weird": object(), 3: "int key"},
        {"role": "user", "content": "last words"},
    ]


def test_malformed_messages_never_raise_and_are_stored(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    provider = open_provider(home, "s1")
    engine = open_engine(home, "s1")
    live = malformed()
    provider.on_turn_start(1, None)  # type: ignore[arg-type]
    provider.sync_turn(None, None, session_id="s1", messages=live)  # type: ignore[arg-type]
    provider.sync_turn("", "", session_id="s1", messages=live)
    assert isinstance(provider.on_pre_compress(live), str)
    assert isinstance(provider.prefetch(None), str)  # type: ignore[arg-type]
    out = engine.compress(list(live), current_tokens=63_000, force=True)
    assert isinstance(out, list) and out
    engine.on_session_end("s1", live)
    provider.on_session_end(live)
    assert len(logged(core_of(home), "s1")) == len(live)  # every entry stored, once
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    many = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(10_000)
    ]
    # A guard against a hang, not a speed check (bench/compress.py and bench/sync_turn.py time
    # these): on an idle 2-core machine this block takes about 3 s.
    with timed(120):
        provider.sync_turn("", "", session_id="s2", messages=many)
        engine.on_session_start("s2")
        out = engine.compress(list(many), current_tokens=63_000)
    assert len(logged(core_of(home), "s2")) == len(many)
    assert out != many and not violations(many, out)
    provider.shutdown()


# -- 5. a broken summary endpoint ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def silent_server(limit_s: float = 20.0) -> Iterator[int]:
    """A server on 127.0.0.1 that accepts connections and never answers. Stops by itself."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()
    deadline = time.monotonic() + limit_s

    def serve() -> None:
        while not stop.is_set() and time.monotonic() < deadline and len(held) < 64:
            with contextlib.suppress(TimeoutError, OSError):
                conn, _ = server.accept()
                held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_a_broken_summary_endpoint_falls_back_within_the_timeout(home: Path, kind: str) -> None:
    with contextlib.ExitStack() as stack:
        port = free_port() if kind == "refused" else stack.enter_context(silent_server())
        write_config(
            home,
            context={
                "summarizer": "endpoint",
                "summarizer_base_url": f"http://127.0.0.1:{port}/v1",
                "summarizer_model": "m",
                "summarizer_timeout_seconds": 1,
            },
        )
        engine = open_engine(home, "s1")
        live = [m for n in range(30) for m in turn(n, pad=900)]
        with timed(4):
            out = engine.compress(list(live), current_tokens=60_000)
        assert out != live and not violations(live, out)
        assert any(HANDOFF_MARKER in str(m.get("content")) for m in out)
        status = json.loads(engine.handle_tool_call("chronicle_context_status", {}))
        assert status["last_pass"]["fell_back"] is True
