"""A session's conversation tree as versioned JSONL: export, import, migrate.

Format "chronicle-session":
- Line 1 is a header: {"format": "chronicle-session", "version": N, "session": ..., ...}.
- Version 2 (current): every later line is one event of the conversation's tree, in log order:
  {"type": <entry kind or event type>, "id": ..., "parentId": ... (tree entries only),
   "session": ..., "createdAt": ..., "event": {"namespace", "type", "version", "payload"}}.
  Messages keep their exact wire dict inside the payload, so an import restores them byte for
  byte; every entry's parent is written out, so the tree does not depend on fold order.
- Version 1 (older, linear): every later line is one wire message, in conversation order. It is
  migrated on load into version-2 records (each message the child of the one before, ids derived
  the way capture derives them, so capturing the same conversation later records nothing twice).

Invariants of `import_session`: the whole file is parsed, migrated and checked before anything is
written; a bad line raises `FormatError` naming its line number and nothing is imported. Importing
is idempotent: events keep their ids, and an id already in the log is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from ..capture.align import fingerprint, wire_message
from ..capture.describe import describe_payload, legacy_message_id
from ..capture.events import NAMESPACE as CHAT_NAMESPACE
from ..errors import FormatError, UnknownEventType
from ..log.store import PendingEvent
from .events import ENTRY_KINDS
from .events import NAMESPACE as SESSION_NAMESPACE
from .redact import Forgotten, redacted
from .tree import SessionTree

__all__ = [
    "FORMAT",
    "VERSION",
    "export_session",
    "import_session",
    "export_jsonl",
    "import_jsonl",
    "MIGRATIONS",
]

FORMAT = "chronicle-session"
VERSION = 2

Record = dict[str, object]


def _kind(namespace: str, type_: str) -> str | None:
    if namespace == CHAT_NAMESPACE and type_ == "MessageCaptured":
        return "message"
    if namespace == SESSION_NAMESPACE:
        return ENTRY_KINDS.get(type_)
    return None


def export_session(tree: SessionTree, session_id: str, forgotten: Forgotten | None = None) -> str:
    conversation = tree.conversation(session_id)
    with tree.tables.reading("exporting a session") as conn:
        sessions = [
            row[0]
            for row in conn.execute(
                "SELECT session FROM session_heads WHERE conversation = ? ORDER BY started_seq",
                (conversation,),
            )
        ]
        # A session never captured has no head: nothing to ask (PostgreSQL refuses `IN ()`).
        parents: dict[str, str | None] = (
            dict(
                conn.execute(
                    "SELECT entry_id, parent_id FROM session_entries WHERE session IN"
                    f" ({','.join('?' * len(sessions))})",
                    sessions,
                ).fetchall()
            )
            if sessions
            else {}
        )
    header = {
        "format": FORMAT,
        "version": VERSION,
        "session": session_id,
        "conversation": conversation,
        "sessions": sessions,
        "exportedAt": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    lines = [json.dumps(header, ensure_ascii=False)]
    events = tree.store.read(sessions=sessions, namespaces=[CHAT_NAMESPACE, SESSION_NAMESPACE])
    for event in redacted(events, forgotten or Forgotten()):
        env = event.envelope
        kind = _kind(env.namespace, env.type)
        if env.namespace == CHAT_NAMESPACE and kind is None:
            continue
        record: Record = {"type": kind or env.type, "id": env.id}
        payload = event.payload
        if kind is not None:
            record["parentId"] = parents.get(env.id)
            # The parent as folded, written out: the file does not depend on fold order.
            payload = {**payload, "parent": record["parentId"] or ""}
        record.update(
            {
                "session": env.session,
                "createdAt": env.created_at,
                "event": {
                    "namespace": env.namespace,
                    "type": env.type,
                    "version": env.version,
                    "payload": payload,
                },
            }
        )
        lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(lines) + "\n"


# -- migrations: each turns a version's records (with line numbers) into the next version's ----


def _v1_to_v2(header: Record, records: list[tuple[int, object]]) -> list[tuple[int, object]]:
    session = str(header.get("session") or "imported")
    out: list[tuple[int, object]] = []
    anchor = ""
    turn = 0
    for number, message in records:
        if not isinstance(message, dict):
            raise FormatError(f"line {number}: a version-1 line is one message object")
        wire = wire_message(message)
        fp = fingerprint(wire)
        turn += wire.get("role") == "user"
        payload = describe_payload(message, wire, fp, parent=anchor, turn=turn)
        entry_id = legacy_message_id(session, anchor, fp)
        out.append(
            (
                number,
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": anchor or None,
                    "session": session,
                    "createdAt": header.get("exportedAt"),
                    "event": {
                        "namespace": CHAT_NAMESPACE,
                        "type": "MessageCaptured",
                        "version": 1,
                        "payload": payload,
                    },
                },
            )
        )
        anchor = entry_id
    return out


MIGRATIONS: dict[int, Callable[[Record, list[tuple[int, object]]], list[tuple[int, object]]]] = {
    1: _v1_to_v2,
}


def _parse(text: str) -> tuple[Record, list[tuple[int, object]]]:
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise FormatError("line 1: empty file; expected a chronicle-session header")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise FormatError(f"line 1: not JSON ({exc.msg}); expected the header") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise FormatError(f"line 1: not a {FORMAT} export (the header names another format)")
    records: list[tuple[int, object]] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise FormatError(
                f"line {number}: not JSON ({exc.msg} at column {exc.colno})"
            ) from None
    return header, records


def _pending(tree: SessionTree, number: int, record: object) -> PendingEvent:
    if not isinstance(record, dict):
        raise FormatError(f"line {number}: expected a JSON object")
    event = record.get("event")
    if not isinstance(event, dict) or not isinstance(record.get("id"), str):
        raise FormatError(f"line {number}: a record needs an 'id' and an 'event' object")
    namespace, type_ = event.get("namespace"), event.get("type")
    payload = event.get("payload")
    if namespace not in (CHAT_NAMESPACE, SESSION_NAMESPACE) or not isinstance(payload, dict):
        raise FormatError(f"line {number}: not a session event ({namespace}.{type_})")
    try:
        cls, current = tree.types.class_of(str(namespace), str(type_))
    except UnknownEventType:
        raise FormatError(f"line {number}: unknown event type {namespace}.{type_}") from None
    version = event.get("version", 1)
    if not isinstance(version, int) or version < 1:
        raise FormatError(f"line {number}: bad event version {version!r}")
    payload = dict(payload)
    if _kind(str(namespace), str(type_)) is not None:
        parent = record.get("parentId")
        if parent is not None and not isinstance(parent, str):
            raise FormatError(f"line {number}: parentId must be a string or null")
        payload["parent"] = parent or ""
    try:
        upcast = tree.reader.upcasts.upcast(str(namespace), str(type_), version, current, payload)
        cls.model_validate(upcast)
    except (ValidationError, UnknownEventType) as exc:
        first = str(exc).splitlines()[0]
        raise FormatError(f"line {number}: the {type_} payload is invalid ({first})") from None
    session = record.get("session")
    created = record.get("createdAt")
    return PendingEvent(
        namespace=str(namespace),
        type=str(type_),
        version=version,
        payload=payload,
        id=record["id"],
        session=str(session) if session is not None else None,
        **({"created_at": str(created)} if created else {}),
    )


def import_session(tree: SessionTree, text: str) -> int:
    header, records = _parse(text)
    version = header.get("version")
    if not isinstance(version, int) or version < 1:
        raise FormatError(f"line 1: bad format version {version!r}")
    if version > VERSION:
        raise FormatError(
            f"line 1: format version {version} is newer than this Chronicle reads ({VERSION}); "
            "upgrade Chronicle to import it"
        )
    while version < VERSION:
        records = MIGRATIONS[version](header, records)
        version += 1
    pending = [_pending(tree, number, record) for number, record in records]
    numbers = {p.id: number for p, (number, _) in zip(pending, records, strict=True)}
    with tree.writing() as w:
        defined: set[str] = set()
        for p in pending:
            parent = p.payload.get("parent") if _kind(p.namespace, p.type) else None
            if parent and parent not in defined:
                known = w.conn.execute(
                    "SELECT 1 FROM session_entries WHERE entry_id = ?", (parent,)
                ).fetchone()
                if known is None:
                    raise FormatError(
                        f"line {numbers[p.id]}: parentId {parent!r} is neither an earlier line "
                        "nor an entry of this database"
                    )
            defined.add(p.id)
        before = w.end
        seqs = w.append(pending)
    return sum(1 for s in seqs if s > before)


def export_jsonl(
    tree: SessionTree,
    session_id: str,
    path: str | Path | None = None,
    forgotten: Forgotten | None = None,
) -> str:
    """The session's whole conversation tree as versioned JSONL (returned, and written to
    `path` when given), without the words of the `forgotten` messages."""
    text = export_session(tree, str(session_id), forgotten)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def import_jsonl(tree: SessionTree, source: str | Path) -> int:
    """Import an exported session (text or a file path). Older format versions are
    migrated; a corrupt line is reported with its number and nothing is imported. Returns
    how many events were new to this log."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source):
        candidate = Path(source)
        if candidate.exists():
            source = candidate.read_text(encoding="utf-8")
    return import_session(tree, str(source))
