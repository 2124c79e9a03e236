"""Recall's hot path: what prefetch, queue_prefetch and a search cost, and what a narrowed
search must still find.

- queue_prefetch works ahead (folds, embeds) and searches nothing: Hermes hands it the turn that
  just ended, and the next prefetch asks about a message not written yet.
- The statements a search or a prefetch runs do not grow with its candidates, and the rows it
  reads do not grow with the conversation in the window.
- scope="session" and prefetch's window are applied before the candidates' LIMIT: a session's
  own match, or an older conversation's, is found behind a hundred better matches elsewhere.
- Recall's fold reads its own namespaces only: another namespace's payload is never decoded.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from test_recall_support import open_core, say

from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.core import ChronicleCore


@pytest.fixture(params=["memory", "file"])
def core(request, tmp_path):
    c = open_core(request.param, tmp_path)
    yield c
    c.shutdown()


def ids(results: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in results]


@contextmanager
def statements(core: ChronicleCore) -> Iterator[list[str]]:
    """The SQL statements this thread's connection runs inside the block: ours, not the ones
    SQLite runs for itself (FTS5 reading its segments, triggers), traced as "-- ..."."""
    seen: list[str] = []

    def keep(sql: str) -> None:
        if not sql.startswith("--"):
            seen.append(sql)

    conn = core.store.connection
    conn.set_trace_callback(keep)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


@contextmanager
def vm_steps(core: ChronicleCore) -> Iterator[list[int]]:
    """SQLite virtual-machine instructions run inside the block (in hundreds): a measure of the
    rows a read touches that does not depend on the machine's speed."""
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    conn = core.store.connection
    conn.set_progress_handler(tick, 100)
    try:
        yield count
    finally:
        conn.set_progress_handler(None, 100)


def capture(core: ChronicleCore, session: str, texts: list[str], role: str = "user") -> list[int]:
    """A whole conversation captured at once (one live list), its messages' seqs in order."""
    seqs = core.capture.capture_messages(session, [{"role": role, "content": t} for t in texts])
    assert all(s is not None for s in seqs)
    return [s for s in seqs if s is not None]


_WORDS = ["".join(p) for p in itertools.product("bdfgkmpst", "aeiou", "lnrv")]


# -- 11: queue_prefetch ----------------------------------------------------------------------------


def test_queue_prefetch_folds_ahead_and_searches_nothing(core):
    earlier = say(core, "earlier", "The boiler service is due in October.")
    say(core, "live", "when is the boiler service due in October?")
    with statements(core) as ran:
        core.recall.queue_prefetch("when is the boiler service due in October?", session_id="live")
    assert core.store.position("recall") == core.store.last_seq()  # the work ahead was done
    assert not [s for s in ran if " MATCH " in s]  # and no search was thrown away
    block = core.recall.prefetch("is the boiler service in October?", session_id="live")
    assert f"m{earlier}" in block


# -- 12: prefetch and search cost -----------------------------------------------------------------


def _memory_with(core: ChronicleCore, n: int) -> None:
    """n earlier conversations, each with a message, a belief and a section about caravan tyres,
    and a live conversation."""
    for i, word in enumerate(_WORDS[:n]):
        session = f"old-{i}"
        seqs = capture(core, session, [f"My caravan {word} tyre is from Michelin, said {word}."])
        name = core.sessions.chronicle_name(session)
        core.chronicle(name).append(
            Section(Anchor(f"{seqs[0]}-{seqs[0]}", seqs[0], seqs[0], 1), f"Caravan tyres {word}.")
        )
    capture(core, "live", ["hello", "what should we pack for the trip?"])


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_statements_per_read_do_not_grow_with_the_candidates(kind, tmp_path):
    counts: dict[str, list[int]] = {"search": [], "prefetch": []}
    for n in (3, 40):
        core = open_core(kind, tmp_path / str(n))
        try:
            _memory_with(core, n)
            question = "which caravan tyre brand did we pick?"
            # The second call counts: the first folds and fills caches. Its prefetch asks for
            # another conversation: the live one is not given an item twice while it holds it.
            for session in ("warm-up", "live"):
                with statements(core) as searched:
                    found = core.recall.search(question, session_id="live", limit=30)
                with statements(core) as prefetched:
                    block = core.recall.prefetch(question, session_id=session)
            kinds = {r["kind"] for r in found}
            assert kinds == {"message", "belief", "section"}  # every kind had candidates
            assert "Michelin" in block
            counts["search"].append(len(searched))
            counts["prefetch"].append(len(prefetched))
        finally:
            core.shutdown()
    assert counts["search"][0] == counts["search"][1], counts
    assert counts["prefetch"][0] == counts["prefetch"][1], counts


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_prefetch_reads_no_more_rows_as_the_live_conversation_grows(kind, tmp_path):
    steps: list[int] = []
    for n in (20, 1000):
        core = open_core(kind, tmp_path / str(n))
        try:
            older = say(core, "earlier", "The caravan tyres are from 2016 and need replacing.")
            capture(core, "live", [f"note {w}: packing list and maps" for w in _WORDS[:n]])
            question = "should we replace the caravan tyres?"
            # The second call counts: the first folds and fills caches. It asks for another
            # conversation: the live one is not given an item twice while it is in its window.
            for session in ("warm-up", "live"):
                with vm_steps(core) as count:
                    block = core.recall.prefetch(question, session_id=session)
            assert f"m{older}" in block
            steps.append(count[0])
        finally:
            core.shutdown()
    # Before, the window was every seq of the conversation, read into a set on each prefetch.
    assert steps[1] - steps[0] < 20, steps


# -- 13: narrowing before the LIMIT ---------------------------------------------------------------


@pytest.fixture(params=["ranked", "newest"])
def narrow_core(request, tmp_path):
    """ "ranked": bm25 over the query's words; "newest": the words are too common for bm25's
    budget, so the newest matches are the candidates."""
    budget = {"ranked": 1500, "newest": 20}[request.param]
    c = open_core("file", tmp_path, recall__match_budget=budget)
    yield c
    c.shutdown()


def test_a_sessions_own_match_survives_a_hundred_better_ones_elsewhere(narrow_core):
    core = narrow_core
    mine = say(
        core,
        "mine",
        "After a long day of walking around the harbour and the old town, looking at the boats "
        "and the fishermen, we finally decided that the ferry would be the easiest way over.",
    )
    for i in range(6):
        capture(core, f"other-{i}", [f"ferry ferry {w}" for w in _WORDS[i * 20 : i * 20 + 20]])
    assert f"m{mine}" not in ids(core.recall.search("ferry", scope="messages", limit=100))
    found = core.recall.search("ferry", session_id="mine", scope="session")
    assert ids(found) == [f"m{mine}"]


def test_prefetch_finds_the_older_conversation_behind_a_long_live_one(narrow_core):
    core = narrow_core
    older = say(
        core,
        "earlier",
        "On the way back from the coast we noticed the caravan tyres were worn and cracked.",
    )
    capture(core, "live", [f"caravan tyres {w} caravan tyres" for w in _WORDS[:120]])
    block = core.recall.prefetch("what did we say about the caravan tyres?", session_id="live")
    assert f"m{older}" in block


def test_a_narrowed_search_still_leaves_out_what_it_must(core):
    mine = say(core, "mine", "The ferry to Naxos leaves at noon.")
    say(core, "mine", "Noted, the ferry at noon.", role="assistant")
    say(core, "other", "The ferry to Paros was cancelled.")
    core.recall.forget(f"m{mine}", session_id="mine")
    found = core.recall.search("ferry", session_id="mine", scope="session")
    assert {r["session"] for r in found} == {"mine"}
    assert f"m{mine}" not in ids(found)


# -- 15: recall reads its own namespaces ----------------------------------------------------------


def test_recall_never_decodes_another_namespaces_payload(core):
    first = say(core, "s1", "The spare key is under the blue flowerpot.")
    with core.store.atomic() as conn:  # a row nobody could decode, in a namespace recall ignores
        conn.execute(
            "INSERT INTO events(id, namespace, type, version, created_at, session, payload)"
            " VALUES ('broken', 'elsewhere', 'Blob', 1, '2024-01-01T00:00:00+00:00', 's1',"
            " '{not json')"
        )
    second = say(core, "s1", "The blue flowerpot is by the door.")
    assert {f"m{first}", f"m{second}"} <= set(ids(core.recall.search("blue flowerpot")))
    assert core.store.position("recall") == core.store.last_seq()
    core.recall.rebuild()
    assert {f"m{first}", f"m{second}"} <= set(ids(core.recall.search("blue flowerpot")))
