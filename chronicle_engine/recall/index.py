"""Recall's index: the recall fold kept caught up with the log, and the reads every recall path
shares (whose memory a call reaches, a conversation's lineage, ranked hits).

Invariant: one user's memory is never read for another. Every read resolves the caller's scope
first (`who`, `scope`) and narrows every candidate query to it (see search.py).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from ..config import Config
from ..errors import StoreBusy, StoreError, StoreReadOnly, UsageError
from ..log.events import EventReader
from ..log.port import LogStore
from ..log.projector import Projector
from ..log.store import sqlite_errors
from ..log.tables import Statements
from ..sessions.capture import Capture
from ..sessions.tree import SessionTree
from .fold import RecallFold, scope_number
from .injected import Injected
from .reach import Reach, Window
from .schema import MIGRATIONS
from .search import (
    FTS5_BELIEFS,
    BeliefIndex,
    Hit,
    MessageRow,
    MessageSearch,
    fuse,
    message_hit,
    message_rows,
    rank_beliefs,
    rank_sections,
)
from .text import STOPWORDS, query_words, tokens
from .vectors import Embedder, nearest
from .when import Span, named_time

__all__ = ["RecallIndex", "SCOPES"]

log = logging.getLogger("chronicle_engine.recall")

SCOPES = ("all", "session", "messages", "beliefs", "sections")
_MAX_QUERY_WORDS = 24
_FOLD_ON_CAPTURE = 64
_SECTION_SHARE = 5
"""Sections get a fifth of the match budget: each covers tens of messages, so a word matches
proportionally more of them, and bm25 reads a row of the index for every match it scores."""


class RecallIndex:
    """The recall fold and the reads over it, for one database."""

    belief_index: BeliefIndex = FTS5_BELIEFS
    """Where `rank_beliefs` finds and scores beliefs (FTS5's bm25 on SQLite)."""

    def __init__(
        self, reader: EventReader, config: Config, sessions: SessionTree, capture: Capture
    ) -> None:
        self.reader: EventReader[LogStore] = reader
        self.store = reader.store
        self.log: LogStore = reader.store
        """The log (either store): what the memory tools append to and ask about positions."""
        self.types = reader.types
        self.store.migrate(MIGRATIONS)
        self.fold = RecallFold(body_from_log=True)
        self.projector: Projector[sqlite3.Connection] | Projector[Statements] = Projector(
            reader.store, reader, [self.fold]
        )
        self._messages = MessageSearch(config.settings.recall)
        self._keep(config, sessions, capture)

    def _keep(self, config: Config, sessions: SessionTree, capture: Capture) -> None:
        """What an index keeps beside its tables, on either store."""
        self.tuning = config.settings.recall
        self.embedder = Embedder.from_settings(config.settings)
        self._sessions = sessions
        self.identity = capture.identity
        """Who a live session serves, as the memory slot last said (capture keeps it)."""
        self._fold_lock = threading.Lock()
        self._warned: set[str] = set()
        self.injected = Injected()
        """What per-turn memory already gave each conversation (prefetch.py)."""
        self.clock: Callable[[], float] = time.time
        """When a query is asked (UTC seconds): what "5 days ago" or "last week" counts from.
        A bench replaying a dataset sets it to the dataset's own time."""
        capture.on_stored(self._stored)

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[Statements]:
        """A connection to read recall's tables from, the store's errors as Chronicle's own."""
        with sqlite_errors(what), self.store.reading() as conn:
            yield conn

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[Statements]:
        """One transaction on recall's tables (the vector cache is the one thing written
        outside the fold), the store's errors as Chronicle's own."""
        with sqlite_errors(what), self.store.atomic() as conn:
            yield conn

    def _rank_sections(
        self,
        conn: Statements,
        scope: int,
        words: Sequence[str],
        *,
        limit: int,
        chronicles: set[str] | None,
    ) -> list[Hit]:
        return rank_sections(
            conn,
            scope,
            words,
            limit=limit,
            plan=self._messages.plan,
            budget=max(self.tuning.match_budget // _SECTION_SHARE, limit),
            chronicles=chronicles,
            index=self._messages.sections_index,
            candidates=self._messages.section_candidates,
        )

    def hold_fold(self, conn: Statements) -> None:
        """Make the write transaction `conn` and recall's fold wait for each other (a vector
        written beside a forget): SQLite's one writer does it already."""

    # -- keeping up with the log ---------------------------------------------------------------

    def catch_up(self) -> int:
        """Fold whatever the log gained since the last read. A busy or read-only store is not
        an error: the read goes on with what is already indexed."""
        try:
            with self._fold_lock:
                return self.projector.catch_up()
        except (StoreBusy, StoreReadOnly) as exc:
            log.debug("chronicle recall: searching what is already indexed (%s)", exc)
            return 0

    def _stored(self, count: int) -> None:
        """Capture stored `count` messages: a big capture is folded now, on the capturing
        thread, so no read pays for it; a few messages are left to the next read (or to
        queue_prefetch, which Hermes calls after each turn), keeping a turn's capture cheap."""
        if count >= _FOLD_ON_CAPTURE:
            self.catch_up()

    def rebuild(self) -> int:
        """Drop recall's projection and fold the whole log again (same rows, same ids)."""
        with self._fold_lock:
            return self.projector.rebuild(self.fold.name)

    def warn_once(self, key: str, message: str, *args: object) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        log.warning(message, *args)

    # -- who and where -------------------------------------------------------------------------

    def who(
        self,
        conn: Statements,
        session_id: str | None,
        user_id: str | None,
        profile: str | None,
    ) -> tuple[str | None, str | None]:
        """The (user, profile) a call acts for: explicit arguments, else the session's own."""
        if user_id is not None or profile is not None:
            return user_id, profile
        if session_id:
            row = conn.execute(
                "SELECT s.user_id, s.profile FROM recall_messages m JOIN recall_scopes s"
                " ON s.n = m.scope WHERE m.session = ? ORDER BY m.seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            if row is not None:
                return row[0] or None, row[1] or None
            live = self.identity(session_id)
            if live:
                return live["user_id"], live["profile"]
        return None, None

    def scope(
        self,
        conn: Statements,
        session_id: str | None,
        user_id: str | None,
        profile: str | None,
    ) -> int | None:
        user, prof = self.who(conn, session_id, user_id, profile)
        return scope_number(conn, user, prof)

    def lineage(self, session_id: str) -> list[str]:
        """Every session id of the conversation `session_id` belongs to (itself when the session
        tree cannot answer)."""
        if not session_id:
            return []
        try:
            found = list(self._sessions.lineage(session_id))
        except Exception as exc:  # the tree is another subsystem: degrade, do not fail a read
            self.warn_once("lineage", "chronicle recall: session lineage unavailable (%s)", exc)
            return [session_id]
        return found or [session_id]

    def chronicle_name(self, session_id: str) -> str | None:
        try:
            return str(self._sessions.chronicle_name(session_id))
        except Exception as exc:
            self.warn_once("chronicle_name", "chronicle recall: no chronicle name (%s)", exc)
            return None

    # -- search --------------------------------------------------------------------------------

    def hits(
        self,
        query: str,
        *,
        session_id: str | None = None,
        scope: str = "all",
        user_id: str | None = None,
        profile: str | None = None,
        limit: int | None = None,
        keep_message: Callable[[MessageRow], bool] | None = None,
        message_text: bool = False,
        outside: Window | None = None,
        belief_origins: Sequence[str] | None = None,
        use_vectors: bool = True,
        sections: bool = True,
        in_session: str | None = None,
        pooling: bool = False,
    ) -> list[Hit]:
        """Ranked hits. Narrowing (scope "session", a window to leave `outside`) is done in the
        candidate queries; `keep_message` then judges each candidate row (with its text when
        `message_text`). `pooling`: the hits are to be pooled by session (`MessageSearch.rank`)."""
        if scope not in SCOPES:
            raise UsageError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
        limit = max(1, min(int(limit or self.tuning.search_limit), 100))
        query = query if isinstance(query, str) else str(query)
        words = query_words(query)[:_MAX_QUERY_WORDS]
        if not words:
            return []
        query_tokens = set(tokens(query))
        moment = named_time(query, self.clock(), query_tokens)
        self.catch_up()
        # A search pooled by session fuses the vectors' nearest with full text; a plain search
        # asks for them only when its whole ranking (full text, beliefs, sections) leaves
        # places (`_filled`, below).
        fuses = use_vectors and pooling and scope in ("all", "session", "messages")
        query_vector = self.query_vector(query) if fuses else None
        messages = False
        with self.reading("searching memory") as conn:
            n = self.scope(conn, session_id, user_id, profile)
            if n is None:
                return []
            if isinstance(moment, Span):
                moment, words = _relative(conn, n, query, moment, words)
            reach = Reach(outside=outside if outside is not None and outside.sessions else None)
            chronicles: set[str] | None = None
            if scope == "session":
                lineage = tuple(self.lineage(session_id or ""))
                reach = Reach(lineage, _span(conn, lineage), reach.outside)
                name = self.chronicle_name(session_id or "") if session_id else None
                chronicles = {name} if name else set()
            if in_session:
                reach = Reach((in_session,), _span(conn, (in_session,)), reach.outside)
                chronicles = set()

            lists: list[tuple[float, Sequence[Hit]]] = []
            if scope in ("all", "session", "messages") and (
                reach.sessions is None or reach.span is not None
            ):
                found = self._messages.rank(
                    conn,
                    n,
                    words,
                    query_tokens,
                    keep=keep_message,
                    reach=reach,
                    text=message_text,
                    limit=limit,
                    moment=moment,
                    pooling=pooling,
                )
                messages = True
                if query_vector is not None:
                    nearest = self._nearest(conn, n, query_vector, reach, keep_message, limit)
                    if nearest:
                        found = fuse(
                            [(1.0, found), (1.0, nearest)], k=self.tuning.rrf_k, limit=limit
                        )
                lists.append((1.0, found))
            if scope in ("all", "session", "beliefs"):
                lists.append(
                    (
                        1.0,
                        rank_beliefs(
                            conn,
                            n,
                            words,
                            limit=limit,
                            reach=reach,
                            origins=belief_origins,
                            index=self.belief_index,
                        ),
                    )
                )
            if sections and scope in ("all", "session", "sections"):
                lists.append(
                    (0.9, self._rank_sections(conn, n, words, limit=limit, chronicles=chronicles))
                )
        if not lists:
            return []
        if len(lists) == 1:
            ranked = list(lists[0][1])[:limit]
        else:
            ranked = fuse(lists, k=self.tuning.rrf_k, limit=limit)
        if use_vectors and not pooling and messages and len(ranked) < limit:
            vector = self.query_vector(query)  # outside the read: a request may take a while
            if vector is not None:
                try:
                    with self.reading("searching memory") as conn:
                        nearest = self._nearest(conn, n, vector, reach, keep_message, limit)
                except StoreError as exc:  # the ranking already made stands without them
                    self.warn_once("vectors_read", "chronicle recall: vectors unread (%s)", exc)
                    return ranked
                ranked = _filled(ranked, nearest, k=self.tuning.rrf_k, limit=limit)
        return ranked

    # -- vectors -------------------------------------------------------------------------------

    def query_vector(self, query: str) -> list[float] | None:
        if self.embedder is None or not self.embedder.available:
            return None
        got = self.embedder.embed([query])
        return got[0] if got else None

    def _nearest(
        self,
        conn: Statements,
        scope: int,
        vector: list[float],
        reach: Reach,
        keep: Callable[[MessageRow], bool] | None,
        limit: int,
    ) -> list[Hit]:
        assert self.embedder is not None
        condition, params = reach.messages("m.seq", "m.session")
        if condition:
            sql = (
                "SELECT v.seq, v.vec FROM recall_vectors v JOIN recall_messages m ON m.seq = v.seq"
                f" WHERE v.scope = ? AND v.model = ? AND {condition} ORDER BY v.seq DESC LIMIT ?"
            )
        else:
            sql = (
                "SELECT seq, vec FROM recall_vectors WHERE scope = ? AND model = ?"
                " ORDER BY seq DESC LIMIT ?"
            )
        rows = conn.execute(
            sql, (scope, self.embedder.model, *params, self.tuning.vector_scan)
        ).fetchall()
        top = nearest(vector, rows, limit * 3)
        # The message's own scope, not the vector's: a vector written from a read made before a
        # rebuild renumbered the scopes (PostgreSQL) may carry another scope's number.
        found = message_rows(conn, [seq for _, seq in top], scope=scope)
        hits = [
            message_hit(found[seq], sim)
            for sim, seq in top
            if seq in found and (keep is None or keep(found[seq]))
        ]
        return hits[:limit]


def _relative(
    conn: Statements, scope: int, query: str, span: Span, words: list[str]
) -> tuple[Span | None, list[str]]:
    """The span a query's relative time names, and its words but the time's: "5 days ago" says
    when, not what, and the evidence, told at another time, words it otherwise ("today"); a date
    written out keeps its words, as the evidence may write it the same way. A span that starts
    after the user's newest message holds none of this memory: the query was not counted from
    now (or nothing was said since), so it is ranked as one naming no time, words and all. When
    only function words would be left, the query keeps them all."""
    newest = conn.execute(
        "SELECT ts FROM recall_messages WHERE scope = ? ORDER BY seq DESC LIMIT 1", (scope,)
    ).fetchone()
    if newest is None or not newest[0] or float(newest[0]) < span.start:
        return None, words
    rest = query_words(query.replace(span.phrase, " "))[:_MAX_QUERY_WORDS]
    return span, rest if any(word not in STOPWORDS for word in rest) else words


def _span(conn: Statements, sessions: Sequence[str]) -> tuple[int, int] | None:
    """The first and last seq of these sessions' messages (None when they have none)."""
    if not sessions:
        return None
    row = conn.execute(
        "SELECT min(seq), max(seq) FROM recall_messages"
        f" WHERE session IN ({','.join('?' * len(sessions))})",
        list(sessions),
    ).fetchone()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


def _filled(found: Sequence[Hit], nearest: Sequence[Hit], *, k: int, limit: int) -> list[Hit]:
    """A plain search with vectors: its ranking as full text, beliefs and sections made it,
    and the nearest messages it did not find after it, while it holds fewer than `limit` (a
    question in other words than its answer finds something). Fused by rank instead, vectors
    lowered recall@10 (LoCoMo) and turn recall_all@10 (LongMemEval) on every half of both
    development sets (docs/benchmarks.md "Vectors"); a search pooled by session fuses them,
    where they raised LongMemEval's sessions. When anything is added, the list is scored by
    position as `fuse` scores one list."""
    if len(found) >= limit:
        return list(found)
    ids = {hit.id for hit in found}
    ordered = [*found, *(hit for hit in nearest if hit.id not in ids)][:limit]
    if len(ordered) == len(found):
        return list(found)
    return [hit.rescored(1.0 / (k + rank)) for rank, hit in enumerate(ordered, start=1)]
