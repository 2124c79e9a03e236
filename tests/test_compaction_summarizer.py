"""Section writers: the extractive default, Hermes' auxiliary model, a local OpenAI-compatible
server (a stub on 127.0.0.1), the egress refusal, and the fallback on any failure."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_compaction_support import core_for

from chronicle_engine.chronicle.extractive import condense_prose, summarize_messages
from chronicle_engine.chronicle.writers import (
    ExtractiveWriter,
    FoldInput,
    ModelWriter,
    auxiliary_model,
    endpoint_model,
    writer_from_config,
)
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.errors import UsageError
from chronicle_engine.log.bookkeeping import BOOKKEEPING_NAMESPACE

FOLD = [
    {"role": "user", "content": "Deploy build 4.2.1 to staging; the ticket is OPS-311."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "terminal",
                    "arguments": '{"command": "kubectl rollout status"}',
                },
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Error: deployment exceeded its progress deadline",
    },
    {"role": "assistant", "content": "We decided to roll back to 4.2.0 because the probe failed."},
]


@pytest.fixture
def core(tmp_path: Any) -> Iterator[ChronicleCore]:
    c = core_for(tmp_path / "writers.db")
    yield c
    c.shutdown()


def test_the_extractive_summary_keeps_requests_steps_decisions_and_facts() -> None:
    prose = summarize_messages(FOLD, budget_chars=2000)
    assert "User: Deploy build 4.2.1 to staging; the ticket is OPS-311." in prose
    assert "Step: terminal(kubectl rollout status) → ERROR Error: deployment exceeded" in prose
    assert "Decision: We decided to roll back to 4.2.0 because the probe failed." in prose
    facts = next(line for line in prose.splitlines() if line.startswith("Facts:"))
    assert "OPS-311" in facts and "4.2.1" in facts
    assert summarize_messages(FOLD, budget_chars=2000) == prose  # deterministic


def test_over_budget_the_summary_says_how_to_get_everything_back() -> None:
    many = [
        m for n in range(200) for m in ({"role": "user", "content": f"request {n} " + "x" * 300},)
    ]
    prose = summarize_messages(
        many, budget_chars=1500, restore='chronicle_expand(section_id="1-200")'
    )
    assert len(prose) <= 1500
    assert prose.splitlines()[-1].endswith(
        'chronicle_expand(section_id="1-200") returns every original message.)'
    )
    assert "request 0 " in prose and "request 199 " in prose  # how it started, where it got to


def test_condensed_prose_keeps_each_parts_facts() -> None:
    children = [
        ("1-10", "User: first part\nFacts: ALPHA-1, ALPHA-2"),
        ("11-20", "User: second part\nFacts: BETA-1, BETA-2"),
    ]
    prose = condense_prose(children, budget_chars=400)
    assert "[1-10]" in prose and "[11-20]" in prose
    assert "ALPHA-1" in prose and "BETA-1" in prose


def test_hermes_auxiliary_model_is_called_for_compression(
    core: ChronicleCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.auxiliary_client as aux

    seen: list[dict[str, Any]] = []

    def call_llm(**kwargs: Any) -> Any:
        seen.append(kwargs)
        return {"choices": [{"message": {"content": "User: deploy 4.2.1\nFacts: OPS-311"}}]}

    monkeypatch.setattr(aux, "call_llm", call_llm)
    writer = ModelWriter(
        lambda: auxiliary_model(5), core.store, core.types, timeout=10, name="auxiliary"
    )
    drawn = writer.summarize(FoldInput(FOLD, "1-4", None, 2000))
    assert drawn.prose == "User: deploy 4.2.1\nFacts: OPS-311" and not drawn.fell_back
    (call,) = seen
    assert call["task"] == "compression" and call["timeout"] == 5
    assert call["messages"][0]["role"] == "system" and "OPS-311" in call["messages"][-1]["content"]
    assert drawn.pins and len(list(core.store.read(namespaces=[BOOKKEEPING_NAMESPACE]))) == 1
    # The same request again is answered from its pin: no second call.
    again = writer.summarize(FoldInput(FOLD, "1-4", None, 2000))
    assert again.prose == drawn.prose and len(seen) == 1


class _Stub(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Stub.bodies.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        payload = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": "User: from the stub"}}]}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def stub() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_a_local_openai_compatible_server_writes_the_prose(
    core: ChronicleCore, stub: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUMMARY_KEY", "sk-local")
    config = Config(
        {
            "context": {
                "summarizer": "endpoint",
                "summarizer_base_url": stub,
                "summarizer_model": "qwen-small",
                "summarizer_api_key_env": "SUMMARY_KEY",
            }
        }
    )
    writer = writer_from_config(config, core.store, core.types)
    assert writer.name == "endpoint"
    drawn = writer.summarize(FoldInput(FOLD, "1-4", "rollback", 2000))
    assert drawn.prose == "User: from the stub" and drawn.model_calls == 1
    body = _Stub.bodies[-1]
    assert body["path"] == "/v1/chat/completions" and body["model"] == "qwen-small"
    assert body["auth"] == "Bearer sk-local"
    assert "Focus on: rollback" in body["messages"][-1]["content"]


def test_an_off_host_endpoint_is_refused_unless_allowed(core: ChronicleCore) -> None:
    with pytest.raises(UsageError, match="summarizer_allow_remote"):
        endpoint_model(
            "https://summaries.invalid/v1", "m", api_key=None, timeout=1, allow_remote=False
        )
    config = Config(
        {
            "context": {
                "summarizer": "endpoint",
                "summarizer_base_url": "https://summaries.invalid/v1",
            }
        }
    )
    assert isinstance(writer_from_config(config, core.store, core.types), ExtractiveWriter)


def test_an_unreachable_server_falls_back_to_the_extractive_prose(core: ChronicleCore) -> None:
    writer = ModelWriter(
        lambda: endpoint_model(
            "http://127.0.0.1:9/v1", "m", api_key=None, timeout=2, allow_remote=False
        ),
        core.store,
        core.types,
        timeout=5,
        name="endpoint",
    )
    drawn = writer.summarize(FoldInput(FOLD, "1-4", None, 2000))
    assert drawn.fell_back and drawn.error
    assert drawn.prose == ExtractiveWriter().summarize(FoldInput(FOLD, "1-4", None, 2000)).prose


def _fold(n: int, deadline: float | None = None) -> FoldInput:
    messages = [{"role": "user", "content": f"request {n}: rotate the key of host db-{n}"}]
    return FoldInput(messages, f"{n}-{n}", None, 2000, deadline)


def test_hung_draws_hold_a_bounded_pool_not_a_thread_each(
    core: ChronicleCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chronicle_engine.chronicle.writers as summarizer

    release = threading.Event()
    started: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started.append(1)
        release.wait(10)
        return ModelResponse(parts=[TextPart("late answer")])

    monkeypatch.setattr(summarizer, "COOLDOWN_SECONDS", 0.0)  # ask again after each timeout
    before = set(threading.enumerate())
    writer = ModelWriter(lambda: FunctionModel(model), core.store, core.types, timeout=0.05)
    try:
        for n in range(6):
            drawn = writer.summarize(_fold(n))
            assert drawn.fell_back and "longer than" in str(drawn.error)
            time.sleep(0.11)  # past the cooldown of 2 x timeout
        workers = [t for t in set(threading.enumerate()) - before if t.name.startswith("chronicle")]
        assert len(workers) <= 2 and len(started) <= 2  # queued draws behind them never ran
    finally:
        release.set()
        writer.close()


def test_one_ledger_serves_every_draw_and_keeps_no_rejected_answer(core: ChronicleCore) -> None:
    answers = iter(["   ", "User: rotate the key", "User: rotate the other key"])

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(next(answers))])

    writer = ModelWriter(lambda: FunctionModel(model), core.store, core.types, timeout=5)
    ledger = writer._ledger
    empty = writer.summarize(_fold(1))
    assert empty.fell_back and ledger.pending == 0  # the empty answer is not pinned
    writer._resting_until = 0.0  # (the cooldown is tested elsewhere)
    first = writer.summarize(_fold(1))
    second = writer.summarize(_fold(2))
    assert (first.prose, second.prose) == ("User: rotate the key", "User: rotate the other key")
    assert writer._ledger is ledger
    pins = list(core.store.read(namespaces=[BOOKKEEPING_NAMESPACE]))
    assert [p.payload["key"] for p in pins] == [*first.pins, *second.pins]


def test_no_model_is_asked_past_the_callers_deadline(core: ChronicleCore) -> None:
    calls: list[float] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(time.monotonic())
        time.sleep(0.5)
        return ModelResponse(parts=[TextPart("User: slow but fine")])

    writer = ModelWriter(lambda: FunctionModel(model), core.store, core.types, timeout=5)
    spent = writer.summarize(_fold(1, deadline=time.monotonic() - 1))
    assert spent.fell_back and spent.model_calls == 0 and "spent its time" in str(spent.error)
    assert calls == []
    began = time.monotonic()
    cut = writer.summarize(_fold(2, deadline=began + 0.1))
    assert time.monotonic() - began < 0.4  # waited for the deadline, not the 5 s timeout
    assert cut.fell_back and cut.model_calls == 1
    time.sleep(0.5)  # let the cut-off draw finish on its worker
    # A pass running out of time is not the model failing: the next caller still asks it.
    assert writer.summarize(_fold(3)).prose == "User: slow but fine"
    writer.close()


def test_facts_when_the_better_tiers_fill_the_limit_exactly():
    """The tiers above the last fill the limit to the fact: the rest is left out, no division
    by the room that is not there (this used to raise and fail the whole summary)."""
    from chronicle_engine.chronicle.extractive import _facts

    once = [f"build-{n}x" for n in range(4)]  # seen once, letters and digits: the top tier
    texts = [(" ".join(once), 1), ("port 80 and port 80 again", 1)]
    assert _facts(texts, 4) == once
    assert _facts(texts, 5)[:4] == once and len(_facts(texts, 5)) == 5
