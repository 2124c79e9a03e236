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
  database is reopened, the fold rebuilt, or the session exported and imported elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypedDict, TypeVar

from ..capture.events import NAMESPACE as CHAT_NAMESPACE
from ..capture.shortened import edited_note
from ..capture.spill import Claim, Spill, kept_aside
from ..errors import StoreBusy, StoreError, StoreReadOnly, UsageError
from ..log.events import DomainEvent, EventReader
from ..log.port import LogStore
from ..log.projector import Projector
from ..log.store import PendingEvent, StoredEvent
from ..log.tables import Statements, look_up
from .events import NAMESPACE as SESSION_NAMESPACE
from .events import (
    SWITCH_REASONS,
    BranchSummarized,
    CompactionRecorded,
    ContextEdited,
    Labeled,
    LeafMoved,
    SessionNamed,
    SessionSwitched,
    UsageRecorded,
)
from .fold import FOLD_NAME, SessionFold, apply_events, entry_rows, fold_pending
from .fold import NAMESPACES as FOLDED_NAMESPACES
from .paths import PathEntry, RecentPath, read_leaf, read_path, read_recent, walk_since
from .projection import project
from .summary import abandoned_summary
from .tables import SessionTables

__all__ = ["SessionTree", "TreeWriter", "PathEntry", "CHRONICLE_PREFIX"]

CHRONICLE_PREFIX = "conversation:"

log = logging.getLogger("chronicle_engine.sessions")

_T = TypeVar("_T")

_SWITCHES = (SESSION_NAMESPACE,)
"""The events that can change a lineage whose session and root have heads (`lineage`)."""
_REMEMBERED_LINEAGES = 256

# Reasons Hermes itself passes (memory_manager, cli) that name one of ours differently.
_HOST_REASONS = {"new_session": "new", "undo": "rewound"}


class TreeWriter:
    """Appends events and folds them into the tree inside one write transaction."""

    def __init__(self, tree: SessionTree, conn: Statements, end: int) -> None:
        self.tree = tree
        self.conn = conn
        self.end = end  # the log's last seq, as this transaction has written it
        self.sessions: set[str] = set()  # the sessions it appended to

    def leaf(self, session: str) -> str | None:
        return read_leaf(self.conn, session)

    def leaf_from(self, session: str, cached: str | None) -> str | None:
        """The session's leaf, for a caller that holds a branch it read at `cached`. Inside a
        write transaction the leaf is read (the write must stand on the tree as it is)."""
        return self.leaf(session)

    def confirm(self, session: str) -> None:
        """A plan that appends nothing stands on the session's leaf as this writer gave it
        (`leaf_from`'s unread one is read now: no append's check will)."""

    def path(self, leaf: str | None) -> list[PathEntry]:
        return read_path(self.conn, leaf)

    def recent(self, leaf: str | None) -> RecentPath:
        """The end of the branch at `leaf` the latest compaction left in context (`read_recent`)."""
        return read_recent(self.conn, leaf, self.tree.compaction_refs)

    def since(
        self, leaf: str | None, old_leaf: str | None, limit: int = 64
    ) -> list[PathEntry] | None:
        return walk_since(self.conn, leaf, old_leaf, limit)

    def append(self, events: Sequence[PendingEvent]) -> list[int]:
        """Append (idempotently, by event id) and fold. Returns each event's seq, in order; an
        event whose id was already in the log gets the stored event's seq."""
        if not events:
            return []
        existing = self.tree.store.seqs_of(e.id for e in events)
        fresh: list[PendingEvent] = []
        for e in events:
            if e.id not in existing:
                existing[e.id] = -1  # an id twice in one batch is stored once
                fresh.append(e)
        stored = self.tree.tables.append(fresh)
        apply_events(self.conn, stored)
        self.sessions.update(e.session for e in fresh if e.session)
        if stored:
            self.end = max(self.end, stored[-1].seq)
        existing.update((e.envelope.id, e.seq) for e in stored)
        return [existing[e.id] for e in events]


class _Replan(Exception):
    """A write planned outside the tree's lock that the store would not take as planned."""


class _PlannedWriter(TreeWriter):
    """A TreeWriter over a reading connection (no lock, no transaction): the writer a capture
    plans with first (`SessionTree.write_planned`). It reads each session's leaf once, so the
    plan stands on one leaf, and its append is the store's `append_planned`: taken only if that
    leaf is still the session's and nothing of the tree waits to be folded; else `_Replan`."""

    def __init__(self, tree: SessionTree, conn: Statements) -> None:
        # Every event it appends is new (a plan that finds one stored is replanned), so any
        # seq it hands back is past this `end`.
        super().__init__(tree, conn, 0)
        self._leaves: dict[str, str | None] = {}
        self._unread: set[str] = set()  # sessions whose leaf came from the caller, unread

    def leaf(self, session: str) -> str | None:
        if session not in self._leaves:
            self._leaves[session] = read_leaf(self.conn, session)
        return self._leaves[session]

    def leaf_from(self, session: str, cached: str | None) -> str | None:
        # Planned on the leaf the caller's branch ends at, unread: the store's check refuses
        # the append if the leaf moved since (another host's turn, a compaction's entry), and
        # the write is planned again under the lock. Saves the turn a round trip.
        if session not in self._leaves:
            self._leaves[session] = cached
            self._unread.add(session)
        return self._leaves[session]

    def confirm(self, session: str) -> None:
        if session in self._unread:
            self._unread.discard(session)
            if read_leaf(self.conn, session) != self._leaves[session]:
                raise _Replan  # another host moved the branch this plan found nothing new on

    def append(self, events: Sequence[PendingEvent]) -> list[int]:
        if not events:
            return []
        session = events[0].session or ""
        if session not in self._leaves:
            raise _Replan  # not planned on a leaf this writer read
        leaf = self._leaves[session]
        entries = entry_rows(session, leaf, events)
        if entries is None:
            raise _Replan  # a switch or a moved leaf: the fold reads the tree for it
        stored = self.tree.tables.append_planned(session, leaf, events, entries)
        if stored is None:
            raise _Replan
        self._leaves[session] = entries[-1][0]
        return [e.seq for e in stored]


# A session's head row: conversation, lineage_root, parent_session, fork_seq, reason, leaf_id.
_HeadRow = tuple[str, str, str | None, int | None, str, str | None]


class Usage(TypedDict):
    """Token totals over a session's lineage, and by source."""

    calls: int
    prompt_tokens: int
    completion_tokens: int
    by_source: dict[str, dict[str, int]]


def _tokens(value: object) -> int:
    """A usage entry's token count (absent: 0)."""
    return int(value) if isinstance(value, int | float | str) and value else 0


class SessionTree:
    """Sessions as an append-only tree; see the module docstring."""

    def __init__(self, reader: EventReader[LogStore], tables: SessionTables) -> None:
        self.reader = reader
        self.store = reader.store
        self.types = reader.types
        self.tables = tables
        self._catch_up = Projector(tables, reader, [SessionFold()], batch_size=2000)
        self._refresh_lock = threading.Lock()
        self.spill = Spill.beside(tables.spill_path) if tables.spill_path is not None else None
        self._replay_listeners: list[Callable[[set[str]], None]] = []
        self._kept_listeners: list[Callable[[Sequence[PendingEvent]], None]] = []
        self._moved_listeners: list[Callable[[set[str]], None]] = []
        # session -> (the tree fold's position when its lineage was read, the lineage)
        self._lineages: dict[str, tuple[int, tuple[str, ...]]] = {}
        self._lineages_lock = threading.Lock()

    # -- writing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self) -> Iterator[TreeWriter]:
        """One write transaction with the tree caught up; events appended through the writer
        are folded in the same transaction. The outermost one first writes what the spill
        kept while the database refused writes, so those events keep their order."""
        with contextlib.ExitStack() as stack:
            claim: Claim | None = None
            with self.tables.writing("writing the session tree") as conn:
                position, end = fold_pending(self._catch_up, conn, self.tables.fold_start)
                writer = TreeWriter(self, conn, end)
                if self.spill is not None and self.tables.depth == 1 and self.spill.waiting():
                    claim = self._replay(stack, writer)
                yield writer
                if writer.end != position:
                    self.tables.set_position(conn, FOLD_NAME, writer.end)
            if claim is not None:
                claim.settle()  # committed: the spill may go
            if writer.sessions:
                for listener in self._moved_listeners:
                    listener(writer.sessions)

    def write_planned(self, body: Callable[[TreeWriter], _T], replanning: Callable[[], None]) -> _T:
        """`body(writer)` as inside `writing()`. Where the tables allow it (`plans_unlocked`),
        first planned without the tree's lock: body reads the tree as it stands and its one
        append is folded and checked on the server (`_PlannedWriter`). When the store finds the
        plan no longer holds (another host moved the session's leaf, or something waits to be
        folded) nothing was stored: `replanning()` drops what body cached, and body runs
        again inside `writing()`. Writers on many hosts then queue only for the server's part
        of each other's writes, not for each other's planning and round trips."""
        if (
            self.tables.plans_unlocked
            and self.tables.depth == 0
            and (self.spill is None or not self.spill.waiting())
        ):
            try:
                with self.tables.reading("planning a write to the session tree") as conn:
                    return body(_PlannedWriter(self, conn))
            except _Replan:
                replanning()
        with self.writing() as w:
            return body(w)

    def _replay(self, stack: contextlib.ExitStack, writer: TreeWriter) -> Claim | None:
        assert self.spill is not None
        # A write that changes nothing: a read-only database refuses it here, before the spill
        # (which grows while the database stays read-only) is read for nothing.
        writer.conn.execute("DELETE FROM fold_positions WHERE 1 = 0")
        try:
            claim = stack.enter_context(self.spill.claim())
        except OSError as exc:
            log.warning("chronicle: could not read the spill file (%s); will try again", exc)
            return None
        if not claim.events:
            return claim
        end = writer.end
        try:
            # a savepoint: a replay that fails leaves this write whole
            with self.tables.writing("writing the spill's events"):
                writer.append(claim.events)
        except StoreError:
            raise
        except Exception:
            writer.end = end
            log.exception("chronicle: the spill file's events could not be written")
            claim.refuse()
            return None
        for listener in self._replay_listeners:
            listener(claim.sessions)
        return claim

    def on_replay(self, listener: Callable[[set[str]], None]) -> None:
        """Call `listener(sessions)` when spilled events of those sessions reach the log (inside
        the write transaction), so caches of their branches can be dropped."""
        self._replay_listeners.append(listener)

    def on_moved(self, listener: Callable[[set[str]], None]) -> None:
        """Call `listener(sessions)` after a write through the tree's lock (`writing()`)
        appended to those sessions (a compaction's entry, a label, a usage record): their
        leaves moved. Told when the block ends without an error (a nested block's before its
        outer transaction commits): a hint to read the leaf again, never a plan's only guard."""
        self._moved_listeners.append(listener)

    def on_kept_aside(self, listener: Callable[[Sequence[PendingEvent]], None]) -> None:
        """Call `listener(events)` when events are kept in the spill instead of the log."""
        self._kept_listeners.append(listener)

    def keep_aside(
        self, exc: StoreError, events: Sequence[PendingEvent]
    ) -> tuple[StoreError, bool]:
        """The database refused `events` (busy, read-only): keep them in the spill. Returns the
        error to raise (saying where they are) and whether they were kept."""
        error, kept = kept_aside(exc, self.spill, events)
        if kept:
            for listener in self._kept_listeners:
                listener(events)
        return error, kept

    def refresh(self) -> None:
        """Fold whatever other writers appended, so reads see the whole log. Only a chat or
        session event past the fold's position needs the write lock: the turn, compaction and
        recall events appended every turn change nothing the tree reads (the next capture
        moves the position past them)."""
        position = self.store.position(FOLD_NAME)
        if self.store.any_after(position, namespaces=FOLDED_NAMESPACES):
            try:
                with self._refresh_lock, self.writing():
                    pass
            except (StoreBusy, StoreReadOnly):
                log.debug("chronicle: the session tree reads as folded so far (no writes now)")

    def _append(self, session: str, events: Sequence[DomainEvent]) -> list[int]:
        pending = [self.types.pending(e, session=session) for e in events]
        try:
            with self.writing() as w:
                return w.append(pending)
        except (StoreBusy, StoreReadOnly) as exc:
            raise self.keep_aside(exc, pending)[0] from exc

    # -- the host's session switches ---------------------------------------------------------

    def switch(self, new_session_id: str, *, parent_session_id: str = "", reason: str = "") -> int:
        """Record that Hermes moved to `new_session_id`; reason is one of compression, resume,
        branch, reset, rewound, new. Returns the event's seq."""
        reason = _HOST_REASONS.get(reason, reason) or "new"
        if reason not in SWITCH_REASONS:
            raise UsageError(
                f"unknown session switch reason {reason!r}; use one of {sorted(SWITCH_REASONS)}"
            )
        session, parent = str(new_session_id), str(parent_session_id or "")
        event = SessionSwitched(parent_session=parent, reason=reason)  # type: ignore[arg-type]
        pending = [self.types.pending(event, session=session)]
        try:
            with self.writing() as w:
                # Both slots hear a compression rotation (and may hear other switches): the
                # second report of the switch the session last made is the same switch.
                last = self.reader.latest(SessionSwitched, sessions=[session])
                if last is not None and (last.event.parent_session, last.event.reason) == (
                    parent,
                    reason,
                ):
                    return last.seq
                return w.append(pending)[0]
        except (StoreBusy, StoreReadOnly) as exc:
            raise self.keep_aside(exc, pending)[0] from exc

    # -- reading the lineage ------------------------------------------------------------------

    def _head(self, conn: Statements, session: str) -> _HeadRow | None:
        row: _HeadRow | None = conn.execute(
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
        with self.tables.reading("reading the session tree") as conn:
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
        """Every session id of the same logical conversation (the compression continuations
        before AND after this one), oldest first. They share one chronicle, so a tool called
        from any of them reaches every section the conversation ever cited.

        Asked every turn (per-turn memory's window, search scopes, compaction), so a lineage
        is remembered with the fold position it was read at: only a session event (a switch)
        can change it once the session and its root have heads, so while the log holds none
        past that position, the answer stands without folding or reading the tree again."""
        session = str(session_id)
        known = self._lineages.get(session)
        if known is not None and not self.store.any_after(known[0], namespaces=_SWITCHES):
            return list(known[1])
        self.refresh()
        with self.tables.reading("reading the session tree") as conn:
            folded = self.tables.read_position(conn, FOLD_NAME)  # first: the heads are as new
            head = self._head(conn, session)
            if head is None:
                return [session]
            rows = conn.execute(
                "SELECT session FROM session_heads WHERE lineage_root = ?"
                " ORDER BY started_seq, rowid",
                (head[1],),
            ).fetchall()
        chain = [str(r[0]) for r in rows]
        # A root without a head yet gains one (and joins the lineage) with a chat event; inside
        # a write transaction the heads may be uncommitted: neither is remembered.
        if head[1] in chain and self.tables.depth == 0:
            self._remember_lineage(session, folded, chain)
        return chain if session in chain else [*chain, session]

    def _remember_lineage(self, session: str, folded: int, chain: list[str]) -> None:
        with self._lineages_lock:
            self._lineages.pop(session, None)
            self._lineages[session] = (folded, tuple(chain))
            while len(self._lineages) > _REMEMBERED_LINEAGES:
                self._lineages.pop(next(iter(self._lineages)))

    def chronicle_name(self, session_id: str) -> str:
        """The chronicle the conversation's sections go to; the same for its whole lineage."""
        return CHRONICLE_PREFIX + self.lineage(session_id)[0]

    def chronicle_names(self, session_id: str) -> list[str]:
        """This session's chronicle, then those of the sessions it branched from (a handoff
        copied into a branch cites sections of its parent's chronicle)."""
        chain = self.scope(session_id)
        with self.tables.reading("reading the session tree") as conn:
            roots = {s: (head[1] if (head := self._head(conn, s)) else s) for s, _ in chain}
        names: list[str] = []
        asked: set[str] = set()
        for session, _ in reversed(chain):
            # Compression continuations share their lineage and so its chronicle: ask once per
            # lineage, not once per session (a conversation compacted 800 times has 800).
            if roots[session] in asked:
                continue
            asked.add(roots[session])
            name = self.chronicle_name(session)
            if name not in names:
                names.append(name)
        return names

    def conversation(self, session_id: str) -> str:
        """The tree a session's entries belong to (shared by its branches and continuations)."""
        self.refresh()
        with self.tables.reading("reading the session tree") as conn:
            head = self._head(conn, str(session_id))
        return str(head[0]) if head else str(session_id)

    def leaf(self, session_id: str) -> str | None:
        self.refresh()
        with self.tables.reading("reading the session tree") as conn:
            head = self._head(conn, str(session_id))
        return head[5] if head else None

    def path(self, session_id: str) -> list[PathEntry]:
        """The entries on the session's active branch, root first."""
        self.refresh()
        with self.tables.reading("reading the session tree") as conn:
            head = self._head(conn, str(session_id))
            return read_path(conn, head[5] if head else None)

    def message_count(self, session_id: str) -> int:
        """How many messages the session's scope holds in the log (every branch)."""
        segments = self.scope(session_id)
        total = 0
        with self.tables.reading("reading the session tree") as conn:
            for session, bound in segments:
                row = conn.execute(
                    "SELECT COUNT(*) FROM session_entries WHERE session = ? AND kind = 'message'"
                    " AND seq <= ?",
                    (session, bound if bound is not None else 2**62),
                ).fetchone()
                total += int(row[0]) if row else 0
        return total

    def message_events(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredEvent]:
        """The MessageCaptured events of the session's scope with from_seq <= seq <= to_seq."""
        segments = self.scope(session_id)
        bounds = dict(segments)
        events = self.reader.read(
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

    def compaction_refs(self, seq: int) -> tuple[list[str], list[str]]:
        """A compaction entry's (kept entry ids, head entry ids), as recorded."""
        payload = self.payloads([seq]).get(seq, {})
        kept, heads = payload.get("kept_entries"), payload.get("head_entries")
        return (
            [str(k) for k in kept] if isinstance(kept, list) else [],
            [str(h) for h in heads] if isinstance(heads, list) else [],
        )

    def payloads(self, seqs: Sequence[int]) -> dict[int, dict[str, object]]:
        """Stored payloads by seq (the entries' data lives in the log, not in the fold)."""
        return {seq: e.payload for seq, e in self.reader.get_many(seqs).items()}

    # -- the projection -------------------------------------------------------------------------

    def projection(
        self, session_id: str, *, branch_summaries: bool = True
    ) -> list[dict[str, object]]:
        """The messages a model sees for this session: its active branch, with the latest
        compaction and the context edits applied (see `projection.py`)."""
        return project(self.path(session_id), self.payloads, branch_summaries=branch_summaries)

    # -- moving around the tree ------------------------------------------------------------------

    def _entry(self, conn: Statements, entry_id: str) -> tuple[str, int, str, str] | None:
        row: tuple[str, int, str, str] | None = conn.execute(
            "SELECT e.entry_id, e.seq, e.kind, h.conversation FROM session_entries e"
            " JOIN session_heads h ON h.session = e.session WHERE e.entry_id = ?",
            (entry_id,),
        ).fetchone()
        return row

    def branch(self, session_id: str, entry_id: str, *, summary: str | None = None) -> str:
        """Continue the session from the earlier entry `entry_id`; the branch it leaves stays in
        the tree. Unless `summary` is "" a short summary of the abandoned entries is attached
        where the new branch continues (generated when None). Returns the new leaf's id."""
        session = str(session_id)
        self.refresh()
        with self.tables.reading("reading the session tree") as conn:
            target = self._entry(conn, str(entry_id))
            head = self._head(conn, session)
        conversation = head[0] if head else session
        if target is None:
            raise UsageError(f"no entry {entry_id!r} in the session tree; `path()` lists them")
        if target[3] != conversation:
            raise UsageError(
                f"entry {entry_id!r} belongs to conversation {target[3]!r}, not {conversation!r}"
                " of session {session!r}; a session branches within its own tree"
            )
        old_path = self.path(session)
        new_path = self._path_to(str(entry_id))
        common = 0
        while (
            common < min(len(old_path), len(new_path))
            and old_path[common].entry_id == new_path[common].entry_id
        ):
            common += 1
        abandoned = old_path[common:]
        events: list[DomainEvent] = [LeafMoved(target=str(entry_id))]
        if abandoned and summary != "":
            text = summary if summary is not None else self._summarise(abandoned)
            events.append(
                BranchSummarized(
                    parent=str(entry_id),
                    abandoned_leaf=old_path[-1].entry_id,
                    summary=text,
                    abandoned_entries=len(abandoned),
                )
            )
        pending = [self.types.pending(e, session=session) for e in events]
        with self.writing() as w:
            w.append(pending)
            leaf = w.leaf(session)
        return str(leaf)

    def _path_to(self, entry_id: str) -> list[PathEntry]:
        with self.tables.reading("reading the session tree") as conn:
            return read_path(conn, entry_id)

    def _summarise(self, entries: Sequence[PathEntry]) -> str:
        messages = [e for e in entries if e.kind == "message"]
        data = self.payloads([e.seq for e in messages[-50:]])
        return abandoned_summary(
            [
                (str(data[e.seq].get("role", "")), str(data[e.seq].get("text", "")))
                for e in messages[-50:]
                if e.seq in data
            ]
        )

    def _on_path(self, session: str, target: str) -> None:
        if not any(e.entry_id == target for e in self.path(session)):
            raise UsageError(
                f"entry {target!r} is not on the active branch of session {session!r}; "
                "edits and labels apply to what the session's context holds"
            )

    def edit_context(
        self, session_id: str, target: str, replacement: Mapping[str, object] | None = None
    ) -> int:
        """Hide (`replacement` None) or replace an earlier entry in future context. The entry
        itself stays in the log, exports and accounting; branching back before the edit brings
        it back. Returns the edit's seq."""
        self._on_path(str(session_id), str(target))
        edit = ContextEdited(
            target=str(target), replacement=dict(replacement) if replacement else None
        )
        return self._append(str(session_id), [edit])[0]

    def edit_message(self, session_id: str, seq: int, content: str | None) -> dict[str, object]:
        """Hide (`content` None) or replace the words of the message logged at `seq` in the
        session's future context: a context edit whose replacement is the message with its
        content changed and a note naming the original (so capture takes the edited copy for
        the message it stands for). Returns the replacement, for the host's list."""
        session = str(session_id)
        entry = self._entry_at(int(seq))
        stored = self.payloads([int(seq)]).get(int(seq), {}).get("message")
        if entry is None or not isinstance(stored, dict):
            raise UsageError(f"no message at seq {seq}; the handoff and expand name messages' seqs")
        replacement = {k: v for k, v in stored.items() if k != "api_content"}
        if content is None:
            replacement["content"] = edited_note("hidden by the agent", int(seq), alone=True)
        else:
            replacement["content"] = content + edited_note("the agent replaced the words", int(seq))
        self.edit_context(session, entry, replacement)
        return replacement

    def label(self, session_id: str, target: str, label: str | None) -> int:
        """Put a label on an entry (None clears it). Labels never reach the model."""
        self._on_path(str(session_id), str(target))
        return self._append(str(session_id), [Labeled(target=str(target), label=label)])[0]

    def labels(self, session_id: str) -> dict[str, str]:
        """Current labels of the entries on the active branch (latest wins)."""
        path = self.path(session_id)
        data = self.payloads([e.seq for e in path if e.kind == "label"])
        out: dict[str, str] = {}
        for e in path:
            if e.kind == "label" and e.target:
                value = data.get(e.seq, {}).get("label")
                if value is None:
                    out.pop(e.target, None)
                else:
                    out[e.target] = str(value)
        return out

    def name(self, session_id: str, name: str) -> int:
        """Name the session (a session-info entry)."""
        return self._append(str(session_id), [SessionNamed(name=str(name))])[0]

    def session_name(self, session_id: str) -> str | None:
        path = self.path(session_id)
        named = [e for e in path if e.kind == "session_info"]
        if not named:
            return None
        return str(self.payloads([named[-1].seq])[named[-1].seq].get("name") or "") or None

    # -- entries other subsystems record -------------------------------------------------------

    def _entry_at(self, seq: int | None) -> str | None:
        return None if seq is None else self._entries_at([seq]).get(int(seq))

    def _entries_at(self, seqs: Iterable[int | None]) -> dict[int, str]:
        """The entry id at each of `seqs` the tree holds, in one read (a compaction entry names
        its head, its kept messages and its first kept one)."""
        wanted = sorted({int(s) for s in seqs if s is not None})
        if not wanted:
            return {}
        self.refresh()
        found: dict[int, str] = {}
        with self.tables.reading("reading the session tree") as conn:
            rows = look_up(
                conn,
                "SELECT seq, entry_id FROM session_entries"
                f" WHERE seq IN ({','.join('?' * len(wanted))})",
                wanted,
            )
        for seq, entry_id in rows:
            found.setdefault(seq, entry_id)  # (the first, as a read of that seq alone takes)
        return found

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
        kept_seqs: Sequence[int] = (),
        shortened: Mapping[int, Mapping[str, object]] | None = None,
    ) -> int:
        """A compaction entry on the session's branch. `first_kept_seq` is the seq of the first
        message kept verbatim after the handoff (capture aligns the next live list from it);
        `summary` is the handoff text the model sees in place of the folded entries;
        `head_seqs` the protected head kept before it; `kept_seqs` older messages kept right
        after it, before the first kept one; `shortened` the copies (by the seq of their
        original) the context holds in place of messages cut to fit. Returns the entry's seq."""
        cut = shortened or {}
        at = self._entries_at([*head_seqs, *kept_seqs, first_kept_seq, *cut])
        event = CompactionRecorded(
            section_ids=list(section_ids),
            first_kept_entry=None if first_kept_seq is None else at.get(int(first_kept_seq)),
            first_kept_seq=first_kept_seq,
            head_entries=[at[int(s)] for s in head_seqs if int(s) in at],
            kept_entries=[at[int(s)] for s in kept_seqs if int(s) in at],
            shortened={at[int(s)]: dict(copy) for s, copy in cut.items() if int(s) in at},
            tokens_before=int(tokens_before),
            tokens_after=int(tokens_after),
            summary=summary,
        )
        return self._append(str(session_id), [event])[0]

    def record_usage(
        self, session_id: str, *, prompt_tokens: int, completion_tokens: int, source: str
    ) -> int:
        """The tokens of one model call (the host's, or Chronicle's own summaries)."""
        event = UsageRecorded(
            prompt_tokens=int(prompt_tokens or 0),
            completion_tokens=int(completion_tokens or 0),
            source=str(source or "host"),
        )
        return self._append(str(session_id), [event])[0]

    def usage(self, session_id: str) -> Usage:
        """Token totals over the session's lineage, every branch included, by source."""
        sessions = self.lineage(session_id)
        with self.tables.reading("reading the session tree") as conn:
            seqs = [
                int(row[0])
                for row in conn.execute(
                    "SELECT seq FROM session_entries WHERE kind = 'usage' AND session IN"
                    f" ({','.join('?' * len(sessions))})",
                    sessions,
                )
            ]
        totals = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        by_source: dict[str, dict[str, int]] = {}
        for payload in self.payloads(seqs).values():
            source = str(payload.get("source") or "host")
            bucket = by_source.setdefault(
                source, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
            )
            for key, value in (
                ("calls", 1),
                ("prompt_tokens", _tokens(payload.get("prompt_tokens"))),
                ("completion_tokens", _tokens(payload.get("completion_tokens"))),
            ):
                bucket[key] += value
                totals[key] += value
        return Usage(
            calls=totals["calls"],
            prompt_tokens=totals["prompt_tokens"],
            completion_tokens=totals["completion_tokens"],
            by_source=by_source,
        )
