"""A search on PostgreSQL reads its (user, profile)'s scope number from the server each time: a
number remembered from an earlier search would outlive a rebuild, which numbers the scopes again
without the gaps a rolled-back fold left in their sequence, and another user could take it.
(From the review of a scope-number cache that did so: bob's search returned carol's words.)"""

from __future__ import annotations

import psycopg
import pytest
from postgres_support import own_schema
from test_recall_support import open_core, say


@pytest.mark.parametrize("rebuilder", ["this host", "another host"])
def test_a_scope_number_never_outlives_a_rebuild(request, tmp_path, rebuilder: str) -> None:
    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        a = open_core(conninfo, tmp_path)
        b = open_core(conninfo, tmp_path / "b")
        try:
            say(a, "sa", "alice rides the ferry", user_id="alice")
            a.recall.catch_up()
            # A scope number taken and given back: another host's fold rolled back (SERIAL).
            with psycopg.connect(conninfo, autocommit=True) as c:
                c.execute("SELECT nextval(pg_get_serial_sequence('recall_scopes', 'n'))")
            say(a, "sb", "bob rides the ferry too", user_id="bob")
            assert [h["seq"] for h in a.recall.search("ferry", user_id="bob")]
            (a if rebuilder == "this host" else b).recall.rebuild()  # alice 1, bob 2
            say(b, "sc", "carol private ferry diary", user_id="carol")  # bob's old 3
            b.recall.catch_up()
            texts = [str(h["text"]) for h in a.recall.search("ferry", user_id="bob")]
            assert texts and not any("carol" in t for t in texts), texts
        finally:
            a.shutdown()
            b.shutdown()
