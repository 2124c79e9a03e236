"""Capture: every message of every turn into the log, once, with who said what.

Invariants:
- Idempotent. A message of the live list is recorded only if it is not in the log yet: the live
  list is aligned against the messages on the session's active branch, and only what follows the
  alignment point is new. Replays, the same list seen by sync_turn and compress,
  compaction-shaped lists and concurrent calls record each message once. How the alignment is
  found, cheapest first: the last live dict the host kept since the previous capture (Hermes
  keeps its dicts across turns); the position the live region must start at (the conversation's
  start, or the first message the latest recorded compaction kept); a run of fingerprints
  (`align.py`).
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
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import StoreBusy, StoreError, StoreReadOnly
from ..log.store import PendingEvent, sqlite_errors, utc_now
from ..tree.events import BranchSummarized, LeafMoved
from ..tree.paths import read_leaf, read_path
from ..tree.summary import abandoned_summary
from ..tree.writing import TreeWriting
from . import shortened
from .align import RUN, align, embed, fingerprint, wire_message
from .describe import describe_payload, digest, message_id
from .events import MessageCaptured, register_capture_events
from .hooks import HostRecorder
from .path import BranchPath, positional
from .speaker import is_handoff

if TYPE_CHECKING:
    from ..core import ChronicleCore

__all__ = ["Capture"]

log = logging.getLogger("chronicle_engine.capture")

_CACHED_SESSIONS = 256
_REMEMBERED_IDENTITIES = 4096  # a few dicts each; a gateway serves many sessions at once
"""Sessions whose branch capture keeps in memory (a gateway serves many chats; a session
evicted here is reloaded from the tree on its next capture)."""


def _created(created_at: Any) -> str:
    if created_at is None:
        # One stamp for the whole call: its messages are captured at the same moment.
        return utc_now()
    if isinstance(created_at, datetime):
        return created_at.isoformat(timespec="microseconds")
    return str(created_at)


class _Plan:
    """What one capture call appends: the events, the live indexes of the new messages, and
    the branch path as it will stand once they are stored."""

    def __init__(self, path: BranchPath) -> None:
        self.path = path
        self.events: list[PendingEvent] = []
        self.new: list[int] = []
        self.first_new_q = len(path.ids)


class Capture(HostRecorder):
    """Records the live message list into the log; see the module docstring. Also records
    what the host reports besides messages (`hooks.HostRecorder`)."""

    def __init__(self, core: ChronicleCore) -> None:
        self.core = core
        register_capture_events(core.types)
        self.tree = core.sessions
        # The branches a session will have once the spill is written (this process's view).
        self._offline: dict[str, BranchPath] = {}
        self.tree.on_replay(self._replayed)
        self.tree.on_kept_aside(self._switch_kept_aside)
        self._paths: dict[str, BranchPath] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # Who each session serves, as the memory slot last said (this process only): the
        # context engine captures mid-turn without knowing, and event ids do not depend on it,
        # so a message it stores first must already carry the right user, profile and context.
        self._identities: dict[str, dict[str, str | None]] = {}

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
        config = self.core.config
        if not config.get("capture.enabled"):
            return False
        skipped = config.get("capture.skip_agent_contexts") or []
        return (agent_context or "primary") not in {str(s) for s in skipped}

    def forget(self, session_id: str) -> None:
        """Drop the cached branch of a session; the next capture reloads it from the tree."""
        self._paths.pop(str(session_id), None)

    # -- the contract ---------------------------------------------------------------------

    def capture_messages(
        self,
        session_id: str,
        messages: Sequence[Any] | None,
        *,
        user_id: str | None = None,
        profile: str | None = None,
        agent_context: str | None = None,
        platform: str | None = None,
        created_at: Any = None,
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
        self, session_id: str, messages: Sequence[Any] | None, **identity: str | None
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
        messages: Sequence[Any] | None,
        *,
        created_at: Any,
        return_seqs: bool,
        user_id: str | None = None,
        profile: str | None = None,
        agent_context: str | None = None,
        platform: str | None = None,
    ) -> tuple[list[int | None], int]:
        """Both of the above: the seqs, and how many messages were stored by this call."""
        session = str(session_id or "")
        known = self.identity(session)
        if known:
            user_id = user_id if user_id is not None else known.get("user_id")
            profile = profile if profile is not None else known.get("profile")
            agent_context = agent_context or known.get("agent_context")
            platform = platform or known.get("platform")
        try:
            items = list(messages) if messages is not None else []
        except TypeError:
            items = [messages]
        result: list[int | None] = [None] * len(items)
        stored = 0
        if not items:
            return result, stored
        context = {
            "user_id": user_id,
            "profile": profile,
            "agent_context": agent_context or "primary",
            "platform": platform,
            "created_at": _created(created_at),
        }
        with self._lock(session):
            try:
                with self.tree.writing() as w:
                    path = self._sync_path(w, session)
                    plan = None if return_seqs else self._fast_plan(session, path, items, context)
                    if plan is None:
                        plan = self._full_plan(session, path, items, result, context)
                    if plan.events:
                        end = w.end
                        seqs = w.append(plan.events)
                        by_id = {e.id: s for e, s in zip(plan.events, seqs, strict=True)}
                        for q in range(plan.first_new_q, len(plan.path.ids)):
                            plan.path.stored(q, by_id[plan.path.ids[q]])
                        for offset, i in enumerate(plan.new):
                            seq = result[i] = plan.path.seqs[plan.first_new_q + offset]
                            stored += seq > end  # not an id another process stored first
            except (StoreBusy, StoreReadOnly) as exc:
                raise self._keep_aside(exc, session, items, context) from exc
            except BaseException:
                self.forget(session)  # the plan may have grown the cached branch in place
                raise
            # Only a committed write updates the cache.
            with self._locks_guard:
                self._paths.pop(session, None)
                self._paths[session] = plan.path  # most recently used last
                while len(self._paths) > _CACHED_SESSIONS:
                    self._paths.pop(next(iter(self._paths)))
        return result, stored

    def _keep_aside(
        self, exc: StoreError, session: str, items: Sequence[Any], context: dict[str, Any]
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
            plan = self._full_plan(session, path, items, [None] * len(items), context)
        except StoreError as err:
            log.error("chronicle: could not plan the capture to keep it aside: %s", err)
            return exc
        error, kept = self.tree.keep_aside(exc, plan.events)
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
        with sqlite_errors("reading the session tree"), self.core.store.reading() as conn:
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

    def _sync_path(self, w: TreeWriting, session: str) -> BranchPath:
        leaf = w.leaf(session)
        cached = self._paths.get(session)
        if cached is not None:
            if cached.leaf == leaf:
                return cached
            grown = w.since(leaf, cached.leaf)
            if grown is not None:  # entries others appended on top (usage, compaction, ...)
                cached.leaf = leaf
                cached.extend(grown)
                return cached
        path = BranchPath(leaf=leaf)
        path.extend(w.path(leaf))
        return path

    # -- planning -------------------------------------------------------------------------------

    def _fast_plan(
        self, session: str, path: BranchPath, items: Sequence[Any], context: dict[str, Any]
    ) -> _Plan | None:
        """Scan from the end for the latest live dict captured before; what follows it is new.
        None when a handoff comes first (the general plan aligns the region after it)."""
        new: list[int] = []
        for i in range(len(items) - 1, -1, -1):
            msg = items[i]
            if isinstance(msg, dict):
                q = path.known(msg)
                if q is not None:
                    if q != len(path.ids) - 1:
                        return None  # a branch, or a turn stored elsewhere: the full plan aligns it
                    new.reverse()
                    return self._extend(
                        session, path, items, q, True, new, context, keep_identity=True
                    )
                if msg.get("role") == "system":
                    continue
            if is_handoff(msg):
                return None
            new.append(i)
        return None

    def _full_plan(
        self,
        session: str,
        path: BranchPath,
        items: Sequence[Any],
        result: list[int | None],
        context: dict[str, Any],
    ) -> _Plan:
        """Align the whole live list, fill `result` for what is already captured, plan the rest."""
        last_handoff = -1
        conversational: list[int] = []
        for i, msg in enumerate(items):
            if isinstance(msg, dict) and msg.get("role") == "system":
                continue
            if is_handoff(msg):
                last_handoff = i
                continue
            conversational.append(i)
        head = [i for i in conversational if i < last_handoff]
        region = [i for i in conversational if i > last_handoff]
        ids = [id(items[i]) for i in conversational]
        duplicated: set[int] = set()
        if len(set(ids)) != len(ids):
            duplicated = {x for x in ids if ids.count(x) > 1}

        def known(i: int) -> int | None:
            msg = items[i]
            if not isinstance(msg, dict) or id(msg) in duplicated:
                return None
            return path.known(msg)

        fps: dict[int, str] = {}

        def fp(i: int) -> str:
            found = fps.get(i)
            if found is None:
                found = fps[i] = self._fingerprint(items[i], path)
            return found

        # The alignment point: the latest kept dict, else position, else a fingerprint run.
        p = q_anchor = -1
        for k in range(len(region) - 1, -1, -1):
            q = known(region[k])
            if q is not None:
                p, q_anchor = k, q
                break
        start = 0 if last_handoff < 0 else path.kept_from
        in_step = False  # aligned by position from `start`, verified by a run at the path's end
        placed: list[int] | None = None  # the path index of each of region[: p + 1], if known
        if p < 0 and path.ids and start is not None:
            # Where the path ends, if the region runs in step with it: check a run at that point
            # only, so a restart does not hash the whole list (a run is the same evidence
            # `align` asks for).
            k_end = len(path.ids) - 1 - start
            if 0 <= k_end < len(region):
                depth = min(RUN, k_end + 1)
                if all(fp(region[k_end - j]) == path.fps[-1 - j] for j in range(depth)):
                    p, q_anchor, in_step = k_end, len(path.ids) - 1, True
        if p < 0 and path.ids:
            live = [fp(i) for i in region]
            p, q_anchor = positional(live, path.fps, start)
            # Folded messages left out between kept ones happen only after a handoff; without
            # one, an edited turn whose earlier reply repeats the abandoned one ("Done.") would
            # look embedded and be appended after the turn it replaces instead of branching.
            embedded = embed(live, path.fps) if p < 0 and last_handoff >= 0 else None
            if p < 0:
                if embedded is not None:  # kept messages with folded ones between them
                    p, placed = embedded
                    q_anchor = len(path.ids) - 1
                else:
                    p, q_anchor = align(live, path.fps, strict=last_handoff < 0)

        if placed is None and p >= 0:
            # What follows the alignment point and is already on the branch right after it, in
            # order (another process stored this turn first): the same messages after the same
            # anchor, so the same entries, not a branch away from them.
            while (
                p + 1 < len(region)
                and q_anchor + 1 < len(path.fps)
                and fp(region[p + 1]) == path.fps[q_anchor + 1]
            ):
                p, q_anchor = p + 1, q_anchor + 1

        # Seqs of what is already captured.
        latest: dict[str, int] | None = None
        for k in range(p + 1):
            i = region[k]
            q = known(i)
            if q is None and placed is not None:
                q = placed[k]
            if q is None:
                expected = q_anchor - (p - k)
                if 0 <= expected < len(path.fps) and (
                    path.fps[expected] == fps[i] if i in fps else in_step
                ):
                    # In step with the path (checked, or inside a run that was): a message the
                    # host rewrote since keeps the seq of the original it stands for.
                    q = expected
                else:
                    if latest is None:
                        latest = {f: j for j, f in enumerate(path.fps)}
                    q = latest.get(fp(i))
            result[i] = path.seqs[q] if q is not None else None
        first: dict[str, int] | None = None
        for i in head:
            q = known(i)
            if q is None:
                if first is None:
                    first = {}
                    for j, f in enumerate(path.fps):
                        first.setdefault(f, j)
                q = first.get(fp(i))
            result[i] = path.seqs[q] if q is not None else None

        new = region[p + 1 :]
        if not path.ids:
            # Nothing of this session's branch is in the log: the whole list is new, in order.
            new = [i for i in head if result[i] is None] + new
        plan = self._extend(session, path, items, q_anchor, last_handoff < 0, new, context, fps)
        # Remember the live dicts that matched, so the next turn finds them by identity.
        identity = plan.path.identity if plan.events else {}
        for i in head + region[: p + 1]:
            seq = result[i]
            if seq is None or id(items[i]) in duplicated:
                continue
            q = plan.path.index_of_seq(seq)
            if q is not None:
                obj = items[i]
                if isinstance(obj, dict):
                    identity[id(obj)] = (obj, obj.get("content"), obj.get("tool_calls"), q)
        plan.path.identity = identity
        return plan

    def _extend(
        self,
        session: str,
        path: BranchPath,
        items: Sequence[Any],
        q: int,
        from_start: bool,
        new: list[int],
        context: dict[str, Any],
        fps: dict[int, str] | None = None,
        keep_identity: bool = False,
    ) -> _Plan:
        """Plan the events for the live messages `new`, attached after path[q]."""
        if not new:
            return _Plan(path)
        last = len(path.ids) - 1
        if not path.ids or q == last or (q < 0 and not from_start):
            # Grown in place, not copied (a copy cost O(conversation) a turn): a capture whose
            # write fails drops the cached branch (`_capture_list`), so no caller sees it half-grown.
            plan = _Plan(path)
            if not keep_identity:
                path.identity = {}  # the full plan refills it with the dicts that matched
            parent = path.leaf if path.leaf is not None else ""
            anchor = path.ids[-1] if path.ids else ""
        else:
            # The live list left the branch after path[q]: branch there, summarising what was
            # abandoned so its findings stay in the new branch's history.
            plan = _Plan(path.truncated(q))
            anchor = path.ids[q] if q >= 0 else ""
            summary = BranchSummarized(
                parent=anchor,
                abandoned_leaf=path.leaf or "",
                summary=abandoned_summary(self._texts(path.seqs[q + 1 :])),
                abandoned_entries=len(path.ids) - q - 1,
            )
            parent = "b" + digest(session, anchor, path.leaf or "")
            plan.events.append(self.core.types.pending(summary, session=session, id=parent))
        turns = plan.path.turns[-1] if plan.path.turns else 0
        tool_names = _ToolNames(items)
        for i in new:
            obj = items[i]
            wire = wire_message(obj)
            fp = fps.get(i) if fps is not None else None
            if fp is None:
                fp = fingerprint(wire)
            role = str(wire.get("role") or "")
            turns += role == "user"
            event_id = message_id(session, anchor, fp, len(plan.path.ids))
            payload = self._message(obj, wire, fp, parent, turns, tool_names.near(i), context)
            plan.events.append(
                self.core.types.pending_payload(
                    MessageCaptured,
                    payload,
                    session=session,
                    id=event_id,
                    created_at=context["created_at"],
                )
            )
            plan.path.add(event_id, -1, fp, role == "user")  # the seq is filled in once stored
            plan.path.remember(obj, len(plan.path.ids) - 1)
            plan.new.append(i)
            parent = anchor = event_id
        plan.path.leaf = plan.path.ids[-1]
        plan.first_new_q = len(plan.path.ids) - len(plan.new)
        if plan.path is not path:
            # A branch: its messages may be entries the log already holds (the host went back
            # to a branch it left, "Done." regenerated after "Sure."), which the fold does not
            # add again, so the leaf is moved to the branch's end explicitly.
            plan.events.append(
                self.core.types.pending(LeafMoved(target=plan.path.leaf), session=session)
            )
        return plan

    def _fingerprint(self, message: Any, path: BranchPath) -> str:
        """A message's fingerprint; a copy compaction cut to fit the context has its original's
        (it stands for a message already on the branch, see `shortened.py`)."""
        seq = shortened.origin(message)
        if seq is not None:
            q = path.index_of_seq(seq)
            if q is not None:
                original = self.core.store.get(seq)
                if original is not None and shortened.stands_for(
                    message, original.payload.get("message")
                ):
                    return path.fps[q]
        return fingerprint(message)

    def _texts(self, seqs: Sequence[int]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for seq in list(seqs)[-50:]:
            event = self.core.store.get(seq)
            if event is not None:
                out.append((str(event.payload.get("role", "")), str(event.payload.get("text", ""))))
        return out

    def _message(
        self,
        obj: Any,
        wire: dict[str, Any],
        fp: str,
        parent: str,
        turn: int,
        tool_names: _ToolNames,
        context: dict[str, Any],
    ) -> dict[str, Any]:
        """The message's MessageCaptured payload (`describe_payload`)."""
        role = wire.get("role")
        tool_name = None
        if role in ("tool", "function") and not wire.get("name"):
            tool_name = tool_names.get(str(wire.get("tool_call_id") or ""))
        return describe_payload(
            obj,
            wire,
            fp,
            parent=parent,
            turn=turn,
            tool_name=tool_name,
            user_id=context["user_id"],
            profile=context["profile"],
            agent_context=context["agent_context"],
            platform=context["platform"],
        )


class _ToolNames:
    """tool_call_id -> function name, read from the assistant messages before a tool result."""

    def __init__(self, items: Sequence[Any]) -> None:
        self._items = items
        self._names: dict[str, str] = {}
        self._scanned_from = 0
        self._at = len(items)

    def near(self, index: int) -> _ToolNames:
        self._at = index
        return self

    def get(self, call_id: str) -> str | None:
        if not call_id:
            return None
        found = self._names.get(call_id)
        if found is not None:
            return found
        for i in range(self._at - 1, -1, -1):
            msg = self._items[i]
            if not isinstance(msg, dict) or msg.get("role") != "assistant":
                continue
            for call in msg.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id"):
                    fn = call.get("function")
                    if isinstance(fn, dict) and fn.get("name"):
                        self._names.setdefault(str(call["id"]), str(fn["name"]))
            if call_id in self._names:
                return self._names[call_id]
        return None
