"""The memory tools' writes: remember, forget, correct. Each is an event in the log (never an
edit), validated first against the caller's own memory, and folded before the call returns, so
the next read already sees it and a rebuild repeats it.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from ..capture.secrets import mask
from ..errors import UsageError
from ..log.events import DomainEvent
from ..log.tables import Statements
from .events import MemoryCorrected, MemoryForgotten, MemoryRemembered
from .fold import scope_number
from .index import RecallIndex

__all__ = ["remember", "forget", "correct", "Forgotten"]


class Forgotten(TypedDict):
    """What chronicle_forget answers."""

    forgotten: str
    include_source: bool
    seq: int
    messages: list[int]
    sections_redrawn: NotRequired[list[str]]


def _append(recall: RecallIndex, event: DomainEvent, session_id: str | None) -> int:
    stored = recall.log.append([recall.types.pending(event, session=session_id or None)])
    recall.catch_up()
    return stored[0].seq


def remember(
    recall: RecallIndex,
    text: str,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    profile: str | None = None,
) -> dict[str, object]:
    if not isinstance(text, str) or not text.strip():
        raise UsageError("chronicle_remember needs the text to keep")
    with recall.reading("reading memory") as conn:
        user, prof = recall.who(conn, session_id, user_id, profile)
    seq = _append(
        recall, MemoryRemembered(text=text.strip(), user_id=user, profile=prof), session_id
    )
    return {"id": f"b{seq}.0", "seq": seq, "stored": True, "text": mask(text.strip())}


def _owned(recall: RecallIndex, conn: Statements, scope: int | None, target: str) -> bool:
    if scope is None:
        return False
    if target.startswith("m") and target[1:].isdigit():
        row = conn.execute(
            "SELECT scope FROM recall_messages WHERE seq = ?", (int(target[1:]),)
        ).fetchone()
    elif target.startswith("b"):
        row = conn.execute("SELECT scope FROM recall_beliefs WHERE id = ?", (target,)).fetchone()
    elif target.startswith("s:") and "/" in target:
        chronicle, _, section_id = target[2:].rpartition("/")
        span = conn.execute(
            "SELECT from_seq, to_seq FROM sections WHERE chronicle = ? AND section_id = ?",
            (chronicle, section_id),
        ).fetchone()
        row = (
            conn.execute(
                "SELECT scope FROM recall_messages WHERE seq BETWEEN ? AND ? ORDER BY seq LIMIT 1",
                span,
            ).fetchone()
            if span
            else None
        )
    else:
        return False
    return row is not None and int(row[0]) == scope


def _target(
    recall: RecallIndex,
    target: str,
    session_id: str | None,
    user_id: str | None,
    profile: str | None,
) -> tuple[str | None, str | None]:
    target = (target or "").strip()
    recall.catch_up()
    with recall.reading("reading memory") as conn:
        user, prof = recall.who(conn, session_id, user_id, profile)
        if not _owned(recall, conn, scope_number(conn, user, prof), target):
            raise UsageError(
                f"{target!r} is not an item of this user's memory; use an id from "
                "chronicle_search (m<seq>, b<seq>.<n> or s:<chronicle>/<section>)"
            )
    return user, prof


def forget(
    recall: RecallIndex,
    target: str,
    *,
    include_source: bool = False,
    reason: str = "",
    session_id: str | None = None,
    user_id: str | None = None,
    profile: str | None = None,
) -> Forgotten:
    user, prof = _target(recall, target, session_id, user_id, profile)
    seq = _append(
        recall,
        MemoryForgotten(
            target=target.strip(),
            include_source=bool(include_source),
            reason=reason,
            user_id=user,
            profile=prof,
        ),
        session_id,
    )
    with recall.reading("reading memory") as conn:
        hidden = sorted(
            int(t[1:])
            for (t,) in conn.execute(
                "SELECT target FROM recall_hidden WHERE by_seq = ? AND target >= 'm' AND target < 'n'",
                (seq,),
            )
            if t[1:].isdigit()
        )
    return Forgotten(
        forgotten=target.strip(),
        include_source=bool(include_source),
        seq=seq,
        messages=hidden,  # the message seqs this call hid (sections holding them are redrawn)
    )


def correct(
    recall: RecallIndex,
    target: str,
    text: str,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    profile: str | None = None,
) -> dict[str, object]:
    if not isinstance(text, str) or not text.strip():
        raise UsageError("chronicle_correct needs the corrected text")
    user, prof = _target(recall, target, session_id, user_id, profile)
    seq = _append(
        recall,
        MemoryCorrected(target=target.strip(), text=text.strip(), user_id=user, profile=prof),
        session_id,
    )
    return {"corrected": target.strip(), "id": f"b{seq}.0", "seq": seq}
