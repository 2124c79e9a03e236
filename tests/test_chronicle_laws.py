"""The chronicle's laws: no sequence of writes forks it or uncovers a consolidated range."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronicle_engine.chronicle.sections import Anchor, Section, section_id_for, split_section_id
from chronicle_engine.chronicle.store import SQLiteChronicleStore
from chronicle_engine.errors import ChronicleFork, SectionCollision, UsageError
from chronicle_engine.log.store import SQLiteEventStore

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


def check_invariants(chronicle: SQLiteChronicleStore, covered: set[int]) -> set[int]:
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


@settings(max_examples=150, deadline=None)
@given(ops)
def test_no_write_sequence_forks_the_chronicle(operations) -> None:
    store = SQLiteEventStore(":memory:")
    chronicle = SQLiteChronicleStore(store)
    other = SQLiteChronicleStore(store, "other")
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
    store.close()


def test_load_refuses_the_whole_transfer_on_a_fork() -> None:
    store = SQLiteEventStore(":memory:")
    here = SQLiteChronicleStore(store, "here")
    there = SQLiteChronicleStore(store, "there")
    here.append(fresh(5, 9))
    there.append(fresh(1, 3))
    there.append(fresh(4, 6))  # overlaps here's 5-9
    with pytest.raises(ChronicleFork, match="overlaps the current section '5-9'"):
        here.load(there.export())
    assert [s.anchor.section_id for s in here.export()] == ["5-9"]


def test_superseding_must_keep_the_range() -> None:
    store = SQLiteEventStore(":memory:")
    chronicle = SQLiteChronicleStore(store)
    chronicle.append(fresh(1, 3))
    with pytest.raises(ChronicleFork, match="must cover exactly the range"):
        chronicle.append_new(Section(Anchor("1-4#2", 1, 4, 4, "1-3"), "wider"))
    with pytest.raises(SectionCollision, match="already stored"):
        chronicle.append_new(fresh(1, 3))
    assert chronicle.append(fresh(1, 3, "replayed")) is False
    assert chronicle.get("1-3").prose == "p"  # a replayed batch keeps the existing row
