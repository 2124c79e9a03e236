"""Capture: every message of every turn into the log, once, with who said what.

The session tree owns these writes: `capture/plan.py` works out what a live list adds to the
branch, and this module writes it inside the tree's write transaction (or keeps it aside in the
spill when the database refuses writes), keeping each session's branch cached between turns.

Invariants:
- Idempotent. A message of the live list is recorded only if it is not in the log yet: the live
  list is aligned against the messages on the session's active branch, and only what follows the
  alignment point is new. Replays, the same list seen by sync_turn and compress,
  compaction-shaped lists and concurrent calls record each message once. How the alignment is
  found, cheapest first: the last live dict the host kept since the previous capture (Hermes
  keeps its dicts across turns); the position the live region must start at (the conversation's
  start, or the first message the latest recorded compaction kept); a run of fingerprints
  (`capture/align.py`).
- The wire message is stored exactly (minus the host's private `_` keys), `api_content` sidecar
  included: that is what the model was sent. Everything derived for reading (`text`,
  `person_text`) is built from `content` with credentials masked, so the sidecar's recalled
  memory is never taken for the person's words and no credential reaches an index.
- A message's event id is derived from the session, the message it follows and its fingerprint,
  so a capture repeated after a crash, or by another process, stores nothing twice.
- Leaving the end of the branch (a rewind, a rewritten last message) starts a new branch at the
  alignment point, with a short summary of what was abandoned; the old branch stays.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial

from ..capture.describe import digest, message_position, session_digest
from ..capture.events import text_parts
from ..capture.hooks import HostRecorder
from ..capture.path import BranchPath
from ..capture.plan import Branch, Context, Plan, Planner
from ..capture.speaker import is_handoff
from ..config import Config
from ..errors import StoreBusy, StoreError, StoreReadOnly
from ..log.store import PendingEvent, utc_now
from ..storable import escape_text
from .events import BranchSummarized, CompactionRecorded, LeafMoved
from .paths import PathEntry, read_leaf, read_path
from .projection import compaction_summary
from .summary import abandoned_summary
from .tree import SessionTree, TreeWriter

__all__ = ["Capture"]

log = logging.getLogger("chronicle_engine.capture")

_CACHED_SESSIONS = 256
_REMEMBERED_IDENTITIES = 4096  # a few dicts each; a gateway serves many sessions at once
"""Sessions whose branch capture keeps in memory (a gateway serves many chats; a session
evicted here is reloaded from the tree on its next capture)."""


def _created(created_at: object) -> str:
    if created_at is None:
        # One stamp for the whole call: its messages are captured at the same moment.
        return utc_now()
    if isinstance(created_at, datetime):
        return created_at.isoformat(timespec="microseconds")
    return str(created_at)


def _undo_growth(path: BranchPath | None) -> Callable[[], None]:
    """What puts a cached branch back as it was before a plan the store would not take
    (`SessionTree.write_planned` then plans again under the tree's lock). A plan grows the
    cached branch in place (`Planner._extend`): its columns go back to their length, its leaf,
    latest compaction and identity map to what they were. Dropping the branch instead would
    forget which of the host's live dicts are which messages, and the plan made again would
    align the list as after a restart (where repeated texts may align elsewhere)."""
    if path is None:
        return _nothing
    leaf, n, kept_from, identity = path.leaf, len(path.ids), path.kept_from, path.identity
    known = len(identity)

    def undo() -> None:
        path.put_back(n, leaf, kept_from)
        if len(identity) != known:  # remembered while planning: dicts at the positions undone
            for key in [k for k, hit in identity.items() if hit[3] >= n]:
                del identity[key]
        path.identity = identity

    return undo


def _nothing() -> None:
    pass


class Capture(HostRecorder):
    """Records the live message list into the log; see the module docstring. Also records
    what the host reports besides messages (`hooks.HostRecorder`)."""

    def __init__(self, tree: SessionTree, config: Config) -> None:
        super().__init__(tree.reader, tree.keep_aside)
        self.tree = tree
        self._config = config
        self._planner = Planner(tree.store, tree.types)
        # The branches a session will have once the spill is written (this process's view).
        self._offline: dict[str, BranchPath] = {}
        self.tree.on_replay(self._replayed)
        self.tree.on_kept_aside(self._switch_kept_aside)
        self.tree.on_moved(self._moved)
        self._paths: dict[str, BranchPath] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # sessions whose leaf a write through the tree's lock moved since their branch was cached
        self._moved_leaves: set[str] = set()
        # Who each session serves, as the memory slot last said (this process only): the
        # context engine captures mid-turn without knowing, and event ids do not depend on it,
        # so a message it stores first must already carry the right user, profile and context.
        self._identities: dict[str, dict[str, str | None]] = {}
        self._listeners: list[Callable[[int], None]] = []
        self._rewinds: set[str] = set()  # sessions whose host truncated its list since a capture
        self._listener_failures: set[str] = set()

    def _lock(self, session: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(session)
            if lock is None:
                lock = self._locks[session] = threading.Lock()
            return lock

    def remember_identity(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        profile: str | None = None,
        agent_context: str | None = None,
        platform: str | None = None,
    ) -> None:
        """Record who `session_id` serves (the memory slot knows; the context engine does not).
        A capture that names nobody takes this identity."""
        identity = {
            "user_id": user_id,
            "profile": profile,
            "agent_context": agent_context or "primary",
            "platform": platform,
        }
        with self._locks_guard:
            self._identities.pop(str(session_id), None)
            self._identities[str(session_id)] = identity
            while len(self._identities) > _REMEMBERED_IDENTITIES:
                self._identities.pop(next(iter(self._identities)))

    def identity(self, session_id: str) -> dict[str, str | None]:
        """The identity last remembered for the session ({} when none)."""
        with self._locks_guard:
            return dict(self._identities.get(str(session_id)) or {})

    def capturing(self, agent_context: str | None) -> bool:
        """Whether turns of this agent context are recorded (`capture.enabled`,
        `capture.skip_agent_contexts`)."""
        capture = self._config.settings.capture
        if not capture.enabled:
            return False
        return (agent_context or "primary") not in capture.skip_agent_contexts

    def forget(self, session_id: str) -> None:
        """Drop the cached branch of a session; the next capture reloads it from the tree."""
        with self._locks_guard:
            self._paths.pop(str(session_id), None)
            self._moved_leaves.discard(str(session_id))

    def rewound(self, session_id: str) -> None:
        """The host truncated the session's list (Hermes' /undo): the next capture may branch
        from where the latest compaction's kept part began (see `Planner.full`)."""
        with self._locks_guard:
            self._rewinds.add(str(session_id))
        self.forget(session_id)

    # -- the contract ---------------------------------------------------------------------

    def capture_messages(
        self,
        session_id: str,
        messages: Sequence[object] | None,
        *,
        user_id: str | None = None,
        profile: str | None = None,
        agent_context: str | None = None,
        platform: str | None = None,
        created_at: object = None,
        return_seqs: bool = True,
    ) -> list[int | None]:
        """Record every message of `messages` not in the log yet. Returns, aligned with
        `messages`, each message's seq (None for the system prompt and compaction handoffs).
        With `return_seqs=False` only the new messages' seqs are filled in, which keeps a turn's
        capture independent of the list's length. A call that names no user, profile or agent
        context takes it from the session's remembered identity (`remember_identity`), field by field. Raises only
        StoreError (the database failed); a malformed message is stored, not refused."""
        return self._capture_list(
            session_id,
            messages,
            user_id=user_id,
            profile=profile,
            agent_context=agent_context,
            platform=platform,
            created_at=created_at,
            return_seqs=return_seqs,
        )[0]

    def capture_turn(
        self, session_id: str, messages: Sequence[object] | None, **identity: str | None
    ) -> int:
        """`capture_messages(..., return_seqs=False)` for a hook that only needs to know how many
        messages this call stored (none of the list's seqs, nor a read of the log's end).
        `identity`: capture_messages' user_id, profile, agent_context and platform."""
        return self._capture_list(
            session_id, messages, created_at=None, return_seqs=False, **identity
        )[1]

    def _capture_list(
        self,
        session_id: str,
        messages: Sequence[object] | None,
        *,
        created_at: object,
        return_seqs: bool,
        user_id: str | None = None,
        profile: str | None = None,
        agent_context: str | None = None,
        platform: str | None = None,
    ) -> tuple[list[int | None], int]:
        """Both of the above: the seqs, and how many messages were stored by this call."""
        # A session id with a lone surrogate is stored escaped (storable.py); read it the same way.
        session = escape_text(str(session_id or ""))
        try:
            items: list[object] = list(messages) if messages is not None else []
        except TypeError:
            items = [messages]
        result: list[int | None] = [None] * len(items)
        if not items:
            return result, 0
        known = self.identity(session)
        if known:
            user_id = user_id if user_id is not None else known.get("user_id")
            profile = profile if profile is not None else known.get("profile")
            agent_context = agent_context or known.get("agent_context")
            platform = platform or known.get("platform")
        context: Context = {
            "user_id": user_id,
            "profile": profile,
            "agent_context": agent_context or "primary",
            "platform": platform,
            "created_at": _created(created_at),
        }
        with self._locks_guard:
            rewound = session in self._rewinds
        write = partial(self._write, session, items, result, context, return_seqs, rewound)
        with self._lock(session):
            try:
                # A plan the store would not take (another host moved the session's branch, or
                # the plan branches) may have grown the cached branch in place: put it back.
                undo = _undo_growth(self._paths.get(session))
                plan, stored = self.tree.write_planned(write, undo)
            except (StoreBusy, StoreReadOnly) as exc:
                raise self._keep_aside(exc, session, items, context) from exc
            except BaseException:
                self.forget(session)  # the plan may have grown the cached branch in place
                raise
            self._cache(session, plan)  # (only a committed write updates the cache)
        if stored:
            self._tell_stored(stored)
        return result, stored

    def _write(
        self,
        session: str,
        items: Sequence[object],
        result: list[int | None],
        context: Context,
        return_seqs: bool,
        rewound: bool,
        w: TreeWriter,
    ) -> tuple[Plan, int]:
        """Plan the capture against the session's branch as `w` reads it and append its events;
        fills `result` with every message's seq. Returns the plan and how many it stored."""
        stored = 0
        result[:] = [None] * len(items)
        path = self._sync_path(w, session)
        plan = None if return_seqs else self._planner.fast(session, path, items, context)
        if plan is None:
            plan = self._planner.full(session, path, items, result, context, rewound=rewound)
            if plan.needs_whole_path and path.base:
                # Planned against the branch's end only, the list reached before it: plan
                # again against the whole branch.
                path = self._branch_path(w, w.leaf(session), whole=True)
                result[:] = [None] * len(items)
                plan = self._planner.full(session, path, items, result, context, rewound=rewound)
        if plan.events:
            end = w.end
            events = self._events(session, plan, items, w.path)
            seqs = w.append(events)
            by_id = {e.id: s for e, s in zip(events, seqs, strict=True)}
            for q in range(plan.first_new_q, len(plan.path.ids)):
                plan.path.stored(q, by_id[plan.path.ids[q]])
            for offset, i in enumerate(plan.new):
                seq = result[i] = plan.path.seqs[plan.first_new_q + offset]
                stored += seq > end  # not an id another process stored first
        else:
            w.confirm(session)
        return plan, stored

    def _cache(self, session: str, plan: Plan) -> None:
        """Keep the branch a committed capture planned against, most recently used last."""
        with self._locks_guard:
            if plan.events:
                self._rewinds.discard(session)  # the turn after the rewind is on its branch
            self._paths.pop(session, None)
            self._paths[session] = plan.path
            while len(self._paths) > _CACHED_SESSIONS:
                evicted = next(iter(self._paths))
                del self._paths[evicted]
                self._moved_leaves.discard(evicted)

    def on_stored(self, listener: Callable[[int], None]) -> None:
        """Call `listener(count)` after each capture that stored messages (after its commit, on
        the capturing thread): a reader's index can catch up with a big capture there instead
        of on its first read. A listener's failure is logged once, never raised."""
        self._listeners.append(listener)

    def _tell_stored(self, count: int) -> None:
        for listener in list(self._listeners):
            try:
                listener(count)
            except Exception as exc:  # a reader's index must never fail a capture
                if type(exc).__name__ not in self._listener_failures:
                    self._listener_failures.add(type(exc).__name__)
                    log.warning("chronicle capture: a listener failed (%s)", exc)

    def _keep_aside(
        self, exc: StoreError, session: str, items: Sequence[object], context: Context
    ) -> StoreError:
        """The database refused the write: plan the same events from what it holds (a read
        needs no lock in WAL mode), on top of what this process already kept aside, and keep
        them in the spill, so a session whose last capture failed loses nothing. The ids are
        the ones a capture of the same list computes once the spill is written."""
        # A plan may have grown the cached branch's identity map with dicts that were never
        # stored; the next capture reloads the branch from the tree.
        self.forget(session)
        if self.tree.spill is None:
            return exc
        try:
            offline = self._offline_path(session)
            path = offline.copy()  # kept as it was unless the spill takes the plan
            path.identity = dict(offline.identity)
            plan = self._planner.full(session, path, items, [None] * len(items), context)
            events = self._events(session, plan, items, self._read_path)
        except StoreError as err:
            log.error("chronicle: could not plan the capture to keep it aside: %s", err)
            return exc
        error, kept = self.tree.keep_aside(exc, events)
        if kept and plan.events:
            with self._locks_guard:
                self._offline[session] = plan.path
        return error

    def _offline_path(self, session: str) -> BranchPath:
        """The session's branch as the log will hold it once the spill is written: what this
        process kept aside last, else the tree as it stands."""
        if self.tree.spill is not None and not self.tree.spill.waiting():
            with self._locks_guard:
                self._offline.clear()  # another process wrote the spill: the tree is current
        with self._locks_guard:
            kept = self._offline.get(session)
        if kept is not None:
            return kept
        with self.tree.tables.reading("reading the session tree") as conn:
            leaf = read_leaf(conn, session)
            path = BranchPath(leaf=leaf)
            path.extend(read_path(conn, leaf))
        return path

    def _switch_kept_aside(self, events: Sequence[PendingEvent]) -> None:
        """A session switch went to the spill: a compression continuation or a branch starts
        from its parent's branch, as the tree will make it when the switch is written."""
        for event in events:
            if event.type != "SessionSwitched" or not event.session:
                continue
            parent = str(event.payload.get("parent_session") or "")
            if event.payload.get("reason") not in ("compression", "branch") or not parent:
                continue
            with self._locks_guard:
                if event.session in self._offline:
                    continue
            try:
                start = self._offline_path(parent).copy()
            except StoreError:
                continue
            with self._locks_guard:
                self._offline.setdefault(event.session, start)

    def _replayed(self, sessions: set[str]) -> None:
        for session in sessions:
            self.forget(session)
        with self._locks_guard:
            self._offline.clear()  # the tree holds everything that was kept aside

    # -- keeping the cached branch in step with the tree ------------------------------------------

    def _moved(self, sessions: set[str]) -> None:
        with self._locks_guard:
            self._moved_leaves |= sessions & self._paths.keys()

    def _sync_path(self, w: TreeWriter, session: str) -> BranchPath:
        cached = self._paths.get(session)
        with self._locks_guard:
            moved = session in self._moved_leaves
            self._moved_leaves.discard(session)
        # Planned on the cached branch's end, unread where the store checks the plan
        # (`leaf_from`): a turn of one round trip on PostgreSQL.
        if cached is not None and not moved:
            leaf = w.leaf_from(session, cached.leaf)
        else:
            leaf = w.leaf(session)
        if cached is not None:
            if cached.leaf == leaf:
                return cached
            grown = w.since(leaf, cached.leaf)
            if grown is not None:  # entries others appended on top (usage, compaction, ...)
                cached.leaf = leaf
                cached.extend(grown)
                return cached
        return self._branch_path(w, leaf)

    def _branch_path(self, w: TreeWriter, leaf: str | None, *, whole: bool = False) -> BranchPath:
        """The branch at `leaf` as a capture aligns against it. After a compaction, only what
        the compaction kept and what followed it (with its head beside it), so a session's
        first capture does not read the history before; the whole branch when `whole`, or
        when the positions of that end cannot be read back from its ids."""
        path = BranchPath(leaf=leaf)
        if whole:
            path.extend(w.path(leaf))
            return path
        recent = w.recent(leaf)
        if not recent.complete:
            bounds = self._bounds(recent.entries)
            if bounds is None:
                path.extend(w.path(leaf))
                return path
            path.base, path.base_turns = bounds
            for head in recent.heads:
                if head.kind == "message" and head.fp:
                    path.heads.setdefault(head.fp, head.seq)
        path.extend(recent.entries)
        return path

    def _bounds(self, entries: Sequence[PathEntry]) -> tuple[int, int] | None:
        """(messages before, user messages before) the first message of `entries`, a part of
        a branch: the positions its ids were derived from, checked to run on one by one, and
        the turn count its payload recorded. None when they cannot be trusted."""
        messages = [e for e in entries if e.kind == "message"]
        if not messages:
            return None
        first: int | None = None
        for k, entry in enumerate(messages):
            position = message_position(entry.entry_id, session_digest(entry.session))
            if position is None or (first is not None and position != first + k):
                return None
            if first is None:
                first = position
        assert first is not None
        turn = self.tree.payloads([messages[0].seq]).get(messages[0].seq, {}).get("turn")
        if not isinstance(turn, int) or isinstance(turn, bool):
            return None
        return first, turn - (messages[0].role == "user")

    # -- the tree's own entries around a plan ----------------------------------------------------

    def _events(
        self,
        session: str,
        plan: Plan,
        items: Sequence[object],
        path_to: Callable[[str | None], list[PathEntry]],
    ) -> list[PendingEvent]:
        """The plan's message events, with the tree entries a new branch needs: the compaction
        the host's list still stands on, when the branch leaves the tree before it (see
        `_carried`); a summary of what was abandoned (its findings stay in the new branch's
        history); and the leaf moved to the branch's end last (its messages may be entries the
        log already holds, the host having gone back to a branch it left, which the fold does
        not add again)."""
        branch = plan.branch
        if branch is None:
            return plan.events
        types = self.tree.types
        events: list[PendingEvent] = []
        parent = branch.parent
        carried = self._carried(branch, items, path_to)
        if carried is not None:
            carried_id = "c" + digest(session, branch.entry_id)
            events.append(
                types.pending(
                    carried.model_copy(update={"parent": parent}), session=session, id=carried_id
                )
            )
            parent = carried_id
        summary = BranchSummarized(
            parent=parent,
            abandoned_leaf=branch.abandoned_leaf,
            summary=abandoned_summary(self._texts(branch.abandoned_seqs)),
            abandoned_entries=len(branch.abandoned_seqs),
        )
        leaf = plan.path.leaf
        assert leaf is not None, "a branch's path ends at the entries the plan appends"
        return [
            *events,
            types.pending(summary, session=session, id=branch.entry_id),
            *plan.events,
            types.pending(LeafMoved(target=leaf), session=session),
        ]

    def _carried(
        self,
        branch: Branch,
        items: Sequence[object],
        path_to: Callable[[str | None], list[PathEntry]],
    ) -> CompactionRecorded | None:
        """The compaction a new branch must repeat, or None.

        Hermes' /undo truncates the list it holds, which after a compaction is the handoff and
        what the pass kept: the live list still stands on that compaction while its last kept
        message may come before the compaction entry in the tree (the entry follows the
        messages it was recorded after). A branch from that message would leave the entry
        behind and project every folded message again. So when the live list holds a handoff
        and the abandoned entries hold the compaction it came from, the same compaction is
        recorded again at the start of the new branch. A list without a handoff went back
        before the compaction, and the branch rightly has none."""
        handoff = next((m for m in reversed(items) if is_handoff(m)), None)
        if not isinstance(handoff, dict):
            return None
        old = path_to(branch.abandoned_leaf or None)
        at = next((i for i, e in enumerate(old) if e.entry_id == branch.parent), -1)
        compactions = [(i, e) for i, e in enumerate(old) if e.kind == "compaction"]
        if not compactions or compactions[-1][0] <= at:
            return None  # the compaction the list stands on is still on the new branch
        text = "\n".join(text_parts(handoff.get("content")))
        payloads = self.tree.payloads([e.seq for _, e in compactions])
        chosen = compactions[-1]
        for i, e in reversed(compactions):
            if compaction_summary(payloads.get(e.seq, {})) == text:
                chosen = (i, e)
                break
        if chosen[0] <= at:
            return None
        found = self.tree.reader.get_many([chosen[1].seq]).get(chosen[1].seq)
        if found is None:
            return None
        event = self.tree.reader.decode(found)
        return event if isinstance(event, CompactionRecorded) else None

    def _read_path(self, leaf: str | None) -> list[PathEntry]:
        with self.tree.tables.reading("reading the session tree") as conn:
            return read_path(conn, leaf)

    def _texts(self, seqs: Sequence[int]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for seq in list(seqs)[-50:]:
            event = self.tree.store.get(seq)
            if event is not None:
                out.append((str(event.payload.get("role", "")), str(event.payload.get("text", ""))))
        return out
