"""What a writer of the session tree offers inside its one write transaction.

`sessions.tree.TreeWriter` implements it; capture appends messages through it without importing
the sessions package (which sits above capture).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..log.store import PendingEvent
from .paths import PathEntry

__all__ = ["TreeWriting"]


class TreeWriting(Protocol):
    def leaf(self, session: str) -> str | None:
        """The session's leaf entry id as this transaction sees it."""
        ...

    def path(self, leaf: str | None) -> list[PathEntry]:
        """The entries from the root down to `leaf`."""
        ...

    def since(
        self, leaf: str | None, old_leaf: str | None, limit: int = 64
    ) -> list[PathEntry] | None:
        """The entries after `old_leaf` down to `leaf`, or None when it is not an ancestor."""
        ...

    def append(self, events: Sequence[PendingEvent]) -> list[int]:
        """Append idempotently (by event id) and fold; each event's seq, in order."""
        ...
