"""The session tree: branches that stay, edits that only touch the projection, carry as JSONL."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import chat_places

from chronicle_engine.capture.events import HANDOFF_MARKER
from chronicle_engine.core import ChronicleCore
from chronicle_engine.errors import FormatError, UsageError
from chronicle_engine.log.projector import Projector
from chronicle_engine.sessions.fold import FOLD_NAME, SessionFold
from chronicle_engine.sessions.jsonl import export_jsonl, import_jsonl
from chronicle_engine.sessions.paths import read_path, read_recent
from chronicle_engine.sessions.projection import BRANCH_SUMMARY_MARKER


@pytest.fixture
def core(chat_core):
    return chat_core


def u(text: str) -> dict:
    return {"role": "user", "content": text}


def a(text: str) -> dict:
    return {"role": "assistant", "content": text}


def entry_of(core: ChronicleCore, session: str, seq: int) -> str:
    return next(e.entry_id for e in core.sessions.path(session) if e.seq == seq)


def all_messages(core: ChronicleCore) -> list[dict]:
    return [
        e.payload["message"]
        for e in core.store.read(namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    ]


def tables(core: ChronicleCore) -> tuple[list, list]:
    """Every column of the tree's tables (on PostgreSQL less `session_heads.rowid`, SQLite's
    implicit rowid made a column: a rebuild's serial goes on counting where SQLite's starts
    again; it only orders heads started at one seq, and that order a rebuild keeps)."""
    with core.store.reading() as conn:
        return _tree_rows(conn)


def _tree_rows(conn) -> tuple[list, list]:
    entries = conn.execute(
        "SELECT entry_id, seq, session, parent_id, kind, fp, role, target_id"
        " FROM session_entries ORDER BY seq"
    ).fetchall()
    heads = conn.execute(
        "SELECT session, conversation, lineage_root, parent_session, fork_seq, reason,"
        " leaf_id, started_seq FROM session_heads ORDER BY session"
    ).fetchall()
    return [tuple(r) for r in entries], [tuple(r) for r in heads]


def test_branch_and_return_to_the_old_branch(core):
    old = [u("name a cat"), a("Miso"), u("another"), a("Tofu")]
    seqs = core.capture.capture_messages("s", old)
    old_leaf = core.sessions.leaf("s")
    fork = entry_of(core, "s", seqs[1])

    core.sessions.branch("s", fork)
    new = [*old[:2], u("a dog name instead"), a("Biscuit")]
    core.capture.capture_messages("s", json.loads(json.dumps(new)))
    assert core.sessions.projection("s", branch_summaries=False) == new
    summary = core.sessions.projection("s")[2]
    assert summary["content"].startswith(BRANCH_SUMMARY_MARKER)
    assert "another" in summary["content"]  # what the abandoned branch asked

    # Back to the old branch: it was never lost.
    core.sessions.branch("s", old_leaf, summary="")
    assert core.sessions.projection("s") == old
    assert all_messages(core) == old + new[2:]


def test_a_context_edit_changes_the_projection_not_the_history(core):
    big = {"role": "tool", "tool_call_id": "c1", "content": "x" * 5000}
    live = [
        u("list the files"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        big,
        a("there are many"),
    ]
    seqs = core.capture.capture_messages("s", live)
    before_edit = core.sessions.leaf("s")
    target = entry_of(core, "s", seqs[2])
    core.sessions.edit_context(
        "s", target, {"role": "tool", "tool_call_id": "c1", "content": "[5000 x]"}
    )
    projected = core.sessions.projection("s")
    assert projected[2]["content"] == "[5000 x]"
    assert all_messages(core)[2] == big  # the raw history keeps the original
    assert core.sessions.message_events("s", seqs[2], seqs[2])[0].payload["message"] == big
    core.sessions.edit_context("s", target, None)  # the latest edit wins: now hidden
    assert [m.get("content") for m in core.sessions.projection("s")] == [
        "list the files",
        None,
        "there are many",
    ]
    # Edits are branch-relative: going back to before them brings the original back.
    core.sessions.branch("s", before_edit, summary="")
    assert core.sessions.projection("s") == live


def test_edits_and_labels_refuse_entries_off_the_branch(core):
    core.capture.capture_messages("s", [u("hi")])
    with pytest.raises(UsageError, match="not on the active branch"):
        core.sessions.edit_context("s", "nope")
    with pytest.raises(UsageError, match="no entry"):
        core.sessions.branch("s", "nope")


def test_compaction_entry_shapes_the_projection(core):
    live = [u("one"), a("two"), u("three"), a("four"), u("five"), a("six")]
    seqs = core.capture.capture_messages("s", live)
    core.sessions.record_compaction(
        "s",
        section_ids=["2-4"],
        first_kept_seq=seqs[4],
        tokens_before=1000,
        tokens_after=300,
        summary=HANDOFF_MARKER + " folded 2-4",
        head_seqs=[seqs[0]],
    )
    core.capture.capture_messages(
        "s",
        [
            live[0],
            {"role": "user", "content": HANDOFF_MARKER + " folded 2-4"},
            *live[4:],
            u("seven"),
        ],
    )
    assert core.sessions.projection("s") == [
        u("one"),
        {"role": "user", "content": HANDOFF_MARKER + " folded 2-4"},
        u("five"),
        a("six"),
        u("seven"),
    ]
    assert len(all_messages(core)) == 7


@pytest.mark.parametrize("kind", ["file", "postgres"])
def test_projection_is_identical_after_reopening_and_after_a_rebuild(kind, tmp_path, request):
    with chat_places(kind, request, tmp_path) as (place,):
        _reopened_and_rebuilt(place)


def _reopened_and_rebuilt(place) -> None:
    core = place.open()
    live = [u("q1"), a("r1"), u("q2"), a("r2"), u("q3"), a("r3")]
    seqs = core.capture.capture_messages("s", live)
    core.sessions.branch("s", entry_of(core, "s", seqs[3]))
    core.capture.capture_messages("s", [*json.loads(json.dumps(live[:4])), u("q3'"), a("r3'")])
    core.sessions.edit_context("s", entry_of(core, "s", seqs[1]), None)
    core.sessions.label("s", entry_of(core, "s", seqs[0]), "start")
    core.sessions.name("s", "naming things")
    core.sessions.record_usage("s", prompt_tokens=10, completion_tokens=5, source="host")
    expected = core.sessions.projection("s")
    expected_tables = tables(core)
    core.shutdown()

    reopened = place.open()
    assert reopened.sessions.projection("s") == expected
    Projector(reopened.sessions.tables, reopened.reader, [SessionFold()]).rebuild(FOLD_NAME)
    assert tables(reopened) == expected_tables
    assert reopened.sessions.projection("s") == expected
    assert reopened.sessions.labels("s") == {entry_of(reopened, "s", seqs[0]): "start"}
    assert reopened.sessions.session_name("s") == "naming things"
    reopened.shutdown()


def test_switches_map_onto_lineage_scope_and_chronicles(core):
    tree = core.sessions
    core.capture.capture_messages("a1", [u("hello"), a("hi")])
    tree.switch("a2", parent_session_id="a1", reason="compression")
    core.capture.capture_messages(
        "a2", [{"role": "user", "content": HANDOFF_MARKER + " x"}, u("more"), a("sure")]
    )
    tree.switch("b1", parent_session_id="a2", reason="branch")
    core.capture.capture_messages(
        "b1", [u("hello"), a("hi"), u("more"), a("sure"), u("fork!"), a("ok")]
    )
    core.capture.capture_messages("a2", [u("hello"), a("hi"), u("more"), a("sure"), u("main line")])
    tree.switch("n1", parent_session_id="a2", reason="new")
    tree.switch("a2", parent_session_id="n1", reason="resume")

    assert tree.lineage("a2") == ["a1", "a2"]
    assert tree.chronicle_name("a2") == tree.chronicle_name("a1") == "conversation:a1"
    assert tree.lineage("b1") == ["b1"] and tree.chronicle_name("b1") == "conversation:b1"
    assert tree.chronicle_names("b1") == ["conversation:b1", "conversation:a1"]
    assert tree.lineage("n1") == ["n1"]
    # A branch's scope reaches its parent's messages up to the fork, not the parent's later ones.
    scoped = [e.payload["message"]["content"] for e in tree.message_events("b1", 1, 10**9)]
    assert scoped == ["hello", "hi", "more", "sure", "fork!", "ok"]
    main = [e.payload["message"]["content"] for e in tree.message_events("a2", 1, 10**9)]
    assert main == ["hello", "hi", "more", "sure", "main line"]
    assert [m["content"] for m in tree.projection("b1")] == [
        "hello",
        "hi",
        "more",
        "sure",
        "fork!",
        "ok",
    ]
    with pytest.raises(UsageError, match="unknown session switch reason"):
        tree.switch("x", reason="teleport")
    tree.switch("n2", parent_session_id="n1", reason="new_session")
    assert tree.lineage("n2") == ["n2"]


def test_usage_counts_every_model_call_including_chronicles_own(core):
    core.sessions.record_usage("s", prompt_tokens=1200, completion_tokens=80, source="host")
    core.sessions.record_usage(
        "s", prompt_tokens=900, completion_tokens=150, source="chronicle.summary"
    )
    core.sessions.switch("s2", parent_session_id="s", reason="compression")
    core.sessions.record_usage("s2", prompt_tokens=300, completion_tokens=20, source="host")
    usage = core.sessions.usage("s2")
    assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (3, 2400, 250)
    assert usage["by_source"]["chronicle.summary"] == {
        "calls": 1,
        "prompt_tokens": 900,
        "completion_tokens": 150,
    }
    assert core.sessions.projection("s2") == []  # usage never reaches the model


def _build_conversation(core: ChronicleCore) -> list[int]:
    live = [
        u("plan"),
        a("step 1 ✓"),
        u("secret is sk-proj-Ab3dEf5hIj7kLm9nOp1qRs3tUv5wXy7z"),
        a("noted"),
    ]
    seqs = core.capture.capture_messages("s", live)
    core.sessions.branch("s", entry_of(core, "s", seqs[1]))
    core.capture.capture_messages(
        "s", [*json.loads(json.dumps(live[:2])), u("other way"), a("fine")]
    )
    core.sessions.edit_context("s", entry_of(core, "s", seqs[0]), u("plan (edited)"))
    core.sessions.record_usage("s", prompt_tokens=5, completion_tokens=5, source="host")
    return seqs


def test_jsonl_round_trip_into_another_database(core, tmp_path):
    _build_conversation(core)
    exported = export_jsonl(core.sessions, "s", tmp_path / "s.jsonl")
    assert json.loads(exported.splitlines()[0])["version"] == 2
    other = ChronicleCore(tmp_path / "other.db")
    assert import_jsonl(other.sessions, tmp_path / "s.jsonl") == len(exported.splitlines()) - 1
    assert other.sessions.projection("s") == core.sessions.projection("s")
    assert [json.dumps(m) for m in all_messages(other)] == [
        json.dumps(m) for m in all_messages(core)
    ]
    assert import_jsonl(other.sessions, exported) == 0  # idempotent
    assert import_jsonl(core.sessions, exported) == 0  # and into the database it came from
    assert export_jsonl(other.sessions, "s").splitlines()[1:] == exported.splitlines()[1:]
    other.shutdown()


def test_an_older_linear_export_is_migrated_on_load(core):
    messages = [u("hi"), a("hello"), u("ok"), a("Done."), u("ok"), a("Done.")]
    v1 = "\n".join(
        [json.dumps({"format": "chronicle-session", "version": 1, "session": "old"})]
        + [json.dumps(m) for m in messages]
    )
    assert import_jsonl(core.sessions, v1) == 6
    assert core.sessions.projection("old") == messages
    # The migrated ids are the ones version-1 files always got, so a file imported before
    # capture's ids led with session and position is still a no-op to import again.
    from chronicle_engine.capture.align import fingerprint
    from chronicle_engine.capture.describe import digest

    first = next(iter(core.store.read(session="old"))).envelope.id
    assert first == "m" + digest("old", "", fingerprint(messages[0]))  # the layout, spelled out
    assert import_jsonl(core.sessions, v1) == 0
    # Capture aligns with the imported branch: capturing the same conversation adds nothing.
    core.capture.capture_messages("old", json.loads(json.dumps(messages)))
    assert len(all_messages(core)) == 6
    assert json.loads(export_jsonl(core.sessions, "old").splitlines()[0])["version"] == 2


def test_a_corrupt_line_is_reported_with_its_number_and_nothing_is_imported(core, tmp_path):
    _build_conversation(core)
    lines = export_jsonl(core.sessions, "s").splitlines()
    other = ChronicleCore(tmp_path / "corrupt.db")
    broken = [*lines[:3], lines[3][:-7], *lines[4:]]
    with pytest.raises(FormatError, match=r"^line 4: not JSON"):
        import_jsonl(other.sessions, "\n".join(broken))
    at = next(i for i, line in enumerate(lines) if i > 1 and '"type":"message"' in line)
    record = json.loads(lines[at])
    record["event"]["payload"]["speaker"] = "a ghost"
    bad_payload = [*lines[:at], json.dumps(record), *lines[at + 1 :]]
    with pytest.raises(
        FormatError, match=rf"^line {at + 1}: the MessageCaptured payload is invalid"
    ):
        import_jsonl(other.sessions, "\n".join(bad_payload))
    orphan = json.loads(lines[2])
    orphan["parentId"] = "no-such-entry"
    with pytest.raises(FormatError, match=r"^line 3: parentId 'no-such-entry'"):
        import_jsonl(other.sessions, "\n".join([*lines[:2], json.dumps(orphan), *lines[3:]]))
    with pytest.raises(FormatError, match="newer than this Chronicle reads"):
        import_jsonl(other.sessions, json.dumps({"format": "chronicle-session", "version": 99}))
    assert other.store.count() == 0
    with sqlite3.connect(tmp_path / "corrupt.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM session_entries").fetchone()[0] == 0
    other.shutdown()


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.sampled_from(["ok", "Done.", "why?", "because"])),
        st.tuples(st.just("branch"), st.integers(min_value=0, max_value=40)),
        st.tuples(st.just("hide"), st.integers(min_value=0, max_value=40)),
        st.tuples(st.just("compact"), st.integers(min_value=1, max_value=5)),
        st.tuples(st.just("usage"), st.integers(min_value=1, max_value=500)),
    ),
    max_size=30,
)


@pytest.mark.parametrize("kind", ["file", "postgres"])  # each example a store of its own
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_law_rebuild_reopen_and_carry_give_the_same_tree_and_projection(
    kind, ops, tmp_path_factory, request
):
    with chat_places(kind, request, tmp_path_factory.mktemp("law"), 2) as places:
        _rebuild_reopen_and_carry(ops, *places)


def _rebuild_reopen_and_carry(ops, here, there) -> None:
    core = here.open()
    live: list[dict] = []
    for op, arg in ops:
        if op == "say":
            live.append({"role": "user" if len(live) % 2 == 0 else "assistant", "content": arg})
            core.capture.capture_messages("s", json.loads(json.dumps(live)))
        elif op == "branch" and core.sessions.path("s"):
            path = core.sessions.path("s")
            core.sessions.branch("s", path[arg % len(path)].entry_id)
        elif op == "hide":
            messages = [e for e in core.sessions.path("s") if e.kind == "message"]
            if messages:
                core.sessions.edit_context("s", messages[arg % len(messages)].entry_id)
        elif op == "compact":
            seqs = [
                s for s in core.capture.capture_messages("s", json.loads(json.dumps(live))) if s
            ]
            if len(seqs) > arg:
                core.sessions.record_compaction(
                    "s",
                    section_ids=["x"],
                    first_kept_seq=seqs[-arg],
                    tokens_before=2,
                    tokens_after=1,
                )
        else:
            core.sessions.record_usage("s", prompt_tokens=arg, completion_tokens=1, source="host")
    projection = core.sessions.projection("s")
    before = tables(core)
    Projector(core.sessions.tables, core.reader, [SessionFold()]).rebuild(FOLD_NAME)
    assert tables(core) == before
    exported = export_jsonl(core.sessions, "s")
    core.shutdown()
    reopened = here.open()
    assert reopened.sessions.projection("s") == projection
    reopened.shutdown()
    carried = there.open()
    import_jsonl(carried.sessions, exported)
    assert carried.sessions.projection("s") == projection
    carried.shutdown()


def _tree_tables(parts) -> tuple[list, list]:
    with parts.sessions.tables.reading("test") as conn:
        return _tree_rows(conn)


def test_a_rebuild_and_a_reopen_give_the_same_tree_on_each_store(target):
    parts = target.tree()
    seqs = _build_conversation(parts)
    parts.sessions.switch("s2", parent_session_id="s", reason="compression")
    parts.capture.capture_messages("s2", [u("after the rotation"), a("still here")])
    parts.sessions.branch("s", entry_of(parts, "s", seqs[0]))
    projections = {s: parts.sessions.projection(s) for s in ("s", "s2")}
    before = _tree_tables(parts)
    assert before[0] and before[1]
    Projector(parts.sessions.tables, parts.reader, [SessionFold()]).rebuild(FOLD_NAME)
    assert _tree_tables(parts) == before
    parts.shutdown()
    reopened = target.tree()
    assert {s: reopened.sessions.projection(s) for s in ("s", "s2")} == projections
    assert reopened.sessions.lineage("s2") == ["s", "s2"]
    reopened.shutdown()


def test_hosts_writing_one_tree_at_once_fold_every_entry_once(target):
    """Four writers with their own store (their own connection: on PostgreSQL, four hosts)
    capture their own sessions and record usage in a shared one, all at once."""
    writers, turns = 4, 12
    errors: list[BaseException] = []
    barrier = threading.Barrier(writers)

    def host(n: int) -> None:
        parts = target.tree()
        try:
            barrier.wait(timeout=60)
            live: list[dict] = []
            for i in range(turns):
                live += [u(f"host {n} asks {i}"), a(f"host {n} answers {i}")]
                parts.capture.capture_messages(f"h{n}", json.loads(json.dumps(live)))
                parts.sessions.record_usage(
                    "shared", prompt_tokens=1, completion_tokens=1, source="host"
                )
        except BaseException as exc:  # reported below, with the host's number
            errors.append(exc)
        finally:
            parts.shutdown()

    threads = [threading.Thread(target=host, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    parts = target.tree()
    for n in range(writers):
        contents = [m["content"] for m in parts.sessions.projection(f"h{n}")]
        assert contents == [
            x for i in range(turns) for x in (f"host {n} asks {i}", f"host {n} answers {i}")
        ]
    assert parts.sessions.usage("shared")["calls"] == writers * turns
    entries, _ = _tree_tables(parts)
    tree_events = [
        e
        for e in parts.store.read(namespaces=["chronicle.chat", "chronicle.session"])
        if e.envelope.type in ("MessageCaptured", "UsageRecorded")
    ]
    assert sorted(e[0] for e in entries) == sorted(e.envelope.id for e in tree_events)
    assert len(entries) == writers * turns * 3
    before = _tree_tables(parts)
    Projector(parts.sessions.tables, parts.reader, [SessionFold()]).rebuild(FOLD_NAME)
    assert _tree_tables(parts) == before
    parts.shutdown()


def _walked(conn, leaf: str | None) -> list[tuple]:
    """The branch at `leaf` by one lookup per parent link: what `read_path` must give."""
    entries: list[tuple] = []
    while leaf is not None:
        row = conn.execute(
            "SELECT entry_id, seq, kind, fp, session, target_id, role, parent_id"
            " FROM session_entries WHERE entry_id = ?",
            (leaf,),
        ).fetchone()
        if row is None:
            break
        entries.append(tuple(row[:7]))
        leaf = row[7]
    entries.reverse()
    return entries


_TREE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.integers(min_value=1, max_value=4)),
        st.tuples(st.just("branch"), st.integers(min_value=0, max_value=60)),
        st.tuples(st.just("compact"), st.integers(min_value=1, max_value=5)),
        st.tuples(st.just("rotate"), st.sampled_from(["compression", "branch", "new"])),
        st.tuples(st.just("usage"), st.integers(min_value=1, max_value=9)),
    ),
    max_size=25,
)


@pytest.mark.parametrize("kind", ["memory", "postgres"])  # each example a store of its own
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_TREE_OPS, chunk=st.sampled_from([1, 2, 3, 7, 256]))
def test_law_a_branch_read_in_steps_by_session_is_the_walk_by_parent_links(
    kind, ops, chunk, tmp_path, request
):
    """Paths are read by each session's index in growing steps (`sessions/paths.py`); over
    branches, continued and forked sessions, compactions and turns left behind, every entry's
    path is the one its parent links give, and the end a capture reads is that path's end."""
    with chat_places(kind, request, tmp_path) as (place,):
        _read_in_steps(place.open(), ops, chunk)


def _read_in_steps(core, ops, chunk) -> None:
    session, live, n = "s0", [], 0
    for op, arg in ops:
        if op == "say":
            for _ in range(arg):
                n += 1
                live.append(
                    {"role": "user" if len(live) % 2 == 0 else "assistant", "content": f"m{n}"}
                )
            core.capture.capture_messages(session, json.loads(json.dumps(live)))
        elif op == "branch" and core.sessions.path(session):
            path = core.sessions.path(session)
            core.sessions.branch(session, path[arg % len(path)].entry_id)
            live = live[: max(0, len(live) - arg % 3)]
        elif op == "compact":
            seqs = [
                s for s in core.capture.capture_messages(session, json.loads(json.dumps(live))) if s
            ]
            if len(seqs) > arg:
                core.sessions.record_compaction(
                    session,
                    section_ids=["x"],
                    first_kept_seq=seqs[-arg],
                    head_seqs=seqs[:1],
                    tokens_before=2,
                    tokens_after=1,
                )
        elif op == "rotate":
            parent, session = session, f"s{int(session[1:]) + 1}"
            core.sessions.switch(session, parent_session_id=parent, reason=arg)
        else:
            core.sessions.record_usage(
                session, prompt_tokens=arg, completion_tokens=1, source="host"
            )
    with core.sessions.tables.reading("test") as conn:
        leaves = [r[0] for r in conn.execute("SELECT entry_id FROM session_entries").fetchall()]
        for leaf in [*leaves, "no-such-entry"]:
            whole = _walked(conn, leaf)
            assert [tuple(e) for e in read_path(conn, leaf, chunk=chunk)] == whole
            recent = read_recent(conn, leaf, core.sessions.compaction_refs, margin=2, chunk=chunk)
            assert [tuple(e) for e in recent.entries] == whole[len(whole) - len(recent.entries) :]
            assert recent == read_recent(conn, leaf, core.sessions.compaction_refs, margin=2)
    core.shutdown()


def test_a_remembered_lineage_follows_every_switch_and_head_another_process_writes(tmp_path):
    """`lineage` remembers its answer while no session event follows it: a continuation
    another process starts, and a root whose head a later chat message creates, still show."""
    path = tmp_path / "chat.db"
    here, there = ChronicleCore(path), ChronicleCore(path)

    def fresh(session: str) -> list[str]:
        reopened = ChronicleCore(path)
        try:
            return reopened.sessions.lineage(session)
        finally:
            reopened.shutdown()

    try:
        here.capture.capture_messages("r", [u("hello"), a("hi")])
        assert here.sessions.lineage("r") == ["r"]
        here.capture.capture_messages("r", [u("hello"), a("hi"), u("more"), a("ok")])
        assert here.sessions.lineage("r") == ["r"]
        there.sessions.switch("r2", parent_session_id="r", reason="compression")
        assert here.sessions.lineage("r") == here.sessions.lineage("r2") == ["r", "r2"]
        # A continuation of a session with no message yet: its root has no head until then.
        there.sessions.switch("q2", parent_session_id="q", reason="compression")
        there.capture.capture_messages("q2", [u("after the rotation")])
        assert here.sessions.lineage("q2") == fresh("q2")
        there.capture.capture_messages("q", [u("before it")])
        assert here.sessions.lineage("q2") == fresh("q2")
        assert here.sessions.lineage("q") == fresh("q")
    finally:
        here.shutdown()
        there.shutdown()
