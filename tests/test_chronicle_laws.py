"""The chronicle's laws: no sequence of writes forks it or uncovers a consolidated range; on
each store (SQLite, PostgreSQL), and with hosts racing to write one chronicle."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import Target, own_schema, release_together

from chronicle_engine.chronicle.postgres import PostgresChronicleStore
from chronicle_engine.chronicle.sections import Anchor, Section, section_id_for, split_section_id
from chronicle_engine.chronicle.store import ChronicleStoreBase, SQLiteChronicleStore
from chronicle_engine.errors import ChronicleFork, SectionCollision, StoreError, UsageError
from chronicle_engine.log.postgres import PostgresEventStore
from chronicle_engine.log.store import SQLiteEventStore

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 120
Chronicles = Callable[[str], ChronicleStoreBase]  # a chronicle of that name in one database

ranges = st.tuples(st.integers(1, 30), st.integers(0, 8)).map(lambda t: (t[0], t[0] + t[1]))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), ranges),
        st.tuples(st.just("append_new"), ranges),
        st.tuples(st.just("supersede"), st.integers(0, 40), ranges),
        st.tuples(st.just("load"), st.lists(ranges, max_size=4)),
    ),
    max_size=40,
)


def fresh(lo: int, hi: int, prose: str = "p") -> Section:
    return Section(Anchor(section_id_for(lo, hi), lo, hi, hi), prose)


def check_invariants(chronicle: ChronicleStoreBase, covered: set[int]) -> set[int]:
    current = chronicle.current()
    seen: set[int] = set()
    for s in current:
        span = set(range(s.anchor.from_seq, s.anchor.to_seq + 1))
        assert not (span & seen), f"two current sections over one seq: {current}"
        seen |= span
    assert covered <= seen, f"a consolidated range was uncovered: {covered - seen}"
    # exactly one current section per stored range lineage
    for s in chronicle.export():
        assert chronicle.current_of(s.anchor.section_id) in {c.anchor.section_id for c in current}
    return seen


@pytest.fixture(params=["sqlite", "postgres"])
def chronicles(request: pytest.FixtureRequest) -> Iterator[Chronicles]:
    """Chronicles in one database: SQLite in memory, or a schema of its own on the session's
    PostgreSQL server. Each test (and each hypothesis example) names its own chronicles."""
    if request.param == "sqlite":
        store = SQLiteEventStore(":memory:")
        yield lambda name: SQLiteChronicleStore(store, name)
        store.close()
        return
    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        pg = PostgresEventStore(conninfo)
        yield lambda name: PostgresChronicleStore(pg, name)
        pg.close()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops)
def test_no_write_sequence_forks_the_chronicle(chronicles: Chronicles, operations) -> None:
    example = uuid.uuid4().hex[:8]
    chronicle = chronicles(f"default-{example}")
    other = chronicles(f"other-{example}")
    covered: set[int] = set()
    for op in operations:
        try:
            if op[0] == "append":
                chronicle.append(fresh(*op[1]))
            elif op[0] == "append_new":
                chronicle.append_new(fresh(*op[1]))
            elif op[0] == "supersede":
                stored = chronicle.export()
                if not stored:
                    continue
                target = stored[op[1] % len(stored)].anchor
                lo, hi = op[2] if op[1] % 3 == 0 else (target.from_seq, target.to_seq)
                generation = split_section_id(target.section_id)[2] + 1
                chronicle.append_new(
                    Section(
                        Anchor(section_id_for(lo, hi, generation), lo, hi, hi, target.section_id),
                        "again",
                    )
                )
            else:
                for lo, hi in op[1]:
                    with contextlib.suppress(ChronicleFork):
                        other.append(fresh(lo, hi))
                chronicle.load(other.export())
        except (ChronicleFork, SectionCollision, UsageError):
            pass
        covered = check_invariants(chronicle, covered)


def test_load_refuses_the_whole_transfer_on_a_fork(chronicles: Chronicles) -> None:
    here = chronicles("here")
    there = chronicles("there")
    here.append(fresh(5, 9))
    there.append(fresh(1, 3))
    there.append(fresh(4, 6))  # overlaps here's 5-9
    with pytest.raises(ChronicleFork, match="overlaps the current section '5-9'"):
        here.load(there.export())
    assert [s.anchor.section_id for s in here.export()] == ["5-9"]


def test_superseding_must_keep_the_range(chronicles: Chronicles) -> None:
    chronicle = chronicles("default")
    chronicle.append(fresh(1, 3))
    with pytest.raises(ChronicleFork, match="must cover exactly the range"):
        chronicle.append_new(Section(Anchor("1-4#2", 1, 4, 4, "1-3"), "wider"))
    with pytest.raises(SectionCollision, match="already stored"):
        chronicle.append_new(fresh(1, 3))
    assert chronicle.append(fresh(1, 3, "replayed")) is False
    assert chronicle.get("1-3").prose == "p"  # a replayed batch keeps the existing row


def test_a_section_is_never_updated_but_a_superseded_ones_prose_may_be_purged(
    chronicles: Chronicles,
) -> None:
    chronicle = chronicles("default")
    chronicle.append(fresh(1, 3, "first words"))
    with pytest.raises(StoreError, match="never updated"), chronicle._writing(None) as c:
        c.execute(chronicle._sql("UPDATE sections SET prose = 'x' WHERE section_id = ?"), ("1-3",))
    with pytest.raises(StoreError, match="never updated"):
        chronicle.purge("1-3", "forgotten")  # the current section: supersede it first
    chronicle.append_new(Section(Anchor("1-3#2", 1, 3, 3, "1-3"), "second words"))
    assert chronicle.purge("1-3", "forgotten") is True
    old = chronicle.get("1-3")
    assert old is not None and old.prose == "" and old.meta == {"purged": "forgotten"}
    assert [s.anchor.section_id for s in chronicle.current()] == ["1-3#2"]


_RACER = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = [{root!r}, {tests!r}]
    from postgres_support import Target
    from chronicle_engine.chronicle.sections import Anchor, Section, section_id_for
    from chronicle_engine.errors import ChronicleFork
    kind, where, n, rounds = {args!r}
    store = Target(kind, where).open()
    chronicle = Target(kind, where).chronicle(store, "warm-up")
    print("ready", flush=True)
    sys.stdin.readline()
    won = []
    for r in range(rounds):
        lo, hi = 1 + n, 5 + n  # every host's range overlaps every other's at 4..5
        try:
            chronicle.named(f"race-{{r}}").append(
                Section(Anchor(section_id_for(lo, hi), lo, hi, hi), f"host {{n}}")
            )
            won.append(r)
        except ChronicleFork:
            pass
    store.close()
    print(json.dumps(won))
    """
)


def test_hosts_racing_to_write_overlapping_sections_leave_one(target: Target) -> None:
    store = target.open()
    target.chronicle(store, "warm-up")  # the schema exists before the hosts race
    rounds, hosts = 30, 4
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _RACER.format(
                    root=str(ROOT),
                    tests=str(ROOT / "tests"),
                    args=(target.kind, target.where, n, rounds),
                ),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(hosts)
    ]
    try:
        release_together(processes)
        won: list[int] = []
        for process in processes:
            out, err = process.communicate(timeout=DEADLINE_S)
            assert process.returncode == 0, err[-3000:]
            won += json.loads(out.strip().splitlines()[-1])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert sorted(won) == list(range(rounds)), "a round was won by two hosts, or by none"
    for r in range(rounds):
        current = target.chronicle(store, f"race-{r}").current()
        assert len(current) == 1
    store.close()
