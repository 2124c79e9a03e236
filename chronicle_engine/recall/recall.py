"""Recall: what was captured comes back when it is useful, scoped to its user, with provenance.

`core.recall` is this class. It keeps recall's projection (the recall fold) caught up with the log
before every read, and answers:
- `search` (chronicle_search): full text over messages, beliefs and sections; with a local
  embedding server, its nearest messages are fused in a search by session and fill the places
  a plain search's full text leaves;
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
from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict

from ..capture.secrets import mask
from ..config import Config
from ..errors import ChronicleError
from ..log.events import EventReader
from ..sessions.capture import Capture
from ..sessions.tree import SessionTree
from . import answer, memory, prefetch, upkeep
from .events import NAMESPACE as RECALL
from .fold import FOLD_NAME
from .index import SCOPES, RecallIndex
from .pool import pool_sessions
from .reach import Window
from .schema import log_texts
from .search import BELIEF_VISIBLE, belief_hit, belief_sources
from .vectors import pack

__all__ = ["Recall", "SCOPES"]

log = logging.getLogger("chronicle_engine.recall")


class Recall:
    """Search, per-turn memory, answers and the memory tools for one core."""

    def __init__(
        self,
        reader: EventReader,
        config: Config,
        sessions: SessionTree,
        capture: Capture,
        redraw: Callable[[Sequence[int]], list[str]] | None = None,
    ) -> None:
        """`redraw`: what forgetting asks of the chronicle once messages are hidden (redraw
        every section that held one without it; the ids it wrote), handed in by the wiring."""
        self._start(RecallIndex(reader, config, sessions, capture), capture, redraw)

    @classmethod
    def over(
        cls,
        index: RecallIndex,
        capture: Capture,
        redraw: Callable[[Sequence[int]], list[str]] | None = None,
    ) -> Recall:
        """Recall over an index already built: on PostgreSQL, `postgres.PostgresRecallIndex`
        over the store's reader, the session tree and the capture of the same store."""
        recall = cls.__new__(cls)
        recall._start(index, capture, redraw)
        return recall

    def _start(
        self,
        index: RecallIndex,
        capture: Capture,
        redraw: Callable[[Sequence[int]], list[str]] | None,
    ) -> None:
        self.index = index
        self._redraw = redraw
        self.tuning = self.index.tuning
        self.embedder = self.index.embedder
        self._capture = capture
        self._state_lock = threading.Lock()
        self._last_live = ""

    # -- keeping up with the log ---------------------------------------------------------------

    def catch_up(self) -> int:
        """Fold whatever the log gained since the last read (see `RecallIndex.catch_up`)."""
        return self.index.catch_up()

    def rebuild(self) -> int:
        """Drop recall's projection and fold the whole log again (same rows, same ids)."""
        return self.index.rebuild()

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
        self._capture.remember_identity(
            session_id,
            user_id=user_id,
            profile=profile,
            agent_context=agent_context,
            platform=platform,
        )
        with self._state_lock:
            self._last_live = session_id

    def lineage(self, session_id: str) -> list[str]:
        """Every session id of the conversation `session_id` belongs to."""
        return self.index.lineage(session_id)

    def window(self, session_id: str) -> Window | None:
        """The messages already in the model's window for this session, as a range of its
        lineage (see `prefetch.window`); None without a session."""

        return prefetch.window(self.index, session_id)

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
        in_session: str | None = None,
        by_session: bool = False,
    ) -> list[dict[str, object]]:
        """chronicle_search: ranked results as JSON-ready dicts, each citing its seq (and section
        id), session and time. `in_session`: the best turns of that one session. `by_session`:
        one result per session, the sessions holding the most of the evidence first."""
        tuning = self.index.tuning
        wanted = max(1, min(int(limit or tuning.search_limit), 100))
        hits = self.index.hits(
            query,
            session_id=session_id,
            scope=scope,
            user_id=user_id,
            profile=profile,
            limit=max(tuning.candidates, wanted) if by_session else wanted,
            in_session=in_session,
            pooling=by_session,
        )
        if by_session:
            hits = pool_sessions(hits, k=wanted, limit=wanted)
        return [h.as_dict() for h in hits]

    def embed_pending(self, limit: int = 64) -> int:
        """Embed up to `limit` messages that have no vector yet (newest first, then older ones).
        No-op without an embedding server; never raises. Returns how many were stored."""
        if self.embedder is None or not self.embedder.available:
            return 0
        model = self.embedder.model
        try:
            self.catch_up()
            with self.index.reading("reading memory") as conn:
                top = conn.execute(
                    "SELECT max(seq), min(seq) FROM recall_vectors WHERE model = ?", (model,)
                ).fetchone()
                hi, lo = (top[0] or 0, top[1] or 0) if top else (0, 0)
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
                # A body the row leaves to the log (schema.TEXT_FIELD) is read from there.
                logged = log_texts(conn, [r[0] for r in rows if not r[2]])
                rows = [
                    (seq, scope, body or logged.get(seq, ("", ""))[0]) for seq, scope, body in rows
                ]
            if not rows:
                return 0
            vectors = self.embedder.embed([mask(r[2])[:2000] for r in rows])
            if vectors is None:
                return 0
            with self.index.writing("storing vectors") as conn:
                # Held against recall's fold: a forget folded while these were embedded is
                # seen below, and one folded after waits, then deletes what this wrote.
                self.index.hold_fold(conn)
                # Each message's scope as it is now, not as it was read: a rebuild folded while
                # these were embedded may have numbered the scopes again (PostgreSQL), or
                # dropped the row.
                seqs = [seq for seq, _, _ in rows]
                now: dict[int, int] = dict(
                    conn.execute(
                        "SELECT seq, scope FROM recall_messages"
                        f" WHERE seq IN ({','.join('?' * len(seqs))})",
                        seqs,
                    ).fetchall()
                )
                conn.executemany(
                    # (an upsert both stores read alike: a vector of another model is replaced)
                    "INSERT INTO recall_vectors(target, scope, model, seq, dim, vec)"
                    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(target) DO UPDATE SET"
                    " scope = excluded.scope, model = excluded.model, seq = excluded.seq,"
                    " dim = excluded.dim, vec = excluded.vec",
                    [
                        (f"m{seq}", now[seq], model, seq, len(vec), pack(vec))
                        for (seq, _, _), vec in zip(rows, vectors, strict=True)
                        if seq in now
                    ],
                )
                targets = [f"m{seq}" for seq, _, _ in rows]
                marks = ",".join("?" * len(targets))
                conn.execute(
                    "DELETE FROM recall_vectors WHERE target IN"
                    f" (SELECT target FROM recall_hidden WHERE target IN ({marks}))",
                    targets,
                )
            return len(rows)
        except ChronicleError as exc:
            self.index.warn_once("embed", "chronicle recall: could not store vectors (%s)", exc)
            return 0
        except sqlite3.Error as exc:
            self.index.warn_once("embed", "chronicle recall: could not store vectors (%s)", exc)
            return 0

    # -- per-turn memory -----------------------------------------------------------------------

    def queue_prefetch(self, query: str, *, session_id: str = "", **context: object) -> None:
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
            self.index.warn_once(
                "queue_prefetch", "chronicle recall: queue_prefetch failed (%s)", exc
            )

    def prefetch(self, query: str, *, session_id: str = "", **context: object) -> str:
        """Memory relevant to the new message, or "" (never raises)."""
        try:
            if session_id and context:
                self.note_session(session_id, **_live_fields(context))
            return self._prefetch_now(query, session_id or self._last_live)
        except Exception as exc:
            self.index.warn_once("prefetch", "chronicle recall: prefetch failed (%s)", exc)
            return ""

    def automated(self, session_id: str) -> bool:
        """Is this session a scheduled job's (cron) run?"""

        return prefetch.automated(self.index, session_id)

    def _prefetch_now(self, query: str, session_id: str) -> str:

        return prefetch.prepare(self.index, query, session_id)

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
    ) -> dict[str, object]:

        return answer.answer(
            self.index, question, session_id=session_id, user_id=user_id, profile=profile
        )

    def remember(
        self,
        text: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> dict[str, object]:
        """chronicle_remember: keep the agent's note, as an event."""

        return memory.remember(
            self.index, text, session_id=session_id, user_id=user_id, profile=profile
        )

    def forget(
        self,
        target: str,
        *,
        include_source: bool = False,
        reason: str = "",
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> memory.Forgotten:
        """chronicle_forget: hide an item of this user's memory from every read path, and
        have every section that held a forgotten message drawn again without it."""
        result = memory.forget(
            self.index,
            target,
            include_source=include_source,
            reason=reason,
            session_id=session_id,
            user_id=user_id,
            profile=profile,
        )
        if result["messages"] and self._redraw is not None:
            result["sections_redrawn"] = self._redraw(result["messages"])
        return result

    def correct(
        self,
        target: str,
        text: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> dict[str, object]:
        """chronicle_correct: record what is true instead, superseding the item."""

        return memory.correct(
            self.index, target, text, session_id=session_id, user_id=user_id, profile=profile
        )

    # -- for other parts -----------------------------------------------------------------------

    def sweep_beliefs(self, cursor: int = 0, budget: int = 1000) -> dict[str, object]:
        """Scheduler hook: check beliefs for consistency from `cursor`, `budget` at a time."""

        self.catch_up()
        return upkeep.sweep_beliefs(self.index, cursor, budget)

    def is_hidden(self, target: str) -> bool:
        """Was this item ("m<seq>", "b<seq>.<n>", "s:<chronicle>/<section>") forgotten?"""
        self.catch_up()
        with self.index.reading("reading memory") as conn:
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
        with self.index.reading("reading memory") as conn:
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

    def forgotten_messages(self, *, current: bool = True) -> set[int]:
        """Every message seq that was forgotten (an export leaves their words out, a new
        section does not summarise them). `current=False` skips the catch-up: forgetting folds
        before it returns, so only a caller that must see other processes' latest needs it."""
        # Only recall's own events (forgetting among them) add to what is hidden: when none
        # is past the fold's position, the table is current without indexing the messages
        # logged since (a search indexes those when it needs them).
        log = self.index.log
        if current and log.any_after(log.position(FOLD_NAME), namespaces=(RECALL,)):
            self.catch_up()
        with self.index.reading("reading memory") as conn:
            return {
                int(t[1:])
                for (t,) in conn.execute(
                    "SELECT target FROM recall_hidden WHERE target >= 'm' AND target < 'n'"
                )
                if t[1:].isdigit()
            }

    def beliefs(
        self,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        profile: str | None = None,
        kind: str | None = None,
    ) -> list[dict[str, object]]:
        """The user's current beliefs (not superseded, not forgotten), oldest first."""

        self.catch_up()
        with self.index.reading("reading memory") as conn:
            n = self.index.scope(conn, session_id, user_id, profile)
            if n is None:
                return []
            where = ["b.scope = ?", BELIEF_VISIBLE]
            params: list[str | int] = [n]
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


class _Live(TypedDict):
    user_id: str | None
    profile: str | None
    agent_context: str | None
    platform: str | None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _live_fields(context: Mapping[str, object]) -> _Live:
    """Who a live session belongs to, from the slot's context (its values are text or absent)."""
    return _Live(
        user_id=_text(context.get("user_id")),
        profile=_text(context.get("profile")),
        agent_context=_text(context.get("agent_context")),
        platform=_text(context.get("platform")),
    )
