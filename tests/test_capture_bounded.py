"""A capture after a compaction reads the end of the branch, not the history before it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import chat_places
from test_capture import a, captured, fresh, u

import chronicle_engine.sessions.paths as paths
from chronicle_engine.capture.events import HANDOFF_MARKER
from chronicle_engine.core import ChronicleCore


def messages_of(core: ChronicleCore) -> list[tuple[str, str | None, int]]:
    """(id, session, turn) of every captured message, in log order."""
    return [
        (e.envelope.id, e.envelope.session, e.payload["turn"])
        for e in core.store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


class _Counted:
    """Counts the session tree entries read (every read of the tree builds a PathEntry, through
    `paths._entry`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        entry = paths._entry

        def counted(cls: type[paths.PathEntry], values: tuple[object, ...]) -> paths.PathEntry:
            self.count += 1
            return entry(cls, values)

        monkeypatch.setattr(paths, "_entry", counted)


def _live_a_lineage(core: ChronicleCore, sessions: int, turns: int, keep: int) -> list[dict]:
    """A conversation compacted `sessions - 1` times, each pass under a new session id (as
    Hermes does), keeping the first exchange as the head and the last `keep` messages; each
    new session first captures the compacted list. Returns the last session's live list."""
    head = [u("the project is called kestrel"), a("noted")]
    live = list(head)
    for s in range(sessions):
        session = f"s{s}"
        for t in range(turns):
            live += [u(f"session {s} question {t}"), a(f"session {s} answer {t}")]
            core.capture.capture_messages(session, live, return_seqs=False)
        if s == sessions - 1:
            return live
        seqs = core.capture.capture_messages(session, live)
        kept = [i for i in range(len(live)) if seqs[i] is not None][-keep:]
        core.sessions.record_compaction(
            session,
            section_ids=[f"pass-{s}"],
            first_kept_seq=seqs[kept[0]],
            head_seqs=[seqs[0], seqs[1]],
            tokens_before=1000,
            tokens_after=100,
            summary=f"folded pass {s}",
        )
        core.sessions.switch(f"s{s + 1}", parent_session_id=session, reason="compression")
        handoff = {"role": "user", "content": f"{HANDOFF_MARKER} folded pass {s}"}
        live = [*fresh(head), handoff, *fresh([live[i] for i in kept])]
        core.capture.capture_messages(f"s{s + 1}", live)
    return live


def test_a_new_session_after_a_compaction_reads_what_the_pass_kept_not_the_history(
    monkeypatch, store_core: ChronicleCore
):
    core = store_core
    live = _live_a_lineage(core, sessions=6, turns=100, keep=6)
    last = "s5"
    assert len(core.sessions.path(last)) > 1000  # the branch runs through six sessions
    core.capture.forget(last)  # a new process, or a session the cache let go
    counted = _Counted(monkeypatch)
    live += [u("what is the project called?"), a("kestrel")]
    seqs = core.capture.capture_messages(last, fresh(live))
    # What the latest pass kept and what followed (6 + 200 + 2 messages, a few tree entries)
    # plus a margin before it and the two heads: not the 1,000 messages before.
    assert 0 < counted.count <= 300
    assert seqs[0] is not None and seqs[1] is not None  # the head, found outside the window
    assert len(core.sessions.path(last)) > 1000


@pytest.mark.parametrize("kind", ["memory", "postgres"])
def test_the_ids_and_turns_are_those_of_a_whole_read(monkeypatch, kind, request, tmp_path):
    """The same conversation captured with every branch read whole and with only its end read
    after each compaction: the same ids (positions included) and turn counts, message for
    message."""
    with chat_places(kind, request, tmp_path, count=2) as (first, second):
        bounded = _captured_ids(monkeypatch, first.open(), bounded=True)
        assert bounded == _captured_ids(monkeypatch, second.open(), bounded=False)


def _captured_ids(
    monkeypatch: pytest.MonkeyPatch, core: ChronicleCore, *, bounded: bool
) -> list[tuple[str, str | None, int]]:
    """(id, session, turn) of every message `core` captured of a conversation compacted three
    times, each branch read as capture reads it (`bounded`: its end only), or read whole."""
    with monkeypatch.context() as m:
        if not bounded:
            m.setattr(paths, "read_recent", _whole)
            import chronicle_engine.sessions.tree as tree

            m.setattr(tree, "read_recent", _whole)
        live = _live_a_lineage(core, sessions=4, turns=40, keep=5)
        for n in range(3):
            core.capture.forget("s3")
            live += [u(f"after a restart {n}"), a(f"reply {n}")]
            core.capture.capture_messages("s3", fresh(live))
    return messages_of(core)


def _whole(conn, leaf, refs, **_: object) -> paths.RecentPath:
    return paths.RecentPath(paths.read_path(conn, leaf), True)


_ALPHABET = st.sampled_from([u("ok"), a("Done."), u("next"), a("Sure."), u("ok"), a("ok")])


@pytest.mark.parametrize("kind", ["memory", "postgres"])  # each example a store of its own
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(messages=st.lists(_ALPHABET, min_size=4, max_size=40), data=st.data())
def test_law_reloaded_after_each_compaction_nothing_is_lost_or_repeated(
    kind, messages, data, tmp_path, request
):
    """Every capture reloads the branch from the tree (a restart before each turn), so every
    capture after a compaction aligns against the branch's end only; repeated words make the
    fingerprints ambiguous. Each message is still recorded once, in order."""
    with chat_places(kind, request, tmp_path) as (place,):
        _reloaded(place.open(), messages, data)


def _reloaded(core, messages, data) -> None:
    head_len = 2
    live: list[dict] = []
    head: list[dict] = []
    for message in messages:
        live.append(message)
        core.capture.forget("s")
        seqs = core.capture.capture_messages("s", fresh(live))
        conversation = [
            i
            for i, m in enumerate(live)
            if not str(m.get("content", "")).startswith(HANDOFF_MARKER)
        ]
        if not head:
            head = [live[i] for i in conversation[:head_len]]
        tail = [i for i in conversation if i >= head_len]
        if len(tail) > 3 and data.draw(st.booleans()):
            keep = data.draw(st.integers(min_value=1, max_value=len(tail) - 1))
            first_kept = tail[-keep]
            core.sessions.record_compaction(
                "s",
                section_ids=["x"],
                first_kept_seq=seqs[first_kept],
                head_seqs=[seqs[i] for i in conversation[:head_len] if seqs[i] is not None],
                tokens_before=1,
                tokens_after=1,
            )
            handoff = {"role": "user", "content": HANDOFF_MARKER + " folded"}
            live = [*fresh(head), handoff, *live[first_kept:]]
    assert [p["message"] for p in captured(core)] == messages
    core.shutdown()
