"""Capture: every message of every turn into the log, once, with who said what.

Invariants:
- Idempotent. A message of the live list is recorded only if it is not in the log yet: the live
  list is aligned (`align.py`) against the messages on the session's active branch, and only what
  follows the alignment point is new. Replays, the same list seen by sync_turn and compress,
  compaction-shaped lists and concurrent calls record each message once.
- The wire message is stored exactly (minus the host's private `_` keys), `api_content` sidecar
  included: that is what the model was sent. Everything derived for reading (`text`,
  `person_text`) is built from `content`, with credentials masked, so the sidecar's recalled
  memory is never mistaken for the person's words and no credential reaches an index.
- A message's event id is derived from the session, the message it follows and its fingerprint,
  so a capture repeated after a crash or from another process stores nothing twice.
- The in-memory alignment state is a cache of the session's path in the tree; it is checked
  against the tree's leaf inside every write transaction and reloaded when it is stale.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..log.store import PendingEvent
from ..sessions.events import BranchSummarized
from .align import align, fingerprint, wire_message
from .events import (
    HOST_NAMESPACE,
    CompressionAhead,
    DelegationObserved,
    MemoryWritten,
    MessageCaptured,
    SessionEnded,
    TurnStarted,
    message_text,
    register_capture_events,
)
from .secrets import mask
from .speaker import attribute, is_handoff

if TYPE_CHECKING:
    from ..core import ChronicleCore
    from ..sessions.tree import PathEntry, TreeWriter

__all__ = ["Capture", "abandoned_summary"]

_SUMMARY_LIMIT = 600


@dataclass
class _Path:
    """The messages on a session's active branch, as capture last saw them."""

    leaf: str | None = None
    ids: list[str] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    fps: list[str] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)  # user messages up to and including each
    roles: list[str] = field(default_factory=list)
    kept_from: int | None = None  # path index of the first message the latest compaction kept
    # id(live dict) -> (the dict, its content, its tool_calls, path index): the host keeps the
    # same dict objects across turns, which tells repeated identical messages apart in-process.
    identity: dict[int, tuple[Any, Any, Any, int]] = field(default_factory=dict)

    def extend(self, entries: Sequence[PathEntry], roles: Sequence[str] | None = None) -> None:
        for i, e in enumerate(entries):
            if e.kind == "compaction":
                self.kept_from = _index_of_id(self.ids, e.target) if e.target else None
                continue
            if e.kind != "message":
                continue
            role = roles[i] if roles is not None else ""
            self.ids.append(e.entry_id)
            self.seqs.append(e.seq)
            self.fps.append(e.fp or "")
            self.roles.append(role)
            previous = self.turns[-1] if self.turns else 0
            self.turns.append(previous + (1 if role == "user" else 0))

    def truncated(self, q: int) -> _Path:
        return _Path(
            leaf=self.ids[q] if q >= 0 else None,
            ids=self.ids[: q + 1],
            seqs=self.seqs[: q + 1],
            fps=self.fps[: q + 1],
            turns=self.turns[: q + 1],
            roles=self.roles[: q + 1],
            kept_from=self.kept_from
            if self.kept_from is not None and self.kept_from <= q
            else None,
        )

    def copy(self) -> _Path:
        return _Path(
            leaf=self.leaf,
            ids=list(self.ids),
            seqs=list(self.seqs),
            fps=list(self.fps),
            turns=list(self.turns),
            roles=list(self.roles),
            kept_from=self.kept_from,
        )


class _Stale(Exception):
    """The tree moved under the cached path in a way that needs a full reload."""


@dataclass
class _Live:
    index: int
    obj: Any
    wire: dict[str, Any]
    fp: str


def abandoned_summary(texts: Sequence[tuple[str, str]]) -> str:
    """A short extractive account of an abandoned branch: what was asked, what came back."""
    asked = [t for role, t in texts if role == "user" and t.strip()]
    said = [t for role, t in texts if role == "assistant" and t.strip()]
    pieces = [f"Abandoned branch of {len(texts)} message(s)."]
    if asked:
        pieces.append("Asked: " + " | ".join(_clip(t, 160) for t in asked[:3]))
    if said:
        pieces.append("Last reply: " + _clip(said[-1], 200))
    return _clip(" ".join(pieces), _SUMMARY_LIMIT)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _created(created_at: Any) -> str | None:
    if created_at is None:
        return None
    if isinstance(created_at, datetime):
        return created_at.isoformat(timespec="microseconds")
    return str(created_at)


class Capture:
    """Records the live message list into the log; see the module docstring."""

    def __init__(self, core: ChronicleCore) -> None:
        self.core = core
        register_capture_events(core.types)
        self.tree = core.sessions
        self._paths: dict[str, _Path] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, session: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(session)
            if lock is None:
                lock = self._locks[session] = threading.Lock()
            return lock

    def forget(self, session_id: str) -> None:
        """Drop the cached path of a session (the next capture reloads it from the tree)."""
        self._paths.pop(str(session_id), None)

    # -- the contract ---------------------------------------------------------------------

    def capture_messages(
        self,
        session_id: str,
        messages: Sequence[Any] | None,
        *,
        user_id: str | None = None,
        profile: str | None = None,
        agent_context: str = "primary",
        platform: str | None = None,
        created_at: Any = None,
    ) -> list[int | None]:
        """Record every message of `messages` not in the log yet; return each message's seq
        (None for the system prompt and compaction handoffs). Raises only StoreError."""
        session = str(session_id or "")
        try:
            items = list(messages) if messages is not None else []
        except TypeError:
            items = [messages]
        result: list[int | None] = [None] * len(items)
        last_handoff = -1
        conversational: list[int] = []
        for i, msg in enumerate(items):
            if isinstance(msg, dict) and msg.get("role") == "system":
                continue
            if is_handoff(msg):
                last_handoff = i
                continue
            conversational.append(i)
        if not conversational:
            return result
        head = [i for i in conversational if i < last_handoff]
        region = [i for i in conversational if i > last_handoff]
        context = {
            "user_id": user_id,
            "profile": profile,
            "agent_context": agent_context or "primary",
            "platform": platform,
            "created_at": _created(created_at),
        }
        with self._lock(session):
            for _attempt in range(3):
                try:
                    with self.tree.writing() as w:
                        path = self._sync_path(w, session)
                        new_path, events, new_indexes = self._plan(
                            session, path, items, head, region, last_handoff < 0, result, context
                        )
                        if events:
                            seqs = w.append(events)
                            self._record_seqs(new_path, result, seqs, events, new_indexes)
                    self._paths[session] = new_path
                    return result
                except _Stale:
                    self._paths.pop(session, None)
            raise AssertionError(
                "unreachable: a reload always yields a fresh path"
            )  # pragma: no cover

    # -- keeping the cached path in step with the tree ------------------------------------------

    def _sync_path(self, w: TreeWriter, session: str) -> _Path:
        leaf = w.leaf(session)
        cached = self._paths.get(session)
        if cached is not None:
            if cached.leaf == leaf:
                return cached
            grown = w.since(leaf, cached.leaf)
            if grown is not None:
                cached.leaf = leaf
                cached.extend(grown, self._roles(w, grown))
                return cached
        path = _Path(leaf=leaf)
        entries = w.path(leaf)
        path.extend(entries, self._roles(w, entries))
        return path

    def _roles(self, w: TreeWriter, entries: Sequence[PathEntry]) -> list[str]:
        seqs = [e.seq for e in entries if e.kind == "message"]
        roles: dict[int, str] = {}
        for chunk in range(0, len(seqs), 500):
            part = seqs[chunk : chunk + 500]
            rows = w.conn.execute(
                "SELECT seq, json_extract(payload, '$.role') FROM events"
                f" WHERE seq IN ({','.join('?' * len(part))})",
                part,
            ).fetchall()
            roles.update((int(s), str(r or "")) for s, r in rows)
        return [roles.get(e.seq, "") if e.kind == "message" else "" for e in entries]

    # -- planning what is new ---------------------------------------------------------------

    def _live(self, items: Sequence[Any], index: int) -> _Live:
        wire = wire_message(items[index])
        return _Live(index, items[index], wire, fingerprint(wire))

    def _known(self, path: _Path, obj: Any, duplicated: set[int]) -> int | None:
        """The path index of a live dict seen before, if it has not changed since."""
        if not isinstance(obj, dict) or id(obj) in duplicated:
            return None
        hit = path.identity.get(id(obj))
        if hit is None or hit[0] is not obj:
            return None
        if obj.get("content") is not hit[1] or obj.get("tool_calls") is not hit[2]:
            return None
        q = hit[3]
        return q if q < len(path.ids) else None

    def _plan(
        self,
        session: str,
        path: _Path,
        items: Sequence[Any],
        head: list[int],
        region: list[int],
        from_start: bool,
        result: list[int | None],
        context: dict[str, Any],
    ) -> tuple[_Path, list[PendingEvent], list[int]]:
        """Fill `result` for what is already captured; return the path after the new messages,
        the events to append and the live indexes of the new messages."""
        ids = [id(items[i]) for i in head + region]
        duplicated: set[int] = set()
        if len(set(ids)) != len(ids):
            duplicated = {x for x in ids if ids.count(x) > 1}
        known: dict[int, int] = {}  # live index -> path index
        for i in head + region:
            q = self._known(path, items[i], duplicated)
            if q is not None:
                known[i] = q

        # Where does the region stop being already captured? The latest live dict the host has
        # kept since the last capture answers it in-process; otherwise align by fingerprints.
        p = q_anchor = -1
        live: dict[int, _Live] = {}
        for k in range(len(region) - 1, -1, -1):
            if region[k] in known:
                p, q_anchor = k, known[region[k]]
                break
        if p < 0 and path.ids:
            for i in region:
                live[i] = self._live(items, i)
            fps = [live[i].fp for i in region]
            start = 0 if from_start else path.kept_from
            p, q_anchor = _positional(fps, path.fps, start)
            if p < 0:
                p, q_anchor = align(fps, path.fps)

        def entry(i: int) -> _Live:
            found = live.get(i)
            if found is None:
                found = live[i] = self._live(items, i)
            return found

        # Seqs of what was already captured.
        fp_latest: dict[str, int] | None = None
        for k in range(0, p + 1):
            i = region[k]
            if i in known:
                result[i] = path.seqs[known[i]]
                continue
            expected = q_anchor - (p - k)
            fp = entry(i).fp
            if 0 <= expected < len(path.fps) and path.fps[expected] == fp:
                result[i] = path.seqs[expected]
                continue
            if fp_latest is None:
                fp_latest = {f: q for q, f in enumerate(path.fps)}
            q = fp_latest.get(fp)
            result[i] = path.seqs[q] if q is not None else None
        fp_first: dict[str, int] | None = None
        for i in head:
            if i in known:
                result[i] = path.seqs[known[i]]
                continue
            if fp_first is None:
                fp_first = {}
                for q, f in enumerate(path.fps):
                    fp_first.setdefault(f, q)
            q = fp_first.get(entry(i).fp)
            result[i] = path.seqs[q] if q is not None else None

        new_indexes = region[p + 1 :]
        if not path.ids:
            # Nothing of this session's branch is in the log: the whole list is new, in order.
            new_indexes = [i for i in head if result[i] is None] + new_indexes
        events: list[PendingEvent] = []
        identity: dict[int, tuple[Any, Any, Any, int]] = {}
        next_path = path
        if new_indexes:
            next_path, parent, anchor, events = self._branch_point(
                session, path, q_anchor, from_start
            )
            user_turns = next_path.turns[-1] if next_path.turns else 0
            tool_names = _ToolNames(items)
            for i in new_indexes:
                e = entry(i)
                role = str(e.wire.get("role") or "")
                if role == "user":
                    user_turns += 1
                event_id = _message_id(session, anchor, e.fp)
                event = self._message_event(e, parent, user_turns, tool_names, context)
                events.append(
                    self.core.types.pending(
                        event, session=session, id=event_id, created_at=context["created_at"]
                    )
                )
                next_path.ids.append(event_id)
                next_path.seqs.append(-1)  # filled in once stored
                next_path.fps.append(e.fp)
                next_path.roles.append(role)
                next_path.turns.append(user_turns)
                if isinstance(e.obj, dict) and id(e.obj) not in duplicated:
                    identity[id(e.obj)] = (
                        e.obj,
                        e.obj.get("content"),
                        e.obj.get("tool_calls"),
                        len(next_path.ids) - 1,
                    )
                parent = anchor = event_id
            next_path.leaf = next_path.ids[-1]
        # Remember the live dicts that matched, so the next call finds them by identity.
        for i in head + region[: p + 1]:
            seq = result[i]
            obj = items[i]
            if seq is None or not isinstance(obj, dict) or id(obj) in duplicated:
                continue
            q = known.get(i)
            if q is None or q >= len(next_path.seqs) or next_path.seqs[q] != seq:
                q = _index_of(next_path.seqs, seq)
            if q is not None:
                identity[id(obj)] = (obj, obj.get("content"), obj.get("tool_calls"), q)
        next_path.identity = identity
        return next_path, events, new_indexes

    def _branch_point(
        self, session: str, path: _Path, q: int, from_start: bool
    ) -> tuple[_Path, str, str, list[PendingEvent]]:
        """Where new messages attach: (path they extend, their parent, the message they follow,
        any entries to append first). Leaving the branch's end attaches a summary of what was
        abandoned at the branch point."""
        last = len(path.ids) - 1
        if not path.ids or q == last or (q < 0 and not from_start):
            fresh = path.copy()
            parent = path.leaf if path.leaf is not None else ""
            anchor = path.ids[-1] if path.ids else ""
            return fresh, parent, anchor, []
        branch = path.truncated(q)
        anchor = path.ids[q] if q >= 0 else ""
        abandoned = self._abandoned_texts(path.seqs[q + 1 :])

        summary = BranchSummarized(
            parent=anchor,
            abandoned_leaf=path.leaf or "",
            summary=abandoned_summary(abandoned),
            abandoned_entries=len(path.ids) - q - 1,
        )
        summary_id = "b" + _digest(session, anchor, path.leaf or "")
        pending = self.core.types.pending(summary, session=session, id=summary_id)
        return branch, summary_id, anchor, [pending]

    def _abandoned_texts(self, seqs: Sequence[int]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for seq in list(seqs)[-50:]:
            event = self.core.store.get(seq)
            if event is not None:
                out.append((str(event.payload.get("role", "")), str(event.payload.get("text", ""))))
        return out

    def _record_seqs(
        self,
        path: _Path,
        result: list[int | None],
        seqs: list[int],
        events: list[PendingEvent],
        new_indexes: list[int],
    ) -> None:
        by_id = {e.id: s for e, s in zip(events, seqs, strict=True)}
        for q in range(len(path.ids) - 1, -1, -1):
            if path.seqs[q] != -1:
                break
            path.seqs[q] = by_id[path.ids[q]]
        messages = [e for e in events if e.type == "MessageCaptured"]
        for i, event in zip(new_indexes, messages, strict=True):
            result[i] = by_id[event.id]

    def _message_event(
        self,
        entry: _Live,
        parent: str,
        turn: int,
        tool_names: _ToolNames,
        context: dict[str, Any],
    ) -> MessageCaptured:
        wire = entry.wire
        role = str(wire.get("role") or "unknown")
        text = mask(message_text(wire))
        attribution = attribute(
            entry.obj if isinstance(entry.obj, dict) else wire,
            text,
            agent_context=context["agent_context"],
            platform=context["platform"],
        )
        call_ids: list[str] = []
        tool_name: str | None = None
        if role == "assistant":
            for call in wire.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id"):
                    call_ids.append(str(call["id"]))
        elif role in ("tool", "function"):
            call_id = wire.get("tool_call_id")
            if call_id:
                call_ids.append(str(call_id))
            name = wire.get("name")
            tool_name = str(name) if name else tool_names.get(str(call_id or ""))
        return MessageCaptured(
            role=role,
            message=wire,
            fingerprint=entry.fp,
            speaker=attribution.speaker,
            text=text,
            person_text=attribution.person_text,
            host_spans=attribution.host_spans,
            turn=turn,
            user_id=context["user_id"],
            profile=context["profile"],
            agent_context=context["agent_context"],
            tool_name=tool_name,
            tool_call_ids=call_ids,
            parent=parent,
        )

    # -- what the host tells the memory slot besides messages -------------------------------------

    def _record(self, session_id: str, event: Any) -> int:
        pending = self.core.types.pending(event, session=str(session_id or ""))
        return self.core.store.append([pending])[0].seq

    def record_turn_start(
        self,
        session_id: str,
        turn: int,
        message: str,
        *,
        model: str | None = None,
        platform: str | None = None,
    ) -> int:
        preview = mask(_clip(str(message or ""), 200))
        return self._record(
            session_id,
            TurnStarted(turn=int(turn or 0), preview=preview, model=model, platform=platform),
        )

    def record_session_end(self, session_id: str, messages: int, captured: int) -> int:
        return self._record(session_id, SessionEnded(messages=messages, captured=captured))

    def record_compression_ahead(self, session_id: str, messages: int, captured: int) -> int:
        return self._record(session_id, CompressionAhead(messages=messages, captured=captured))

    def record_memory_write(
        self,
        session_id: str,
        action: str,
        target: str,
        content: str,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        clean = {
            str(k): mask(str(v)) if isinstance(v, str) else v for k, v in (metadata or {}).items()
        }
        event = MemoryWritten(
            action=str(action), target=str(target), content=mask(str(content or "")), metadata=clean
        )
        pending = self.core.types.pending(event, session=str(session_id or ""))
        pending = _json_safe(pending)
        return self.core.store.append([pending])[0].seq

    def record_delegation(
        self, session_id: str, task: str, result: str, child_session_id: str = ""
    ) -> int:
        event = DelegationObserved(
            task=mask(str(task or "")),
            result=mask(str(result or "")),
            child_session_id=str(child_session_id or ""),
        )
        return self._record(session_id, event)

    def host_events(self, session_id: str) -> list[Any]:
        """The host events recorded for a session, oldest first (for inspection and tests)."""
        return list(self.core.reader.read(session=str(session_id), namespaces=[HOST_NAMESPACE]))


class _ToolNames:
    """tool_call_id -> function name, from the assistant messages of the live list."""

    def __init__(self, items: Sequence[Any]) -> None:
        self._items = items
        self._names: dict[str, str] | None = None

    def get(self, call_id: str) -> str | None:
        if not call_id:
            return None
        if self._names is None:
            self._names = {}
            for msg in self._items:
                if isinstance(msg, dict) and msg.get("role") == "assistant":
                    for call in msg.get("tool_calls") or ():
                        if isinstance(call, dict) and call.get("id"):
                            fn = call.get("function")
                            if isinstance(fn, dict) and fn.get("name"):
                                self._names[str(call["id"])] = str(fn["name"])
        return self._names.get(call_id)


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode("utf-8"), digest_size=16).hexdigest()


def _message_id(session: str, anchor: str, fp: str) -> str:
    return "m" + _digest(session, anchor, fp)


def _positional(live: Sequence[str], path: Sequence[str], start: int | None) -> tuple[int, int]:
    """Align by position when the live region is known to start at path[start] (the start of
    the conversation, or the first message the latest compaction kept). Trusted only when the
    match runs to the end of the path or of the live region; otherwise (-1, -1)."""
    if start is None or start < 0 or start >= len(path):
        return (-1, -1)
    k = 0
    while k < len(live) and start + k < len(path) and live[k] == path[start + k]:
        k += 1
    if k and (start + k == len(path) or k == len(live)):
        return (k - 1, start + k - 1)
    return (-1, -1)


def _index_of_id(values: list[str], value: str) -> int | None:
    for q in range(len(values) - 1, -1, -1):
        if values[q] == value:
            return q
    return None


def _index_of(values: list[int], value: int) -> int | None:
    for q in range(len(values) - 1, -1, -1):
        if values[q] == value:
            return q
    return None


def _json_safe(pending: PendingEvent) -> PendingEvent:
    import json

    try:
        json.dumps(pending.payload, ensure_ascii=False)
        return pending
    except (TypeError, ValueError):
        payload = json.loads(json.dumps(pending.payload, ensure_ascii=False, default=str))
        return PendingEvent(
            namespace=pending.namespace,
            type=pending.type,
            version=pending.version,
            payload=payload,
            id=pending.id,
            session=pending.session,
            created_at=pending.created_at,
        )
