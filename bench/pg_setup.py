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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chronicle_engine.config import Config
from chronicle_engine.recall.pool import pool_sessions
from chronicle_engine.recall.postgres import PostgresRecallIndex

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from postgres_support import PostgresCluster, Target, TreeParts, own_schema, start_cluster  # noqa: E402

__all__ = ["ask_index", "cluster", "postgres_recall", "PostgresCluster"]


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
    )
    if by_session:
        hits = pool_sessions(hits, k=limit, limit=limit)
    return [hit.as_dict() for hit in hits]
