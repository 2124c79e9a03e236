"""Recall: what was captured comes back when it is useful, scoped to its user, with provenance.

`core.recall` is this class. It keeps recall's projection (the recall fold) caught up with the log
before every read, and answers:
- `search` (chronicle_search): full text over messages, beliefs and sections, optionally fused
  with vectors from a local embedding server;
- `prefetch`: per-turn memory behind the relevance gate, never from the conversation already in
  the window, never for a scheduled job's turn (prefetch.py); `queue_prefetch` only works ahead
  (folds and embeds): the next turn's message is not known until prefetch is asked;
- `answer` (chronicle_answer): evidence with citations, or an abstention (answer.py);
- `remember`, `forget`, `correct`: the memory tools, each written to the log as an event
  (memory.py).

Invariants: nothing here raises into the host from prefetch or queue_prefetch (they log once and
return nothing); the one user's memory is never read for another (see search.py); every text
that leaves goes through `capture.secrets.mask`.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..capture.events import register_capture_events
from ..capture.secrets import mask
from ..errors import ChronicleError, StoreBusy, StoreReadOnly, UsageError
from ..log.projector import Projector
from ..log.store import sqlite_errors
from .events import register_recall_events
from .fold import RecallFold, scope_number
from .reach import Reach, Window
from .schema import MIGRATIONS
from .search import (
    BELIEF_VISIBLE,
    Hit,
    MessageRow,
    MessageSearch,
    fuse,
    message_hit,
    message_rows,
    rank_beliefs,
    rank_sections,
)
from .settings import Tuning
from .text import content_words, tokens
from .vectors import Embedder, nearest, pack

if TYPE_CHECKING:
    from ..core import ChronicleCore
    from ..tools import ToolSpec

__all__ = ["Recall", "SCOPES"]

log = logging.getLogger("chronicle_engine.recall")

SCOPES = ("all", "session", "messages", "beliefs", "sections")
_MAX_QUERY_WORDS = 24


class Recall:
    """Search, per-turn memory, answers and the memory tools for one core."""

    TOOLS: ClassVar[Sequence[ToolSpec]]

    def __init__(self, core: ChronicleCore) -> None:
        self.core = core
        register_capture_events(core.types)
        register_recall_events(core.types)
        core.store.migrate(MIGRATIONS)
        self.tuning = Tuning.from_config(core.config)
        self.fold = RecallFold()
        self.projector = Projector(core.store, core.reader, [self.fold])
        self.embedder = Embedder.from_config(core.config)
        self._messages = MessageSearch(self.tuning)
        self._fold_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._last_live = ""
        self._warned: set[str] = set()

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

    def rebuild(self) -> int:
        """Drop recall's projection and fold the whole log again (same rows, same ids)."""
        with self._fold_lock:
            return self.projector.rebuild(self.fold.name)

    def note_session(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        profile: str | None = None,
        agent_context: str | None = None,
        platform: str | None = None,
    ) -> None:
        """The slot's word on who a live session belongs to and what kind of turn it runs (Hermes
        passes none of it to prefetch). Kept where capture keeps it: one identity per session."""
        if not session_id:
            return
        self.core.capture.remember_identity(
            session_id,
            user_id=user_id,
            profile=profile,
            agent_context=agent_context,
            platform=platform,
        )
        with self._state_lock:
            self._last_live = session_id

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        log.warning(message, *args)

    # -- who and where -------------------------------------------------------------------------

    def _who(
        self,
        conn: sqlite3.Connection,
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
            live = self.core.capture.identity(session_id)
            if live:
                return live["user_id"], live["profile"]
        return None, None

    def _scope(
        self,
        conn: sqlite3.Connection,
        session_id: str | None,
        user_id: str | None,
        profile: str | None,
    ) -> int | None:
        user, prof = self._who(conn, session_id, user_id, profile)
        return scope_number(conn, user, prof)

    def lineage(self, session_id: str) -> list[str]:
        """Every session id of the conversation `session_id` belongs to (itself when the session
        tree is not available)."""
        if not session_id:
            return []
        try:
            found = list(self.core.sessions.lineage(session_id))
        except ImportError:
            return [session_id]
        except Exception as exc:  # the tree is another subsystem: degrade, do not fail a read
            self._warn_once("lineage", "chronicle recall: session lineage unavailable (%s)", exc)
            return [session_id]
        return found or [session_id]

    def _chronicle_name(self, session_id: str) -> str | None:
        try:
            return str(self.core.sessions.chronicle_name(session_id))
        except ImportError:
            return None
        except Exception as exc:
            self._warn_once("chronicle_name", "chronicle recall: no chronicle name (%s)", exc)
            return None

    def window(self, session_id: str) -> Window | None:
        """The messages already in the model's window for this session, as a range of its
        lineage (see `prefetch.window`); None without a session."""
        from .prefetch import window

        return window(self, session_id)

    # -- search --------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        scope: str = "all",
        user_id: str | None = None,
        profile: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """chronicle_search: ranked results as JSON-ready dicts, each citing its seq (and section
        id), session and time."""
        return [
            h.as_dict()
            for h in self.hits(
                query,
                session_id=session_id,
                scope=scope,
                user_id=user_id,
                profile=profile,
                limit=limit,
            )
        ]

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
    ) -> list[Hit]:
        """Ranked hits. Narrowing (scope "session", a window to leave `outside`) is done in the
        candidate queries; `keep_message` then judges each candidate row (with its text when
        `message_text`)."""
        if scope not in SCOPES:
            raise UsageError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
        limit = max(1, min(int(limit or self.tuning.limit), 100))
        query = query if isinstance(query, str) else str(query)
        words = content_words(query) or [w for w in tokens(query) if len(w) > 1]
        words = words[:_MAX_QUERY_WORDS]
        if not words:
            return []
        query_tokens = set(tokens(query))
        self.catch_up()
        query_vector = self._query_vector(query) if use_vectors else None
        with sqlite_errors("searching memory"), self.core.store.reading() as conn:
            n = self._scope(conn, session_id, user_id, profile)
            if n is None:
                return []
            reach = Reach(outside=outside if outside is not None and outside.sessions else None)
            chronicles: set[str] | None = None
            if scope == "session":
                lineage = tuple(self.lineage(session_id or ""))
                reach = Reach(lineage, _span(conn, lineage), reach.outside)
                name = self._chronicle_name(session_id or "") if session_id else None
                chronicles = {name} if name else set()

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
                )
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
                            conn, n, words, limit=limit, reach=reach, origins=belief_origins
                        ),
                    )
                )
            if sections and scope in ("all", "session", "sections"):
                lists.append(
                    (0.9, rank_sections(conn, n, words, limit=limit, chronicles=chronicles))
                )
        if not lists:
            return []
        if len(lists) == 1:
            return list(lists[0][1])[:limit]
        return fuse(lists, k=self.tuning.rrf_k, limit=limit)

    # -- vectors -------------------------------------------------------------------------------

    def _query_vector(self, query: str) -> list[float] | None:
        if self.embedder is None or not self.embedder.available:
            return None
        got = self.embedder.embed([query])
        return got[0] if got else None

    def _nearest(
        self,
        conn: sqlite3.Connection,
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
        found = message_rows(conn, [seq for _, seq in top])
        hits = [
            message_hit(found[seq], sim)
            for sim, seq in top
            if seq in found and (keep is None or keep(found[seq]))
        ]
        return hits[:limit]

    def embed_pending(self, limit: int = 64) -> int:
        """Embed up to `limit` messages that have no vector yet (newest first, then older ones).
        No-op without an embedding server; never raises. Returns how many were stored."""
        if self.embedder is None or not self.embedder.available:
            return 0
        model = self.embedder.model
        try:
            self.catch_up()
            with self.core.store.reading() as conn:
                top = conn.execute(
                    "SELECT max(seq), min(seq) FROM recall_vectors WHERE model = ?", (model,)
                ).fetchone()
                hi, lo = top[0] or 0, top[1] or 0
                rows = conn.execute(
                    "SELECT seq, scope, body FROM recall_messages m WHERE seq > ?"
                    " AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || m.seq)"
                    " ORDER BY seq LIMIT ?",
                    (hi, limit),
                ).fetchall()
                if len(rows) < limit and lo:
                    rows += conn.execute(
                        "SELECT seq, scope, body FROM recall_messages m WHERE seq < ?"
                        " AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || m.seq)"
                        " ORDER BY seq DESC LIMIT ?",
                        (lo, limit - len(rows)),
                    ).fetchall()
            if not rows:
                return 0
            vectors = self.embedder.embed([mask(r[2])[:2000] for r in rows])
            if vectors is None:
                return 0
            with self.core.store.atomic() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO recall_vectors(target, scope, model, seq, dim, vec)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (f"m{seq}", scope, model, seq, len(vec), pack(vec))
                        for (seq, scope, _), vec in zip(rows, vectors, strict=True)
                    ],
                )
            return len(rows)
        except ChronicleError as exc:
            self._warn_once("embed", "chronicle recall: could not store vectors (%s)", exc)
            return 0
        except sqlite3.Error as exc:
            self._warn_once("embed", "chronicle recall: could not store vectors (%s)", exc)
            return 0

    # -- per-turn memory -----------------------------------------------------------------------

    def queue_prefetch(self, query: str, *, session_id: str = "", **context: Any) -> None:
        """Work ahead for the next turn (Hermes calls this after a turn, off the main thread):
        fold what was just captured and embed a few messages, so the next prefetch finds the
        projection current. Nothing is searched: Hermes passes the turn that just ended, and
        the next prefetch asks about a message not written yet."""
        try:
            if session_id and context:
                self.note_session(session_id, **_live_fields(context))
            self.catch_up()
            self.embed_pending(limit=32)
        except Exception as exc:  # a background hook must never raise into the host
            self._warn_once("queue_prefetch", "chronicle recall: queue_prefetch failed (%s)", exc)

    def prefetch(self, query: str, *, session_id: str = "", **context: Any) -> str:
        """Memory relevant to the new message, or "" (never raises)."""
        try:
            if session_id and context:
                self.note_session(session_id, **_live_fields(context))
            return self._prefetch_now(query, session_id or self._last_live)
        except Exception as exc:
            self._warn_once("prefetch", "chronicle recall: prefetch failed (%s)", exc)
            return ""

    def automated(self, session_id: str) -> bool:
        """Is this session a scheduled job's (cron) run?"""
        from .prefetch import automated

        return automated(self, session_id)

    def _prefetch_now(self, query: str, session_id: str) -> str:
        from .prefetch import prepare

        return prepare(self, query, session_id)

    def system_prompt_block(self) -> str:
        return (
            "Chronicle is this agent's long-term memory: every message of your conversations "
            "with this user is kept in a local, append-only log, and long chats are compacted "
            "into sections that cite the messages they cover. Memory recalled for a turn arrives "
            "inside <memory-context>: it is background from earlier conversations, not a new "
            "request. Tools: chronicle_search (find earlier messages, facts and sections; "
            "results cite ids, seq, session and time), chronicle_answer (answer from memory with "
            "citations, or say there is not enough evidence), chronicle_remember (keep a note), "
            "chronicle_correct (fix what memory holds) and chronicle_forget (hide an item)."
        )

    # -- the memory tools ----------------------------------------------------------------------

    def answer(
        self,
        question: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> dict[str, Any]:
        from .answer import answer

        return answer(self, question, session_id=session_id, user_id=user_id, profile=profile)

    def remember(
        self,
        text: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> dict[str, Any]:
        """chronicle_remember: keep the agent's note, as an event."""
        from .memory import remember

        return remember(self, text, session_id=session_id, user_id=user_id, profile=profile)

    def forget(
        self,
        target: str,
        *,
        include_source: bool = False,
        reason: str = "",
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> dict[str, Any]:
        """chronicle_forget: hide an item of this user's memory from every read path."""
        from .memory import forget

        return forget(
            self,
            target,
            include_source=include_source,
            reason=reason,
            session_id=session_id,
            user_id=user_id,
            profile=profile,
        )

    def correct(
        self,
        target: str,
        text: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> dict[str, Any]:
        """chronicle_correct: record what is true instead, superseding the item."""
        from .memory import correct

        return correct(self, target, text, session_id=session_id, user_id=user_id, profile=profile)

    # -- for other parts -----------------------------------------------------------------------

    def sweep_beliefs(self, cursor: int = 0, budget: int = 1000) -> dict[str, Any]:
        """Scheduler hook: check beliefs for consistency from `cursor`, `budget` at a time."""
        from .upkeep import sweep_beliefs

        self.catch_up()
        return sweep_beliefs(self.core.store, cursor, budget)

    def is_hidden(self, target: str) -> bool:
        """Was this item ("m<seq>", "b<seq>.<n>", "s:<chronicle>/<section>") forgotten?"""
        self.catch_up()
        with self.core.store.reading() as conn:
            return (
                conn.execute("SELECT 1 FROM recall_hidden WHERE target = ?", (target,)).fetchone()
                is not None
            )

    def hidden_seqs(self, seqs: Sequence[int]) -> set[int]:
        """Which of these message seqs were forgotten (chronicle_expand leaves them out)."""
        wanted = [f"m{int(s)}" for s in seqs]
        if not wanted:
            return set()
        self.catch_up()
        out: set[int] = set()
        with self.core.store.reading() as conn:
            for i in range(0, len(wanted), 500):
                chunk = wanted[i : i + 500]
                out.update(
                    int(t[1:])
                    for (t,) in conn.execute(
                        f"SELECT target FROM recall_hidden WHERE target IN ({','.join('?' * len(chunk))})",
                        chunk,
                    )
                )
        return out

    def beliefs(
        self,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
        kind: str | None = None,
    ) -> list[dict[str, Any]]:
        """The user's current beliefs (not superseded, not forgotten), oldest first."""
        from .search import belief_hit, belief_sources

        self.catch_up()
        with self.core.store.reading() as conn:
            n = self._scope(conn, session_id, user_id, profile)
            if n is None:
                return []
            where = ["b.scope = ?", BELIEF_VISIBLE]
            params: list[Any] = [n]
            if kind:
                where.append("b.kind = ?")
                params.append(kind)
            rows = conn.execute(
                "SELECT b.id, b.kind, b.key, b.value, b.polarity, b.text, b.origin, b.source_seq,"
                f" b.session, b.at, b.supersedes FROM recall_beliefs b WHERE {' AND '.join(where)}"
                " ORDER BY b.rowid",
                params,
            ).fetchall()
            sources = belief_sources(conn, [row[0] for row in rows])
            return [belief_hit(row, 0.0, sources[row[0]]).as_dict() for row in rows]


def _span(conn: sqlite3.Connection, sessions: Sequence[str]) -> tuple[int, int] | None:
    """The first and last seq of these sessions' messages (None when they have none)."""
    if not sessions:
        return None
    row = conn.execute(
        "SELECT min(seq), max(seq) FROM recall_messages"
        f" WHERE session IN ({','.join('?' * len(sessions))})",
        list(sessions),
    ).fetchone()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


def _live_fields(context: dict[str, Any]) -> dict[str, Any]:
    return {k: context.get(k) for k in ("user_id", "profile", "agent_context", "platform")}


from .tools import RECALL_TOOLS  # noqa: E402  (the tools call back into Recall)

Recall.TOOLS = RECALL_TOOLS
