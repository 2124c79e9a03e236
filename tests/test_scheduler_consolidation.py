"""Background consolidation: closed units become sections, replayably, never forking the chronicle."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import own_schema
from test_scheduler_support import (
    START,
    FakeClock,
    PostgresWhere,
    chronicle_of,
    message,
    open_core,
    places,
    scheduler,
    session_end,
    summarise,
    summarise_async,
)

from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.core import ChronicleCore
from chronicle_engine.scheduler.consolidation import FOLD_NAME, Consolidator
from chronicle_engine.scheduler.units import UnitRules


@pytest.fixture(params=["memory", "file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    with places(request, tmp_path) as place:
        yield place


def consolidator(core: ChronicleCore, **rules) -> Consolidator:
    return Consolidator(
        core.store,
        core.reader,
        core.types,
        conversations=core.sessions,
        summarize=summarise,
        rules=UnitRules(**rules),
    )


def anchors(core: ChronicleCore, session: str) -> list[tuple[str, int, int]]:
    return [
        (s.anchor.section_id, s.anchor.from_seq, s.anchor.to_seq)
        for s in core.chronicle(chronicle_of(core, session)).current()
    ]


def prose(core: ChronicleCore, session: str) -> list[str]:
    return [s.prose for s in core.chronicle(chronicle_of(core, session)).current()]


def test_a_session_end_closes_the_unit_after_its_last_message(where) -> None:
    core = open_core(where)
    t = START
    core.store.append(
        [
            message(core, "a", "user", "plan the trip", t),
            message(core, "a", "assistant", "Lisbon, 3 days", t + 5),
            message(core, "a", "user", "book it", t + 10),
            session_end(core, "a", t + 20),
            message(core, "a", "user", "next day", t + 100),
        ]
    )
    c = consolidator(core)
    report = c.run(budget=100)
    assert (report.processed, report.remaining) == (5, 0)
    assert anchors(core, "a") == [("1-3", 1, 3)]
    assert prose(core, "a") == ["plan the trip | Lisbon, 3 days | book it"]
    section = core.chronicle(chronicle_of(core, "a")).current()[0]
    assert section.meta["boundary"] == "session_end" and section.meta["messages"] == 3
    assert c.open_units() == [
        {
            "chronicle": chronicle_of(core, "a"),
            "session": "a",
            "from_seq": 5,
            "last_seq": 5,
            "turns": 1,
        }
    ]
    core.shutdown()


def test_every_n_turns_closes_before_the_turn_that_would_exceed_it(where) -> None:
    core = open_core(where)
    events = []
    for turn in range(5):
        events.append(message(core, "a", "user", f"q{turn}", START + turn * 10))
        events.append(message(core, "a", "assistant", f"a{turn}", START + turn * 10 + 1))
    core.store.append(events)
    consolidator(core, unit_turns=2).run(budget=100)
    assert anchors(core, "a") == [("1-4", 1, 4), ("5-8", 5, 8)]
    assert prose(core, "a") == ["q0 | a0 | q1 | a1", "q2 | a2 | q3 | a3"]
    core.shutdown()


def test_a_long_silence_between_messages_closes_the_unit(where) -> None:
    core = open_core(where)
    core.store.append(
        [
            message(core, "a", "user", "morning", START),
            message(core, "a", "assistant", "hi", START + 2),
            message(core, "a", "user", "evening", START + 3 * 3600),
        ]
    )
    consolidator(core, idle_gap_seconds=1800).run(budget=100)
    assert anchors(core, "a") == [("1-2", 1, 2)]
    assert core.chronicle(chronicle_of(core, "a")).current()[0].meta["boundary"] == "idle_gap"
    core.shutdown()


def test_each_conversation_gets_its_own_sections_from_its_own_messages(where) -> None:
    core = open_core(where)
    core.store.append(
        [
            message(core, "a", "user", "a1", START),
            message(core, "b", "user", "b1", START + 1),
            message(core, "a", "assistant", "a2", START + 2),
            message(core, "b", "assistant", "b2", START + 3),
            session_end(core, "b", START + 4),
            session_end(core, "a", START + 5),
        ]
    )
    consolidator(core).run(budget=100)
    assert anchors(core, "a") == [("1-3", 1, 3)]  # seq 2 is b's: a range may span others
    assert anchors(core, "b") == [("2-4", 2, 4)]
    assert prose(core, "a") == ["a1 | a2"] and prose(core, "b") == ["b1 | b2"]
    core.shutdown()


def test_idle_conversations_are_reaped_into_sections_through_the_hooks(where) -> None:
    core = open_core(
        where,
        {"maintenance": {"schedules": {"consolidate": "* * * * *", "reap": "*/5 * * * *"}}},
        {"consolidation": {"idle_gap_minutes": 30}},
    )
    clock = FakeClock()
    sched = scheduler(core, clock)
    core.store.append(
        [
            message(core, "a", "user", "remember the blue door", clock()),
            message(core, "a", "assistant", "noted", clock() + 1),
        ]
    )
    for _ in range(12 * 60):  # a hook every 5 s for an hour
        clock.advance(5)
        sched.tick("sync_turn")
    assert anchors(core, "a") == [("1-2", 1, 2)]
    reaped = [e for e in core.store.read() if e.envelope.type == "SessionReaped"]
    assert len(reaped) == 1
    assert reaped[0].payload["through_seq"] == 2 and reaped[0].envelope.session == "a"
    assert reaped[0].payload["idle_seconds"] >= 1800
    assert sched.maintenance_status()["consolidation"]["open_units"] == []
    core.shutdown()


def test_a_stale_reap_decision_is_ignored(where) -> None:
    core = open_core(where)
    c = consolidator(core, idle_gap_seconds=600)
    core.store.append([message(core, "a", "user", "hello", START)])
    c.run(budget=100)
    # The conversation continues under its next session id (a compression continuation)
    # before the fold has read it ...
    core.sessions.switch("a2", parent_session_id="a", reason="compression")
    core.store.append([message(core, "a2", "user", "still here", START + 300)])
    # ... so the reaper, which sees session "a" quiet for 601 s, decides on stale knowledge.
    assert c.reap(START + 601, budget=10).processed == 1
    c.run(budget=100)
    assert anchors(core, "a") == []
    assert c.open_units()[0]["from_seq"] == 1 and c.open_units()[0]["last_seq"] == 3
    core.shutdown()


def test_sections_start_after_what_the_context_engine_already_folded(where) -> None:
    core = open_core(where)
    core.store.append(
        [
            message(core, "a", "user" if i % 2 == 0 else "assistant", f"m{i}", START + i)
            for i in range(5)
        ]
        + [session_end(core, "a", START + 9)]
    )
    chronicle = core.chronicle(chronicle_of(core, "a"))
    chronicle.append(Section(Anchor("1-3", 1, 3, unit=3), "compacted m0..m2"))
    consolidator(core).run(budget=100)
    assert anchors(core, "a") == [("1-3", 1, 3), ("4-5", 4, 5)]
    assert prose(core, "a") == ["compacted m0..m2", "m3 | m4"]
    core.shutdown()


def test_a_unit_the_context_engine_already_covered_writes_nothing(where) -> None:
    core = open_core(where)
    core.store.append(
        [message(core, "a", "user", f"m{i}", START + i) for i in range(3)]
        + [session_end(core, "a", START + 9)]
    )
    core.chronicle(chronicle_of(core, "a")).append(
        Section(Anchor("1-3", 1, 3, unit=3), "all of it")
    )
    consolidator(core).run(budget=100)
    assert anchors(core, "a") == [("1-3", 1, 3)]
    assert core.store.position(FOLD_NAME) == 4
    core.shutdown()


def _talk(core: ChronicleCore, session: str, count: int) -> list:
    return [
        message(core, session, "user" if i % 2 == 0 else "assistant", f"m{i}", START + i)
        for i in range(count)
    ]


def test_a_fork_refused_by_the_store_is_retried_next_tick_not_lost(where) -> None:
    core = open_core(
        where,
        {"maintenance": {"schedules": {"consolidate": "* * * * *"}}},
        {"consolidation": {"unit_turns": 2}},
    )
    clock = FakeClock()
    raced = []

    def summarise_while_compaction_lands(events):
        if not raced:  # the context engine folds 1..2 while we draw
            raced.append(True)
            core.chronicle(chronicle_of(core, "a")).append(
                Section(Anchor("1-2", 1, 2, unit=2), "compaction's own")
            )
        return summarise(events)

    sched = scheduler(core, clock, summarize=summarise_while_compaction_lands)
    core.store.append(_talk(core, "a", 5))  # the third user message closes 1..4
    sched.tick("sync_turn")  # draws 1..4; the store refuses the fork
    job = sched.queue.jobs()[0]
    assert job.state == "pending" and "raced a compaction" in (job.reason or "")
    assert core.store.position(FOLD_NAME) == 0
    sched.tick("sync_turn")  # the very next hook redraws against the new end
    assert anchors(core, "a") == [("1-2", 1, 2), ("3-4", 3, 4)]
    assert prose(core, "a") == ["compaction's own", "m2 | m3"]
    done = sched.queue.get(job.id)
    assert done is not None and done.state == "done" and done.attempts == 2
    core.shutdown()


def test_the_draw_happens_outside_the_write_lock(where) -> None:
    core = open_core(where)
    appended = []

    def summarise_and_write_elsewhere(events):
        # Another thread appends while we draw: it would wait forever if we held the lock.
        def other():
            appended.extend(core.store.append([message(core, "z", "user", "meanwhile", START)]))

        worker = threading.Thread(target=other)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive(), "the summariser ran inside the write transaction"
        return summarise(events)

    c = Consolidator(
        core.store,
        core.reader,
        core.types,
        conversations=core.sessions,
        summarize=summarise_and_write_elsewhere,
        rules=UnitRules(),
    )
    core.store.append([message(core, "a", "user", "hi", START), session_end(core, "a", START + 1)])
    c.run(budget=10)
    assert appended and anchors(core, "a") == [("1-1", 1, 1)]
    core.shutdown()


def test_async_hosts_consolidate_through_the_async_path(where) -> None:
    core = open_core(
        where,
        {"maintenance": {"schedules": {"consolidate": "* * * * *"}}},
        {"consolidation": {"unit_turns": 1}},
    )
    sched = scheduler(core, FakeClock(), summarize=summarise_async)
    core.store.append(_talk(core, "a", 3))
    asyncio.run(sched.tick_async("sync_turn"))
    assert anchors(core, "a") == [("1-2", 1, 2)]
    assert prose(core, "a") == ["m0 | m1"]
    core.shutdown()


def test_a_sync_hook_with_an_async_summariser_fails_the_attempt_and_says_why(where) -> None:
    core = open_core(where, {"maintenance": {"schedules": {"consolidate": "* * * * *"}}})
    sched = scheduler(core, FakeClock(), summarize=summarise_async)
    core.store.append(_talk(core, "a", 1))
    sched.tick("sync_turn")
    job = sched.queue.jobs()[0]
    assert job.state == "pending" and "catch_up_async" in (job.reason or "")
    assert core.store.position(FOLD_NAME) == 0
    core.shutdown()


# -- replay ---------------------------------------------------------------------------------

_step = st.tuples(
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from(["user", "assistant", "end", "reap", "compress"]),
    st.sampled_from([1, 30, 700, 4000]),  # seconds since the previous step
)


def _play(core: ChronicleCore, script, budgets) -> Consolidator:
    """Append the script's events, folding and reaping in pieces of the given budgets. A
    "compress" step continues the conversation under a new session id, as Hermes does after a
    compaction, so a conversation's units span its lineage."""
    c = consolidator(core, unit_turns=3, idle_gap_seconds=1800)
    t = START
    pieces = iter(budgets)
    current = {name: name for name in "abc"}
    for i, (name, kind, gap) in enumerate(script):
        t += gap
        session = current[name]
        if kind == "end":
            core.store.append([session_end(core, session, t)])
        elif kind == "reap":
            c.run(budget=next(pieces, 7))
            c.reap(t, budget=2)
        elif kind == "compress":
            current[name] = f"{name}{i}"
            core.sessions.switch(current[name], parent_session_id=session, reason="compression")
        else:
            core.store.append([message(core, session, kind, f"{session}:{i}", t)])
        if i % 3 == 0:
            c.run(budget=next(pieces, 5))
    while c.run(budget=next(pieces, 4)).remaining:
        pass
    return c


def _copy_log(source: ChronicleCore, target: ChronicleCore) -> None:
    from chronicle_engine.log.store import PendingEvent

    target.store.append(
        [
            PendingEvent(
                e.envelope.namespace,
                e.envelope.type,
                e.envelope.version,
                e.payload,
                id=e.envelope.id,
                session=e.envelope.session,
                created_at=e.envelope.created_at,
            )
            for e in source.store.read()
        ]
    )


@pytest.mark.parametrize("replayed_on", ["file", "postgres"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=st.lists(_step, min_size=1, max_size=40), budgets=st.lists(st.integers(1, 9)))
def test_replaying_the_same_log_gives_identical_anchors(
    request, tmp_path_factory, replayed_on, script, budgets
) -> None:
    """A log played with consolidation runs in pieces, copied into another store (a WAL file,
    or a schema of its own on the session's PostgreSQL server) and folded there at once."""
    with contextlib.ExitStack() as stack:
        if replayed_on == "postgres":
            cluster = request.getfixturevalue("postgres_cluster")
            where: str | Path = PostgresWhere(stack.enter_context(own_schema(cluster)))
        else:
            where = tmp_path_factory.mktemp("replay") / "replay.db"
        _replay(script, budgets, where)


def _replay(script: list, budgets: list[int], where: str | Path) -> None:
    live = open_core(":memory:")
    _play(live, script, budgets)
    replay = open_core(where)
    _copy_log(live, replay)
    c = consolidator(replay, unit_turns=3, idle_gap_seconds=1800)
    c.run(budget=10_000)  # the whole log at once
    for session in "abc":
        assert anchors(replay, session) == anchors(live, session)
        assert prose(replay, session) == prose(live, session)
        sections = live.chronicle(chronicle_of(live, session)).current()
        for before, after in zip(sections, sections[1:], strict=False):
            assert before.anchor.to_seq < after.anchor.from_seq  # never overlapping
        for s in sections:
            first = live.store.get(s.anchor.from_seq)
            assert first is not None and first.envelope.type == "MessageCaptured"
            assert live.sessions.chronicle_name(first.envelope.session or "") == (
                live.sessions.chronicle_name(session)
            )
    live.shutdown()
    replay.shutdown()


def test_a_rebuild_of_the_fold_keeps_the_carried_sections_and_their_anchors(where) -> None:
    core = open_core(where)
    core.store.append(
        [message(core, "a", "user", f"m{i}", START + i) for i in range(3)]
        + [session_end(core, "a", START + 5)]
        + [message(core, "a", "user", "more", START + 9), session_end(core, "a", START + 10)]
    )
    c = consolidator(core)
    c.run(budget=100)
    before = anchors(core, "a")
    c.projector.rebuild(FOLD_NAME, discard_generated=True)
    assert anchors(core, "a") == before == [("1-3", 1, 3), ("5-5", 5, 5)]
    assert len(core.chronicle(chronicle_of(core, "a"))) == 2
    core.shutdown()


def _chat(start: int, count: int) -> list[dict]:
    out = []
    for i in range(start, start + count):
        out.append({"role": "user", "content": f"request {i}: handle item {i} " + "x" * 300})
        out.append({"role": "assistant", "content": f"handled item {i} " + "y" * 300})
    return out


def test_the_context_engine_reuses_background_sections_and_never_forks_them(where) -> None:
    from chronicle_engine.compaction.policy import policy_from_config

    core = open_core(where, {"consolidation": {"unit_turns": 3}})
    sched = scheduler(core, FakeClock(), summarize=None)  # the shipped writer
    name = chronicle_of(core, "s1")
    messages = _chat(0, 15)
    core.capture.capture_messages("s1", messages)
    sched.enqueue("consolidate")
    sched.run_pending()
    background = [s.anchor.section_id for s in core.chronicle(name).current()]
    assert background == ["1-6", "7-12", "13-18", "19-24"]

    policy = policy_from_config(core.config)
    out = core.compaction.compress("s1", messages, policy=policy, force=True)
    assert out.messages is not None
    assert out.reused and set(out.reused) <= set(background)
    assert out.model_calls == 0

    # The conversation goes on; background consolidation extends after whatever is there.
    more = out.messages + _chat(100, 7)
    core.capture.capture_messages("s1", more)
    sched.enqueue("consolidate")
    sched.run_pending()
    sections = core.chronicle(name).current()
    for before, after in zip(sections, sections[1:], strict=False):
        assert before.anchor.to_seq < after.anchor.from_seq
    assert len(sections) > len(background)
    sched.enqueue("integrity")
    sched.run_pending()
    assert "problems" not in sched.sweeps.load("integrity").report.get("detail", {})
    core.shutdown()


def test_background_consolidation_starts_after_a_compaction_of_the_same_conversation(
    where,
) -> None:
    from chronicle_engine.compaction.policy import policy_from_config

    core = open_core(where, {"consolidation": {"unit_turns": 2}})
    sched = scheduler(core, FakeClock(), summarize=None)
    name = chronicle_of(core, "s1")
    messages = _chat(0, 12)
    out = core.compaction.compress(
        "s1", messages, policy=policy_from_config(core.config), force=True
    )
    assert out.messages is not None and out.written
    compacted_through = core.chronicle(name).consolidated_through()
    sched.enqueue("consolidate")
    sched.run_pending()
    sections = core.chronicle(name).current()
    mine = [s for s in sections if s.meta.get("source") == "consolidation"]
    assert mine and all(s.anchor.from_seq > compacted_through for s in mine)
    for before, after in zip(sections, sections[1:], strict=False):
        assert before.anchor.to_seq < after.anchor.from_seq
    core.shutdown()
