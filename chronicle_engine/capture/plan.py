"""Planning a capture: from the host's live list and the session's branch, what to append.

Invariant: planning writes nothing. It aligns the live list against the branch (see
`sessions/capture.py` for the order of the evidence), fills in the seqs of what is already
captured, and returns the `MessageCaptured` events of the rest, each with an id derived from the
session, the message it follows and its fingerprint, so planning the same list twice (after a
crash, or in another process) plans the same events. When the list left the branch, the plan says
where the new branch starts (`Branch`); the session tree turns that into its own entries.

The one thing a plan changes is the cached `BranchPath` it was given, grown in place (a copy would
cost O(conversation) a turn); a caller whose write then fails drops that cache.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypedDict

from ..log.events import EventTypeRegistry
from ..log.port import LogStore
from ..log.store import PendingEvent
from . import shortened
from .align import RUN, align, embed, fingerprint, plain_wire
from .describe import describe_payload, digest, message_id
from .events import MessageCaptured
from .path import BranchPath, positional
from .speaker import conversation_of, is_handoff

__all__ = ["Branch", "Context", "Plan", "Planner"]


class Context(TypedDict):
    """Who the messages of one capture call serve, and when they were captured."""

    user_id: str | None
    profile: str | None
    agent_context: str
    platform: str | None
    created_at: str


class Branch(NamedTuple):
    """The live list left the branch: a new branch starts after `parent` (an entry id, "" at
    the root), and the entries after it, ending at `abandoned_leaf`, are left behind."""

    entry_id: str  # the id of the entry that records the abandoned branch
    parent: str
    abandoned_leaf: str
    abandoned_seqs: list[int]


class Plan:
    """What one capture call appends: the message events, the live indexes of the new messages,
    the branch they start (if any), and the branch path as it will stand once they are stored."""

    def __init__(self, path: BranchPath) -> None:
        self.path = path
        self.events: list[PendingEvent] = []
        self.new: list[int] = []
        self.first_new_q = len(path.ids)
        self.branch: Branch | None = None
        # Whether the whole branch could matter to this plan, where the path holds only its
        # end (`BranchPath.base`): a list with no handoff, a head message not found, a branch.
        self.needs_whole_path = False


class Planner:
    """Plans captures against a log (read only: the stored originals of shortened copies)."""

    def __init__(self, store: LogStore, types: EventTypeRegistry) -> None:
        self._store = store
        self._types = types

    def fast(
        self, session: str, path: BranchPath, items: Sequence[object], context: Context
    ) -> Plan | None:
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

    def full(
        self,
        session: str,
        path: BranchPath,
        items: Sequence[object],
        result: list[int | None],
        context: Context,
        *,
        rewound: bool = False,
    ) -> Plan:
        """Align the whole live list, fill `result` for what is already captured, plan the rest.
        `rewound`: the host said it truncated its list since the last capture; a region after a
        handoff that holds none of what the compaction kept then starts a branch where the kept
        part began (the host took back every turn after the handoff), not a continuation."""
        live = _Live(items, path, self._fingerprint)
        at = _align(live, path)
        if rewound and at.p < 0 and live.last_handoff >= 0 and path.kept_from is not None:
            at = _Alignment(-1, path.kept_from - 1, None, False)
        _fill_seqs(live, path, at, result)
        new = live.region[at.p + 1 :]
        if not path.ids:
            # Nothing of this session's branch is in the log: the whole list is new, in order.
            new = [i for i in live.head if result[i] is None] + new
        plan = self._extend(
            session, path, items, at.q, live.last_handoff < 0, new, context, live.fps
        )
        plan.needs_whole_path = (
            live.last_handoff < 0
            or plan.branch is not None
            or any(result[i] is None for i in live.head)
        )
        _remember_matches(live, plan, result, at.p)
        return plan

    def _extend(
        self,
        session: str,
        path: BranchPath,
        items: Sequence[object],
        q: int,
        from_start: bool,
        new: list[int],
        context: Context,
        fps: dict[int, str] | None = None,
        keep_identity: bool = False,
    ) -> Plan:
        """Plan the events for the live messages `new`, attached after path[q]."""
        if not new:
            return Plan(path)
        last = len(path.ids) - 1
        if not path.ids or q == last or (q < 0 and not from_start):
            # Grown in place, not copied (a copy cost O(conversation) a turn): a capture whose
            # write fails drops the cached branch (`_capture_list`), so no caller sees it half-grown.
            plan = Plan(path)
            if not keep_identity:
                path.identity = {}  # the full plan refills it with the dicts that matched
            parent = path.leaf if path.leaf is not None else ""
            anchor = path.ids[-1] if path.ids else ""
        else:
            # The live list left the branch after path[q]: branch there, summarising what was
            # abandoned so its findings stay in the new branch's history.
            plan = Plan(path.truncated(q))
            anchor = path.ids[q] if q >= 0 else ""
            parent = "b" + digest(session, anchor, path.leaf or "")
            plan.branch = Branch(
                entry_id=parent,
                parent=anchor,
                abandoned_leaf=path.leaf or "",
                abandoned_seqs=path.seqs[q + 1 :],
            )
        turns = plan.path.turns[-1] if plan.path.turns else plan.path.base_turns
        tool_names = _ToolNames(items)
        for i in new:
            obj = items[i]
            wire, plain = plain_wire(obj)  # (plain: checked once, for all that follows)
            fp = fps.get(i) if fps is not None else None
            if fp is None:
                fp = fingerprint(wire, plain=plain)
            role = str(wire.get("role") or "")
            turns += role == "user"
            event_id = message_id(session, anchor, fp, plan.path.length)
            payload = self._message(
                obj, wire, plain, fp, parent, turns, tool_names.near(i), context
            )
            plan.events.append(
                self._types.pending_payload(
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
        return plan

    def _fingerprint(self, message: object, path: BranchPath) -> str:
        """A message's fingerprint; a copy compaction cut to fit the context has its original's
        (it stands for a message already on the branch, see `shortened.py`)."""
        seq = shortened.origin(message)
        if seq is not None:
            q = path.index_of_seq(seq)
            if q is not None:
                original = self._store.get(seq)
                if original is not None and shortened.stands_for(
                    message, original.payload.get("message")
                ):
                    return path.fps[q]
        return fingerprint(message)

    def _message(
        self,
        obj: object,
        wire: dict[str, object],
        plain: bool,
        fp: str,
        parent: str,
        turn: int,
        tool_names: _ToolNames,
        context: Context,
    ) -> dict[str, object]:
        """The message's MessageCaptured payload (`describe_payload`)."""
        role = wire.get("role")
        tool_name = None
        if role in ("tool", "function") and not wire.get("name"):
            tool_name = tool_names.get(str(wire.get("tool_call_id") or ""))
        return describe_payload(
            obj,
            wire,
            fp,
            plain=plain,
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

    def __init__(self, items: Sequence[object]) -> None:
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


class _Live:
    """The live list as alignment reads it: the conversational messages before the last handoff
    (`head`) and after it (`region`), with the branch index a kept dict is known at and each
    message's fingerprint, computed once."""

    def __init__(
        self,
        items: Sequence[object],
        path: BranchPath,
        fingerprint_of: Callable[[object, BranchPath], str],
    ) -> None:
        self.items = items
        self._path = path
        self._fingerprint_of = fingerprint_of
        conversational, self.last_handoff = conversation_of(items)
        # (in order, and without the handoff: the head is what comes before it)
        cut = bisect_right(conversational, self.last_handoff)
        self.head = conversational[:cut]
        self.region = conversational[cut:]
        ids = list(map(id, map(items.__getitem__, conversational)))
        # The same dict twice in one list tells nothing about either position.
        self.duplicated: set[int] = set()
        if len(set(ids)) != len(ids):
            self.duplicated = {x for x in ids if ids.count(x) > 1}
        self.fps: dict[int, str] = {}

    def known(self, i: int) -> int | None:
        msg = self.items[i]
        if not isinstance(msg, dict) or id(msg) in self.duplicated:
            return None
        return self._path.known(msg)

    def fp(self, i: int) -> str:
        found = self.fps.get(i)
        if found is None:
            found = self.fps[i] = self._fingerprint_of(self.items[i], self._path)
        return found


class _Alignment(NamedTuple):
    """region[p] stands at path index q (-1, -1: nothing aligns)."""

    p: int
    q: int
    placed: list[int] | None  # the path index of each of region[: p + 1], if known
    in_step: bool  # aligned by position from the start, verified by a run at the path's end


def _align(live: _Live, path: BranchPath) -> _Alignment:
    """The alignment point: the latest kept dict, else position, else a fingerprint run."""
    region = live.region
    p = q_anchor = -1
    # (none is known by identity when the path remembers no dict: a process's first capture)
    for k in range(len(region) - 1, -1, -1) if path.identity else ():
        q = live.known(region[k])
        if q is not None:
            p, q_anchor = k, q
            break
    start = 0 if live.last_handoff < 0 else path.kept_from
    in_step = False
    placed: list[int] | None = None
    if p < 0 and path.ids and start is not None:
        # Where the path ends, if the region runs in step with it: check a run at that point
        # only, so a restart does not hash the whole list (a run is the same evidence
        # `align` asks for).
        k_end = len(path.ids) - 1 - start
        if 0 <= k_end < len(region):
            depth = min(RUN, k_end + 1)
            if all(live.fp(region[k_end - j]) == path.fps[-1 - j] for j in range(depth)):
                p, q_anchor, in_step = k_end, len(path.ids) - 1, True
    if p < 0 and path.ids:
        fps = [live.fp(i) for i in region]
        p, q_anchor = positional(fps, path.fps, start)
        # Folded messages left out between kept ones happen only after a handoff; without
        # one, an edited turn whose earlier reply repeats the abandoned one ("Done.") would
        # look embedded and be appended after the turn it replaces instead of branching.
        embedded = embed(fps, path.fps) if p < 0 and live.last_handoff >= 0 else None
        if p < 0:
            if embedded is not None:  # kept messages with folded ones between them
                p, placed = embedded
                q_anchor = len(path.ids) - 1
            else:
                p, q_anchor = align(fps, path.fps, strict=live.last_handoff < 0)

    if placed is None and p >= 0:
        # What follows the alignment point and is already on the branch right after it, in
        # order (another process stored this turn first): the same messages after the same
        # anchor, so the same entries, not a branch away from them.
        while (
            p + 1 < len(region)
            and q_anchor + 1 < len(path.fps)
            and live.fp(region[p + 1]) == path.fps[q_anchor + 1]
        ):
            p, q_anchor = p + 1, q_anchor + 1
    return _Alignment(p, q_anchor, placed, in_step)


def _fill_seqs(live: _Live, path: BranchPath, at: _Alignment, result: list[int | None]) -> None:
    """The seqs of what is already captured: the region up to the alignment point, and the
    head before the handoff."""
    p, q_anchor, placed, in_step = at
    fps = live.fps
    latest: dict[str, int] | None = None
    # No dict is known by identity in a process's first capture of a branch (nor asked of).
    known = live.known if path.identity else None
    todo = range(p + 1)
    if known is None and placed is None and _in_step(live, path, at):
        # (a process's first capture of a branch it runs in step with: the loop below, at once)
        for i, stored in zip(live.region, path.seqs[q_anchor - p : q_anchor + 1], strict=False):
            result[i] = stored
        todo = range(0)
    for k in todo:
        i = live.region[k]
        q = known(i) if known is not None else None
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
                q = latest.get(live.fp(i))
        result[i] = path.seqs[q] if q is not None else None
    first: dict[str, int] | None = None
    for i in live.head:
        q = known(i) if known is not None else None
        if q is None and path.heads:
            seq = path.heads.get(live.fp(i))
            if seq is not None:  # a head before the part of the branch the path holds
                result[i] = seq
                continue
        if q is None:
            if first is None:
                first = {}
                for j, f in enumerate(path.fps):
                    first.setdefault(f, j)
            q = first.get(live.fp(i))
        result[i] = path.seqs[q] if q is not None else None


def _in_step(live: _Live, path: BranchPath, at: _Alignment) -> bool:
    """Whether every region message up to the alignment point stands where the run checked
    at the path's end says (`_fill_seqs`): every fingerprint computed equals the path's there."""
    p, q_anchor, _, in_step = at
    first = q_anchor - p
    if not in_step or first < 0 or q_anchor >= len(path.fps):
        return False
    region = live.region
    for i, fp in live.fps.items():
        k = bisect_left(region, i)
        if k <= p and region[k] == i and path.fps[first + k] != fp:
            return False
    return True


def _remember_matches(live: _Live, plan: Plan, result: list[int | None], p: int) -> None:
    """Remember the live dicts that matched, so the next turn finds them by identity."""
    identity = plan.path.identity if plan.events else {}
    index_of = plan.path.by_seq().get
    items, duplicated = live.items, live.duplicated
    for i in live.head + live.region[: p + 1]:
        seq = result[i]
        if seq is None:
            continue
        obj = items[i]
        if duplicated and id(obj) in duplicated:
            continue
        q = index_of(seq)
        if q is not None and isinstance(obj, dict):
            identity[id(obj)] = (obj, obj.get("content"), obj.get("tool_calls"), q)
    plan.path.identity = identity
