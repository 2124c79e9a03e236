"""Recall on PostgreSQL for the recall benches (`--postgres`): a throwaway cluster, capture and
recall's PostgreSQL index over it, and chronicle_search's answer read from that index.

The cluster is tests/postgres_support.py's: initdb and pg_ctl in a temporary directory, on
127.0.0.1 and a Unix socket, stopped and removed at the end. Each haystack gets a schema of its
own (`own_schema`), dropped after it. The memory tools are not wired to a PostgreSQL store yet, so
`ask_index` does what `Recall.search` does with the index's `hits`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from chronicle_engine.config import Config
from chronicle_engine.recall.pool import pool_sessions
from chronicle_engine.recall.postgres import PostgresRecallIndex

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from postgres_support import PostgresCluster, Target, TreeParts, own_schema, start_cluster  # noqa: E402

__all__ = [
    "ask_index",
    "cached_database",
    "cluster",
    "logged_statements",
    "postgres_recall",
    "PostgresCluster",
]


@contextlib.contextmanager
def cached_database(
    cache: Path,
    name: str,
    build: Callable[[str], None],
    settings: tuple[str, ...] = (),
    migrate: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """A conninfo of a fresh copy of database `name` in the cluster kept under `cache` (made on
    first use; `settings`: more server settings). The first run builds `name` with
    `build(conninfo)` (into another name, renamed when it returns, so a build cut short is never
    taken for a whole one); then each run hands it to `migrate` first, so the copy is made from
    a store this code has migrated once. The copy (what a bench may write to) is dropped at the
    end."""
    import psycopg

    with start_cluster(cache, settings) as server:
        admin = server.conninfo("postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            held = {str(d) for (d,) in conn.execute("SELECT datname FROM pg_database")}
            if name not in held:
                conn.execute(f"DROP DATABASE IF EXISTS {name}_building")
                conn.execute(f"CREATE DATABASE {name}_building")
                build(server.conninfo(f"{name}_building"))
                conn.execute(f"ALTER DATABASE {name}_building RENAME TO {name}")
            if migrate is not None:
                migrate(server.conninfo(name))
            conn.execute(f"DROP DATABASE IF EXISTS {name}_run")
            conn.execute(f"CREATE DATABASE {name}_run TEMPLATE {name} STRATEGY FILE_COPY")
        try:
            yield server.conninfo(f"{name}_run")
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name}_run WITH (FORCE)")


def logged_statements(cluster: PostgresCluster, since: int = 0) -> tuple[list[str], int]:
    """The statements `cluster`'s log holds from line `since` on (the server logs them with
    `log_statement = 'all'`; the SETs of `log_statement` left out), and the log's length: read
    after half a second, as the server writes its log asynchronously."""
    time.sleep(0.5)
    lines = (cluster.root / "server.log").read_text().splitlines()
    return [
        line.split("LOG:  ", 1)[1]
        for line in lines[since:]
        if ("LOG:  statement:" in line or "LOG:  execute" in line) and "log_statement" not in line
    ], len(lines)


def cluster(store: str) -> contextlib.AbstractContextManager[PostgresCluster | None]:
    """A throwaway cluster unless `store` names a database to use (then None)."""
    return contextlib.nullcontext() if store else start_cluster()


@contextlib.contextmanager
def postgres_recall(
    server: PostgresCluster | None, store: str = ""
) -> Iterator[tuple[TreeParts, PostgresRecallIndex]]:
    """Capture and recall's index in a new schema of `server`'s database, or in the (empty)
    database `store` names; closed (and the schema dropped) at the end."""
    with contextlib.ExitStack() as stack:
        conninfo = store if server is None else stack.enter_context(own_schema(server))
        parts = Target("postgres", conninfo).tree()
        stack.callback(parts.shutdown)
        yield parts, PostgresRecallIndex(parts.reader, Config(), parts.sessions, parts.capture)


def ask_index(
    index: PostgresRecallIndex,
    question: str,
    *,
    user: str | None = None,
    scope: str = "all",
    limit: int = 10,
    by_session: bool = False,
) -> list[dict[str, Any]]:
    """What chronicle_search (`Recall.search`) returns for these arguments, from the index."""
    hits = index.hits(
        question,
        scope=scope,
        user_id=user,
        limit=max(index.tuning.candidates, limit) if by_session else limit,
        pooling=by_session,
    )
    if by_session:
        hits = pool_sessions(hits, k=limit, limit=limit)
    return [hit.as_dict() for hit in hits]
