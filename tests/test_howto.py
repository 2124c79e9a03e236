"""The chronicle how-to (seed 001), run against this code, with its printed results reproduced."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_scheduler_support import START, message, open_core, session_end

from chronicle_engine.chronicle.fold import FOLD_NAME, ChronicleFold
from chronicle_engine.chronicle.reconsolidate import reconsolidate
from chronicle_engine.chronicle.sections import Anchor, Consolidation, EventTypes
from chronicle_engine.chronicle.store import SQLiteChronicleStore
from chronicle_engine.chronicle.write import WriterSummarizer
from chronicle_engine.chronicle.writers import ModelWriter
from chronicle_engine.errors import ChronicleFork, GenerativeRebuild
from chronicle_engine.log.bookkeeping import is_bookkeeping, register_builtin_events
from chronicle_engine.log.events import DomainEvent, EventReader, EventTypeRegistry, UpcastRegistry
from chronicle_engine.log.pins import PinLedger, PinnedModel, ReplayPins
from chronicle_engine.log.projector import Projector
from chronicle_engine.log.store import SQLiteEventStore, StoredEvent
from chronicle_engine.scheduler.consolidation import FOLD_NAME as CONSOLIDATION_FOLD
from chronicle_engine.scheduler.consolidation import Consolidator
from chronicle_engine.scheduler.units import UnitRules


class OfferMade(DomainEvent, frozen=True):
    party: str
    text: str


class RoundClosed(DomainEvent, frozen=True):
    round_number: int


def _lines(events: Sequence[StoredEvent]) -> list[str]:
    return [
        f"{e.payload['party']}: {e.payload['text']}"
        for e in events
        if e.envelope.type == "OfferMade"
    ]


def fixed(text: str):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text)])

    return model


ROUND_ONE = "The UK opened at 12%; Norway held at 5%."
ROUND_TWO = "The UK moved to 10%; Norway met it at 8%."
REVISED = "Round 1: the UK asked for a 12% mackerel cut; Norway offered 5%."
PROMPT = "Summarise this round of a fisheries negotiation in one sentence:\n"


class RoundSummary:
    def __init__(self, resolver, text: str = ROUND_ONE, prompt: str = PROMPT) -> None:
        self._resolver = resolver
        self._text = text
        self._prompt = prompt

    def __call__(self, events: Sequence[StoredEvent]) -> Consolidation:
        keys: list[str] = []
        model = PinnedModel(FunctionModel(fixed(self._text)), self._resolver, on_key=keys.append)
        result = Agent(model).run_sync(self._prompt + "\n".join(_lines(events)))
        return Consolidation(prose=result.output, pins=tuple(keys))


class AwaitedRoundSummary:
    def __init__(self, resolver) -> None:
        self._resolver = resolver

    async def __call__(self, events: Sequence[StoredEvent]) -> Consolidation:
        keys: list[str] = []
        model = PinnedModel(FunctionModel(fixed(ROUND_TWO)), self._resolver, on_key=keys.append)
        result = await Agent(model).run(PROMPT + "\n".join(_lines(events)))
        return Consolidation(prose=result.output, pins=tuple(keys))


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    path = ":memory:" if request.param == "memory" else tmp_path / "howto.db"
    s = SQLiteEventStore(path)
    yield s
    s.close()


def test_howto(store: SQLiteEventStore, tmp_path, caplog) -> None:
    types = EventTypeRegistry()
    register_builtin_events(types)
    types.event("fisheries", "OfferMade")(OfferMade)
    types.event("fisheries", "RoundClosed")(RoundClosed)
    reader = EventReader(store, UpcastRegistry(), types)
    chronicle = SQLiteChronicleStore(store)
    ledger = PinLedger(store, types)
    boundary = EventTypes(("fisheries", "RoundClosed"))
    fold = ChronicleFold(chronicle, reader, boundary=boundary, summarize=RoundSummary(ledger))
    consolidate = Projector(store, reader, [fold])

    # 3. close round one
    store.append(
        [
            types.pending(OfferMade(party="UK", text="A 12% cut to the mackerel quota.")),
            types.pending(OfferMade(party="Norway", text="No more than 5%.")),
            types.pending(RoundClosed(round_number=1)),
            types.pending(OfferMade(party="UK", text="We could move to 10%.")),
        ]
    )
    consolidate.catch_up()
    assert ledger.commit() == 1

    # 4. read recent events and the summarised past
    through = chronicle.consolidated_through()
    assert through == 3
    (section,) = chronicle.current()
    assert section.anchor.section_id == "1-3"
    assert section.prose == ROUND_ONE
    assert len(section.pins) == 1 and section.pins[0].startswith("p1:model_call:")
    recent = [e for e in reader.read(after=through) if not is_bookkeeping(e.envelope)]
    assert [(e.seq, e.envelope.type, e.payload) for e in recent] == [
        (4, "OfferMade", {"party": "UK", "text": "We could move to 10%."})
    ]
    assert [s.anchor for s in chronicle.current(from_seq=2, to_seq=2)] == [Anchor("1-3", 1, 3, 3)]
    assert chronicle.current(from_seq=4, to_seq=4) == []

    # carry the chronicle to a new store: 1 section, then 0 on a repeat
    new_store = SQLiteEventStore(tmp_path / "new-backend.db")
    carried = SQLiteChronicleStore(new_store)
    assert carried.load(chronicle.export()) == 1
    assert carried.load(chronicle.export()) == 0
    new_store.close()

    # rebuild only when you mean it
    with pytest.raises(GenerativeRebuild, match="'chronicle' is a generative fold"):
        consolidate.rebuild(FOLD_NAME, reset=chronicle.reset)
    assert [s.anchor.section_id for s in chronicle.current()] == ["1-3"]

    # consolidate from async code: round two covers 4..7 (the open offer, the pin at 5, 6, 7)
    async def close_round_two() -> None:
        store.append(
            [
                types.pending(OfferMade(party="Norway", text="We could go to 8%.")),
                types.pending(RoundClosed(round_number=2)),
            ]
        )
        ledger2 = PinLedger(store, types)
        fold2 = ChronicleFold(
            chronicle, reader, boundary=boundary, summarize=AwaitedRoundSummary(ledger2)
        )
        await Projector(store, reader, [fold2]).catch_up_async()
        ledger2.commit()

    # asyncio.run() would orphan the loop Agent.run_sync set on this thread; use a loop of our own.
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(close_round_two())
    finally:
        loop.close()
    assert [(s.anchor.section_id, s.prose) for s in chronicle.current()] == [
        ("1-3", ROUND_ONE),
        ("4-7", ROUND_TWO),
    ]

    # re-consolidate a section
    ledger3 = PinLedger(store, types)
    revise = RoundSummary(
        ledger3, REVISED, PROMPT.replace("one sentence", "one sentence, naming the stock")
    )
    with caplog.at_level(logging.WARNING, logger="chronicle_engine.chronicle.reconsolidation"):
        revised = reconsolidate(chronicle, reader, "1-3", revise)
    ledger3.commit()
    assert revised.anchor == Anchor("1-3#2", 1, 3, 3, supersedes="1-3")
    assert (
        "re-consolidated 1-3 as 1-3#2 (seq 1..3): runs that read the old prose will diverge on "
        "replay, and a rebuild of the chronicle discards the new section"
    ) in caplog.text
    assert [(s.anchor.section_id, s.prose) for s in chronicle.current()] == [
        ("1-3#2", REVISED),
        ("4-7", ROUND_TWO),
    ]
    still = chronicle.get("1-3")
    assert still is not None and still.prose == ROUND_ONE
    with pytest.raises(ChronicleFork) as refused:
        reconsolidate(chronicle, reader, "1-3", revise)
    assert str(refused.value) == "section '1-3' is already superseded; the current one is '1-3#2'"

    # rebuild through replay pins: the same prose, word for word, the model never reached
    def unreachable(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("a replayed rebuild must not reach the model")

    class ReplaySummary(RoundSummary):
        def __call__(self, events: Sequence[StoredEvent]) -> Consolidation:
            keys: list[str] = []
            model = PinnedModel(FunctionModel(unreachable), self._resolver, on_key=keys.append)
            result = Agent(model).run_sync(PROMPT + "\n".join(_lines(events)))
            return Consolidation(prose=result.output, pins=tuple(keys))

    replay = ReplayPins.from_events(store.read(), types)
    replayed = ChronicleFold(chronicle, reader, boundary=boundary, summarize=ReplaySummary(replay))
    Projector(store, reader, [replayed]).rebuild(
        FOLD_NAME, reset=chronicle.reset, reset_in_transaction=True, discard_generated=True
    )
    assert [(s.anchor.section_id, s.prose) for s in chronicle.current()] == [
        ("1-3", ROUND_ONE),
        ("4-7", ROUND_TWO),
    ]


def test_sync_catch_up_refuses_async_summarizer(store: SQLiteEventStore) -> None:
    types = EventTypeRegistry()
    register_builtin_events(types)
    types.event("fisheries", "OfferMade")(OfferMade)
    types.event("fisheries", "RoundClosed")(RoundClosed)
    reader = EventReader(store, UpcastRegistry(), types)
    chronicle = SQLiteChronicleStore(store)
    ledger = PinLedger(store, types)
    fold = ChronicleFold(
        chronicle,
        reader,
        boundary=EventTypes(("fisheries", "RoundClosed")),
        summarize=AwaitedRoundSummary(ledger),
    )
    store.append([types.pending(RoundClosed(round_number=1))])
    projector = Projector(store, reader, [fold])
    with pytest.raises(TypeError, match="'chronicle' only prepares asynchronously"):
        projector.catch_up()
    with pytest.raises(TypeError, match="only prepares asynchronously"):
        projector.rebuild(FOLD_NAME, discard_generated=True)
    assert store.position(FOLD_NAME) == 0
    assert len(chronicle) == 0
    assert ledger.live_draws == 0


def test_howto_on_the_production_path(tmp_path, caplog) -> None:
    """The how-to's steps on the path production writes sections by: the conversation's own units
    (a session end closes one), the section writer drawing through a pinned model (the writer
    `context.summarizer` configures), the same ChronicleFold, store, carry and re-consolidation.
    Production sections cite the conversation's messages, so a unit ends at its last message
    rather than at its boundary event."""
    core = open_core(tmp_path / "howto.db")
    writers = []

    def writer(text: str) -> ModelWriter:
        made = ModelWriter(
            lambda: FunctionModel(fixed(text)), core.store, core.types, timeout=30, name="model"
        )
        writers.append(made)
        return made

    round_one = writer(ROUND_ONE)
    consolidate = Consolidator(
        core.store,
        core.reader,
        core.types,
        conversations=core.sessions,
        summarize=WriterSummarizer(lambda: round_one, 2_000),
        rules=UnitRules(),
    )
    t = START
    core.store.append(
        [
            message(core, "talks", "user", "UK: A 12% cut to the mackerel quota.", t),
            message(core, "talks", "assistant", "Norway: No more than 5%.", t + 1),
            message(core, "talks", "user", "UK: noted.", t + 2),
            session_end(core, "talks", t + 3),
            message(core, "talks", "user", "UK: We could move to 10%.", t + 4),
        ]
    )
    consolidate.run(budget=100)
    chronicle = core.chronicle(core.sessions.chronicle_name("talks"))
    through = chronicle.consolidated_through()
    assert through == 3
    (section,) = chronicle.current()
    assert (section.anchor.section_id, section.prose) == ("1-3", ROUND_ONE)
    assert len(section.pins) == 1 and section.pins[0].startswith("p1:model_call:")
    assert section.meta["writer"] == "model" and section.meta["boundary"] == "session_end"
    recent = [
        e.payload.get("text")
        for e in core.reader.read(after=through)
        if not is_bookkeeping(e.envelope)
    ]
    assert recent[-1] == "UK: We could move to 10%."
    # Retrieval over sections is recall's ranked index (the seed's Retriever port).
    hits = core.recall.search("Norway", scope="all")
    assert "1-3" in [h.get("section_id") for h in hits]

    new_store = SQLiteEventStore(tmp_path / "new-backend.db")
    carried = SQLiteChronicleStore(new_store, chronicle.name)
    assert carried.load(chronicle.export()) == 1
    assert carried.load(chronicle.export()) == 0
    new_store.close()

    with pytest.raises(GenerativeRebuild, match="'scheduler.consolidation' is a generative fold"):
        consolidate.projector.rebuild(CONSOLIDATION_FOLD)

    round_two = writer(ROUND_TWO)
    consolidate.fold.summarize = WriterSummarizer(lambda: round_two, 2_000)
    core.store.append(
        [
            message(core, "talks", "assistant", "Norway: We could go to 8%.", t + 5),
            session_end(core, "talks", t + 6),
        ]
    )
    consolidate.run(budget=100)
    (second,) = [s for s in chronicle.current() if s.anchor.section_id != "1-3"]
    assert second.prose == ROUND_TWO and second.anchor.from_seq == 5

    # A revised prompt (here: a focus) is a new pin key; the same prompt would replay round one.
    revise = writer(REVISED)
    revised_summary = WriterSummarizer(lambda: revise, 2_000, focus="the stock")
    with caplog.at_level(logging.WARNING, logger="chronicle_engine.chronicle.reconsolidation"):
        revised = reconsolidate(
            chronicle,
            core.reader,
            "1-3",
            revised_summary,
            admit=lambda e: e.envelope.type == "MessageCaptured",
        )
    assert revised.anchor == Anchor("1-3#2", 1, 3, 3, supersedes="1-3")
    assert "re-consolidated 1-3 as 1-3#2 (seq 1..3)" in caplog.text
    assert [(s.anchor.section_id, s.prose) for s in chronicle.current()] == [
        ("1-3#2", REVISED),
        (second.anchor.section_id, ROUND_TWO),
    ]
    still = chronicle.get("1-3")
    assert still is not None and still.prose == ROUND_ONE
    with pytest.raises(ChronicleFork) as refused:
        reconsolidate(chronicle, core.reader, "1-3", revised_summary)
    assert str(refused.value) == "section '1-3' is already superseded; the current one is '1-3#2'"
    for made in writers:
        made.close()
    core.shutdown()
