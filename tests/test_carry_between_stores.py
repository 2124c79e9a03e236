"""A whole database carried between stores: the log exported from SQLite and imported into an
empty SQLite file and an empty PostgreSQL log keeps every event at its seq (gaps included, as
`append_new` leaves them), so the chronicle's sections carried after it cite the same messages.
"""

from __future__ import annotations

import io

from postgres_support import Target

from chronicle_engine import transfer
from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.log.store import PendingEvent, SQLiteEventStore


def _message(n: int, *, id: str | None = None) -> PendingEvent:
    extra = {"id": id} if id else {}
    return PendingEvent("chat", "Said", 1, {"text": f"message {n} — naïve ✓"}, session="s", **extra)


def test_a_log_with_gaps_and_its_sections_carry_into_an_empty_store_unchanged(
    target: Target, tmp_path
) -> None:
    source = SQLiteEventStore(str(tmp_path / "source.db"))
    source.append([_message(1, id="m1")])
    source.append_new([_message(1, id="m1"), _message(2, id="m2")])  # the held id spends a seq
    source.append_new([_message(1, id="m1")])
    source.append([_message(3), _message(4)])
    seqs = [e.seq for e in source.read()]
    assert seqs != list(range(1, len(seqs) + 1)), "the source log should have gaps"
    chronicle = Target("sqlite", source.path).chronicle(source, "conversation:s")
    chronicle.append(Section(Anchor("2-5", seqs[1], seqs[2], seqs[2]), "two and three"))
    chronicle.append_new(
        Section(Anchor("2-5#2", seqs[1], seqs[2], seqs[2], "2-5"), "two and three, again")
    )

    events, sections = io.StringIO(), io.StringIO()
    transfer.write_events(source.read(), events)
    transfer.write_sections(chronicle, sections)

    dest = target.open()
    read, stored = transfer.import_events(
        dest, transfer.read_events(io.StringIO(events.getvalue()))
    )
    assert (read, stored) == (len(seqs), len(seqs))
    carried = target.chronicle(dest, "conversation:s")
    assert carried.load(transfer.read_sections(io.StringIO(sections.getvalue()))) == 2

    def log_of(store):
        return [(e.seq, e.envelope, e.payload) for e in store.read()]

    assert log_of(dest) == log_of(source)
    assert carried.export() == chronicle.export()
    (current,) = carried.current()
    cited = [
        e.payload["text"]
        for e in dest.read(after=current.anchor.from_seq - 1, upto=current.anchor.to_seq)
    ]
    assert cited == ["message 2 — naïve ✓", "message 3 — naïve ✓"]
    # Importing the same file again stores nothing; a later append goes above the last seq.
    assert transfer.import_events(dest, transfer.read_events(io.StringIO(events.getvalue()))) == (
        len(seqs),
        0,
    )
    [after] = dest.append([_message(5)])
    assert after.seq > seqs[-1]  # (SQLite's re-import spent numbers on the held ids)
    dest.close()
    source.close()
