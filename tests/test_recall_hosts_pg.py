"""Two hosts folding recall over one database (a SQLite file, or a schema on the session's
PostgreSQL server): a batch one host read before the other folded it is not folded again, and
recall's position never moves back (review, session 9: /tmp/rv9/two_hosts.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_projector import Interleaved
from test_scheduler_support import open_core, places, reading


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    with places(request, tmp_path) as place:
        yield place


def said(n: int, tag: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"orchard {tag} {i}"} for i in range(n)]


def test_a_host_that_read_a_batch_before_another_folded_it_folds_nothing_twice(where) -> None:
    a, b = open_core(where), open_core(where)
    a.capture.capture_messages("s1", said(4, "a"))
    a.recall.catch_up()
    a.capture.capture_messages("s1", said(4, "a") + said(6, "b"))  # six left to fold
    index = a.recall.index
    name = index.fold.name
    interleaved = Interleaved(index.projector.reader)
    index.projector.reader = interleaved
    seen = [a.store.position(name)]

    def host_b() -> None:  # between host A's read of its batch and A's write of it
        b.capture.capture_messages("s1", said(4, "a") + said(6, "b") + said(5, "c"))
        b.recall.catch_up()
        seen.append(b.store.position(name))

    interleaved.meanwhile = host_b
    a.recall.catch_up()
    seen.append(a.store.position(name))
    last = a.store.last_seq()
    assert seen[1] == seen[2] == last and seen == sorted(seen)  # never back
    with reading(a) as conn:
        rows = conn.execute("SELECT seq FROM recall_messages ORDER BY seq").fetchall()
    assert len(rows) == len({seq for (seq,) in rows}) == 15  # every message once
    hits = a.recall.search("orchard c 3", scope="messages", limit=5)
    assert any("orchard c 3" in str(hit) for hit in hits)
    for core in (a, b):
        core.shutdown()
