"""Session pooling: `by_session` answers with one result per session, the sessions holding the
most of the evidence first, each shown by its best hit."""

from __future__ import annotations

import json

import pytest
from test_recall_support import core_on, say

from chronicle_engine.recall.pool import pool_sessions
from chronicle_engine.recall.search import Hit
from chronicle_engine.recall.tools import RECALL_TOOLS
from chronicle_engine.tools import dispatch


@pytest.fixture(params=["memory", "file", "postgres"])
def core(request, tmp_path):
    with core_on(request.param, request, tmp_path) as c:
        yield c


def hit(n: int, session: str | None) -> Hit:
    return Hit(f"m{n}", "message", 1.0 / n, seq=n, session=session, raw=f"turn {n}")


def test_a_session_with_several_hits_outranks_one_with_a_single_better_hit() -> None:
    ranking = [hit(1, "a"), hit(2, "b"), hit(3, "b"), hit(4, "b"), hit(5, None), hit(6, "a")]
    pooled = pool_sessions(ranking, k=60, limit=10)
    assert [h.session for h in pooled] == ["b", "a", None]
    b, a, alone = pooled
    assert (b.id, b.extra["session_hits"]) == ("m2", 3)  # shown by its best hit
    assert (a.id, a.extra["session_hits"]) == ("m1", 2)
    assert alone.id == "m5" and alone.extra["session_hits"] == 1
    assert b.score == pytest.approx(1 / 62 + 1 / 63 + 1 / 64)
    assert [h.session for h in pool_sessions(ranking, k=60, limit=1)] == ["b"]
    assert pool_sessions([], k=60, limit=10) == []


def test_by_session_returns_distinct_sessions_that_plain_search_leaves_out(core) -> None:
    # one session says the words many times; three others hold the evidence once each
    for i in range(12):
        say(core, "garden", f"garden log {i}: watered the tomato plants and the tomato seedlings")
    for name in ("march", "april", "may"):
        say(core, name, f"In {name} I planted tomato seeds in the greenhouse.")
        say(core, name, "Then we talked about something else entirely.")
    plain = core.recall.search("tomato plants seedlings", scope="messages", limit=4)
    assert {r["session"] for r in plain} <= {"garden", "march", "april", "may"}
    args = {"query": "tomato plants seedlings", "scope": "messages", "limit": 4}
    answer = json.loads(
        dispatch(RECALL_TOOLS, core.recall, "chronicle_search", args | {"by_session": True})
    )
    sessions = [r["session"] for r in answer["results"]]
    assert len(sessions) == len(set(sessions)) == 4
    assert set(sessions) == {"garden", "march", "april", "may"}
    assert sessions[0] == "garden"
    first = answer["results"][0]
    assert first["session_hits"] > 1 and first["kind"] == "message"
    bad = json.loads(
        dispatch(RECALL_TOOLS, core.recall, "chronicle_search", args | {"by_session": "x"})
    )
    assert "error" in bad


def test_by_session_masks_only_the_results_it_shows(core, monkeypatch) -> None:
    # Pooling ranks a hundred candidates to show a few: only the shown are masked (each once).
    import chronicle_engine.recall.search as search_module

    masked: list[str] = []
    real_mask = search_module.mask

    def counting_mask(text: str) -> str:
        masked.append(text)
        return real_mask(text)

    for n in range(30):
        say(core, f"trip-{n}", f"Day {n} of the trip: the ferry to the island left late again.")
        say(core, f"trip-{n}", f"The ferry ticket for day {n} cost {n + 10} euros.")
    monkeypatch.setattr(search_module, "mask", counting_mask)
    args = {"query": "ferry island ticket", "scope": "messages", "limit": 3, "by_session": True}
    answer = json.loads(dispatch(RECALL_TOOLS, core.recall, "chronicle_search", args))
    shown = answer["results"]
    assert len(shown) == 3 and len({r["session"] for r in shown}) == 3
    assert sorted(masked) == sorted(r["text"] for r in shown)
    assert all(r["session_hits"] >= 1 and "ferry" in r["text"] for r in shown)
