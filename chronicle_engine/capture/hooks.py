"""What the host tells the memory slot besides messages, recorded as events.

Invariant: these events carry no credential (every free text is masked) and are never messages:
they live in their own namespace ("chronicle.host"), so nothing that reads conversation mistakes
a subagent's result or a mirrored memory write for something the person said.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Mapping, Sequence

from ..errors import StoreBusy, StoreError, StoreReadOnly
from ..log.events import DomainEvent, EventReader
from ..log.port import LogStore
from ..log.store import PendingEvent, StoredEvent
from ..storable import escape_text
from .events import (
    HOST_NAMESPACE,
    CompressionAhead,
    DelegationObserved,
    MemoryWritten,
    SessionEnded,
    TurnStarted,
)
from .secrets import mask

__all__ = ["HostRecorder", "KeepAside"]

KeepAside = Callable[[StoreError, Sequence[PendingEvent]], tuple[StoreError, bool]]
"""Keeps events the database refused in the spill: (the error to raise, whether kept)."""


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text(value: object) -> str:
    """What the host passed, as storable text: a foreign object by its str(), one too deep to
    print by a bounded repr, a lone surrogate escaped."""
    if value is None:
        return ""
    try:
        text = value if isinstance(value, str) else str(value)
    except (RecursionError, ValueError):
        text = reprlib.repr(value)
    return escape_text(text)


def _safe(value: Mapping[str, object]) -> dict[str, object]:
    """Metadata as JSON data with every string masked (a part with no JSON form as text)."""
    try:
        data = json.loads(json.dumps(dict(value), ensure_ascii=False, default=str))
    except (ValueError, RecursionError):
        return {"metadata": _mask_strings(_text(value))}
    return {str(k): _mask_strings(v) for k, v in data.items()}


def _mask_strings(value: object) -> object:
    if isinstance(value, str):
        return mask(_text(value))
    if isinstance(value, list):
        return [_mask_strings(v) for v in value]
    if isinstance(value, dict):
        return {_text(k): _mask_strings(v) for k, v in value.items()}
    return value


class HostRecorder:
    """Appends the host's reports straight to the log (they are no tree entries)."""

    def __init__(self, reader: EventReader[LogStore], keep_aside: KeepAside) -> None:
        self._host_log = reader
        self._host_keep_aside = keep_aside

    def _record(self, session_id: str, event: DomainEvent) -> int:
        pending = self._host_log.types.pending(event, session=str(session_id or ""))
        try:
            return self._host_log.store.append([pending])[0].seq
        except (StoreBusy, StoreReadOnly) as exc:
            raise self._host_keep_aside(exc, [pending])[0] from exc

    def record_turn_start(
        self,
        session_id: str,
        turn: int,
        message: str,
        *,
        model: str | None = None,
        platform: str | None = None,
    ) -> int:
        preview = mask(_clip(_text(message), 200))
        event = TurnStarted(
            turn=int(turn or 0),
            preview=preview,
            model=_text(model) if model else None,
            platform=_text(platform) if platform else None,
        )
        return self._record(session_id, event)

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
        metadata: Mapping[str, object] | None = None,
    ) -> int:
        event = MemoryWritten(
            action=_text(action),
            target=_text(target),
            content=mask(_text(content)),
            metadata=_safe(metadata or {}),
        )
        return self._record(session_id, event)

    def record_delegation(
        self, session_id: str, task: str, result: str, child_session_id: str = ""
    ) -> int:
        event = DelegationObserved(
            task=mask(_text(task)),
            result=mask(_text(result)),
            child_session_id=_text(child_session_id),
        )
        return self._record(session_id, event)

    def host_events(self, session_id: str) -> list[StoredEvent]:
        """The host events recorded for a session, oldest first."""
        return list(self._host_log.read(session=str(session_id), namespaces=[HOST_NAMESPACE]))
