"""Pinned model calls: keyed on the whole request, recorded, replayed word for word."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from chronicle_engine.errors import PinMiss
from chronicle_engine.log.bookkeeping import is_bookkeeping
from chronicle_engine.log.events import EventTypeRegistry
from chronicle_engine.log.pins import PinLedger, PinnedModel, ReplayPins
from chronicle_engine.log.store import SQLiteEventStore


def counting(text: str, calls: list[int]):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[TextPart(f"{text} #{len(calls)}")])

    return model


def run(model: PinnedModel, prompt: str) -> str:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(Agent(model).run(prompt)).output
    finally:
        loop.close()


@pytest.fixture
def store():
    s = SQLiteEventStore(":memory:")
    yield s
    s.close()


def test_same_request_same_key_and_one_draw(store) -> None:
    calls: list[int] = []
    keys: list[str] = []
    ledger = PinLedger(store, EventTypeRegistry())
    model = PinnedModel(FunctionModel(counting("a", calls)), ledger, on_key=keys.append)
    first = run(model, "summarise x")
    second = run(model, "summarise x")
    assert first == second == "a #1"
    assert len(calls) == 1 and keys[0] == keys[1]
    run(model, "summarise y")
    assert len(calls) == 2 and keys[2] != keys[0]  # a changed prompt is a different key


def test_commit_appends_bookkeeping_and_replay_never_draws(store) -> None:
    types = EventTypeRegistry()
    calls: list[int] = []
    ledger = PinLedger(store, types)
    answer = run(PinnedModel(FunctionModel(counting("b", calls)), ledger), "p")
    assert ledger.commit() == 1
    assert ledger.commit() == 0
    (pin,) = list(store.read())
    assert is_bookkeeping(pin)

    replay = ReplayPins.from_events(store.read(), types)
    never: list[int] = []
    assert run(PinnedModel(FunctionModel(counting("c", never)), replay), "p") == answer
    assert never == []
    with pytest.raises(PinMiss, match="the log has no pin"):
        run(PinnedModel(FunctionModel(counting("c", never)), replay), "another prompt")

    fresh_ledger = PinLedger(store, types)  # a new run reuses the committed pin
    assert run(PinnedModel(FunctionModel(counting("d", never)), fresh_ledger), "p") == answer
    assert never == [] and fresh_ledger.live_draws == 0
