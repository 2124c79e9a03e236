"""The session tree: every Hermes session id mapped onto an append-only tree of entries.

Invariants:
- Nothing is rewritten. Branching moves a session's leaf to an earlier entry (the old branch stays
  reachable); compaction, context edits, labels, names and usage are new entries; Hermes' session
  switches are events. The tables in `fold.py` are a fold of those events.
- A conversation's *lineage* is its chain of compression continuations: one chronicle for all of
  them. A `/branch` continues the same tree from the parent's leaf under a chronicle of its own;
  its *scope* (what expand and search may reach) still includes the parent's messages up to the
  fork.
- The model-facing projection of a session depends only on the log: it is the same after the
  database is reopened or the fold rebuilt.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..capture.events import NAMESPACE as CHAT_NAMESPACE
from ..capture.events import register_capture_events
from ..errors import UsageError
from ..log.store import PendingEvent, StoredEvent, sqlite_errors
from .events import (
    SWITCH_REASONS,
    CompactionRecorded,
    SessionSwitched,
    UsageRecorded,
    register_session_events,
)
from .fold import FOLD_NAME, MIGRATIONS, apply_events, fold_pending

if TYPE_CHECKING:
    from ..core import ChronicleCore

__all__ = ["SessionTree", "TreeWriter", "PathEntry", "CHRONICLE_PREFIX"]

CHRONICLE_PREFIX = "conv-"

_MAX_DEPTH = 10_000_000  # guards the path walk against a cycle an import could smuggle in


@dataclass(frozen=True, slots=True)
class PathEntry:
    entry_id: str
    seq: int
    kind: str
    fp: str | None
    session: str
    target: str | None = None
    role: str | None = None


class TreeWriter:
    """Appends events and folds them into the tree inside one write transaction."""

    def __init__(self, tree: SessionTree, conn: sqlite3.Connection, end: int) -> None:
        self.tree = tree
        self.conn = conn
        self.end = end  # the log's last seq, as this transaction has written it

    def leaf(self, session: str) -> str | None:
        row = self.conn.execute(
            "SELECT leaf_id FROM session_heads WHERE session = ?", (session,)
        ).fetchone()
        return row[0] if row else None

    def path(self, leaf: str | None) -> list[PathEntry]:
        return _path(self.conn, leaf)

    def since(
        self, leaf: str | None, old_leaf: str | None, limit: int = 64
    ) -> list[PathEntry] | None:
        """Entries from just after `old_leaf` up to `leaf` (root-first) when `old_leaf` is an
        ancestor of `leaf` within `limit` steps; None otherwise."""
        if leaf == old_leaf:
            return []
        if leaf is None:
            return None
        walked: list[PathEntry] = []
        current: str | None = leaf
        while current is not None and len(walked) < limit:
            if current == old_leaf:
                walked.reverse()
                return walked
            row = self.conn.execute(
                "SELECT entry_id, seq, kind, fp, session, target_id, role, parent_id"
                " FROM session_entries WHERE entry_id = ?",
                (current,),
            ).fetchone()
            if row is None:
                return None
            walked.append(PathEntry(*row[:7]))
            current = row[7]
        if current is None and old_leaf is None:
            walked.reverse()
            return walked
        return None

    def append(self, events: Sequence[PendingEvent]) -> list[int]:
        """Append (idempotently, by event id) and fold. Returns each event's seq, in order; an
        event whose id was already in the log gets the stored event's seq."""
        if not events:
            return []
        existing: dict[str, int] = {}
        ids = [e.id for e in events]
        for chunk in range(0, len(ids), 500):
            part = ids[chunk : chunk + 500]
            existing.update(
                self.conn.execute(
                    f"SELECT id, seq FROM events WHERE id IN ({','.join('?' * len(part))})", part
                ).fetchall()
            )
        fresh: list[PendingEvent] = []
        for e in events:
            if e.id not in existing:
                existing[e.id] = -1  # an id twice in one batch is stored once
                fresh.append(e)
        stored = self.tree.store.append(fresh)
        apply_events(self.conn, stored)
        if stored:
            self.end = max(self.end, stored[-1].seq)
        existing.update((e.envelope.id, e.seq) for e in stored)
        return [existing[e.id] for e in events]


def _path(conn: sqlite3.Connection, leaf: str | None) -> list[PathEntry]:
    if leaf is None:
        return []
    rows = conn.execute(
        "WITH RECURSIVE path(entry_id, parent_id, seq, kind, fp, session, target_id, role, depth)"
        " AS (SELECT entry_id, parent_id, seq, kind, fp, session, target_id, role, 0"
        " FROM session_entries WHERE entry_id = ?"
        " UNION ALL"
        " SELECT e.entry_id, e.parent_id, e.seq, e.kind, e.fp, e.session, e.target_id, e.role,"
        " p.depth + 1 FROM session_entries e JOIN path p ON e.entry_id = p.parent_id"
        " WHERE p.depth < ?"
        ") SELECT entry_id, seq, kind, fp, session, target_id, role FROM path"
        " ORDER BY depth DESC",
        (leaf, _MAX_DEPTH),
    ).fetchall()
    return [PathEntry(*row) for row in rows]


class SessionTree:
    """Sessions as an append-only tree; see the module docstring."""

    def __init__(self, core: ChronicleCore) -> None:
        self.core = core
        self.store = core.store
        register_capture_events(core.types)
        register_session_events(core.types)
        self.store.migrate(MIGRATIONS)
        self._refresh_lock = threading.Lock()

    # -- writing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self) -> Iterator[TreeWriter]:
        """One write transaction with the tree caught up; events appended through the writer
        are folded in the same transaction."""
        with sqlite_errors("writing the session tree"), self.store.atomic() as conn:
            position, end = fold_pending(self.store, conn)
            writer = TreeWriter(self, conn, end)
            yield writer
            if writer.end != position:
                self.store.set_position(conn, FOLD_NAME, writer.end)

    def refresh(self) -> None:
        """Fold whatever other writers appended, so reads see the whole log."""
        with self.store.reading() as conn:
            position = self.store.position(FOLD_NAME, conn)
            end = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
        if end > position:
            with self._refresh_lock, self.writing():
                pass

    def _append(self, session: str, events: Sequence[Any]) -> list[int]:
        pending = [self.core.types.pending(e, session=session) for e in events]
        with self.writing() as w:
            return w.append(pending)

    # -- the host's session switches ---------------------------------------------------------

    def switch(self, new_session_id: str, *, parent_session_id: str = "", reason: str = "") -> int:
        """Record that Hermes moved to `new_session_id`. Returns the event's seq."""
        reason = reason or "new"
        if reason not in SWITCH_REASONS:
            raise UsageError(
                f"unknown session switch reason {reason!r}; use one of {sorted(SWITCH_REASONS)}"
            )
        event = SessionSwitched(parent_session=parent_session_id or "", reason=reason)  # type: ignore[arg-type]
        return self._append(str(new_session_id), [event])[0]

    # -- reading the lineage ------------------------------------------------------------------

    def _head(self, conn: sqlite3.Connection, session: str) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = conn.execute(
            "SELECT conversation, lineage_root, parent_session, fork_seq, reason, leaf_id"
            " FROM session_heads WHERE session = ?",
            (session,),
        ).fetchone()
        return row

    def scope(self, session_id: str) -> list[tuple[str, int | None]]:
        """The sessions whose messages this session's history includes, oldest first, each with
        the last seq that belongs to it (None: all of it). Follows compression continuations
        and branches (a branch reaches its parent's messages up to the fork only)."""
        self.refresh()
        session = str(session_id)
        chain: list[tuple[str, int | None]] = []
        seen: set[str] = set()
        bound: int | None = None
        with self.store.reading() as conn:
            current: str | None = session
            while current is not None and current not in seen:
                seen.add(current)
                chain.append((current, bound))
                head = self._head(conn, current)
                if head is None or not head[2] or head[4] not in ("compression", "branch"):
                    break
                if head[4] == "branch" and head[3] is not None:
                    bound = head[3] if bound is None else min(bound, head[3])
                current = head[2]
        chain.reverse()
        return chain

    def lineage(self, session_id: str) -> list[str]:
        """Every session id of the same logical conversation (its compression continuations),
        oldest first. They share one chronicle."""
        self.refresh()
        session = str(session_id)
        chain = [session]
        seen = {session}
        with self.store.reading() as conn:
            current = session
            while True:
                head = self._head(conn, current)
                if head is None or head[4] != "compression" or not head[2] or head[2] in seen:
                    break
                current = head[2]
                seen.add(current)
                chain.append(current)
        chain.reverse()
        return chain

    def chronicle_name(self, session_id: str) -> str:
        """The chronicle the conversation's sections go to; the same for its whole lineage."""
        return CHRONICLE_PREFIX + self.lineage(session_id)[0]

    def chronicle_names(self, session_id: str) -> list[str]:
        """This session's chronicle, then those of the sessions it branched from (a handoff
        copied into a branch cites sections of its parent's chronicle)."""
        names: list[str] = []
        for session, _ in reversed(self.scope(session_id)):
            name = self.chronicle_name(session)
            if name not in names:
                names.append(name)
        return names

    def leaf(self, session_id: str) -> str | None:
        self.refresh()
        with self.store.reading() as conn:
            head = self._head(conn, str(session_id))
        return head[5] if head else None

    def path(self, session_id: str) -> list[PathEntry]:
        """The entries on the session's active branch, root first."""
        self.refresh()
        with self.store.reading() as conn:
            head = self._head(conn, str(session_id))
            return _path(conn, head[5] if head else None)

    def message_events(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredEvent]:
        """The MessageCaptured events of the session's scope with from_seq <= seq <= to_seq."""
        segments = self.scope(session_id)
        bounds = dict(segments)
        events = self.core.reader.read(
            after=max(0, int(from_seq) - 1),
            upto=int(to_seq),
            sessions=[s for s, _ in segments],
            namespaces=[CHAT_NAMESPACE],
        )
        out: list[StoredEvent] = []
        for event in events:
            if event.envelope.type != "MessageCaptured":
                continue
            bound = bounds.get(event.envelope.session or "")
            if bound is not None and event.seq > bound:
                continue
            out.append(event)
        return out

    def message_count(self, session_id: str) -> int:
        """How many messages the session's scope holds in the log (every branch)."""
        segments = self.scope(session_id)
        total = 0
        with self.store.reading() as conn:
            for session, bound in segments:
                row = conn.execute(
                    "SELECT COUNT(*) FROM session_entries WHERE session = ? AND kind = 'message'"
                    " AND seq <= ?",
                    (session, bound if bound is not None else 2**62),
                ).fetchone()
                total += int(row[0])
        return total

    # -- entries other subsystems record -------------------------------------------------------

    def _entry_at(self, seq: int | None) -> str | None:
        if seq is None:
            return None
        self.refresh()
        with self.store.reading() as conn:
            row = conn.execute(
                "SELECT entry_id FROM session_entries WHERE seq = ?", (int(seq),)
            ).fetchone()
        return row[0] if row else None

    def record_compaction(
        self,
        session_id: str,
        *,
        section_ids: Sequence[str],
        first_kept_seq: int | None,
        tokens_before: int,
        tokens_after: int,
        summary: str = "",
        head_seqs: Sequence[int] = (),
    ) -> int:
        """A compaction entry on the session's branch. `summary` is the handoff text the model
        sees in place of the folded entries; `head_seqs` the protected head kept before it."""
        heads = [e for e in (self._entry_at(s) for s in head_seqs) if e is not None]
        event = CompactionRecorded(
            section_ids=list(section_ids),
            first_kept_entry=self._entry_at(first_kept_seq),
            first_kept_seq=first_kept_seq,
            head_entries=heads,
            tokens_before=int(tokens_before),
            tokens_after=int(tokens_after),
            summary=summary,
        )
        return self._append(str(session_id), [event])[0]

    def record_usage(
        self, session_id: str, *, prompt_tokens: int, completion_tokens: int, source: str
    ) -> int:
        event = UsageRecorded(
            prompt_tokens=int(prompt_tokens or 0),
            completion_tokens=int(completion_tokens or 0),
            source=str(source or "host"),
        )
        return self._append(str(session_id), [event])[0]
